"""Launch configurations of the fast kernels: tile shape, warps, programs, pipelining.

Memory-bound kernels are decided by how much data each program has in flight
and how many programs share the chip, not by arithmetic. The knobs of a
:class:`FastConfig`:

- ``BLOCK_N``: columns a program loads at once: ``next_power_of_2(N)`` while
  the row fits one block, else the width of a loop over column blocks.
- ``BLOCK_M``: rows a program handles per step. A rule gives it as ``step``,
  elements per step: BLOCK_M = max(1, step // BLOCK_N), so short rows take
  many rows a step and each step still moves a few KiB.
- ``num_warps``: warps per program.
- ``programs_per_sm``: a persistent grid of P = SMs × this programs (capped
  by the number of row blocks); for the backward P is also the height of
  the (P, N) float32 dgamma partials. None: one program per row block.
- ``num_stages``: software pipelining of the backward's row loop
  (``tl.range(..., num_stages=...)``): loads of the next step are issued
  before this step's arithmetic.
- ``static_n``: N compiled into the kernel (a constexpr), as Inductor
  compiles static shapes. A row narrower than its power-of-two block is
  masked; with N known the compiler drops the masks of the columns that are
  always in range and the registers that would hold them, so more programs
  fit an SM. The price is a compile per N.
- ``split``: programs per row of the forward (1: a row is one program's). Above 1, each row is split into
  ``split`` blocks of BLOCK_N columns held by programs that wait for each other's sums of squares, so a row
  too wide for one program is still read once (:mod:`rmsnorm.split_forward`, GPU only). No rule takes it yet.
- ``flat``: the kernels take whole contiguous rows as one dense run of BLOCK_N elements (as many rows as fit),
  for short rows whose own block would be mostly masked (:mod:`rmsnorm.flat`; forward and backward, the plain
  RMSNorm's). A flat rule applies only to **dense rows**: every (M, N) tensor the kernel reads has row stride
  N (or M ≤ 1), and the launch is the plain RMSNorm's, not the fused add's or the LayerNorm's.

The choice is data: :data:`FORWARD_RULES` and :data:`BACKWARD_RULES` are
tables of :class:`Rule` (N range, kind of N, x dtypes → step, block, warps,
programs per SM, stages, evidence), scanned in order; :func:`forward_config`
and :func:`backward_config` return the first rule that matches (N, dtype, and
whether the rows are dense), cached per key, and :func:`render_rules` lists a
table as rows to read, diff or plot. Each rule's ``evidence`` names the rows of
``results/h200/fast_tuning.csv`` (L2-cold kernel times on an H200) it rests
on, the LayerNorm's forward rules rows of ``results/h100/layernorm_tuning.csv``;
``results/h200/README.md`` says which sweep chose each rule. The LayerNorm takes
:data:`LAYERNORM_FORWARD_RULES` before the forward's (:func:`layernorm_forward_config`) and a limit on the
backward's one block (:func:`layernorm_backward_config`). Every
launcher also takes an explicit :class:`FastConfig`, so lesson 12 and
``scripts/benchmark_fast.py --tune`` can try others.

Source: notebooks/12_tuning_and_side_by_side.ipynb.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
import triton
import triton.language as tl

#: float32 rows of at most this many columns run the backward's row arithmetic in float64; wider
#: rows, and 16-bit rows, in float32. Lesson 12 §11 computes the backward's formula both ways against
#: the float64 oracle: float64 makes a clear difference at N = 1 only, and the two are within a tenth
#: of the tolerance of each other from N = 2 on. 64 is conservative: the table's rules for short
#: float32 rows were timed with float64 arithmetic.
FLOAT64_MAX_N = 64


def row_arithmetic_dtype(N: int, dtype: torch.dtype) -> torch.dtype:
    """The dtype the fused backward computes a row in: float64 for float32 rows of ≤ FLOAT64_MAX_N columns.

    Args:
        N: columns of the row.
        dtype: dtype of x (float32, float16 or bfloat16).

    Returns:
        ``torch.float64`` or ``torch.float32``; also the dtype of the (M,) mean(u · x̂) scratch of
        looped rows.
    """
    return torch.float64 if dtype == torch.float32 and N <= FLOAT64_MAX_N else torch.float32


#: Programs of the persistent backward grid under the CPU interpreter (one after another there).
INTERPRETER_PROGRAMS = 4


@dataclass(frozen=True)
class FastConfig:
    """One launch configuration (see the module docstring for each knob)."""

    BLOCK_M: int
    BLOCK_N: int
    num_warps: int
    programs_per_sm: int | None = 1
    num_stages: int = 1
    static_n: bool = False
    split: int = 1
    flat: bool = False

    def one_block(self, N: int) -> bool:
        """True when a row of N columns fits one block (no column loop)."""
        return N <= self.BLOCK_N

    def static(self, N: int) -> int:
        """The kernels' STATIC_N: N when it is compiled in, else 0 (N stays a run-time argument)."""
        return N if self.static_n else 0


@functools.lru_cache(maxsize=None)
def sm_count(device_index: int) -> int:
    """Streaming multiprocessors of CUDA device ``device_index`` (132 on an H200)."""
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def num_programs(config: FastConfig, device: torch.device, row_blocks: int) -> int:
    """P, the grid: SMs × programs_per_sm (None: ``row_blocks``), at most ``row_blocks``.

    Every program gets at least one row block, so every row of the (P, N)
    partials is written. Under the interpreter, where programs run one after
    another, P = INTERPRETER_PROGRAMS (capped): the same kernels, fewer steps.
    """
    if device.type != "cuda":
        return max(1, min(INTERPRETER_PROGRAMS, row_blocks))
    return grid_size(
        config, row_blocks, sm_count(device.index if device.index is not None else torch.cuda.current_device())
    )


def grid_size(config: FastConfig, row_blocks: int, sms: int) -> int:
    """P on a GPU with ``sms`` SMs: ``sms × programs_per_sm`` (None: ``row_blocks``), between 1 and ``row_blocks``.

    The arithmetic of :func:`num_programs` without a device, for any card
    (lesson 12 tabulates it for the H200's 132 SMs on a machine without one).
    """
    p = row_blocks if config.programs_per_sm is None else sms * config.programs_per_sm
    return max(1, min(p, row_blocks))


def row_alignment(element_size: int, N: int, *row_strides: int) -> int:
    """The largest power of two, at most 16 bytes of elements, that divides N and every row stride.

    Triton specialises an integer argument only on divisibility by 16, so at N = 1000 it cannot
    prove that a masked 16-bit row is 16-byte aligned in groups of 8 and falls back to one element
    per load and store. The launchers pass this value as the ``ROW_ALIGN`` constexpr (through
    :func:`row_align_hint`, which leaves it to Triton where Triton knows) and the kernels
    restate N and the strides through :func:`aligned`. 1 for an odd N or an odd stride (a view
    such as ``buf[:, 1:N + 1]``), where the rows start at 2-byte offsets and nothing wider is
    possible. Both values are in the launch keys (N and strides by value).

    Args:
        element_size: bytes per element (2 or 4).
        N: columns.
        row_strides: elements from one row to the next, of every (M, N) tensor of the launch.
    """
    g = math.gcd(N, *row_strides)
    align = max(1, 16 // element_size)
    while g % align:
        align //= 2
    return align


def row_align_hint(element_size: int, N: int, *row_strides: int) -> int:
    """The ``ROW_ALIGN`` constexpr a launcher passes: :func:`row_alignment`, or 1 where Triton proves more itself.

    When N and every row stride are multiples of 16 elements, Triton's own specialisation marks
    them divisible by 16, which is all the vector accesses need; restating them through
    :func:`aligned` would then only cost integer instructions. Measured: at 1024 × 4096 bf16 the
    restatement added 14 instructions to the forward's PTX and 17 to the backward's, and both
    kernels ran 6 % slower on the H200 than before ``ROW_ALIGN`` (same call, one after the
    other); with 1 there the PTX is instruction for instruction the old one. Widths such as
    N = 1000, which only the hint makes 16-byte aligned, keep it.

    Args:
        element_size: bytes per element (2 or 4).
        N: columns.
        row_strides: elements from one row to the next, of every (M, N) tensor of the launch.

    Returns:
        1, 2, 4 or 8 (a power of two dividing N and every stride, 16 bytes of elements at most).
    """
    if N % 16 == 0 and all(s % 16 == 0 for s in row_strides):
        return 1
    return row_alignment(element_size, N, *row_strides)


@triton.jit
def aligned(v, ALIGN: tl.constexpr):
    """``v`` itself, written as a multiple of ALIGN so that the compiler knows it (the launcher checked it)."""
    return v // ALIGN * ALIGN


@triton.jit
def shifted_weight(weight, OFFSET: tl.constexpr, COMPUTE: tl.constexpr):
    """weight + OFFSET in COMPUTE, as every kernel scales by it; with OFFSET = 0 no addition is compiled."""
    if OFFSET != 0.0:
        return weight.to(COMPUTE) + OFFSET
    return weight.to(COMPUTE)


#: x dtypes a rule applies to, as torch names them.
ALL = ("float32", "float16", "bfloat16")
F32 = ("float32",)
B16 = ("float16", "bfloat16")
BF16 = ("bfloat16",)
#: A rule's kind of N: its parity, or any N, or an even N that is not a power of two (whose block has
#: masked lanes: a power of two fills its block exactly).
ODD, EVEN, ANY, EVEN_NOT_POW2 = "odd", "even", "any", "even, not a power of two"
#: A rule's ``step`` for one row per step (BLOCK_M = 1 whatever the block).
ONE_ROW = 1


class Rule(NamedTuple):
    """One row of a configuration table: where it applies → the knobs, and the rows that chose them."""

    N_min: int
    N_max: int | None  # None: no upper limit
    parity: str  # the kind of N: ODD, EVEN, ANY or EVEN_NOT_POW2
    dtypes: tuple[str, ...]  # x dtypes (ALL, F32, B16)
    step: int  # elements per step: BLOCK_M = max(1, step // BLOCK_N)
    block: int | None  # BLOCK_N of the column loop; None: the whole row in one block, next_power_of_2(N)
    warps: int
    programs_per_sm: int | None  # None: one program per row block
    stages: int
    evidence: str  # the rows of a sweep the rule rests on (its table's comment names the file)
    static_n: bool = False  # N compiled into the kernel (FastConfig.static_n)
    flat: bool = False  # the flat kernels (FastConfig.flat): a rule for dense rows only; ``block`` is the tile

    def matches(self, N: int, dtype: str, dense_rows: bool = False) -> bool:
        """True when the rule applies to rows of N columns of x dtype ``dtype`` (a torch name, "bfloat16");
        a flat rule only where the rows are dense (``dense_rows``: see the module docstring)."""
        in_range = self.N_min <= N and (self.N_max is None or N <= self.N_max)
        parity = self.parity == ANY or self.parity == (ODD if N % 2 else EVEN) or (
            self.parity == EVEN_NOT_POW2 and N % 2 == 0 and N & (N - 1) != 0)
        return in_range and parity and dtype in self.dtypes and (dense_rows or not self.flat)

    def config(self, N: int) -> FastConfig:
        """The rule's configuration at N: the block and the rows per step follow from N."""
        block_n = triton.next_power_of_2(N) if self.block is None else self.block
        return FastConfig(BLOCK_M=max(1, self.step // block_n), BLOCK_N=block_n, num_warps=self.warps,
                          programs_per_sm=self.programs_per_sm, num_stages=self.stages, static_n=self.static_n,
                          flat=self.flat)


#: The forward: one program per row block, no pipelining. Rows of up to 4095 columns in one block; from
#: 4096 on a loop over column blocks, which the sweeps time ahead of one block as wide as the row at
#: 4096 and 4097 in spite of its second read of x (lesson 09 §4), with a block that widens with the row.
#: Odd rows of 33-511 columns (16-bit; 33-127 in float32 too) take one warp a program with N compiled in: a row
#: narrower than its power-of-two block is masked, and with N known one warp holds a few rows' worth of
#: unmasked lanes, so many small programs keep the loads in flight. Dense odd 16-bit rows of 3-33 columns take
#: the flat kernel instead (a tile of whole rows read as one run: no masked lanes, 16-byte accesses), which the
#: sweep times behind the one-warp rule from 65 on.
FORWARD_RULES = (
    # N_min, N_max, parity, dtypes, step, block, warps, programs_per_sm, stages, evidence
    Rule(3, 33, ODD, B16, ONE_ROW, 1024, 4, None, 1,
         "fast_tuning.csv: forward, bfloat16, N=3, 17, 33: best, 1.07-1.96x the rules below (65: 0.57x)", flat=True),
    Rule(33, 127, ODD, ALL, 1024, None, 1, None, 1,
         "fast_tuning.csv: forward, bfloat16, N=33, 65: 1.83x and 2.44x the rule below", static_n=True),
    Rule(129, 511, ODD, B16, 2048, None, 1, None, 1,
         "fast_tuning.csv: forward, bfloat16, N=129, 257: best, 1.94x and 1.62x the rules below", static_n=True),
    Rule(1, 256, ANY, ALL, 2048, None, 4, None, 1, "fast_tuning.csv: forward, bfloat16, N=1, 3, 15: best of 22"),
    Rule(257, 512, ANY, ALL, 4096, None, 4, None, 1, "fast_tuning.csv: forward, bfloat16, N=257, 384: best at every M"),
    Rule(513, 2048, ANY, ALL, 2048, None, 4, None, 1, "fast_tuning.csv: forward, float16, N=1000, 1024, 2048: best"),
    Rule(2049, 4095, ANY, ALL, ONE_ROW, None, 4, None, 1,
         "fast_tuning.csv: forward, bfloat16, N=2560, 3000, 3072: within 2 % of the best but at 8192 × 3072"),
    Rule(6144, 8192, ANY, F32, ONE_ROW, 4096, 16, None, 1,
         "fast_tuning.csv: forward, float32, N=6144, 7168, 8192: within 1.2 % of the best (the 2048 loop: 1.07-1.16x)"),
    Rule(4097, 8191, ANY, B16, ONE_ROW, 2048, 8, None, 1,
         "fast_tuning.csv: forward, bfloat16, N=4097, 5120, 7168: N compiled in 1.04-1.15x ahead", static_n=True),
    Rule(4096, 8192, ANY, ALL, ONE_ROW, 2048, 8, None, 1,
         "fast_tuning.csv: forward, bfloat16, N=4096, 4097: best at every M"),
    Rule(8193, 16383, ODD, ALL, ONE_ROW, 4096, 8, None, 1,
         "fast_tuning.csv: forward, bfloat16, N=12289: 2nd of 35 at M=5460, 4th at 4096"),
    Rule(8193, 16384, ANY, ALL, ONE_ROW, 4096, 16, None, 1, "fast_tuning.csv: forward, bfloat16, N=16384: best of 35"),
    Rule(16385, 32768, ANY, ALL, ONE_ROW, 8192, 32, None, 1, "fast_tuning.csv: forward, bfloat16, N=32768: best of 37"),
    Rule(32769, None, ANY, ALL, ONE_ROW, 16384, 16, None, 1,
         "fast_tuning.csv: forward, bfloat16, N=65536, 131072, 262144: best of 34"),
)

#: The backward: a persistent grid. Odd N, where rows start at 2- or 4-byte offsets and every access
#: is one element, takes fewer rows a step, fewer stages and more programs than even N; a specific
#: rule comes before the general one it overrides (odd 33-511 before odd 1-1023). Dense odd rows of 3-65
#: columns (16-bit; 3-15 in float32) take the flat kernel, which loses to the blocked one at 129.
BACKWARD_RULES = (
    # N_min, N_max, parity, dtypes, step, block, warps, programs_per_sm, stages, evidence
    Rule(3, 33, ODD, B16, ONE_ROW, 1024, 4, 2, 3,
         "fast_tuning.csv: backward, bfloat16, N=3, 17, 33: 1.07-2.68x the rules below", flat=True),
    Rule(35, 65, ODD, B16, ONE_ROW, 2048, 8, 1, 3,
         "fast_tuning.csv: backward, bfloat16, N=33, 65: best, 65 1.07x the rules below (129: 0.57x)", flat=True),
    Rule(3, 15, ODD, F32, ONE_ROW, 512, 4, 4, 3, "fast_tuning.csv: backward, float32, N=3: best, 1.63x", flat=True),
    Rule(33, 63, ODD, B16, 4096, None, 4, 2, 1,
         "fast_tuning.csv: backward, bfloat16, N=33, 63: best unflattened, 1.14x and 1.16x the odd rule"),
    Rule(65, 127, ODD, F32, 1024, None, 4, 4, 1, "fast_tuning.csv: backward, float32, N=65: best of 108"),
    Rule(129, 511, ODD, F32, 2048, None, 4, 4, 1, "fast_tuning.csv: backward, float32, N=257: best of 108"),
    Rule(65, 127, ODD, B16, 2048, None, 2, 4, 1, "fast_tuning.csv: backward, bfloat16, N=65: 2.12x the odd rule"),
    Rule(129, 511, ODD, B16, 4096, None, 2, 4, 1,
         "fast_tuning.csv: backward, bfloat16, N=129, 257: best unflattened, 1.14x and 1.25x", static_n=True),
    Rule(1, 1023, ODD, ALL, 4096, None, 8, 2, 1, "fast_tuning.csv: backward, bfloat16, N=3, 15: best"),
    Rule(1025, 2047, ODD, F32, 4096, None, 8, 2, 1, "fast_tuning.csv: backward, float32, N=1025: best of 108"),
    Rule(2049, 4095, ODD, F32, 4096, None, 4, 2, 1, "fast_tuning.csv: backward, float32, N=4095: best of 90"),
    Rule(1025, 4095, ODD, B16, 4096, None, 8, 2, 3, "fast_tuning.csv: backward, bfloat16, N=2047: best of 108"),
    Rule(4097, 8191, ODD, F32, ONE_ROW, None, 8, 1, 1, "fast_tuning.csv: backward, float32, N=4097: best of 63"),
    Rule(4097, 8191, ODD, B16, ONE_ROW, None, 8, 1, 2,
         "fast_tuning.csv: backward, bfloat16, N=4097, 6143: best; N compiled in 1.20x ahead at 4097", static_n=True),
    Rule(2, 4096, EVEN, F32, 4096, None, 8, 1, 3, "fast_tuning.csv: backward, float32, N=16, 1000, 4096: best"),
    Rule(4098, 8192, EVEN, F32, ONE_ROW, None, 16, 1, 3, "fast_tuning.csv: backward, float32, N=8192: 2nd of 16"),
    Rule(2, 8192, EVEN_NOT_POW2, BF16, 8192, None, 8, 1, 4,
         "fast_tuning.csv: backward, bfloat16, N=384, 1536, 2560, 3000, 3072, 5120, 7168: 4 stages 1-14 % ahead of 3"),
    Rule(2, 8192, EVEN, B16, 8192, None, 8, 1, 3, "fast_tuning.csv: backward, float16, N=256-4096: best"),
    Rule(8193, 16384, ANY, F32, ONE_ROW, None, 32, 1, 1, "fast_tuning.csv: backward, float32, N=12289, 16384: best"),
    Rule(8193, 16383, ODD, B16, ONE_ROW, None, 32, 1, 2, "fast_tuning.csv: backward, bfloat16, N=12289: best of 22"),
    Rule(8194, 16384, EVEN, B16, ONE_ROW, None, 16, 1, 1, "fast_tuning.csv: backward, bfloat16, N=16384: best"),
    Rule(16385, None, ANY, ALL, ONE_ROW, 8192, 8, 1, 1, "fast_tuning.csv: backward, bfloat16, N=65536: best of 18"),
)

#: Widest row the RMSNorm's forward holds in one block (in registers); wider rows loop over blocks (the LayerNorm's
#: own rules hold rows of 8192 and 16384 columns too: :data:`LAYERNORM_FORWARD_RULES`).
ONE_BLOCK_MAX_N = max(rule.N_max for rule in FORWARD_RULES if rule.block is None)  # a flat rule's block is its tile
#: Widest row the LayerNorm's backward holds in one block. Its block keeps x̂, u and two partials (dweight's and
#: dbias's) live where the RMSNorm's keeps one partial, and the RMSNorm's one-block rules past 8192 columns spill
#: it: ptxas for sm_90 spills 1224 bytes a thread at 12288 and 16384 bfloat16 (16 warps), against 172 for the
#: RMSNorm's, and nothing at 8192 or in the 8192-column tiles of the loop. At odd widths up to 8191 the one-block
#: rules spill it a little (4 to 616 bytes, where they spill the RMSNorm's 0 to 168), which only a sweep can weigh
#: against looping (``scripts/benchmark_fast.py --tune-only --norm layernorm``). ptxas's counts:
#: ``python tools/ptx_vector_accesses.py N dtype --spills --layernorm``; the H200's kernel times of the spilling
#: backward are in the body of the commit that set this limit.
LAYERNORM_BACKWARD_ONE_BLOCK_MAX_N = 8192
#: The LayerNorm's forward: rules of its own, scanned before :data:`FORWARD_RULES` (which apply where none of these
#: does). It moves the RMSNorm's bytes but more through L2: every row block reads the weight and the bias, in float32
#: at the widths models keep them so (GPT-2, ViT, Phi), where a row block of one 16-bit row reads four times its x
#: bytes of parameters. So 16-bit rows of 513-2048 columns take four rows a step, which share those loads,
#: and from 1025 columns a persistent grid that holds them for all its row blocks. Rows of 8192 and 16384 columns
#: are held in one block, read once (the loop's second read of x costs the LayerNorm more than the RMSNorm); the
#: looped widths between compile N in (the loop's trip count known, its blocks' loads in flight together); rows of
#: 32769-65536 columns loop over blocks of 16384 on 32 warps, two programs an SM. At 4096 columns the RMSNorm's
#: loop stays: one block there leads from 4096 rows on but, L2-cold at 1024 rows, is the slowest and not stable from
#: run to run, where the loop is (``results/h100/README.md``, *One block of 4096 columns*); the rules look at N, not
#: M. The LayerNorm's own sweeps chose these (``scripts/benchmark_fast.py --tune-only --norm layernorm --tune-passes
#: forward``), run on an H100: ``evidence`` names the file of ``results/h100`` (``layernorm_tuning*.csv``) and its
#: rows, which an H200 sweep is to confirm.
LAYERNORM_FORWARD_RULES: tuple[Rule, ...] = (
    # N_min, N_max, parity, dtypes, step, block, warps, programs_per_sm, stages, evidence
    Rule(513, 1024, ANY, B16, 4096, None, 4, None, 1,
         "layernorm_tuning.csv: forward, float16, N=768, 1024: best (bfloat16 at 768: best)"),
    Rule(1025, 2048, ANY, B16, 8192, None, 4, 4, 3,
         "layernorm_tuning.csv: forward, float16, N=1280, 2048: best, within 0.2 %"),
    Rule(8192, 8192, ANY, B16, ONE_ROW, None, 16, None, 1, "layernorm_tuning.csv: forward, bfloat16, N=8192: best"),
    Rule(8193, 16383, ANY, B16, ONE_ROW, 4096, 16, None, 1,
         "layernorm_tuning_12288.csv: forward, bfloat16, N=12288: best, with float32 and with bfloat16 weight and bias",
         static_n=True),
    Rule(16384, 16384, ANY, B16, ONE_ROW, None, 16, None, 1, "layernorm_tuning.csv: forward, bfloat16, N=16384: best"),
    Rule(32769, 65536, ANY, B16, ONE_ROW, 16384, 32, 2, 1, "layernorm_tuning.csv: forward, bfloat16, N=65536: best"),
)
RULES = {"forward": FORWARD_RULES, "backward": BACKWARD_RULES, "layernorm_forward": LAYERNORM_FORWARD_RULES}
#: The backward's rule for the widest rows, the table's last: a loop over tiles of a fixed block, without an end.
_WIDEST_BACKWARD = BACKWARD_RULES[-1]


def _first_rule(pass_: str, N: int, dtype: torch.dtype, dense_rows: bool) -> Rule | None:
    """The first rule of ``RULES[pass_]`` that matches, or None."""
    name = str(dtype).removeprefix("torch.")
    return next((rule for rule in RULES[pass_] if rule.matches(N, name, dense_rows)), None)


def _first_match(pass_: str, N: int, dtype: torch.dtype, dense_rows: bool) -> FastConfig:
    rule = _first_rule(pass_, N, dtype, dense_rows)
    if rule is None:
        raise ValueError(f"no {pass_} configuration for N = {N}, dtype {str(dtype).removeprefix('torch.')}: the "
                         f"table covers N >= 1 in {ALL}")
    return rule.config(N)


def dense_rows(x: torch.Tensor, *others: torch.Tensor) -> bool:
    """True when every (M, N) tensor is one dense run of rows: row stride N, or at most one row.

    What a flat rule needs of the tensors a kernel reads (the outputs are allocated contiguous). The
    tensors have unit column stride (the contract), so this is ``is_contiguous()``, which torch answers
    from a flag it keeps (0.2 µs a tensor on the course's CPU, where reading shape and stride took 1.2).
    """
    return x.is_contiguous() and all(t.is_contiguous() for t in others)


@functools.lru_cache(maxsize=None)
def forward_config(N: int, dtype: torch.dtype, dense_rows: bool = False) -> FastConfig:
    """The forward's configuration for rows of N columns of x dtype ``dtype``: the first rule of FORWARD_RULES.

    Args:
        N, dtype: the key.
        dense_rows: x's rows are one dense run (:func:`dense_rows`) and the launch is the plain RMSNorm's, so
            that a flat rule may apply. False (rows in any layout) never gives a flat configuration.

    Raises:
        ValueError: no rule matches (N < 1, or a dtype other than float32, float16 and bfloat16).
    """
    return _first_match("forward", N, dtype, dense_rows)


@functools.lru_cache(maxsize=None)
def backward_config(N: int, dtype: torch.dtype, dense_rows: bool = False) -> FastConfig:
    """The backward's configuration for rows of N columns of x dtype ``dtype``: the first rule of BACKWARD_RULES.

    Args:
        N, dtype: the key.
        dense_rows: x's and dy's rows are one dense run (:func:`dense_rows`) and the launch is the plain
            RMSNorm's, so that a flat rule may apply. False (rows in any layout) never gives a flat configuration.

    Raises:
        ValueError: no rule matches (N < 1, or a dtype other than float32, float16 and bfloat16).
    """
    return _first_match("backward", N, dtype, dense_rows)


@functools.lru_cache(maxsize=None)
def layernorm_forward_config(N: int, dtype: torch.dtype) -> FastConfig:
    """The LayerNorm forward's configuration: the first rule of :data:`LAYERNORM_FORWARD_RULES` that matches, else
    :func:`forward_config`'s for rows in any layout (a flat rule is the plain RMSNorm's only).

    Raises:
        ValueError: as :func:`forward_config`.
    """
    rule = _first_rule("layernorm_forward", N, dtype, False)
    return forward_config(N, dtype) if rule is None else rule.config(N)


@functools.lru_cache(maxsize=None)
def layernorm_backward_config(N: int, dtype: torch.dtype) -> FastConfig:
    """The LayerNorm backward's configuration: :func:`backward_config`'s, except that a row wider than
    :data:`LAYERNORM_BACKWARD_ONE_BLOCK_MAX_N` which that would hold in one block loops over column blocks as the
    widest rows do (the last backward rule's tiles).

    Raises:
        ValueError: as :func:`backward_config`.
    """
    config = backward_config(N, dtype)
    if N <= LAYERNORM_BACKWARD_ONE_BLOCK_MAX_N or not config.one_block(N):
        return config
    return _WIDEST_BACKWARD.config(N)


def render_rules(pass_: str) -> list[dict]:
    """The rule table of ``pass_`` ("forward", "backward" or "layernorm_forward") as rows of plain values, in scan
    order.

    Each row: ``N_first``, ``N_last`` (None: no limit), ``parity``, ``dtypes`` (comma-separated),
    ``step`` (elements per step: BLOCK_M = max(1, step // BLOCK_N)), ``BLOCK_N`` (None: the row's
    next power of two), ``num_warps``, ``programs_per_sm``, ``num_stages``, ``static_n``, ``flat`` (a rule for
    dense rows only), ``evidence``; ready for ``pandas.DataFrame`` or a markdown table. A row of N applies when
    no row above it does.
    """
    return [dict(N_first=r.N_min, N_last=r.N_max, parity=r.parity, dtypes=", ".join(r.dtypes), step=r.step,
                 BLOCK_N=r.block, num_warps=r.warps, programs_per_sm=r.programs_per_sm, num_stages=r.stages,
                 static_n=r.static_n, flat=r.flat, evidence=r.evidence) for r in RULES[pass_]]
