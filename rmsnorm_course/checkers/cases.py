"""The cases every kernel checker runs: cheap on the CPU interpreter, chosen to expose classic bugs.

Each is small (at most 17 rows) and has a reason to be there:

- a row of 257 ones (the article's N-vs-BLOCK example: 1.000, or 1.411 when
  the mean is divided by BLOCK_SIZE = 512);
- M = 1 and M = 17 rows; N = 256 (= BLOCK_SIZE, where ÷BLOCK_SIZE hides) and
  N = 257 (BLOCK_SIZE = 512, where it shows);
- eps = 0.5 with an all-zero row (a forgotten or misplaced eps shows);
- float16, and float16 values of scale 200 (standard deviation), whose squares (and their sums)
  exceed 65504, the largest float16: squaring or summing in float16
  overflows, on the GPU as in the interpreter, whatever the reduction's
  internal accumulator;
- N = 1000 and N = 3000 (BLOCK_SIZE = 1024 and 4096): a block width written
  as a number (512, 1024) instead of BLOCK_SIZE shows;
- rows stored further apart than N (row_stride = N + 43), with NaN in
  between: a row offset computed from N instead of the row stride shows.

The persistent-grid exercises (10, 15's backward) share :data:`GRIDS`, their shapes and numbers of programs.

Inputs come from :func:`rmsnorm.testing.make_inputs` (seeded), on the
device the kernels run on.

Source: solutions/03_forward_kernel.ipynb (the cases are listed there), solutions/10_one_pass_backward.ipynb.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rmsnorm.device import default_device
from rmsnorm.testing import make_inputs
from .diagnose import Case


@dataclass(frozen=True)
class LoopCase(Case):
    """A case of exercise 09: the BLOCK_SIZE the checker forces, narrower than the row (x and y share row_stride)."""

    block: int = 64

    @property
    def block_size(self) -> int:  # the launch's BLOCK_SIZE, not next_power_of_2(N)
        return self.block


@dataclass(frozen=True)
class GridCase(Case):
    """A case of exercise 10: its number of programs P (x, dy and dx share ``row_stride``)."""

    programs: int = 4


@dataclass(frozen=True)
class AddCase(Case):
    """A case of exercise 14: the OFFSET the launch passes (0.0: y = ĥ · weight; 1.0: ĥ · (1 + weight))."""

    offset: float = 0.0


@dataclass(frozen=True)
class AddBackwardCase(AddCase):
    """A case of exercise 14's backward: its rows are h's (the forward's residual_out), not x's."""

    @property
    def x(self):
        return self.inputs["h"]


#: Largest finite float16: a float16 sum beyond it becomes inf.
FLOAT16_MAX = 65504.0


def random_case(kind: type[Case], label: str, M: int, N: int, dtype=torch.float32, *, seed: int = 0,
                scale: float = 1.0, eps: float = 1e-6, zero_row: bool = False, names=("x", "gamma"),
                rstd: bool = False, **fields) -> Case:
    """A case of ``kind`` on random inputs (:func:`rmsnorm.testing.make_inputs`, seeded, on the default device).

    Args:
        kind: the Case class (an exercise's own, with its ``fields``).
        names: which of x, gamma, dy the kernel gets; x is multiplied by ``scale``, its first row zeroed
            if ``zero_row``.
        rstd: also give rstd = 1/sqrt(mean(x²) + 1e-6), float32, as the forward would.
    """
    x, gamma, dy = make_inputs(M, N, dtype, device=default_device(), seed=seed)
    x = x * scale
    if zero_row:
        x[0] = 0
    inputs = dict(zip(names, (x, gamma, dy)))
    if rstd:
        inputs["rstd"] = torch.rsqrt(x.double().square().mean(-1) + 1e-6).float()
    return kind(label, inputs, eps, **fields)


def row_cases(with_dy: bool = False) -> list[Case]:
    """The cases of the forward and dx checkers (inputs x, gamma and, if asked, dy)."""
    device = default_device()
    names = ("x", "gamma", "dy") if with_dy else ("x", "gamma")

    def case(label, M, N, dtype=torch.float32, seed=0, row_stride=None, **options):
        return random_case(Case, label, M, N, dtype, seed=seed, names=names, row_stride=row_stride, **options)

    ones = torch.ones(1, 257, device=device)
    return [
        Case("a row of 257 ones", dict(zip(names, (ones, torch.ones(257, device=device), ones.clone())))),
        case("1×256 float32 (random)", 1, 256, seed=1),
        case("17×256 float32 (random)", 17, 256, seed=2),
        case("17×257 float32 (random)", 17, 257, seed=3),
        case("5×33 float32 with eps = 0.5 and a first row of zeros", 5, 33, seed=4, eps=0.5, zero_row=True),
        case("17×257 float16 (random)", 17, 257, torch.float16, seed=5),
        case("3×257 float16 with values of scale 200 (x² often past 65504)", 3, 257, torch.float16, seed=6,
             scale=200.0),
        case("3×1000 float32 (BLOCK_SIZE = 1024)", 3, 1000, seed=7),
        case("2×3000 float32 (BLOCK_SIZE = 4096)", 2, 3000, seed=8),
        case("6×257 float32 with rows 300 elements apart (row stride 300, not N)", 6, 257, seed=9, row_stride=300),
    ]


#: The grids of exercises 10 and 15's backward, (label, M, N, P, dtype, row_stride): rows not a multiple of P,
#: more programs than rows, P = 1, a row stride, float16.
GRIDS = (
    ("17×257 float32, P = 4 programs (5, 4, 4 and 4 rows)", 17, 257, 4, torch.float32, None),
    ("2×33 float32, P = 4 programs: programs 2 and 3 get no rows (their partial rows must hold zeros)", 2, 33, 4,
     torch.float32, None),
    ("1×256 float32, P = 1", 1, 256, 1, torch.float32, None),
    ("9×100 float32 read in place from a (9, 107) buffer: row_stride = 107, P = 3", 9, 100, 3, torch.float32, 107),
    ("17×257 float16, P = 4", 17, 257, 4, torch.float16, None),
    # rows N apart with P = 3: a number of programs written as a constant fails here too, a row stride does not
    ("10×64 float32, P = 3 programs (4, 3 and 3 rows)", 10, 64, 3, torch.float32, None),
)

#: What every grid exercise's success message adds to :func:`counted`.
GRIDS_SAID = "P = 1, 3 and 4 programs, more programs than rows included"


def on_grids(case, first_seed: int) -> list:
    """``case(label, M, N, P, dtype, seed=, stride=)`` on each of :data:`GRIDS`, seeds ``first_seed`` onwards."""
    return [case(label, M, N, P, dtype, seed=first_seed + i, stride=stride)
            for i, (label, M, N, P, dtype, stride) in enumerate(GRIDS)]


def sum_of_squares(case: Case) -> torch.Tensor:
    """(M, 1) float64: Σ x² of each row, over its N real columns."""
    return case.f64("x").square().sum(-1, keepdim=True)


def describe(cases) -> str:
    """'M = 1, 17; N = 33, 256, 257; float32 and float16'."""
    Ms = sorted({c.M for c in cases})
    Ns = sorted({c.N for c in cases})
    dtypes = sorted({str(c.dtype).removeprefix("torch.") for c in cases}, reverse=True)
    return f"M = {', '.join(map(str, Ms))}; N = {', '.join(map(str, Ns))}; {' and '.join(dtypes)}"


def counted(runs, *notes: str) -> str:
    """'7 cases (M = 1, 17; …; float32 and float16; ``notes``…)': the cases of ``runs``, as a success message says."""
    cases = [r.case for r in runs]
    return f"{len(cases)} cases ({'; '.join((describe(cases), *notes))})"
