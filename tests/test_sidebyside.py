"""The side-by-side benchmark of the fast path: its candidates, its ratio table, its committed results.

Timing itself needs a GPU (scripts/benchmark_fast.py); here: the pieces that
decide what is timed and how it is reported, and the committed H200 table.
"""

import pandas as pd
import pytest
import torch

from rmsnorm.bench import RESULTS_DIR, backward_bytes, forward_bytes
from rmsnorm.bench.sidebyside import GRID, PROVIDERS, backward_candidates, forward_candidates, ratio_table
from rmsnorm.fast import backward_config, forward_config

#: Run-to-run spread of the measured copy rate (see test_committed_h200_table_...).
COPY_RATE_SPREAD = 0.01


@pytest.mark.parametrize("M, N, dtype", GRID, ids=[f"{M}x{N}-{str(d)[6:]}" for M, N, d in GRID])
def test_the_sweep_contains_the_tables_choice(M, N, dtype):
    assert forward_config(N, dtype) in set(forward_candidates(N, dtype))
    assert backward_config(N, dtype) in set(backward_candidates(N, dtype))


def test_ratio_table_divides_the_other_providers_time_by_the_fast_time():
    table = pd.DataFrame([
        dict(M=1, N=2, dtype="float16", pass_="forward", provider="fast", us=10.0),
        dict(M=1, N=2, dtype="float16", pass_="forward", provider="compile", us=12.0),
        dict(M=1, N=2, dtype="float16", pass_="forward", provider="eager", us=5.0),
    ])
    row = ratio_table(table).iloc[0]
    assert row["fast_vs_compile"] == pytest.approx(1.2) and row["fast_vs_eager"] == pytest.approx(0.5)


def test_committed_h200_table_is_complete_checked_and_below_the_copy_ceiling():
    table = pd.read_csv(RESULTS_DIR / "fast.csv")
    shapes = {(M, N, str(d).removeprefix("torch.")) for M, N, d in GRID}
    assert set(map(tuple, table[["M", "N", "dtype"]].drop_duplicates().values.tolist())) == shapes
    assert (table["check"] == "ok").all()  # every timed output matched the float64 oracle first
    for _, row in table.iterrows():  # one byte convention for everyone
        nbytes = forward_bytes if row["pass_"] == "forward" else backward_bytes
        assert row["bytes"] == nbytes(row["M"], row["N"], getattr(torch, row["dtype"]))
        assert row["tbps"] == pytest.approx(row["bytes"] / row["us"] / 1e6)
    # L2-cold: no rate above the measured copy rate, give or take the copy's own spread: the same
    # 1 GiB copy timed 4220, 4250, 4261 and 4256 GB/s in four runs on 2026-12-01 (about 1 %), and a
    # kernel that streams at the copy's rate reads up to that much above one run's copy.
    assert table["copy_fraction"].max() <= 1.0 + COPY_RATE_SPREAD
    fast = set(table.provider)
    assert {"fast", "compile", "compile_nomix", "eager", "liger"} <= fast <= set(PROVIDERS)
    article = table[table.provider == "article"]
    assert set(article.dtype) <= {"float32", "float16"}  # the article's contract: no bf16


def test_readme_fast_table_is_the_committed_csv():
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, str(root / "tools" / "readme_fast_table.py"), "--check"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
