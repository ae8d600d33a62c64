"""The cliff sweep: every width the fast path takes, at a fixed size per pass, judged against its neighbours.

A grid of round widths can hide cliffs (lesson 12: N = 1000 ran at half the rate of 992 and 1008
until ``ROW_ALIGN``). This sweep looks for them on purpose:

- :func:`cliff_widths`: every N ≤ 256, then N = 2^k · {1, 1.5} + {−8, −1, 0, 1, 8} up to
  :data:`~rmsnorm.FAST_MAX_N`, and 200 seeded log-uniform N;
- each N runs with M = :data:`X_BYTES` / (N · element size) rows (x is 128 MiB, so the
  forward moves about 256 MiB), x, weight and dy drawn on the GPU with a seeded generator;
- every provider's output is checked against the float64 oracle first
  (:func:`rmsnorm_lab.providers.prepare`), then timed L2-cold
  (:func:`rmsnorm_lab.kernel_time_us`); bytes are the declared minimum for everyone.

Two verdicts, on the table alone (so that tests and lesson 12 can run them on the CSV):

- :func:`neighbour_verdicts`: each N against the mean of its two nearest sweep neighbours of the
  same alignment class (N mod 8 for 16-bit dtypes, N mod 4 for float32): no N may be more than
  :data:`NEIGHBOUR_FLOOR` below;
- :func:`peer_verdicts`: at an odd N (rows at 2- or 4-byte offsets: no implementation can use
  16-byte accesses there), the fast path against the best of the side-by-side's peers
  (:data:`rmsnorm_lab.sidebyside.PEERS`) that passed the oracle at that N: at least
  :data:`PEER_FLOOR`.

Source: issue 17; notebooks/12_tuning_and_side_by_side.ipynb; scripts/benchmark_cliffs.py.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import torch

from rmsnorm import FAST_MAX_N
from rmsnorm.testing import make_inputs
from . import timing
from .providers import EPS, PASSES, pass_calls, prepare, provider
from .results import backward_bytes, forward_bytes
from .sidebyside import best_peer_table

#: Bytes of x at every width of the sweep: M = X_BYTES // (N · element size) rows.
X_BYTES = 128 << 20
#: A width may run at most 10 % below the mean of its two same-class neighbours.
NEIGHBOUR_FLOOR = 0.9
#: At an odd width, the fast path must reach 0.9× the best peer at that width.
PEER_FLOOR = 0.9
#: The odd widths the peers are timed at first (the article's, then 2^k ± 1), before the rest.
FIRST_ODD = (257, 4097, 12289)


def cliff_widths(max_n: int = FAST_MAX_N, random_widths: int = 200, seed: int = 0) -> list[int]:
    """The declared sweep, sorted: every N ≤ 256, N = 2^k·{1, 1.5} + {−8, −1, 0, 1, 8}, and log-uniform N.

    Args:
        max_n: the widest N (default: the fast path's limit).
        random_widths: how many log-uniform N in [257, max_n] to add (seeded).
        seed: the seed of those.

    Returns:
        Distinct widths between 1 and ``max_n``, ascending.
    """
    widths = set(range(1, min(256, max_n) + 1))
    k = 8
    while 2**k <= max_n:
        for base in (2**k, 3 * 2 ** (k - 1)):
            widths.update(base + d for d in (-8, -1, 0, 1, 8))
        k += 1
    rng = np.random.default_rng(seed)
    widths.update(int(n) for n in np.exp(rng.uniform(np.log(257), np.log(max_n), random_widths)).round())
    return sorted(n for n in widths if 1 <= n <= max_n)


def alignment_class(N: int, dtype: str) -> int:
    """N mod 8 for 16-bit dtypes, N mod 4 for float32: widths whose rows align alike."""
    return N % (4 if dtype == "float32" else 8)


def rows_for(N: int, dtype: torch.dtype) -> int:
    """M at width N: x is :data:`X_BYTES` (at least one row)."""
    return max(1, X_BYTES // (N * torch.empty((), dtype=dtype).element_size()))


def odd_widths_first(widths) -> list[int]:
    """The odd widths of ``widths``: :data:`FIRST_ODD`, then 2^k ± 1, then the rest, ascending in each."""
    odd = [n for n in widths if n % 2]
    power = {n for n in odd if ((n - 1) & (n - 2) == 0) or ((n + 1) & n == 0)}
    first = [n for n in FIRST_ODD if n in odd]
    return first + sorted(power - set(first)) + sorted(set(odd) - power - set(first))


def coverage_order(widths) -> list[int]:
    """``widths`` (sorted) reordered so that every prefix spreads over the whole range.

    Every 2^k-th width first (the largest power of two below the count), then the widths halfway
    between those, and so on down to every width: a sweep cut short by its time budget has
    measured a coarser sweep of the whole range, not the narrow half of it.

    Args:
        widths: N values.

    Returns:
        The same N values, each once, in coverage order.
    """
    ordered = sorted(set(widths))
    step = 1
    while step * 2 < len(ordered):
        step *= 2
    order, taken = [], set()
    while step >= 1:
        for i in range(0, len(ordered), step):
            if i not in taken:
                taken.add(i)
                order.append(ordered[i])
        step //= 2
    return order


def measure(widths, dtype: torch.dtype, providers=("fast",), *, deadline: float, log=print,
            device: str = "cuda") -> list[dict]:
    """Check, then time, each provider's forward and backward at every width (until ``deadline``).

    Args:
        widths: N values, in the order to run them.
        dtype: dtype of x, weight and dy.
        providers: names from :data:`rmsnorm_lab.providers.PROVIDER_NAMES`.
        deadline: ``time.perf_counter()`` value after which no new width starts.
        log: called with one line per width.
        device: where the inputs are drawn (CUDA; tests run the glue on the CPU).

    Returns:
        One dict per (N, pass, provider): dtype, N, M, pass_, provider, us (NaN when the check
        failed), bytes, tbps, check ("ok", "wrong: …", "failed: …"); refusals are left out.
    """
    rows = []
    name = str(dtype).removeprefix("torch.")
    for N in widths:
        if time.perf_counter() > deadline:
            log(f"  budget spent: {name} stopped before N = {N}")
            break
        M = rows_for(N, dtype)
        x, weight, dy = make_inputs(M, N, dtype, device, seed=N, draw_on_device=True)
        nbytes = {"forward": forward_bytes(M, N, dtype), "backward": backward_bytes(M, N, dtype)}
        for who in providers:
            calls, status = prepare(provider(who), pass_calls, x, weight, dy, EPS)
            if status.startswith("refused"):
                continue
            for pass_ in PASSES:
                us = timing.kernel_time_us(calls[pass_], calls=10, warmup=2) if calls else float("nan")
                rows.append(dict(dtype=name, N=N, M=M, pass_=pass_, provider=who, us=us, bytes=nbytes[pass_],
                                 tbps=nbytes[pass_] / us / 1e6, check=status))
            del calls
        log(f"  {name} N={N} M={M}: " + " ".join(f"{r['provider']} {r['pass_'][:3]} {r['tbps']:.2f}"
                                                 for r in rows if r["N"] == N and r["dtype"] == name))
        del x, weight, dy
    if device == "cuda":
        torch.cuda.empty_cache()
    return rows


def neighbour_verdicts(table: pd.DataFrame, who: str = "fast") -> pd.DataFrame:
    """Each width's rate over the mean of its two nearest same-class sweep neighbours.

    Args:
        table: rows of dtype, N, pass_, provider, tbps (a cliff sweep).
        who: the provider judged.

    Returns:
        One row per (dtype, pass_, N) that has a neighbour on both sides: dtype, pass_, N,
        below, above (the neighbours' N), tbps, ratio, ok (ratio ≥ :data:`NEIGHBOUR_FLOOR`).
    """
    out = []
    mine = table[(table["provider"] == who) & table["tbps"].notna()]
    for (dtype, pass_), group in mine.groupby(["dtype", "pass_"]):
        rate = group.set_index("N")["tbps"].sort_index()
        by_class: dict[int, list[int]] = {}
        for N in rate.index:
            by_class.setdefault(alignment_class(N, dtype), []).append(N)
        for ns in by_class.values():
            for below, N, above in zip(ns, ns[1:], ns[2:]):
                ratio = rate[N] / ((rate[below] + rate[above]) / 2)
                out.append(dict(dtype=dtype, pass_=pass_, N=N, below=below, above=above, tbps=rate[N], ratio=ratio,
                                ok=bool(ratio >= NEIGHBOUR_FLOOR)))
    return pd.DataFrame(out, columns=["dtype", "pass_", "N", "below", "above", "tbps", "ratio", "ok"])


def peer_verdicts(table: pd.DataFrame) -> pd.DataFrame:
    """At each odd width where a peer was timed: the fast path against the best peer there.

    :func:`rmsnorm_lab.sidebyside.best_peer_table` on the odd widths, with ``ok`` (ratio ≥
    :data:`PEER_FLOOR`).

    Returns:
        One row per (dtype, pass_, N) and what best_peer_table gives: fast_us, best_peer,
        best_peer_us, ratio (best peer µs / fast µs; > 1: fast is faster), ok.
    """
    best = best_peer_table(table[table["N"] % 2 == 1]).reset_index()
    return best.assign(ok=best["ratio"] >= PEER_FLOOR)
