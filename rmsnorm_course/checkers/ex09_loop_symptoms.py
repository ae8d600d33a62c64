"""More wrong loops of exercise 09, each run on the case's memory by :func:`~.ex09_symptoms.emulate`.

Slips of the loop's arithmetic that leave every access inside the tensors, so only the numbers show them: the
block's total added to every lane of the accumulator, pass 1 stepping over block indices used as column offsets,
gamma loaded once per block, x's row start taken from BLOCK_SIZE. Tried after :data:`~.ex09_symptoms.SYMPTOMS`.

Source: solutions/09_the_long_row.ipynb.
"""

from __future__ import annotations

from .diagnose import Symptom
from .ex09_symptoms import emulate

SYMPTOMS = [
    Symptom(
        "pass 1 adds each block's total, `tl.sum(x * x, axis=0)`, to every lane of sum_sq: the final `tl.sum` then "
        "counts it BLOCK_SIZE times",
        lambda c: emulate(c, lane_total=True),
        "Add lane by lane in the loop, `sum_sq += x * x`, and reduce once after it: "
        "`rstd = tl.rsqrt(tl.sum(sum_sq, axis=0) / N + eps)`.",
    ),
    Symptom(
        "pass 1 loops over block indices, `range(0, tl.cdiv(N, BLOCK_SIZE))` (0, 1, 2, …), but uses each as a column "
        "offset (`start + cols`): its blocks start one column apart and overlap",
        lambda c: emulate(c, pass1="range(0, tl.cdiv(N, BLOCK_SIZE))"),
        "Step by columns, block by block: `for start in range(0, N, BLOCK_SIZE)` (start is then 0, BLOCK_SIZE, …).",
    ),
    Symptom(
        "gamma is loaded as one value per block (`tl.load(gamma_ptr + start)`, without `cols`): every column of a "
        "block is scaled by the block's first gamma",
        lambda c: emulate(c, gamma_lanes=False),
        "gamma has one value per column: `tl.load(gamma_ptr + start + cols, mask=mask, other=0.0)`.",
    ),
    Symptom(
        "x's row start is `row * BLOCK_SIZE` (`x_row = x_ptr + row * BLOCK_SIZE`): row 0 is right, every other row "
        "reads from the wrong place, inside x",
        lambda c: emulate(c, x_row="BLOCK_SIZE"),
        "Rows are row_stride elements apart: `x_row = x_ptr + row * row_stride`.",
    ),
]
