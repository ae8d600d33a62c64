"""Wrong variants of exercises 11 and 12: each is a plausible slip, named by its checker with its own message.

Exercise 11 (fake implementations): name → ((fake_forward, fake_backward), substring of the message).
Exercise 12 (reading the benchmark): see :data:`COPY_FRACTION` and :data:`PICK_CONFIG`.

Source: solutions/11_extending_the_contract.ipynb, solutions/12_tuning_and_side_by_side.ipynb.
"""

from __future__ import annotations

import torch

import rmsnorm  # noqa: F401  (registers rmsnorm_fast::forward / ::backward)

# --------------------------------------------------------------------------- exercise 11


def fake_forward(x, weight, eps):
    return x.new_empty(x.shape), x.new_empty(x.shape[:1], dtype=torch.float32)


def fake_backward(x, weight, rstd, dy):
    return x.new_empty(x.shape), (x.new_empty(0) if weight is None else weight.new_empty(weight.shape))


def _fwd_skeleton(x, weight, eps):
    raise NotImplementedError()


def _bwd_skeleton(x, weight, rstd, dy):
    raise NotImplementedError()


def _fwd_rstd_in_x_dtype(x, weight, eps):
    return x.new_empty(x.shape), x.new_empty(x.shape[:1])


def _fwd_rstd_keepdim(x, weight, eps):
    return x.new_empty(x.shape), x.new_empty((x.shape[0], 1), dtype=torch.float32)


def _fwd_promoted_y(x, weight, eps):
    dtype = x.dtype if weight is None else torch.promote_types(x.dtype, weight.dtype)
    return x.new_empty(x.shape, dtype=dtype), x.new_empty(x.shape[:1], dtype=torch.float32)


def _fwd_on_cpu(x, weight, eps):
    return torch.empty(x.shape, dtype=x.dtype), torch.empty(x.shape[:1], dtype=torch.float32)


def _fwd_launches_kernel(x, weight, eps):
    return rmsnorm.rmsnorm_fast_forward(x, weight, eps)


def _fwd_reads_values(x, weight, eps):
    scale = float(x.float().square().mean().item())  # data: a meta tensor has none
    return x.new_empty(x.shape), x.new_empty(x.shape[:1], dtype=torch.float32) * scale


def _fwd_only_y(x, weight, eps):
    return x.new_empty(x.shape)


def _bwd_dgamma_in_x_dtype(x, weight, rstd, dy):
    return x.new_empty(x.shape), (x.new_empty(0) if weight is None else x.new_empty(weight.shape))


def _bwd_dgamma_none(x, weight, rstd, dy):
    return x.new_empty(x.shape), (None if weight is None else weight.new_empty(weight.shape))


def _bwd_dx_in_gamma_dtype(x, weight, rstd, dy):
    dx = x.new_empty(x.shape) if weight is None else weight.new_empty(x.shape)
    return dx, (x.new_empty(0) if weight is None else weight.new_empty(weight.shape))


def _bwd_typo(x, weight, rstd, dy):
    return x.new_empty(x.shape), gama.new_empty(weight.shape)  # noqa: F821  (the slip: a misspelt name)


#: Exercise 11: name → ((fake_forward, fake_backward), substring of the expected message).
FAKE = {
    "skeleton": ((_fwd_skeleton, _bwd_skeleton), "not done yet"),
    "backward skeleton": ((fake_forward, _bwd_skeleton), "not done yet"),
    "rstd in x's dtype": ((_fwd_rstd_in_x_dtype, fake_backward),
                         "rstd is float16, expected float32 whatever x's dtype"),
    "rstd (M, 1)": ((_fwd_rstd_keepdim, fake_backward), "rstd has shape (17, 1), expected (17,): one value per row"),
    "y promoted to weight's dtype": ((_fwd_promoted_y, fake_backward),
                                   "y is float32, weight's dtype; expected x's, bfloat16"),
    "allocated on the CPU": ((_fwd_on_cpu, fake_backward), "y is on cpu, x is on meta. Allocate on x's device"),
    "launches the kernel": ((_fwd_launches_kernel, fake_backward), "ran real work on x (17, 257) float16"),
    "reads values": ((_fwd_reads_values, fake_backward), "never launches the kernel or reads values"),
    "only y": ((_fwd_only_y, fake_backward), "must return a pair (y, rstd)"),
    "dgamma in x's dtype": ((fake_forward, _bwd_dgamma_in_x_dtype),
                           "dgamma is bfloat16, x's dtype; expected weight's, float32"),
    "dgamma None": ((fake_forward, _bwd_dgamma_none), "dgamma is None. An operator must return tensors"),
    "dx in weight's dtype": ((fake_forward, _bwd_dx_in_gamma_dtype),
                           "dx is float32, weight's dtype; expected x's, bfloat16"),
    "typo": ((fake_forward, _bwd_typo), "raised NameError at line "),
}


# --------------------------------------------------------------------------- exercise 12

_S = {"float32": 4, "float16": 2, "bfloat16": 2}


def _fraction(kind="right"):
    def copy_fraction(M, N, dtype, pass_, us, copy_rate_gbps):
        s = 4 if kind == "4 bytes" else _S[dtype]
        backward = pass_ == "backward" and kind != "backward as forward"
        nbytes = (3 if backward else 2) * M * N * s + (2 if backward else 1) * N * s + 4 * M
        if kind == "scratch":
            nbytes += 2 * M * N * 4 if pass_ == "backward" else 0  # the article's partials, written and read
        if kind == "reads only":
            nbytes = (2 if backward else 1) * M * N * s
        if kind == "no gamma, no rstd":
            nbytes = (3 if backward else 2) * M * N * s
        seconds = {"seconds": us, "milliseconds": us * 1e-3}.get(kind, us * 1e-6)
        ceiling = copy_rate_gbps * (2**30 if kind == "GiB" else 1e9)
        return nbytes / seconds / ceiling * (100 if kind == "percent" else 1)
    return copy_fraction


def _fraction_skeleton(M, N, dtype, pass_, us, copy_rate_gbps):
    raise NotImplementedError()


#: Exercise 12.1: name → (copy_fraction, substring of the expected message).
COPY_FRACTION = {
    "skeleton": (_fraction_skeleton, "not done yet"),
    "scratch charged": (_fraction("scratch"), "scratch was charged: the M·N float32 partials, written and read"),
    "us as seconds": (_fraction("seconds"), "the time was taken in seconds"),
    "us as milliseconds": (_fraction("milliseconds"), "the time was taken in milliseconds"),
    "4 bytes per element": (_fraction("4 bytes"), "every element was counted as 4 bytes: float16 takes 2"),
    "backward as forward": (_fraction("backward as forward"), "the backward was counted like the forward"),
    "reads only": (_fraction("reads only"), "only the reads were counted"),
    "no gamma, no rstd": (_fraction("no gamma, no rstd"), "gamma and rstd were left out"),
    "percent": (_fraction("percent"), "that is a percentage"),
    "GiB": (_fraction("GiB"), "the copy rate was taken in GiB/s"),
    "a string": (lambda *args: "0.45", "must return a finite number"),
}

KNOBS = ["BLOCK_M", "BLOCK_N", "num_warps", "programs_per_sm", "num_stages"]


def _pick(stat="median", l2="cold", filter_shape=True, filter_pass=True, best="min"):
    def pick_config(timings, M, N, dtype, pass_):
        keep = timings["us"] == timings["us"]
        if filter_shape:
            keep &= (timings["M"] == M) & (timings["N"] == N) & (timings["dtype"] == dtype)
        if filter_pass:
            keep &= timings["pass_"] == pass_
        if l2 is not None:
            keep &= timings["l2"] == l2
        values = timings[keep].groupby(KNOBS)["us"].agg(stat)
        winner = values.idxmin() if best == "min" else values.idxmax()
        return dict(zip(KNOBS, (int(v) for v in winner)))
    return pick_config


def _pick_skeleton(timings, M, N, dtype, pass_):
    raise NotImplementedError()


#: Exercise 12.2: name → (pick_config, substring of the expected message).
PICK_CONFIG = {
    "skeleton": (_pick_skeleton, "not done yet"),
    "warm samples": (_pick(l2="warm"), "fastest only with a warm L2"),
    "l2 ignored": (_pick(l2=None), "fastest only with a warm L2"),
    "mean": (_pick(stat="mean"), "it ranks by the mean"),
    "fastest sample": (_pick(stat="min"), "it ranks by the fastest single sample"),
    "slowest": (_pick(best="max"), "it picks the slowest configuration"),
    "shape not filtered": (_pick(filter_shape=False), "timed at another shape"),
    "pass not filtered": (_pick(filter_pass=False), "timed for the other pass"),
    "a tuple": (lambda t, M, N, d, p: (8, 256, 4, 2, 2), "must return a dict with the keys"),
    "KeyError": (lambda t, M, N, d, p: t["L2"], "raised KeyError at line "),
}

#: Variants that are the same slip as another in the checker's data, so they get its message: ignoring
#: the l2 column lets the warm samples win, exactly as keeping only the warm ones does.
SAME_MESSAGE = {"l2 ignored": "warm samples"}


# Issue 36, walk 8: a fresh learner's slips of 11, each the solution with one line changed, each named (its y in
# weight's dtype is "y promoted to weight's dtype" above).
def _walk8_fwd_rstd_per_column(x, weight, eps):
    return x.new_empty(x.shape), x.new_empty(x.shape[-1:], dtype=torch.float32)


def _walk8_bwd_no_none_branch(x, weight, rstd, dy):
    return x.new_empty(x.shape), weight.new_empty(weight.shape)


def _walk8_bwd_dx_from_rstd(x, weight, rstd, dy):
    return rstd.new_empty(x.shape), (x.new_empty(0) if weight is None else weight.new_empty(weight.shape))


def _walk8_bwd_dgamma_per_column_without_weight(x, weight, rstd, dy):
    return x.new_empty(x.shape), (x.new_empty(x.shape[1:]) if weight is None else weight.new_empty(weight.shape))


FAKE.update({
    "walk 8: rstd one per column": ((_walk8_fwd_rstd_per_column, fake_backward),
                                    "rstd has shape (257,), expected (17,)"),
    "walk 8: no branch for weight None": ((fake_forward, _walk8_bwd_no_none_branch),
                                          "weight is None here (an RMSNorm without a weight), and your code uses it "
                                          "as a tensor: test `weight is None` first; then dgamma is `x.new_empty(0)`"),
    "walk 8: dx from rstd.new_empty": ((fake_forward, _walk8_bwd_dx_from_rstd), "dx is float32, expected float16"),
    "walk 8: dgamma (N,) without weight": ((fake_forward, _walk8_bwd_dgamma_per_column_without_weight),
                                           "dgamma has shape (40,), expected (0,)"),
})
