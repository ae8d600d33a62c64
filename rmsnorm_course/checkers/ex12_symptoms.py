"""The classic slips of exercise 12, each the number or the pick it makes on a small case built to tell them apart.

:func:`fraction_slips` (12.1: the copy-rate fraction) and :data:`PICK_SLIPS` with the toy sweep
(:data:`TOY`, :func:`toy_timings`; 12.2: picking a configuration) serve
:mod:`rmsnorm_course.checkers.ex12_reading`.

Source: solutions/12_tuning_and_side_by_side.ipynb; scripts/benchmark_fast.py
(the byte convention and the L2-cold timing).
"""

from __future__ import annotations

import torch

from rmsnorm_lab.results import backward_bytes, forward_bytes


def minimum_bytes(M: int, N: int, dtype: str, pass_: str) -> int:
    """The course's byte convention (gamma in x's dtype) for a row of ``fast.csv``: :mod:`rmsnorm_lab`'s counts."""
    return (forward_bytes if pass_ == "forward" else backward_bytes)(M, N, getattr(torch, dtype))


def expected_fraction(M, N, dtype, pass_, us, copy_rate_gbps) -> float:
    """bytes / (us · 1e-6 s) / (copy_rate_gbps · 1e9 B/s)."""
    return minimum_bytes(M, N, dtype, pass_) / (us * 1e-6) / (copy_rate_gbps * 1e9)

def fraction_slips(M, N, dtype, pass_, us, copy):
    s = getattr(torch, dtype).itemsize
    right = minimum_bytes(M, N, dtype, pass_)
    rate = lambda nbytes, seconds=us * 1e-6, ceiling=copy * 1e9: nbytes / seconds / ceiling  # noqa: E731
    small = N * s * (1 if pass_ == "forward" else 2) + 4 * M
    return [
        ("scratch was charged: the M·N float32 partials, written and read (2·M·N·4 bytes), are not in the convention",
         rate(right + 2 * M * N * 4)),
        ("scratch was charged: the M·N float32 partials (M·N·4 bytes) are not in the convention",
         rate(right + M * N * 4)),
        ("the time was taken in seconds: us is in microseconds (1 µs = 1e-6 s)", rate(right, seconds=us)),
        ("the time was taken in milliseconds: us is in microseconds (1 µs = 1e-6 s, not 1e-3 s)",
         rate(right, seconds=us * 1e-3)),
        (f"every element was counted as 4 bytes: {dtype} takes {s}",
         rate(minimum_bytes(M, N, "float32", pass_) if s != 4 else right + 1)),
        ("the backward was counted like the forward (2·M·N elements): it reads x and dy and writes dx, 3·M·N",
         rate(minimum_bytes(M, N, dtype, "forward")) if pass_ == "backward" else None),
        ("only the reads were counted: the writes (y, or dx) move as many bytes",
         rate(M * N * s * (1 if pass_ == "forward" else 2))),
        ("gamma and rstd were left out (N·s per read of gamma, 4·M for the float32 rstd): small, but in the convention",
         rate(right - small)),
        ("that is a percentage: return the fraction (between 0 and 1, not × 100)", 100 * rate(right)),
        ("the copy rate was taken in GiB/s (2^30 B/s): copy_rate_gbps is in GB/s, 1e9 B/s",
         rate(right, ceiling=copy * 2**30)),
    ]


#: The small case where every slip above gives a different number: (M, N, dtype, pass_, us, copy GB/s).
FRACTION_CASE = (100_000, 300, "float16", "backward", 100.0, 4000.0)


def config(block_m, pps, stages, warps=4):
    return {"BLOCK_M": block_m, "BLOCK_N": 256, "num_warps": warps, "programs_per_sm": pps, "num_stages": stages}


#: The toy sweep: (label, config, shape/pass, cold samples µs, warm samples µs).
RIGHT = config(8, 2, 2)
TOY = [
    ("right", RIGHT, "here", (20, 21, 22, 90), (19, 19, 19, 19)),  # median 21.5; one slow outlier: mean 38.25
    ("warm", config(4, 1, 1), "here", (30, 30, 31, 31), (5, 5, 5, 5)),  # fastest only with a warm L2
    ("mean", config(16, 2, 2, 8), "here", (25, 25, 26, 26), (24, 24, 24, 24)),  # steady: the mean's winner
    ("min", config(2, 4, 3), "here", (15, 40, 41, 42), (14, 30, 30, 30)),  # one lucky sample
    ("max", config(1, 1, 1), "here", (60, 61, 62, 63), (50, 50, 50, 50)),  # the slowest
    ("shape", config(32, 1, 1, 16), "other shape", (1, 1, 1, 1), (1, 1, 1, 1)),
    ("pass", config(8, 1, 1), "other pass", (2, 2, 2, 2), (2, 2, 2, 2)),
]
TOY_SHAPE = (65536, 256, "float16", "backward")

PICK_SLIPS = {
    "warm": "it picks a configuration that is fastest only with a warm L2 "
            "(its warm samples are 5 µs, its cold ones 30 µs). "
            "Keep the rows with l2 == 'cold': in a model, the norm's input does not sit in L2 waiting for it",
    "mean": "it ranks by the mean: one slow outlier (90 µs among 20, 21, 22) "
            "pulls the right winner's mean up to 38.25 µs. "
            "Rank by the median of each configuration's samples",
    "min": "it ranks by the fastest single sample (15 µs, next to 40, 41, 42): "
           "one lucky sample is not the typical time. "
           "Rank by the median",
    "max": "it picks the slowest configuration: take the smallest median time (idxmin, not idxmax)",
    "shape": "it picks a configuration timed at another shape: keep the rows of this M, N and dtype only",
    "pass": "it picks a configuration timed for the other pass (forward rows in a backward question): "
            "keep the rows of pass_",
}


def toy_timings():
    """The toy sweep as a long DataFrame: one row per sample (columns M, N, dtype, pass_, knobs, l2, us)."""
    import pandas as pd

    M, N, dtype, pass_ = TOY_SHAPE
    rows = []
    for _label, cfg, where, cold, warm in TOY:
        m, p = (1024 if where == "other shape" else M), ("forward" if where == "other pass" else pass_)
        for l2, samples in (("cold", cold), ("warm", warm)):
            rows += [dict(M=m, N=N, dtype=dtype, pass_=p, **cfg, l2=l2, us=float(us)) for us in samples]
    return pd.DataFrame(rows)
