"""The cause of the odd-N cliff, checked in the compiler's output: 128-bit accesses only with ROW_ALIGN.

On the H200 (torch 2.11, triton 3.6, 2026-12-01, results/h200/alignment_probe.csv), rows of 1000 and
3000 16-bit elements ran the backward at half the rate of 992 and 1008. Triton specialises an integer
argument only on divisibility by 16, so at N = 1000 it cannot prove that a masked row comes in aligned
groups of 8 and loads one element at a time. The launchers pass ROW_ALIGN (rmsnorm.fast.row_alignment)
and the kernels restate N and the strides with it. This test compiles both kernels for sm_90 with
Triton's own compiler (no GPU needed; tools/ptx_vector_accesses.py) and counts 16-byte accesses in the
PTX: none without the hint, loads and stores of both kernels with it. Lesson 12 §4 reads the probe and
asserts what it shows (the cliff before, within 10 % of the neighbours after, no shape 2 % slower).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

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

