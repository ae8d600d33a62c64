"""Checker of exercise 06: the learner's ``torch.autograd.Function`` wiring the three kernels.

It applies the learner's Function to (x, gamma, eps), back-propagates a loss
whose dy is NOT contiguous (the loss reads y transposed, as real networks
often do), and compares y, x.grad and gamma.grad with the float64 oracle.

Mistakes recognised: backward returning two gradients instead of three
(one per input of forward: x, gamma, epsilon); gradients in the wrong order;
no gradient for gamma; dy passed on
without ``.contiguous()``; a forward or backward that does not call the
package's kernels (``forward_op``, ``backward_rows``); ``ctx`` not holding
what backward needs.

Source: solutions/06_autograd_and_training.ipynb.
"""

from __future__ import annotations

import contextlib
import re

import torch

from .. import backward as _backward
from .. import forward as _forward
from ..contract import ContractError
from ..device import default_device
from ..testing import make_inputs, oracle
from .diagnose import Case, Run, close, evidence, first_difference, tolerance
from .feedback import Feedback, describe_error, is_not_implemented, name_of, not_done, passed, wrong

EXERCISE = "06 · autograd.Function"


@contextlib.contextmanager
def _count_launches():
    """Count calls of the forward and dx launchers' allocations (each launcher allocates once per call)."""
    counts = {"forward_op": 0, "backward_rows": 0}
    originals = (_forward.new_output, _backward.new_output)

    def counting(name, original):
        def new_output(shape, dtype, device):
            counts[name] += 1
            return original(shape, dtype, device)
        return new_output

    _forward.new_output = counting("forward_op", originals[0])
    _backward.new_output = counting("backward_rows", originals[1])
    try:
        yield counts
    finally:
        _forward.new_output, _backward.new_output = originals


def _explain_autograd_error(error: BaseException) -> str | None:
    text = str(error)
    count = re.search(r"incorrect number of gradients \(expected (\d+), got (\d+)\)", text)
    if count:
        return (f"backward returned {count.group(2)} values, but forward takes {count.group(1)} inputs "
                "(x, gamma, epsilon): return one gradient per input, in order, `return dx, dgamma, None` "
                "(None for epsilon, which is not differentiated).")
    invalid = re.search(r"invalid gradient at index (\d+) - got \[([\d, ]*)\] but expected shape compatible with \[([\d, ]*)\]", text)
    if invalid:
        index, got, want = invalid.groups()
        return (f"gradient {index} has shape [{got}] where input {index} has shape [{want}]: the gradients "
                "are in the wrong order; return them in the order of forward's inputs, (dx, dgamma, None).")
    if isinstance(error, ContractError) and "dy must be contiguous" in text:
        return ("backward received a dy that is not contiguous (here the loss reads y transposed) and passed it "
                "on: backward_rows refuses it. Pass `dy.contiguous()` (a copy only when needed).")
    if isinstance(error, AttributeError) and ("ctx" in text or "saved_tensors" in text):
        return (f"{text}: save the tensors backward needs in forward with `ctx.save_for_backward(x, gamma, rstd)` "
                "and keep epsilon as `ctx.epsilon = epsilon`.")
    return None


def check_autograd_function(function_class) -> Feedback:
    """Apply a learner's autograd.Function and say what is wrong with its wiring, in plain words.

    Args:
        function_class: a subclass of ``torch.autograd.Function`` whose
            ``forward(ctx, x, gamma, epsilon)`` returns y and whose
            ``backward(ctx, dy)`` returns one gradient per input.

    Returns:
        Feedback: "passed", "not done yet" or "wrong". Never raises for a
        learner's mistake.

    Source: solutions/06_autograd_and_training.ipynb.
    """
    name = name_of(function_class)
    if not (isinstance(function_class, type) and issubclass(function_class, torch.autograd.Function)):
        return wrong(EXERCISE, f"{name} is not a subclass of torch.autograd.Function.")
    device = default_device()
    summaries = []
    for M, N, dtype in ((1, 257, torch.float32), (17, 257, torch.float32), (17, 256, torch.float16)):
        x, gamma, _ = make_inputs(M, N, dtype, device=device, seed=M + N)
        weight = make_inputs(N, M, torch.float32, device=device, seed=N)[0]  # (N, M): loss reads y transposed
        x.requires_grad_(True)
        gamma.requires_grad_(True)
        stage = "forward"
        try:
            with _count_launches() as launches:
                y = function_class.apply(x, gamma, 1e-6)
                stage = "backward"
                (y.t().float() * weight).sum().backward()  # dy = weight.t(): not contiguous
        except Exception as error:  # noqa: BLE001 - any learner error becomes feedback
            if is_not_implemented(error):
                return not_done(EXERCISE, f"{name}.{stage}")
            return wrong(EXERCISE, _explain_autograd_error(error) or describe_error(f"{name}.{stage}", error))
        label = f"{M}×{N} {str(dtype).removeprefix('torch.')}"
        if launches["forward_op"] == 0:
            return wrong(EXERCISE, "forward never called forward_op (the Triton kernel): y must come from the kernel.")
        if launches["backward_rows"] == 0:
            return wrong(EXERCISE, "backward never called backward_rows (the dx kernel): dx and dgamma must come from the kernels.")
        dy = weight.t().to(dtype)
        y64, dx64, dgamma64 = oracle(x, gamma, dy)
        if gamma.grad is None:
            return wrong(EXERCISE, "gamma got no gradient (None): backward must return dgamma as its second value.")
        for what, got, want in (("y", y, y64), ("x.grad", x.grad, dx64), ("gamma.grad", gamma.grad, dgamma64)):
            tol = tolerance(got)
            if not close(got, want, tol):
                run = Run(Case(label, {"x": x}), {what: got}, {what: want})
                shown = evidence(run, what, first_difference(got, want, tol))
                hint = {"y": "forward must return y from forward_op.",
                        "x.grad": "backward must return dx from backward_rows first.",
                        "gamma.grad": "backward must return dgamma = reduce_gamma_gradient(partial, gamma.dtype) second."}[what]
                return wrong(EXERCISE, f"{shown}: {hint}")
        summaries.append(label)
    return passed(
        EXERCISE,
        f"y, x.grad and gamma.grad match the float64 oracle ({', '.join(summaries)}), with a non-contiguous dy; "
        "forward and backward ran the Triton kernels.",
    )
