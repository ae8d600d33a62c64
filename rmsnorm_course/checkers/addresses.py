"""What a stray access's addresses say about the slip that made them: which tensor, which lanes, which offset.

The interpreter hands :mod:`~rmsnorm_course.checkers.guards` every lane's address of a load or store, masked lanes
included (a mask only stops the access, not the arithmetic). Read back as element offsets from the tensor's first
element, they show the learner's address formula: consecutive lanes ``row_stride`` apart is a transposed address;
a row offset that is not ``row × row_stride`` names the number that took the stride's place; a 1-D tensor of one
value per row read at column offsets is a per-row value loaded per column; a mask that lets exactly lane N
through is ``<=`` where ``<`` belongs. :func:`reading` returns those words, or "" where the addresses fit none
(the caller's own words then stand alone), so a message names a suspect only when the evidence points at it.

Source: solutions/03_forward_kernel.ipynb … 10_one_pass_backward.ipynb.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Lanes:
    """One access's lanes, in elements of the tensor its first stray lane fell in.

    Attributes:
        offsets: every lane's element offset from the tensor's first element (the block's shape).
        unmasked: which lanes the mask let through (the block's shape).
        program: the program's index along axis 0 (``tl.program_id(0)``).
        shapes: name → (shape, row stride) of every tensor of the launch, to name a stride taken for another.
    """

    offsets: np.ndarray
    unmasked: np.ndarray
    program: int
    shapes: dict


def reading(tensor: str | None, lanes: Lanes | None) -> str:
    """Words for what the lanes' addresses show of the slip (sentences ending with a period), or ""."""
    if tensor is None or lanes is None or tensor not in lanes.shapes or lanes.offsets.size < 2:
        return ""
    shape, stride = lanes.shapes[tensor]
    for look in (_transposed, _mask_axes_swapped, _per_row_value, _mask_off_by_one, _row_offset, _tile_row_step):
        try:
            words = look(tensor, shape, stride, lanes)
        except Exception:  # noqa: BLE001 - an unusual block shape: no reading, the caller's words stand
            words = ""
        if words:
            return words[0].upper() + words[1:] if words.startswith("the ") else words
    return ""


def _steps(offsets: np.ndarray) -> tuple[int, ...]:
    """The offset between neighbouring lanes along each axis of the block (0 along an axis of length 1)."""
    steps = []
    for axis in range(offsets.ndim):
        if offsets.shape[axis] < 2:
            steps.append(0)
            continue
        first = np.take(offsets, [0], axis=axis).reshape(-1)[0]
        second = np.take(offsets, [1], axis=axis).reshape(-1)[0]
        steps.append(int(second - first))
    return tuple(steps)


def _transposed(tensor, shape, stride, lanes) -> str:
    if len(shape) != 2 or stride <= 1:
        return ""
    steps = _steps(lanes.offsets)
    if lanes.offsets.ndim == 1 and steps[0] == stride:
        return (f"{tensor}'s address is transposed: neighbouring lanes (neighbouring columns) lie {stride} elements "
                f"apart, {tensor}'s row stride, so the stride multiplies the column index (`cols * row_stride`). "
                f"The stride multiplies the row and the columns are added: `{tensor}_ptr + row * row_stride + cols`.")
    if lanes.offsets.ndim == 2 and steps[-1] == stride and steps[0] == 1:
        return (f"the tile's offsets into {tensor} are transposed: along the tile's columns (axis 1) the lanes lie "
                f"{stride} elements apart, {tensor}'s row stride, and along its rows (axis 0) 1 apart. Rows go down "
                "axis 0 and carry the stride, columns go along axis 1: `rows[:, None] * row_stride + cols[None, :]`.")
    return ""


def _rows_and_columns(offsets: np.ndarray, stride: int) -> tuple[np.ndarray, np.ndarray]:
    return offsets // max(stride, 1), offsets % max(stride, 1)


def _mask_axes_swapped(tensor, shape, stride, lanes) -> str:
    """A 2-D tile whose addresses are right but whose mask tests the rows along axis 1 and the columns along axis 0."""
    if len(shape) != 2 or lanes.offsets.ndim != 2 or _steps(lanes.offsets) != (stride, 1):
        return ""
    (M, N), (height, width) = shape, lanes.offsets.shape
    rows, cols = _rows_and_columns(lanes.offsets, stride)
    row0, col0 = int(rows[0, 0]), int(cols[0, 0])
    i, j = np.arange(height)[:, None], np.arange(width)[None, :]
    swapped = (row0 + j < M) & (col0 + i < N)
    if height == width and np.array_equal(lanes.unmasked, swapped) and not np.array_equal(swapped, (rows < M) & (
            cols < N)):
        return (f"the mask's axes are swapped: it lets through the lanes of {tensor} whose column index is below "
                "M and whose row index is below N. Rows go down axis 0, columns along axis 1: "
                "`(rows[:, None] < M) & (cols[None, :] < N)`.")
    return ""


def _per_row_value(tensor, shape, stride, lanes) -> str:
    """A 1-D tensor of one value per row (M of them) read as a block at column offsets, or one per column (N) at a
    row's offsets."""
    if len(shape) != 1 or _steps(lanes.offsets)[-1] != 1:
        return ""
    others = [s for name, (s, _) in lanes.shapes.items() if name != tensor and len(s) == 2]
    if not others:
        return ""
    M, N = others[0]
    first = int(lanes.offsets.reshape(-1)[0])
    if shape[0] == M and M != N and first in (0, lanes.program):
        return (f"{tensor} holds one value per row ({M} of them), but it is loaded as a block at column offsets "
                f"(`{tensor}_ptr + cols`): load the row's one value, `tl.load({tensor}_ptr + row)`.")
    if shape[0] == N and first > 0:
        row_stride = next((st for name, (s, st) in lanes.shapes.items() if len(s) == 2 and first % max(st, 1) == 0),
                          None)
        if row_stride:
            return (f"{tensor} holds one value per column ({N} of them), the same for every row, but it is read at "
                    f"row {first // row_stride}'s offsets (`row * row_stride + cols`): `{tensor}_ptr + cols`.")
    return ""


def _mask_off_by_one(tensor, shape, stride, lanes) -> str:
    """The lanes let through run to exactly column N (or element numel): `cols <= N`."""
    if _steps(lanes.offsets)[-1] != 1:
        return ""
    limit = shape[-1]
    cols = lanes.offsets.reshape(-1, lanes.offsets.shape[-1])
    if len(shape) == 2:  # each block row's columns from the row of its lowest lane (a block past N spills over)
        cols = cols - (cols.min(axis=1, keepdims=True) // max(stride, 1)) * stride
    cols = cols.reshape(lanes.offsets.shape)
    through = cols[lanes.unmasked]
    if through.size and int(through.max()) == limit and limit in (cols.max(), *cols.reshape(-1)):
        past = cols > limit
        if past.any() and not lanes.unmasked[past].any():
            return (f"the mask lets exactly one lane past {tensor}'s last {'column' if len(shape) == 2 else 'element'} "
                    f"through (index {limit}, and none further): `<=` where `<` belongs, `cols < N`.")
    return ""


def _row_offset(tensor, shape, stride, lanes) -> str:
    """A row offset that is ``row × k`` for a k that is not the tensor's row stride but another number of the launch
    (another tensor's row stride, N, BLOCK_SIZE): name the k. The row is taken as the program's index, so a k
    that is none of those (a loop over rows, where row ≠ pid) says nothing."""
    if len(shape) != 2 or _steps(lanes.offsets)[-1] != 1 or lanes.program < 1:
        return ""
    base = int(lanes.offsets.reshape(-1)[0])
    row = lanes.program
    if base % row or base // row == stride:
        return ""
    k = base // row
    others = [name for name, (s, st) in lanes.shapes.items() if name != tensor and len(s) == 2 and st == k]
    names = [f"the row stride of {', '.join(others[:-1])} and {others[-1]}" if len(others) > 1
             else f"{others[0]}'s row stride"] if others else []
    names += ["N, the row's length"] if k == shape[1] else []
    names += ["BLOCK_SIZE, the block's width"] if k == lanes.offsets.shape[-1] and k != shape[1] else []
    if not names:
        return ""
    return (f"row {row}'s block of {tensor} starts {base} elements in, {row} × {k}: {' or '.join(names)}, where "
            f"{tensor}'s own row stride, {stride}, belongs: the row's offset is the row times its tensor's row "
            "stride.")


def _tile_row_step(tensor, shape, stride, lanes) -> str:
    """A 2-D tile whose rows lie N (or BLOCK_N) elements apart where the tensor's rows lie row_stride apart."""
    if len(shape) != 2 or lanes.offsets.ndim != 2:
        return ""
    step, along = _steps(lanes.offsets)
    if along != 1 or step in (0, stride):
        return ""
    names = (["N, the row's length"] if step == shape[1] else []) + (
        ["BLOCK_N, the tile's width"] if step == lanes.offsets.shape[1] and step != shape[1] else [])
    if not names:
        return ""
    return (f"the tile's rows of {tensor} lie {step} elements apart, {' or '.join(names)}, where {tensor}'s rows lie "
            f"{stride} apart: multiply the rows by the row stride, `rows[:, None] * row_stride + cols[None, :]`.")
