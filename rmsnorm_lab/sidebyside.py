"""The fast path side by side: the providers' passes, oracle check first, L2-cold kernel time, one byte count.

For the forward and the backward of an (M, N) shape, each alone, every provider of
:data:`SIDE_BY_SIDE` (names from :data:`rmsnorm_lab.providers.PROVIDERS`: ``fast``, its
launchers; ``article``, the kernels of lessons 03–08 where their contract allows; ``eager``;
``compile`` and ``compile_nomix``, MixOrderReduction on and off; ``liger``; ``quack`` on request).

Method: :func:`rmsnorm_lab.providers.prepare` builds each provider's passes and checks
y, dx and dgamma against the float64 oracle with the declared tolerances; a provider that
refuses the shape (its contract, a failed import) is left out and logged, one that fails the
check gets a row with NaN and the reason. Then :func:`rmsnorm_lab.kernel_time_us`
(profiler kernel time, L2 flushed before every call); bytes are the minimum traffic
(:func:`rmsnorm_lab.forward_bytes`, :func:`~rmsnorm_lab.backward_bytes`) for everyone,
so rates are lower bounds. Used by scripts/benchmark_fast.py, which wrote
results/h200/fast.csv; the config sweep is :mod:`rmsnorm_lab.tuning`.

Source: notebooks/12_tuning_and_side_by_side.ipynb; quack
``benchmarks/benchmark_rmsnorm.py`` (named providers, one byte count).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from rmsnorm.article.contract import MAX_N, MAX_SCRATCH_BYTES, scratch_bytes
from rmsnorm.testing import make_inputs
from .providers import EPS, PASSES, pass_calls, prepare, provider
from .results import backward_bytes, forward_bytes
from .timing import kernel_time_us
from .tuning import backward_candidates, forward_candidates, tune  # noqa: F401  (imported from here by scripts and tests)

#: The fast path's benchmark grid: (M, N, dtype).
GRID = (
    (65536, 256, torch.float16), (16384, 1024, torch.float16), (8192, 2048, torch.float16),
    (4096, 4096, torch.float16), (32768, 4096, torch.bfloat16), (16384, 8192, torch.bfloat16),
    (1024, 4096, torch.bfloat16), (4096, 16384, torch.bfloat16), (1024, 65536, torch.bfloat16),
    (4096, 4096, torch.float32),
)
#: The grid that looks for weak shapes (fast_weak.csv): (M, N, x dtype, weight dtype). The shapes where
#: the fast path trailed (issue 17's table), widths that are not multiples of 16, LLM widths (per-head
#: q/k norms at N = 128, the seed's 1152000 × 384), rows up to 262144, fp32 weights on bf16
#: activations, and a small M.
WEAK_GRID = (
    (65536, 1000, torch.float16, torch.float16), (1024, 65536, torch.bfloat16, torch.bfloat16),
    (2048, 32768, torch.bfloat16, torch.bfloat16), (8192, 5120, torch.bfloat16, torch.bfloat16),
    (8192, 3072, torch.bfloat16, torch.float32), (1152000, 384, torch.bfloat16, torch.bfloat16),
    (1024, 4096, torch.bfloat16, torch.bfloat16),
    (65536, 257, torch.bfloat16, torch.bfloat16), (16384, 3000, torch.bfloat16, torch.bfloat16),
    (16384, 4097, torch.bfloat16, torch.bfloat16), (4096, 12289, torch.bfloat16, torch.bfloat16),
    (262144, 128, torch.bfloat16, torch.bfloat16), (32768, 1536, torch.bfloat16, torch.bfloat16),
    (16384, 2560, torch.bfloat16, torch.bfloat16), (8192, 7168, torch.bfloat16, torch.bfloat16),
    (4096, 12288, torch.bfloat16, torch.bfloat16), (512, 131072, torch.bfloat16, torch.bfloat16),
    (256, 262144, torch.bfloat16, torch.bfloat16), (16384, 4096, torch.bfloat16, torch.float32),
    (65536, 257, torch.float32, torch.float32),
)
#: The providers of the side-by-side by default; a provider whose package is missing is left out and logged.
SIDE_BY_SIDE = ("fast", "article", "eager", "compile", "compile_nomix", "liger", "quack")


def side_by_side(shapes=GRID, providers=SIDE_BY_SIDE, *, copy_gbps: float | None = None, log=print) -> pd.DataFrame:
    """Check, then time, every provider's forward and backward on every shape: one row per (shape, pass, provider).

    Args:
        shapes: (M, N, dtype) or (M, N, dtype, weight dtype).
        providers: names from :data:`rmsnorm_lab.providers.PROVIDER_NAMES`.
        copy_gbps: the device's copy rate, for the ``copy_fraction`` column.
        log: called with one line per provider and shape.

    Returns:
        DataFrame with M, N, dtype, weight (the weight's dtype), pass_, provider, us (kernel time, µs, L2-cold; NaN
        when the check failed), bytes, tbps, copy_fraction, check ("ok" or why not: "wrong: …",
        "failed: …"). A provider that refuses a shape has no row there (the log says why).

    Raises:
        BenchmarkUnavailableError: no CUDA GPU.

    Source: notebooks/12_tuning_and_side_by_side.ipynb.
    """
    records = []
    for M, N, dtype, *weight_dtypes in shapes:
        weight_dtype = weight_dtypes[0] if weight_dtypes else dtype
        x, weight, dy = make_inputs(M, N, dtype, "cuda", weight_dtype=weight_dtype, draw_on_device=True)
        nbytes = {"forward": forward_bytes(M, N, dtype, weight_dtype),
                  "backward": backward_bytes(M, N, dtype, weight_dtype)}
        for name in providers:
            calls, status = prepare(provider(name), pass_calls, x, weight, dy, EPS)
            if status.startswith("refused"):
                log(f"  {M}x{N} {str(dtype)[6:]:8s} {name:14s} not timed, {status}")
                continue
            for pass_ in PASSES:
                us = kernel_time_us(calls[pass_], calls=30, warmup=3) if calls else float("nan")
                tbps = nbytes[pass_] / us / 1e6
                records.append(dict(M=M, N=N, dtype=str(dtype).removeprefix("torch."),
                                    weight=str(weight_dtype).removeprefix("torch."), pass_=pass_, provider=name,
                                    us=us, bytes=nbytes[pass_], tbps=tbps,
                                    copy_fraction=tbps * 1e3 / copy_gbps if copy_gbps else float("nan"),
                                    check=status))
            log(f"  {M}x{N} {str(dtype)[6:]:8s} {name:14s} " + ("checked, " if calls else f"NOT TIMED ({status}) ")
                + " ".join(f"{r['pass_']} {r['us']:.1f} us" for r in records[-2:]))
            del calls
        del x, weight, dy
        torch.cuda.empty_cache()
    return pd.DataFrame(records)


def ratio_table(table: pd.DataFrame) -> pd.DataFrame:
    """Kernel time per provider (µs) and ``fast_vs_<provider>`` = provider time / fast time (> 1: fast is faster)."""
    keys = ["M", "N", "dtype", "weight", "pass_"] if "weight" in table else ["M", "N", "dtype", "pass_"]
    pivot = table.pivot_table(index=keys, columns="provider", values="us")
    pivot = pivot.reindex(pd.MultiIndex.from_frame(table[keys].drop_duplicates()))  # the run's order
    for other in [p for p in pivot.columns if p != "fast"]:
        pivot[f"fast_vs_{other}"] = pivot[other] / pivot["fast"]
    return pivot


#: The peers of the fast path's targets: "the best peer" is the fastest of these that passed the oracle.
PEERS = ("compile", "liger", "quack")


def best_peer_table(table: pd.DataFrame) -> pd.DataFrame:
    """Per shape and pass: the fast path's µs, the best peer (fastest of :data:`PEERS` that passed the oracle), ratio.

    Args:
        table: rows with provider, us, check and the shape's columns (those of M, N, dtype, weight,
            pass_ that it has): a side-by-side or a cliff sweep.

    Returns:
        DataFrame indexed by those shape columns, with fast_us, best_peer, best_peer_us and ratio
        (best peer µs / fast µs: > 1, fast is faster); shapes with no peer timed are left out.
    """
    keys = [k for k in ("M", "N", "dtype", "weight", "pass_") if k in table]
    ok = table[table["check"] == "ok"] if "check" in table else table
    rows = []
    for key, group in ok.groupby(keys, sort=False):
        mine, peers = group[group["provider"] == "fast"], group[group["provider"].isin(PEERS)]
        if mine.empty or peers.empty:
            continue
        best = peers.loc[peers["us"].idxmin()]
        rows.append(dict(zip(keys, key), fast_us=mine["us"].iloc[0], best_peer=best["provider"],
                         best_peer_us=best["us"], ratio=best["us"] / mine["us"].iloc[0]))
    return pd.DataFrame(rows, columns=[*keys, "fast_us", "best_peer", "best_peer_us", "ratio"]).set_index(keys)


def best_peer_means(table: pd.DataFrame) -> dict[str, float]:
    """Geometric mean over the shapes of best peer µs / fast µs, per pass (> 1: fast is faster)."""
    ratios = best_peer_table(table)["ratio"]
    return {pass_: float(np.exp(np.log(r).mean())) for pass_, r in ratios.groupby(level="pass_", sort=False)}


#: Run-to-run spread of the measured copy rate: the same 1 GiB device-to-device copy timed 4220,
#: 4250, 4261 and 4256 GB/s in four runs on an H200 on 2026-12-01 (about 1 %). A kernel that
#: streams at the copy's rate may read up to that much above one run's copy.
COPY_RATE_SPREAD = 0.01


def check_table(table: pd.DataFrame, copy_rate_gbps: float, *, with_article: bool = True) -> None:
    """Assert that a side-by-side table (``fast.csv``) is consistent with itself and with the contracts.

    Checks: every timed output matched the float64 oracle first (``check``; a peer that failed it
    is kept untimed, with its reason, and the fast path never fails it); ``bytes`` is the one
    convention (:func:`forward_bytes`, :func:`backward_bytes`); ``tbps`` and ``copy_fraction``
    follow from bytes, µs and ``copy_rate_gbps``; no rate is above the copy rate beyond
    :data:`COPY_RATE_SPREAD`; with ``with_article``, the article's path is timed exactly at the shapes its
    contract allows (float16/float32, N ≤ MAX_N, at most MAX_SCRATCH_BYTES of partials).

    Args:
        table: rows of M, N, dtype (a name), pass_, provider, us, bytes, tbps, copy_fraction, check.
        copy_rate_gbps: the run's measured copy rate (``fast_environment.json``), GB/s.
        with_article: whether the run was asked to time the article's path (the weak grid's is not).

    Raises:
        AssertionError: naming the first rule a row breaks.

    Source: notebooks/12_tuning_and_side_by_side.ipynb §5 (the side-by-side).
    """
    failed = table[table["check"] != "ok"]
    timed = failed[failed["us"].notna()]
    assert timed.empty, f"rows timed without passing the oracle:\n{timed}"
    own = failed[failed["provider"] == "fast"]
    assert own.empty, f"the fast path failed the oracle:\n{own}"
    for row in table.itertuples():
        count = forward_bytes if row.pass_ == "forward" else backward_bytes
        expected = count(row.M, row.N, getattr(torch, row.dtype), getattr(torch, getattr(row, "weight", row.dtype)))
        assert row.bytes == expected, (f"{row.provider} {row.M}x{row.N} {row.dtype} {row.pass_}: {row.bytes} bytes, "
                                       f"the convention says {expected}")
    rate = table["bytes"] / table["us"] / 1e6
    pd.testing.assert_series_equal(table["tbps"], rate, check_names=False, obj="tbps = bytes / us / 1e6")
    pd.testing.assert_series_equal(table["copy_fraction"], rate * 1e3 / copy_rate_gbps, check_names=False,
                                   obj="copy_fraction = rate / copy rate")
    assert table["copy_fraction"].max() <= 1.0 + COPY_RATE_SPREAD, "a rate above the measured copy rate"
    if not with_article:
        return
    shapes = table[["M", "N", "dtype"]].drop_duplicates()
    allowed = {(m, n, d) for m, n, d in shapes.itertuples(index=False)
               if d != "bfloat16" and n <= MAX_N and scratch_bytes(m, n) <= MAX_SCRATCH_BYTES}
    timed = set(map(tuple, table.loc[table["provider"] == "article", ["M", "N", "dtype"]].to_numpy()))
    assert timed == allowed, f"the article's path was timed at {sorted(timed)}, its contract allows {sorted(allowed)}"
