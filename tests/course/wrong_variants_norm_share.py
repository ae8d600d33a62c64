"""Wrong variants of exercise 13 (the norm's share of a step, the Amdahl bound): plausible slips, each named.

:data:`NORM_SHARE`: name → (norm_share function, substring of the expected message).

Source: solutions/13_into_a_model.ipynb.
"""

from __future__ import annotations

_BOUNDS = {"1 + s": lambda s: 1 + s, "1 / s": lambda s: 1 / s, "s / (1 - s)": lambda s: s / (1 - s),
           "1 - s": lambda s: 1 - s}


def _share(kind="right"):
    def norm_share(profile, step_ms):
        norm = profile[profile["norm"]]
        if kind == "forward only":
            norm = norm[norm["part"] == "forward"]
        column = {"host": "host_us", "warm": "warm_us"}.get(kind, "us")
        us = (norm[column] / norm["calls"]).sum() if kind == "per call" else norm[column].sum()
        if kind == "times calls":
            us = (norm["us"] * norm["calls"]).sum()
        if kind == "host + gpu":
            us = norm["us"].sum() + norm["host_us"].sum()
        denominator = profile["us"].sum() / 1e3 if kind == "busy" else step_ms
        if kind == "no optimizer":  # the step without its optimizer kernels
            denominator -= profile.loc[profile["part"] == "optimizer", "us"].sum() / 1e3
        share = us / denominator if kind == "units" else us / 1e3 / denominator
        share *= 100 if kind == "percent" else 1
        return share, _BOUNDS.get(kind, lambda s: 1 / (1 - s))(share)
    return norm_share


def _skeleton(profile, step_ms):
    raise NotImplementedError()


#: Exercise 13: name → (norm_share, substring of the expected message).
NORM_SHARE = {
    "skeleton": (_skeleton, "not done yet"),
    "percent": (_share("percent"), "that is a percentage: return the fraction (0.2, not 20)"),
    "forward only": (_share("forward only"), "only the forward was counted"),
    "GPU busy time": (_share("busy"), "it is divided by the GPU's busy time (every kernel, 35.0 ms)"),
    "optimizer taken out": (_share("no optimizer"), "the optimizer's time was taken out of the step"),
    "host time": (_share("host"), "host time was counted as GPU time"),
    "host + GPU time": (_share("host + gpu"), "host time was counted as GPU time"),
    "warm timings": (_share("warm"), "warm timings were used"),
    "per call": (_share("per call"), "it takes one call's time"),
    "times calls": (_share("times calls"), "us was multiplied by calls, but us is already the total"),
    "ms and µs": (_share("units"), "ms and µs were mixed"),
    "1 + share": (_share("1 + s"), "1 + share is not Amdahl's bound"),
    "1 / share": (_share("1 / s"), "1 / share is not Amdahl's bound"),
    "share / (1 - share)": (_share("s / (1 - s)"), "share / (1 − share) is the bound minus one"),
    "1 - share": (_share("1 - s"), "1 − share is the time left"),
    "one number": (lambda profile, step_ms: 0.2, "must return a pair of finite numbers"),
    "KeyError": (lambda profile, step_ms: profile["is_norm"], "raised KeyError at line "),
}

#: Variants that are the same slip as another, so they get its message (host time alone, or added to the kernels').
SAME_MESSAGE = {"host + GPU time": "host time"}


# Issue 36, walk 8: a fresh learner's slips of the share, each the solution with one line changed, each named.
def _walk8(kind):
    def norm_share(profile, step_ms):
        rows = {"by name": profile["kernel"].str.contains("rms", case=False), "all": slice(None),
                "inverted": ~profile["norm"]}.get(kind, profile["norm"])
        us = profile.loc[rows, "us"]
        total = us.mean() if kind == "mean" else us.sum()
        share = total / (1e6 if kind == "1e6" else 1e3) / step_ms
        return share, 1 / (1 - share)
    return norm_share


NORM_SHARE.update({
    "walk 8: rows picked by kernel name": (_walk8("by name"), "no row was selected (share 0)"),
    "walk 8: every kernel counted": (_walk8("all"), "every kernel of the step was counted, not only the norm's"),
    "walk 8: µs to ms with 1e6": (_walk8("1e6"), "µs were divided by 1e6, not 1e3"),
    "walk 8: selection inverted": (_walk8("inverted"), "the selection is inverted"),
    "walk 8: mean over the norm's kernels": (_walk8("mean"),
                                             "the norm's kernels were averaged (`.mean()`) where their times add up"),
})
