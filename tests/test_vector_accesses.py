"""The cause of the odd-N cliff, checked in the compiler's output: 128-bit accesses only with ROW_ALIGN.

On the H200 (torch 2.11, triton 3.6, 2026-12-01, results/h200/alignment_probe.csv), rows of 1000 and
3000 16-bit elements ran the backward at half the rate of 992 and 1008. Triton specialises an integer
argument only on divisibility by 16, so at N = 1000 it cannot prove that a masked row comes in aligned
groups of 8 and loads one element at a time. The launchers pass ROW_ALIGN (rmsnorm.fast.row_alignment)
and the kernels restate N and the strides with it. This test compiles both kernels for sm_90 with
Triton's own compiler (no GPU needed; tools/ptx_vector_accesses.py) and counts 16-byte accesses in the
PTX: none without the hint, loads and stores of both kernels with it.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from rmsnorm.bench.results import results_dir

SCRIPT = Path(__file__).resolve().parents[1] / "tools" / "ptx_vector_accesses.py"


@pytest.mark.parametrize("N, dtype", [(1000, "float16"), (3000, "bfloat16"), (1000, "float32")])
def test_rows_of_a_multiple_of_8_move_16_bytes_at_a_time_only_with_row_align(N, dtype):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # compiled mode (it never launches)
    done = subprocess.run([sys.executable, str(SCRIPT), str(N), dtype], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    counts = json.loads(done.stdout)
    assert set(counts["1"].values()) == {0}, counts["1"]  # N = 1000 as Triton sees it: one element at a time
    hinted = counts["8"]
    for which in ("forward", "backward"):
        loads = hinted[f"ld.v4 {which}"] + hinted[f"cp.async.16 {which}"]  # the pipelined backward loads via cp.async
        assert loads > 0 and hinted[f"st.v4 {which}"] > 0, (which, hinted)


#: Same-class neighbours (N mod 8 equal) of the two cliff widths in the committed probe.
NEIGHBOURS = {1000: (992, 1008), 3000: (2992, 3072)}


def _probe() -> pd.DataFrame:
    return pd.read_csv(results_dir() / "alignment_probe.csv")


def test_the_committed_probe_shows_the_cliff_and_its_end():
    """N = 1000 and 3000 ran far below their neighbours before ROW_ALIGN; now within 10 % of their mean."""
    t = _probe().pivot_table(index=["dtype", "pass_", "N"], columns="kernels", values="tbps")
    for (dtype, pass_), rows in t.groupby(level=[0, 1]):
        rows = rows.droplevel([0, 1])
        for N, (lo, hi) in NEIGHBOURS.items():
            for kernels in ("before", "row_align"):
                ratio = rows.loc[N, kernels] / ((rows.loc[lo, kernels] + rows.loc[hi, kernels]) / 2)
                if kernels == "row_align":
                    assert ratio >= 0.9, (dtype, pass_, N, ratio)
                elif dtype == "bfloat16" or pass_ == "backward":  # fp32's forward had no cliff to speak of
                    assert ratio < 0.9, (dtype, pass_, N, ratio)


def test_no_shape_of_the_committed_probe_got_slower_by_more_than_2_percent():
    t = _probe().pivot_table(index=["dtype", "pass_", "N"], columns="kernels", values="us").dropna()
    assert len(t) >= 50  # both kernel sets at every shape up to 65536
    assert (t["before"] / t["row_align"]).min() >= 0.98, (t["before"] / t["row_align"]).sort_values().head()
