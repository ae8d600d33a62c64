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
- every address a load, store or atomic touches in an unmasked lane is
  checked against the elements of the tensors: for an (M, N) tensor with row
  stride s, base + (r·s + c)·itemsize for r < M and c < N; for a 1-D tensor its
  numel elements. The guards, the padding between rows and whatever lies past
  them are outside. The first access outside is kept (:attr:`Buffers.stray`):
  the numbers can come out right while a GPU reads another row's values or
  races with another program, and the checker names it once they do. It keeps
  the access's lanes too (every lane's offset, the mask, the program), which
  :mod:`~rmsnorm_course.checkers.addresses` reads back as the slip. Where
  the exercise asks for it, an access outside every buffer, which would crash
  the process, raises :class:`OutOfBounds` instead.

Source: solutions/03_forward_kernel.ipynb … 10_one_pass_backward.ipynb.
"""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Callable

import numpy as np
import torch

from rmsnorm.device import interpreter_active
from .addresses import Lanes, reading
from .feedback import innermost_learner_frame

#: Elements of NaN guard before every tensor the checker hands a kernel (and, by default, after it).
GUARD = 1024


class OutOfBounds(Exception):
    """An access outside the elements of every tensor a kernel was given, under the interpreter.

    Raised inside a learner's kernel for an address outside every buffer; kept, not raised, in
    :attr:`Buffers.stray` for the first one inside a buffer (a guard, the padding between rows).

    Attributes:
        kind: "load", "store" or "atomic operation".
        tensor: the tensor whose buffer holds the address (None: outside every buffer).
        axis: what the address is past: "columns", "rows", "elements" (a 1-D tensor) or "start".
        frame: the learner's line that made the access (a ``traceback.FrameSummary``), or None.
    """

    def __init__(self, message: str, kind: str = "", tensor: str | None = None, axis: str = "", frame=None,
                 lanes=None, owner: str | None = None):
        super().__init__(message)
        self.kind, self.tensor, self.axis, self.frame = kind, tensor, axis, frame
        #: The access's lanes (:class:`~.addresses.Lanes`) in elements of ``owner``, the tensor its first lane
        #: addresses (also where the stray lane fell outside every buffer); None where not known.
        self.lanes, self.owner = lanes, owner

    def reading(self) -> str:
        """What the lanes' addresses show of the slip (:func:`~.addresses.reading`), or ""."""
        return reading(self.owner, self.lanes)


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
        #: The first access (an unmasked lane) outside every tensor's elements, inside a buffer; None: none seen.
        self.stray: OutOfBounds | None = None
        #: The first access outside every buffer (where the interpreter reads whatever memory holds), when such
        #: accesses are not refused; None: none seen.
        self.far: OutOfBounds | None = None

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

    def views(self) -> dict[str, torch.Tensor]:
        """Name → the tensor itself (its elements, without guards) of every tensor handed out so far."""
        return {name: view for _, name, view, _, _, _ in self.entries}

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


def _describe_address(address: int, itemsize: int, buffers: dict[str, torch.Tensor],
                      views: dict[str, torch.Tensor] | None = None, lane_row: np.ndarray | None = None):
    """Where ``address`` lies, in words, and (tensor, axis): see :class:`OutOfBounds`.

    Inside a tensor's buffer: the row and column of that tensor it addresses ("column 257 of row 0 of y, past its
    N = 257 columns"), the row taken from the lowest address of ``lane_row`` (the unmasked lanes of the access's
    block row: a 1-D block is one row of the tensor), so a block that runs past its row's last column is named by
    its columns even where those addresses fall in the next row. Outside every buffer: the nearest one,
    "12 element(s) past the end of x's buffer".
    """
    for name, buffer in buffers.items():
        start = buffer.data_ptr()
        if views is not None and name in views and start <= address < start + buffer.numel() * buffer.element_size():
            return _in_tensor(name, views[name], address, lane_row)
    best = None
    for name, buffer in buffers.items():
        start = buffer.data_ptr()
        end = start + buffer.numel() * buffer.element_size()
        distance = start - address if address < start else address + itemsize - end
        if best is None or distance < best[0]:
            where = "before the start of" if address < start else "past the end of"
            best = (distance, f"{max(1, distance // itemsize):,} element(s) {where} {name}'s buffer")
    if best is None:
        return "an address outside every tensor", None, ""
    return best[1] + (" (the nearest tensor)" if len(buffers) > 1 else ""), None, ""


def _in_tensor(name: str, view: torch.Tensor, address: int, lane_row: np.ndarray | None):
    """(words, name, axis) for an address inside ``name``'s buffer but outside its elements."""
    size = view.element_size()
    index = (address - view.data_ptr()) // size
    if index < 0:
        return f"{-index:,} element(s) before the first element of {name}", name, "start"
    if view.dim() != 2:
        return f"element {index:,} of {name}, past its {view.numel():,} elements", name, "elements"
    (M, N), stride = view.shape, view.stride(0)
    low = int(lane_row.min()) if lane_row is not None and lane_row.size else address
    row = max(0, (low - view.data_ptr()) // size) // stride
    if row >= M:
        return f"row {row:,} of {name}, past its M = {M:,} rows", name, "rows"
    if lane_row is not None and lane_row.size:  # the block's first column past N, in the kernel's own terms
        columns = (lane_row.astype(np.int64) - view.data_ptr()) // size - row * stride
        past = columns[columns >= N]
        column = int(past.min()) if past.size else index - row * stride
    else:
        column = index - row * stride
    where = " (the padding between its rows)" if row < M - 1 and N <= column < stride else ""
    return f"column {column:,} of row {row:,} of {name}, past its N = {N:,} columns{where}", name, "columns"


def _elements(view: torch.Tensor, addresses: np.ndarray) -> np.ndarray:
    """Which ``addresses`` are those of an element of ``view`` (an (M, N) tensor with any row stride, or 1-D)."""
    size = view.element_size()
    offset = addresses.astype(np.int64) - view.data_ptr()
    index = offset // size
    if view.dim() != 2:
        return (offset >= 0) & (index < view.numel())
    (M, N), stride = view.shape, view.stride(0)
    return (offset >= 0) & (index < (M - 1) * stride + N) & (index % max(stride, 1) < N)


def _learner_frame_here():
    """The innermost frame of the learner's code on the current stack (see :func:`.feedback.learner_frame`)."""
    return innermost_learner_frame(traceback.extract_stack(), copies_last=False)


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
def interpreter_guards(nan_other: bool = True, bounds: Buffers | None = None, refuse: bool = True):
    """Under Triton's interpreter: NaN in the masked lanes of a load without ``other=``, and (if asked) bounds.

    Args:
        nan_other: masked lanes of a float ``tl.load`` without ``other=`` read
            NaN, not the interpreter's 0.
        bounds: when given, every load, store and atomic is checked, in its unmasked lanes, against the elements
            of the tensors it holds (also those it hands out during the block): the first access outside them
            is kept in its :attr:`Buffers.stray`.
        refuse: with ``bounds``, an access outside every buffer raises :class:`OutOfBounds` before it happens.

    Elsewhere (kernels compiled for a GPU) it does nothing; the bounds are not
    checked for buffers off the CPU, whose addresses the interpreter does not use.
    """
    interpreter, builder = _builder()
    if builder is None or not interpreter_active() or not (nan_other or bounds is not None):
        yield
        return
    originals = {n: getattr(builder, n) for n in
                 ("create_masked_load", "create_masked_store", "create_atomic_rmw", "create_atomic_cas")}

    def lanes_of(builder, addresses, unmasked, itemsize, views):
        """(owner, Lanes): the access in elements of the tensor whose buffer holds its first lane; (None, None)
        where that cannot be said (a reading that fails must never fail the learner's launch)."""
        try:
            return _lanes_of(builder, addresses, unmasked, itemsize, views)
        except Exception:  # noqa: BLE001 - the words are extra; the access itself is still judged
            return None, None

    def _lanes_of(builder, addresses, unmasked, itemsize, views):
        first = int(addresses.reshape(-1)[0])
        for name, buffer in bounds.buffers().items():
            start = buffer.data_ptr()
            if start <= first < start + buffer.numel() * buffer.element_size() and name in views:
                view = views[name]
                offsets = (addresses.astype(np.int64) - view.data_ptr()) // itemsize
                shapes = {n: (tuple(v.shape), v.stride(0) if v.dim() == 2 else 1) for n, v in views.items()}
                grid = getattr(builder, "grid_idx", None) or (0,)
                return name, Lanes(offsets, unmasked.copy(), int(grid[0]), shapes)
        return None, None

    def check(ptrs, mask, kind, builder=None):
        buffers = bounds.buffers() if bounds is not None else {}
        if not buffers or any(b.device.type != "cpu" for b in buffers.values()):
            return
        views = bounds.views()
        itemsize = np.dtype(interpreter._get_np_dtype(ptrs.get_element_ty())).itemsize
        addresses = np.asarray(ptrs.data).astype(np.uint64)
        unmasked = (np.ones(addresses.shape, dtype=bool) if mask is None
                    else np.broadcast_to(np.asarray(mask.data, dtype=bool), addresses.shape))
        ok = ~unmasked
        for view in views.values():
            ok |= _elements(view, addresses)
        if ok.all():
            return
        inside = ~unmasked
        for b in buffers.values():
            start = b.data_ptr()
            inside |= (addresses >= start) & (addresses + itemsize <= start + b.numel() * b.element_size())
        if not inside.all() and (refuse or bounds.far is None):
            bad = int(addresses[~inside].reshape(-1)[0])
            words, tensor, axis = _describe_address(bad, itemsize, buffers)
            far = OutOfBounds(f"a {kind} at {words}", kind, tensor, axis, None,
                              *reversed(lanes_of(builder, addresses, unmasked, itemsize, views)))
            if refuse:
                raise far
            far.frame = _learner_frame_here()
            bounds.far = far
        if bounds.stray is not None:
            return
        by_row = addresses.reshape(addresses.shape[0] if addresses.ndim > 1 else 1, -1)
        lanes = unmasked.reshape(by_row.shape)
        first = np.argwhere(~ok.reshape(by_row.shape))[0]
        bad = int(by_row[tuple(first)])
        words, tensor, axis = _describe_address(bad, itemsize, buffers, views, by_row[first[0]][lanes[first[0]]])
        owner, lanes = lanes_of(builder, addresses, unmasked, itemsize, views)
        bounds.stray = OutOfBounds(f"a {kind} at {words}", kind, tensor, axis, _learner_frame_here(), lanes, owner)

    def masked_load(self, ptrs, mask, other, *args, **kwargs):
        check(ptrs, mask, "load", self)
        if other is None and nan_other:
            dtype_tt = ptrs.get_element_ty()
            dtype_np = interpreter._get_np_dtype(dtype_tt)
            if np.issubdtype(dtype_np, np.floating):
                other = interpreter.TensorHandle(np.full_like(ptrs.data, np.nan, dtype=dtype_np), dtype_tt)
        return originals["create_masked_load"](self, ptrs, mask, other, *args, **kwargs)

    def masked_store(self, ptrs, value, mask, *args, **kwargs):
        check(ptrs, mask, "store", self)
        return originals["create_masked_store"](self, ptrs, value, mask, *args, **kwargs)

    def atomic_rmw(self, op, ptr, val, mask, *args, **kwargs):
        check(ptr, mask, "atomic operation", self)
        return originals["create_atomic_rmw"](self, op, ptr, val, mask, *args, **kwargs)

    def atomic_cas(self, ptr, *args, **kwargs):
        check(ptr, None, "atomic operation", self)
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
