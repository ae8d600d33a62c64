"""The loop the peer side-by-sides share: per shape and provider, check the calls, then time them; rows out.

:mod:`rmsnorm_lab.fused_add_bench` and :mod:`rmsnorm_lab.layernorm_bench` each declare a :class:`Side`: the
columns that name a shape (M, N, then one dtype column or more), how a shape's inputs are made, how a provider's
calls are built and checked (:func:`prepared` turns that into a status), and the bytes each pass is charged.
:func:`kernel_rows` and :func:`whole_call_rows` do the rest, the same way for both: a provider is started only
before the deadline (else :data:`~rmsnorm_lab.wholecall.OUT_OF_TIME`), timed only once its check says ``ok``,
and a shape's inputs are freed before the next shape's are made.

Source: rmsnorm_lab/sidebyside.py, rmsnorm_lab/wholecall.py.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np
import torch

from .providers import one_line
from .wholecall import OUT_OF_TIME, fill_times

PASSES = ("forward", "backward")
WHOLE_CALL_PASSES = ("forward", "forward_backward")


@dataclass(frozen=True)
class Side:
    """What one side-by-side declares; the loop of this module is the rest.

    Attributes:
        kernel_columns: the kernel CSV's columns; those between ``N`` and ``provider`` are the shape's dtypes,
            in the order a shape of the grid gives them: (M, N, *dtypes).
        whole_call_columns: the whole-call CSV's columns.
        inputs: ``(M, N, *dtypes, device)`` → the tensors :attr:`prepare` takes after the provider's name.
        prepare: ``(name, *tensors, passes)`` → (calls or None, status), as :func:`prepared` returns.
        forward_bytes, backward_bytes: ``(M, N, *dtypes)`` → the declared bytes of the pass, for every provider.
    """

    kernel_columns: tuple[str, ...]
    whole_call_columns: tuple[str, ...]
    inputs: Callable[..., tuple]
    prepare: Callable[..., tuple]
    forward_bytes: Callable[..., int]
    backward_bytes: Callable[..., int]

    @property
    def dtype_columns(self) -> tuple[str, ...]:
        """The shape's dtype columns: ``("dtype",)``, or ``("dtype", "weight_dtype")``."""
        return self.kernel_columns[self.kernel_columns.index("N") + 1:self.kernel_columns.index("provider")]


def prepared(reason: str | None, build_and_check: Callable[[], dict]) -> tuple[dict | None, str]:
    """(calls, "ok") once checked, or (None, "refused: …" / "failed: …" / "wrong: …"); never raises for a peer.

    Args:
        reason: why the provider refuses these inputs (its contract, an import, the device), or None.
        build_and_check: builds the calls, checks every output (AssertionError: wrong) and returns the calls; a
            KeyError it raises names a pass the provider has no function for (refused).
    """
    if reason:
        return None, f"refused: {reason}"
    try:
        return build_and_check(), "ok"
    except KeyError as err:
        return None, f"refused: {one_line(err)}"
    except AssertionError as err:
        return None, f"wrong: {one_line(err)}"
    except Exception as err:  # noqa: BLE001  a peer that cannot be set up or run is reported, not timed
        return None, f"failed: {one_line(err)}"


def _each_provider(side: Side, shapes, providers, passes, deadline, device, log) -> Iterator[tuple]:
    """Per shape and provider: (base row, calls or None, status) after the check; inputs freed after each shape."""
    for M, N, *dtypes in shapes:
        tensors = side.inputs(M, N, *dtypes, device)
        names = {c: str(d).removeprefix("torch.") for c, d in zip(side.dtype_columns, dtypes)}
        for name in providers:
            base = dict(M=M, N=N, **names, provider=name)
            if deadline is not None and time.perf_counter() > deadline:
                yield base, None, OUT_OF_TIME
                continue
            calls, status = side.prepare(name, *tensors, passes)
            yield base, calls, status
            log(f"  {M}x{N} {base['dtype']:8s} {name:12s} {status[:100]}")
            del calls
        del tensors
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def kernel_rows(side: Side, shapes, providers, *, kernel_time_us: Callable, calls: int = 20,
                deadline: float | None = None, device="cuda", log=print) -> list[dict]:
    """Check, then time every provider's forward and backward alone, L2 cold: rows of ``side.kernel_columns``.

    ``us``: ``kernel_time_us`` (:func:`rmsnorm_lab.kernel_time_us`, ``calls`` profiled calls), NaN when not
    timed; ``bytes`` the side's declared bytes of the pass; ``gbps`` = bytes / µs / 1e3. After ``deadline`` (a
    ``time.perf_counter()`` value) no provider is started: its rows say :data:`~rmsnorm_lab.wholecall.OUT_OF_TIME`.
    """
    rows = []
    for base, timed, status in _each_provider(side, shapes, providers, PASSES, deadline, device, log):
        shape = (base["M"], base["N"], *(getattr(torch, base[c]) for c in side.dtype_columns))
        nbytes = {"forward": side.forward_bytes(*shape), "backward": side.backward_bytes(*shape)}
        for pass_ in PASSES:
            us = kernel_time_us(timed[pass_], calls=calls, warmup=3) if timed else float("nan")
            rows.append(base | dict(pass_=pass_, us=us, bytes=nbytes[pass_], gbps=nbytes[pass_] / us / 1e3,
                                    check=status))
    return rows


def whole_call_rows(side: Side, shapes, providers, *, samples: int | None = None, deadline: float | None = None,
                    device="cuda", log=print) -> list[dict]:
    """Check, then time every provider's whole calls (forward without grad, forward + backward): rows of
    ``side.whole_call_columns``, µs per call from :func:`rmsnorm_lab.wholecall.fill_times`."""
    rows = []
    for base, timed, status in _each_provider(side, shapes, providers, WHOLE_CALL_PASSES, deadline, device, log):
        for pass_ in WHOLE_CALL_PASSES:
            row = base | dict(pass_=pass_, whole_call_us=np.nan, host_us=np.nan, graph_us=np.nan, kernel_us=np.nan,
                              check=status)
            if timed:
                fill_times(row, base["provider"], pass_, timed[pass_], (), {} if samples is None else
                           {"samples": samples})
            rows.append({k: row[k] for k in side.whole_call_columns})
    return rows
