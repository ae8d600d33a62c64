"""The plain kernels' code is the one recorded: switches added to the kernels cost the plain path nothing.

The fused residual add (rmsnorm_add) and the LayerNorm share the fast kernels through constexpr switches (HAS_RESIDUAL
in the forward, HAS_DRES in the backward; IS_LAYERNORM and HAS_BIAS in both). Switched off, a constexpr branch is
not compiled, so the plain kernels must be instruction for instruction the recorded ones: first those of commit
1a22cbb, before the switches, then those of the last deliberate change to the plain code (the file's "commit" field
names it). tools/ptx_vector_accesses.py compiles them for sm_90 (no GPU needed) as the launchers do at each width
and hashes the PTX without its debug information (which names source lines); tests/data/plain_ptx_digests.json
holds the digests.
The widths cover both shapes of each kernel: one block (1000), the forward's column loop (4096), both
loops (32768), and the float64 row arithmetic of the float32 backward (1000 float32).

A deliberate change to a plain kernel changes its digest: record the new ones with the tool's --plain-digest.
The same tool compiles the fused add's and the LayerNorm's kernels (switches on), which the CPU interpreter never
compiles.
"""

import json
from pathlib import Path

import pytest
import triton

import checkout_scripts

ROOT = Path(__file__).resolve().parents[2]
RECORDED = json.loads((ROOT / "tests" / "data" / "plain_ptx_digests.json").read_text())


@pytest.mark.skipif(triton.__version__ != RECORDED["triton"],
                    reason=f"the digests are triton {RECORDED['triton']}'s PTX; another version compiles other code")
@pytest.mark.parametrize("case", sorted(RECORDED["digests"]))
def test_the_plain_kernels_compile_to_the_recorded_ptx(case):
    N, dtype = case.split()
    out = checkout_scripts.ptx_tool(N, dtype, "--plain-digest")
    assert json.loads(out) == RECORDED["digests"][case]


@pytest.mark.parametrize("N, dtype, residual_dtype", [(1000, "bfloat16", "bfloat16"), (4096, "bfloat16", "float32"),
                                                      (32768, "float16", "float16")])
def test_the_fused_add_kernels_compile_for_sm_90_with_their_switches_on(N, dtype, residual_dtype):
    # The interpreter runs the fused add on the CPU but compiles nothing: this compiles it, as a GPU would,
    # at one block, at the forward's column loop with a float32 residual stream, and with both loops.
    out = checkout_scripts.ptx_tool(N, dtype, "--fused", residual_dtype)
    for which, (plain, fused) in json.loads(out).items():
        assert 0 < plain < fused, which  # the switch adds the residual's loads and stores, and only when on


@pytest.mark.parametrize("N, dtype", [(1000, "bfloat16"), (4096, "bfloat16"), (32768, "float16"), (1000, "float32")])
def test_the_layernorm_kernels_compile_for_sm_90_with_their_switches_on(N, dtype):
    # The LayerNorm (IS_LAYERNORM, HAS_BIAS) runs under the interpreter on the CPU, which compiles nothing: this
    # compiles it as a GPU would, at one block, at the forward's loop, at both loops, and in float64 arithmetic.
    out = checkout_scripts.ptx_tool(N, dtype, "--layernorm")
    for which, (plain, layernorm) in json.loads(out).items():
        assert 0 < plain < layernorm, which  # the mean, the bias and dx's third term, compiled only when on


@pytest.mark.parametrize("N, dtype, weight", [(8192, "bfloat16", None), (12288, "bfloat16", None),
                                               (16384, "float32", None), (32768, "float16", None),
                                               (12288, "bfloat16", "float32"), (1280, "float16", "float32")])
def test_the_layernorm_kernels_spill_nothing_at_their_configurations(N, dtype, weight):
    # The LayerNorm's backward keeps two partials live where the RMSNorm's keeps one: in one block at the
    # RMSNorm's one-block widths past 8192 ptxas spills it by a kilobyte a thread, so it loops there
    # (rmsnorm.config.LAYERNORM_BACKWARD_ONE_BLOCK_MAX_N). At the launchers' configurations nothing spills at these
    # widths: one block at 8192, the loop's tiles beyond; nor with float32 weight and bias under 16-bit rows
    # (mixed precision's layout, which the side by side times at the GPT-2, ViT and 12288 widths).
    out = checkout_scripts.ptx_tool(N, dtype, "--spills", "--layernorm", *(("--weight", weight) if weight else ()))
    used = json.loads(out)
    assert {which: use["spill_bytes"] for which, use in used.items()} == {"forward": 0, "backward": 0}, used
    assert all(0 < use["registers"] <= 255 for use in used.values()), used


@pytest.mark.parametrize("N, norm", [(12288, "--layernorm"), (16384, "--layernorm"), (8192, "--layernorm"),
                                     (12288, None), (65536, None)])
def test_a_one_row_forward_meets_float32_parameters_without_shared_memory(N, norm):
    # One row a step, a float32 weight (and bias) beside bfloat16 rows is loaded in the row's own layout
    # (rmsnorm.forward._columns): no tensor passes through shared memory on its way to the row, where a vector load
    # broadcast to the row goes through it in every block (results/h100/forward_layout_ab.csv times both).
    out = checkout_scripts.ptx_tool(N, "bfloat16", "--spills", *((norm,) if norm else ()), "--weight", "float32")
    assert json.loads(out)["forward"]["shared_vector_stores"] == 0, out
