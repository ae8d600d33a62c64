"""The buffers a learner's kernel is run in, and the one patch of Triton's interpreter that watches its memory.

Each tensor the checker hands a kernel sits inside a larger buffer
(:class:`Buffers`): NaN before it, in the padding between its rows (for cases
whose rows are further apart than N) and after it. A read outside a tensor then
brings NaN into the result, a write outside it changes the guard, a write into
an input changes the input.

Under the interpreter, :func:`interpreter_guards` patches Triton's memory
operations for the duration of a launch:

- a masked load without ``other=`` reads NaN in its masked lanes (a GPU leaves
  them undefined and often reads 0 there, so the checker runs this judge on
  every device: :func:`rmsnorm_course.checkers.kernels.check`);
- where the exercise asks for it, every address a load, store or atomic
  touches must lie in one of the buffers: a read far outside, which would
  crash the process, raises :class:`OutOfBounds` instead.

Source: solutions/03_forward_kernel.ipynb … 10_one_pass_backward.ipynb.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import numpy as np
import torch

from rmsnorm.device import interpreter_active

#: Elements of NaN guard before every tensor the checker hands a kernel (and, by default, after it).
GUARD = 1024


class OutOfBounds(Exception):
    """Raised inside a learner's kernel under the interpreter for an address outside every buffer it was given."""


class Buffers:
    """Allocates every tensor a kernel sees inside a NaN-guarded buffer, and says afterwards what changed.

    Each tensor sits :data:`GUARD` elements into its buffer; after it come its
    rows' padding (rows ``row_stride`` apart) and ``room`` more elements (by
    default a guard as long as the whole tensor again, so that a wrong row
    offset lands in NaN, not in another tensor).
    """

    def __init__(self, guard_value: float = float("nan")) -> None:
        self.guard_value = guard_value
        self.entries: list[tuple] = []  # (kind, name, view, buffer, buffer as it was, fix)

    def _place(self, shape, dtype, device, row_stride, room):
        rows, cols = (shape[0], shape[1]) if len(shape) == 2 else (1, shape[0])
        stride = row_stride or cols
        span = (rows - 1) * stride + cols
        after = GUARD + rows * stride if room is None else room
        buffer = torch.full((GUARD + span + after,), self.guard_value, dtype=dtype, device=device)
        strides = (stride, 1) if len(shape) == 2 else (1,)
        view = buffer.as_strided(tuple(shape), strides, GUARD)
        return view, buffer

    def input(self, name: str, t: torch.Tensor, row_stride: int | None = None, room: int | None = None) -> torch.Tensor:
        """A copy of ``t`` in a guarded buffer (read-only for the kernel); ``room``: elements of guard after it."""
        view, buffer = self._place(t.shape, t.dtype, t.device, row_stride, room)
        view.copy_(t)
        self.entries.append(("input", name, view, buffer, buffer.clone(), None))
        return view

    def output(self, name: str, shape, dtype, device, row_stride: int | None = None, room: int | None = None,
               fix: str | Callable[[list[int]], str] | None = None) -> torch.Tensor:
        """A NaN-filled output in a guarded buffer.

        ``fix`` words a write outside it: a string ends the message, a function
        of the offsets written outside (see :meth:`written_outside`) gives the whole message.
        """
        view, buffer = self._place(shape, dtype, device, row_stride, room)
        view.fill_(float("nan"))
        self.entries.append(("output", name, view, buffer, buffer.clone(), fix))
        return view

    def buffers(self) -> dict[str, torch.Tensor]:
        """Name → the whole buffer (guards included) of every tensor handed out so far."""
        return {name: buffer for _, name, _, buffer, _, _ in self.entries}

    def written_outside(self, name: str) -> list[int]:
        """Element offsets, from the first element of ``name``, of every guard element a write changed."""
        for _, entry, view, buffer, before, _ in self.entries:
            if entry == name:
                outside = (_bits(buffer) != _bits(before)) & ~_inside(view, buffer)
                return (torch.nonzero(outside).reshape(-1) - view.storage_offset()).tolist()
        raise KeyError(name)

    def problems(self) -> str | None:
        """What the kernel changed that it must not: an input, or memory outside an output."""
        for kind, name, view, buffer, before, fix in self.entries:
            changed = _bits(buffer) != _bits(before)
            if kind == "input" and changed.any():
                return (f"it wrote into {name}, an input: a kernel only reads its inputs "
                        "(check the pointer of each `tl.store`)")
            outside = changed & ~_inside(view, buffer)
            if outside.any():
                if callable(fix):
                    return fix(self.written_outside(name))
                where = int(torch.nonzero(outside)[0]) - view.storage_offset()
                side = (
                    "before its first element"
                    if where < 0
                    else "past its last element"
                    if where >= _span(view)
                    else "between its rows"
                )
                return (f"it wrote outside {name} ({side}, element offset {where}): "
                        + (fix or "check the row offset (`row * row_stride`) and the store's mask"))
        return None


def _inside(view: torch.Tensor, buffer: torch.Tensor) -> torch.Tensor:
    inside = torch.zeros(buffer.numel(), dtype=torch.bool)
    inside.as_strided(view.shape, view.stride(), view.storage_offset()).fill_(True)
    return inside


def _span(view: torch.Tensor) -> int:
    return (view.shape[0] - 1) * view.stride(0) + view.shape[-1] if view.dim() == 2 else view.numel()


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bits of a float tensor (NaN equal to NaN), as integers, on the CPU."""
    as_int = {2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    return t.detach().contiguous().view(as_int).cpu()


# --------------------------------------------------------------------------- the interpreter's memory operations


def _describe_address(address: int, itemsize: int, buffers: dict[str, torch.Tensor]) -> str:
    """'12 element(s) past the end of x's buffer' for the buffer nearest to ``address``."""
    best = None
    for name, buffer in buffers.items():
        start = buffer.data_ptr()
        end = start + buffer.numel() * buffer.element_size()
        distance = start - address if address < start else address + itemsize - end
        if best is None or distance < best[0]:
            where = "before the start of" if address < start else "past the end of"
            best = (distance, f"{max(1, distance // itemsize):,} element(s) {where} {name}'s buffer")
    if best is None:
        return "an address outside every tensor"
    return best[1] + (" (the nearest tensor)" if len(buffers) > 1 else "")


def _builder():
    """Triton's InterpreterBuilder when it has the memory operations this module wraps, else None."""
    try:
        from triton.runtime import interpreter
    except ImportError:  # pragma: no cover
        return None, None
    builder = getattr(interpreter, "InterpreterBuilder", None)
    names = ("create_masked_load", "create_masked_store", "create_atomic_rmw", "create_atomic_cas")
    if builder is None or not all(hasattr(builder, n) for n in names) or not hasattr(interpreter, "_get_np_dtype"):
        return interpreter, None
    return interpreter, builder


@contextlib.contextmanager
def interpreter_guards(nan_other: bool = True, bounds: Buffers | None = None):
    """Under Triton's interpreter: NaN in the masked lanes of a load without ``other=``, and (if asked) bounds.

    Args:
        nan_other: masked lanes of a float ``tl.load`` without ``other=`` read
            NaN, not the interpreter's 0.
        bounds: when given, a load, store or atomic whose address (in an
            unmasked lane) lies outside every buffer it holds (also those it
            hands out during the block) raises :class:`OutOfBounds` before it happens.

    Elsewhere (kernels compiled for a GPU) it does nothing; the bounds are not
    checked for buffers off the CPU, whose addresses the interpreter does not use.
    """
    interpreter, builder = _builder()
    if builder is None or not interpreter_active() or not (nan_other or bounds is not None):
        yield
        return
    originals = {n: getattr(builder, n) for n in
                 ("create_masked_load", "create_masked_store", "create_atomic_rmw", "create_atomic_cas")}

    def check(ptrs, mask, kind):
        buffers = bounds.buffers() if bounds is not None else {}
        if not buffers or any(b.device.type != "cpu" for b in buffers.values()):
            return
        spans = [(b.data_ptr(), b.data_ptr() + b.numel() * b.element_size()) for b in buffers.values()]
        itemsize = np.dtype(interpreter._get_np_dtype(ptrs.get_element_ty())).itemsize
        addresses = np.asarray(ptrs.data).astype(np.uint64)
        if mask is not None:
            addresses = addresses[np.broadcast_to(np.asarray(mask.data, dtype=bool), addresses.shape)]
        ok = np.zeros(addresses.shape, dtype=bool)
        for start, end in spans:
            ok |= (addresses >= start) & (addresses + itemsize <= end)
        if not ok.all():
            bad = int(addresses[~ok].reshape(-1)[0])
            raise OutOfBounds(f"a {kind} at {_describe_address(bad, itemsize, buffers)}")

    def masked_load(self, ptrs, mask, other, *args, **kwargs):
        check(ptrs, mask, "load")
        if other is None and nan_other:
            dtype_tt = ptrs.get_element_ty()
            dtype_np = interpreter._get_np_dtype(dtype_tt)
            if np.issubdtype(dtype_np, np.floating):
                other = interpreter.TensorHandle(np.full_like(ptrs.data, np.nan, dtype=dtype_np), dtype_tt)
        return originals["create_masked_load"](self, ptrs, mask, other, *args, **kwargs)

    def masked_store(self, ptrs, value, mask, *args, **kwargs):
        check(ptrs, mask, "store")
        return originals["create_masked_store"](self, ptrs, value, mask, *args, **kwargs)

    def atomic_rmw(self, op, ptr, val, mask, *args, **kwargs):
        check(ptr, mask, "atomic operation")
        return originals["create_atomic_rmw"](self, op, ptr, val, mask, *args, **kwargs)

    def atomic_cas(self, ptr, *args, **kwargs):
        check(ptr, None, "atomic operation")
        return originals["create_atomic_cas"](self, ptr, *args, **kwargs)

    replacements: dict[str, Callable] = {"create_masked_load": masked_load, "create_masked_store": masked_store,
                                         "create_atomic_rmw": atomic_rmw, "create_atomic_cas": atomic_cas}
    try:
        for name, fn in replacements.items():
            setattr(builder, name, fn)
        yield
    finally:
        for name, fn in originals.items():
            setattr(builder, name, fn)
