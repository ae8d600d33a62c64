"""The buffers a learner's kernel is run in: every tensor inside NaN, so a stray read or write shows.

Each tensor the checker hands a kernel sits inside a larger buffer: NaN before
it, in the padding between its rows (for cases whose rows are further apart
than N) and after it. A read outside a tensor then brings NaN into the result,
a write outside it changes the guard, a write into an input changes the input
(:class:`Buffers`). Under the interpreter, a masked load without ``other=``
reads NaN in its masked lanes (:func:`nan_for_missing_other`), as a GPU would
read whatever memory held.

Source: solutions/03_forward_kernel.ipynb … 08_n_vs_block_exercise.ipynb.
"""

from __future__ import annotations

import contextlib

import torch

#: Elements of NaN guard before every tensor the checker hands a kernel.
GUARD = 1024


class Buffers:
    """Allocates every tensor a kernel sees inside a NaN-guarded buffer, and says afterwards what changed.

    Each tensor sits :data:`GUARD` elements into its buffer; after it come its
    rows' padding (rows ``row_stride`` apart) and a guard as long as the whole
    tensor again, so that a wrong row offset lands in NaN, not in another tensor.
    """

    def __init__(self, guard_value: float = float("nan")) -> None:
        self.guard_value = guard_value
        self.entries: list[tuple[str, str, torch.Tensor, torch.Tensor, torch.Tensor]] = []

    def _place(self, shape, dtype, device, row_stride):
        rows, cols = (shape[0], shape[1]) if len(shape) == 2 else (1, shape[0])
        stride = row_stride or cols
        span = (rows - 1) * stride + cols
        buffer = torch.full((GUARD + span + GUARD + rows * stride,), self.guard_value, dtype=dtype, device=device)
        strides = (stride, 1) if len(shape) == 2 else (1,)
        view = buffer.as_strided(tuple(shape), strides, GUARD)
        return view, buffer

    def input(self, name: str, t: torch.Tensor, row_stride: int | None = None) -> torch.Tensor:
        """A copy of ``t`` in a guarded buffer (read-only for the kernel)."""
        view, buffer = self._place(t.shape, t.dtype, t.device, row_stride)
        view.copy_(t)
        self.entries.append(("input", name, view, buffer, buffer.clone()))
        return view

    def output(self, name: str, shape, dtype, device, row_stride: int | None = None) -> torch.Tensor:
        """A NaN-filled output in a guarded buffer."""
        view, buffer = self._place(shape, dtype, device, row_stride)
        view.fill_(float("nan"))
        self.entries.append(("output", name, view, buffer, buffer.clone()))
        return view

    def problems(self) -> str | None:
        """What the kernel changed that it must not: an input, or memory outside an output."""
        for kind, name, view, buffer, before in self.entries:
            changed = _bits(buffer) != _bits(before)
            if kind == "input" and changed.any():
                return f"it wrote into {name}, an input: a kernel only reads its inputs (check the pointer of each `tl.store`)"
            inside = torch.zeros(buffer.numel(), dtype=torch.bool)
            inside.as_strided(view.shape, view.stride(), view.storage_offset()).fill_(True)
            offset = view.storage_offset()
            outside = changed & ~inside
            if outside.any():
                where = int(torch.nonzero(outside)[0]) - offset
                side = "before its first element" if where < 0 else "past its last element" if where >= _span(view) else "between its rows"
                return (f"it wrote outside {name} ({side}, element offset {where}): check the row offset "
                        "(`row * row_stride`) and the store's mask")
        return None


def _span(view: torch.Tensor) -> int:
    return (view.shape[0] - 1) * view.stride(0) + view.shape[-1] if view.dim() == 2 else view.numel()


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bits of a float tensor (NaN equal to NaN), as integers, on the CPU."""
    as_int = {2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    return t.detach().contiguous().view(as_int).cpu()


@contextlib.contextmanager
def nan_for_missing_other(enabled: bool = True):
    """Under the interpreter: masked lanes of a load without ``other=`` read as NaN (the GPU leaves them undefined)."""
    try:
        from triton.runtime import interpreter
    except ImportError:  # pragma: no cover
        enabled = False
    if not enabled or not hasattr(interpreter, "InterpreterBuilder"):
        yield
        return
    import numpy as np

    builder = interpreter.InterpreterBuilder
    original = builder.create_masked_load

    def create_masked_load(self, ptrs, mask, other, *args, **kwargs):
        if other is None:
            dtype_tt = ptrs.get_element_ty()
            dtype_np = interpreter._get_np_dtype(dtype_tt)
            if np.issubdtype(dtype_np, np.floating):
                other = interpreter.TensorHandle(np.full_like(ptrs.data, np.nan, dtype=dtype_np), dtype_tt)
        return original(self, ptrs, mask, other, *args, **kwargs)

    builder.create_masked_load = create_masked_load
    try:
        yield
    finally:
        builder.create_masked_load = original
