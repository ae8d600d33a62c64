"""What travels to the checker's child process with the learner's code, and what it restores there.

A learner's ``@triton.jit`` kernel is defined in a notebook cell, which a child
cannot import: :func:`kernel_spec` takes its source and the globals it uses
(modules, helper kernels, constants), and the child defines it again
(:func:`rmsnorm_course.checkers.compile_server.define_kernel`). Plain Python functions
and classes travel with cloudpickle, which drops their file name and cannot
bring a cell's text: :func:`source_lines` and :func:`restore_sources` carry
both, so that an error in the child still names the learner's line.

Source: solutions/03_forward_kernel.ipynb … 08_n_vs_block_exercise.ipynb.
"""

from __future__ import annotations

import importlib
import inspect
import io
import linecache
import pickle
import textwrap
import types
from collections import ChainMap
from dataclasses import dataclass

import cloudpickle
from triton.runtime.jit import JITFunction


def _import_kernel(module: str, name: str):
    return getattr(importlib.import_module(module), name)


def _kernel_by_reference(kernel):
    """A compiled ``@triton.jit`` kernel of an importable module travels as (module, name).

    A compiled kernel holds its device caches and a lock, which cannot be pickled: the exercise
    specs name the package's kernels (their reference signature), so without this a spec could not
    reach the child on a GPU machine. The child imports the module and takes the kernel defined there,
    compiled or interpreted as the child runs. Any other kernel keeps the default (a learner's kernel is
    shipped as source instead, :class:`KernelSource`).
    """
    fn = getattr(kernel, "fn", None)
    module, name = getattr(fn, "__module__", None), getattr(fn, "__name__", None)
    if module and name:
        try:
            if _import_kernel(module, name) is kernel:
                return _import_kernel, (module, name)
        except (ImportError, AttributeError):
            pass
    return kernel.__reduce_ex__(pickle.DEFAULT_PROTOCOL)


class _Pickler(cloudpickle.CloudPickler):
    """cloudpickle, with compiled kernels by reference: this pickler's own table, not ``copyreg``'s.

    The process-wide table would reach every pickle of the process (Inductor pickles the Triton kernels
    it generates), so the rule stays with what the checkers ship.
    """

    dispatch_table = ChainMap({JITFunction: _kernel_by_reference}, cloudpickle.CloudPickler.dispatch_table)


def dumps(obj) -> bytes:
    """``cloudpickle.dumps``, with compiled kernels of importable modules sent as (module, name)."""
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=pickle.DEFAULT_PROTOCOL).dump(obj)
    return buffer.getvalue()


@dataclass(frozen=True)
class KernelSource:
    """What a child needs to define a learner's ``@triton.jit`` kernel again.

    Attributes:
        spec: {"name", "source" (decorator included, dedented), "first_line" (of the decorator in
            its cell or file, so line numbers stay the learner's), "filename", "names" (globals it
            uses: name → ("module", module name) | ("kernel", spec) | ("value", value))}.
    """

    spec: dict


def _code_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


def is_kernel(obj) -> bool:
    """True for a ``@triton.jit`` object (compiled or interpreted): it has ``.fn`` and can be indexed by a grid."""
    return hasattr(obj, "fn") and callable(getattr(obj, "__getitem__", None))


def kernel_spec(kernel, _seen: set | None = None) -> dict:
    """The shippable source of a ``@triton.jit`` kernel and of the globals it uses (see :class:`KernelSource`).

    Raises:
        OSError: the source cannot be found (a kernel typed at a bare ``python`` prompt).
    """
    seen = set() if _seen is None else _seen
    fn = kernel.fn
    seen.add(id(fn))
    lines, first = inspect.getsourcelines(fn)
    names = {}
    for name in sorted(_code_names(fn.__code__)):
        if name not in fn.__globals__:
            continue
        value = fn.__globals__[name]
        if isinstance(value, types.ModuleType):
            names[name] = ("module", value.__name__)
        elif is_kernel(value) and id(value.fn) not in seen:
            names[name] = ("kernel", kernel_spec(value, seen))
        elif (isinstance(value, (bool, int, float, str, type(None)))
              or type(value).__module__.startswith("triton.language")):
            try:
                pickle.dumps(value)
            except Exception:  # noqa: BLE001 - an unpicklable global stays behind; the child then names it
                continue
            names[name] = ("value", value)
    return {"name": fn.__name__, "source": textwrap.dedent("".join(lines)), "first_line": max(first, 1),
            "filename": fn.__code__.co_filename, "names": names}


def _functions(args):
    """The learner's functions among ``args``: functions, the methods of classes, and those in a tuple (an answer of
    several functions) or a dict's values (what the notebook hands along with an answer)."""
    for arg in args:
        if isinstance(arg, (tuple, dict)):
            yield from _functions(arg.values() if isinstance(arg, dict) else arg)
            continue
        members = vars(arg).values() if isinstance(arg, type) else [arg]
        for member in members:
            function = getattr(member, "__func__", member)
            if isinstance(getattr(function, "__code__", None), types.CodeType):
                yield function


def source_lines(args) -> dict:
    """Where the learner's functions come from: cloudpickle drops a code object's file name, and a child lacks
    a notebook cell's text. Returns {"files": [file name per function], "lines": {file name: lines}}."""
    files = [function.__code__.co_filename for function in _functions(args)]
    return {"files": files, "lines": {f: linecache.getlines(f) for f in set(files) if linecache.getlines(f)}}


def _with_filename(code: types.CodeType, filename: str) -> types.CodeType:
    consts = tuple(_with_filename(c, filename) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def restore_sources(args, sources: dict) -> None:
    for function, filename in zip(_functions(args), sources["files"]):
        try:
            function.__code__ = _with_filename(function.__code__, filename)
        except (TypeError, ValueError):  # pragma: no cover - then tracebacks show "<dynamic-code>"
            pass
    for filename, text in sources["lines"].items():
        linecache.cache.setdefault(filename, (sum(map(len, text)), None, text, filename))
