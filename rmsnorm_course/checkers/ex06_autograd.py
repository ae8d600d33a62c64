"""Checker of exercise 06: the learner's ``torch.autograd.Function`` wiring the three kernels.

It applies the learner's Function to (x, weight, eps), back-propagates a loss
whose dy is NOT contiguous (the loss reads y transposed, as real networks
often do), and compares y, x.grad and weight.grad with the float64 oracle.

Mistakes recognised: backward returning two gradients instead of three
(one per input of forward: x, weight, eps); gradients in the wrong order;
no gradient for weight; dy passed on
without ``.contiguous()``; a forward or backward that does not call the
package's kernels (``forward_op``, ``backward_rows``); ``ctx`` not holding
what backward needs; the saved tensors unpacked in another order than they were
saved (backward_rows then refuses weight or rstd: named from the traceback's frames); and, from what backward
itself returns (autograd would sum an (M, N) gradient down to weight's shape): the (M, N) partial returned as
weight's gradient, None for x's gradient; a gradient off by a constant factor (dgamma / M); and, by their values,
forward_op's (y, rstd) unpacked as (rstd, y), x cast to float32 before forward_op, backward_rows's (dx, partial)
unpacked as (partial, dx) or partial returned in dx's place, an attribute backward reads from ctx that forward
never set (``ctx.eps``), None returned for weight's gradient; a gradient returned for eps (autograd's "different
than None at position 3"); one of forward's names (``eps``) used in backward, where only ctx holds it.

Source: solutions/06_autograd_and_training.ipynb.
"""

from __future__ import annotations

import contextlib
import re
import sys
import traceback

import torch

from rmsnorm import device as _device
from rmsnorm.article import RMSNormFunction, backward_rows, forward_op
from rmsnorm.article.contract import ContractError
from rmsnorm.device import default_device
from rmsnorm.testing import make_inputs, oracle
from .diagnose import Case, Run, close, evidence, first_difference, tolerance
from .feedback import Feedback, name_of
from .functions import calling, check
from .spec import FunctionSpec, Refused

EXERCISE = "06 · autograd.Function"


@contextlib.contextmanager
def _count_launches():
    """Count calls of the three launchers, through their allocations (each allocates before it launches).

    The launchers share one allocator (``rmsnorm.device.new_output``): the stand-in put in its place
    asks which function called it. ``counts["arguments"]`` holds what the last call of backward_rows received
    (x, weight, dy, rstd), read from its frame.
    """
    counts = {"forward_op": 0, "backward_rows": 0, "reduce_gamma_gradient": 0, "arguments": {}}
    original = _device.new_output

    def new_output(shape, dtype, device):
        frame = sys._getframe(1)
        caller = frame.f_code.co_name
        if caller in counts:
            counts[caller] += 1
        if caller == "backward_rows":  # what it got, to name a tensor passed in another's place
            counts["arguments"] = ({p: frame.f_locals.get(p) for p in ("x", "weight", "dy", "rstd")})
        return original(shape, dtype, device)

    _device.new_output = new_output
    try:
        yield counts
    finally:
        _device.new_output = original


def _known(case: Case) -> dict[str, torch.Tensor]:
    """The tensors forward and backward see on ``case``, by name: x, weight, y and rstd (forward_op's), dy."""
    x, weight = case.inputs["x"], case.inputs["weight"]
    y, rstd = forward_op(x, weight, case.eps)
    return {"x": x, "weight": weight, "y": y, "rstd": rstd, "dy": case.inputs["loss_weight"].t().to(x.dtype)}


def _role(value, case: Case | None) -> str | None:
    """Which of the tensors of :func:`_known` ``value`` is, by its dtype, shape and values (None: none of them)."""
    if not isinstance(value, torch.Tensor) or case is None:
        return None
    for name, tensor in _known(case).items():
        if value.dtype == tensor.dtype and value.shape == tensor.shape and torch.equal(value.detach(), tensor):
            return name
    return None


_WHAT = {"x": "x", "weight": "weight", "rstd": "rstd", "dy": "dy", "y": "y (forward's output)",
         None: "a tensor that is none of x, weight, rstd, dy and y"}


def _not_y(y: torch.Tensor, case: Case) -> str:
    """Why forward's output is not y in x's dtype and shape, named by its values where they tell (else the rule)."""
    if _role(y, case) == "rstd":
        return ("forward returns forward_op's rstd, not y: forward_op returns (y, rstd) in that order, so "
                "`rstd, y = forward_op(...)` swaps them. Unpack `y, rstd = forward_op(x, weight, eps)` and return y.")
    x, weight = case.inputs["x"], case.inputs["weight"]
    if y.dtype == torch.float32 and x.dtype != torch.float32 and y.shape == x.shape:
        # weight is cast too: forward_op refuses a weight whose dtype is not x's.
        if torch.equal(y.detach(), forward_op(x.float(), weight.float(), case.eps)[0]):
            return ("y is forward_op's output on x cast to float32: x's dtype changed before forward_op "
                    "(`x.float()`, `x.to(torch.float32)`), so y comes back in float32. Pass x and weight as they "
                    "are: `forward_op(x, weight, eps)` computes in float32 inside and returns y in x's dtype.")
    return "return y from forward_op as it is (same dtype and shape as x)."


def _saved_roles(saved, case: Case) -> str | None:
    """What forward saved, where it lacks x, weight or rstd: the cause, certain, of a tensor in another's place."""
    if saved is None:
        return None
    roles = [_role(t, case) for t in saved]
    missing = [p for p in ("x", "weight", "rstd") if p not in roles]
    if not missing:
        return None
    listed = ", ".join(_WHAT[r].split(" (")[0] if r else "?" for r in roles)
    instead = [r for r in roles if r not in ("x", "weight", "rstd")]
    place = "its place" if len(missing) == 1 else "their places"
    also = f", {' and '.join(_WHAT[r].split(' (')[0] for r in instead)} in {place}" if instead else ""
    return (f"forward saves ({listed}): {' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not among "
            f"them{also}. backward_rows needs forward's input x (not its output y), weight and forward_op's rstd: "
            "`ctx.save_for_backward(x, weight, rstd)` in forward, `x, weight, rstd = ctx.saved_tensors` in backward.")


def _misrouted(got: dict, saved, case: Case) -> str | None:
    """backward_rows ran, but on tensors in other tensors' places: name each place, then the cause.

    What forward saved tells the cause: a tensor it lacks (y saved for x) is forward's; with all three saved,
    the tensors are mixed up where backward unpacks them or where it calls backward_rows (dy is never saved:
    dy out of place is the call's order).
    """
    places = [(p, _role(got.get(p), case)) for p in ("x", "weight", "dy", "rstd")]
    wrong = [(p, r) for p, r in places if r != p]
    if not got or not wrong:
        return None
    where = " and ".join(f"{_WHAT[r]} where it takes {p}" for p, r in wrong)
    head = f"on {case.label}, backward_rows gets {where}"
    if (cause := _saved_roles(saved, case)) is not None:
        return f"{head}: {cause}"
    call = "`backward_rows(x, weight, dy.contiguous(), rstd, eps)`"
    if any("dy" in pair for pair in wrong):
        return f"{head}: the call passes them in another order; its arguments come in the order {call}."
    return (f"{head}: forward saves all three, so the order is off where backward unpacks them "
            "(`x, weight, rstd = ctx.saved_tensors`, in the order of `ctx.save_for_backward(x, weight, rstd)`) "
            f"or in the call, {call}.")


def _saved_order(error: BaseException, case: Case | None) -> str | None:
    """backward_rows refused x, weight or rstd because it got another of the three there: name the order at fault.

    The frames of the traceback still hold what backward_rows received and the names of the learner's backward:
    a name that holds another saved tensor (``weight`` holding rstd) means ``ctx.saved_tensors`` was unpacked in
    another order than ``ctx.save_for_backward`` saved it; names that hold their own tensor, passed in other
    places, mean the call's order; else both orders are worth a look.
    """
    frames = [frame for frame, _ in traceback.walk_tb(error.__traceback__)]
    inside = next((i for i, f in enumerate(frames) if f.f_code.co_name == "backward_rows"
                   and f.f_globals.get("__name__") == "rmsnorm.article.backward"), None)
    if not inside:
        return None
    # The learner's backward: the last frame before backward_rows outside torch (its compiler.disable wraps it).
    outer = [f for f in frames[:inside] if not str(f.f_globals.get("__name__", "")).startswith("torch")]
    got, caller = frames[inside].f_locals, (outer[-1].f_locals if outer else {})
    misplaced = [(p, _role(got.get(p), case)) for p in ("x", "weight", "rstd")]
    if any(role is None for _, role in misplaced) or all(p == role for p, role in misplaced):
        return None
    places = " and ".join(f"{_WHAT[role]} where it takes {p}" for p, role in misplaced if p != role)
    if (cause := _saved_roles(getattr(error, "saved_tensors", None), case)) is not None:
        return f"backward_rows gets {places}, and refuses it ({error}): {cause}"
    order = "`ctx.save_for_backward(x, weight, rstd)` in forward, `x, weight, rstd = ctx.saved_tensors` in backward"
    if all(caller.get(p) is got.get(p) for p in ("x", "weight", "rstd")):
        names = " and ".join(f"`{p}` holds {_WHAT[role]}" for p, role in misplaced if p != role)
        return (f"your backward unpacks `ctx.saved_tensors` in another order than forward saved them with "
                f"`ctx.save_for_backward(...)`: {names}, so backward_rows refuses them ({error}). saved_tensors "
                f"gives the tensors back in the order they were saved: save and unpack them in one order, {order}.")
    if all(_role(caller.get(p), case) == p for p in ("x", "weight", "rstd")):  # right names, called out of order
        return (f"your call of backward_rows passes {places}, and it refuses them ({error}): its arguments come in "
                "the order `backward_rows(x, weight, dy.contiguous(), rstd, eps)`.")
    return (f"backward_rows gets {places}, and refuses them ({error}): check the order of the tensors where forward "
            f"saves them and backward unpacks them ({order}), and in the call, "
            "`backward_rows(x, weight, dy.contiguous(), rstd, eps)`.")


#: forward's inputs after ctx, in order: autograd's "position" of a gradient counts them from 1.
_INPUTS = ("x", "weight", "eps")
#: forward's names that backward cannot see, with where backward finds each.
_KEPT = {"eps": "forward keeps it on ctx, `ctx.eps = eps`, and backward reads `ctx.eps`",
         **{name: ("forward saves it, `ctx.save_for_backward(x, weight, rstd)`, and backward unpacks it, "
                   "`x, weight, rstd = ctx.saved_tensors`") for name in ("x", "weight", "rstd")}}


def _forward_name_in_backward(error: NameError) -> str | None:
    """A NameError raised in the learner's backward for one of forward's names (eps, x, weight, rstd)."""
    name = getattr(error, "name", None)
    frames = [frame for frame, _ in traceback.walk_tb(error.__traceback__)]
    if name not in _KEPT or not frames or frames[-1].f_code.co_name != "backward":
        return None
    return (f"backward uses `{name}`, a name of forward's (NameError: name '{name}' is not defined in backward): "
            f"backward only sees what forward stored on ctx. {_KEPT[name][0].upper()}{_KEPT[name][1:]}.")


def _explain_autograd_error(error: BaseException, case: Case | None = None) -> str | None:
    text = str(error)
    count = re.search(r"incorrect number of gradients \(expected (\d+), got (\d+)\)", text)
    if count:
        return (f"backward returned {count.group(2)} values, but forward takes {count.group(1)} inputs "
                "(x, weight, eps): return one gradient per input, in order, `return dx, dgamma, None` "
                "(None for eps, which is not differentiated).")
    not_none = re.search(r"returned a gradient different than None at position (\d+), but the corresponding "
                         r"forward input was not a Variable", text)
    if not_none:
        position = int(not_none.group(1))
        what = _INPUTS[position - 1] if 0 < position <= len(_INPUTS) else f"input {position}"
        return (f"backward returns a value other than None in place {position}, the gradient of forward's {what}: "
                f"{what} is a Python number, not a tensor, so it is not differentiable and autograd takes no "
                "gradient for it. Return None in its place: `return dx, dgamma, None`.")
    if isinstance(error, NameError) and (unseen := _forward_name_in_backward(error)) is not None:
        return unseen
    invalid = re.search(
        r"invalid gradient at index (\d+) - got \[([\d, ]*)\] but expected shape compatible with \[([\d, ]*)\]", text
    )
    if invalid:
        index, got, want = invalid.groups()
        return (f"gradient {index} has shape [{got}] where input {index} has shape [{want}]: the gradients "
                "are in the wrong order; return them in the order of forward's inputs, (dx, dgamma, None).")
    if isinstance(error, ContractError) and "dy must be contiguous" in text:
        return ("backward received a dy that is not contiguous (here the loss reads y transposed) and passed it "
                "on: backward_rows refuses it. Pass `dy.contiguous()` (a copy only when needed).")
    if isinstance(error, ContractError) and (order := _saved_order(error, case)) is not None:
        return order
    unset = re.fullmatch(r"'\w+Backward' object has no attribute '(\w+)'", text)
    if isinstance(error, AttributeError) and unset:
        # ctx is an instance of the Function's <name>Backward class: the attribute was never set on it.
        return (f"backward reads `ctx.{unset.group(1)}`, but forward never sets it ({error.__class__.__name__}: "
                f"ctx has no attribute '{unset.group(1)}'): keep it on ctx in forward, `ctx.{unset.group(1)} = "
                f"{unset.group(1)}`, next to `ctx.save_for_backward(x, weight, rstd)`.")
    if isinstance(error, AttributeError) and ("ctx" in text or "saved_tensors" in text):
        return (f"{text}: save the tensors backward needs in forward with `ctx.save_for_backward(x, weight, rstd)` "
                "and keep eps as `ctx.eps = eps`.")
    return None


#: (M, N, dtype, eps) of each case: M = 1; N = 257 and 256; float16; a non-default eps with a row of zeros.
CASES = ((1, 257, torch.float32, 1e-6), (17, 257, torch.float32, 1e-6), (17, 256, torch.float16, 1e-6),
         (5, 33, torch.float32, 0.5))


def _cases(function_class) -> list[Case]:
    """The cases, each with the loss's weight: (N, M), so the loss reads y transposed and dy is not contiguous."""
    if not (isinstance(function_class, type) and issubclass(function_class, torch.autograd.Function)):
        raise Refused(f"{name_of(function_class)} is not a subclass of torch.autograd.Function.")
    device = default_device()
    cases = []
    for M, N, dtype, eps in CASES:
        label = f"{M}×{N} {str(dtype).removeprefix('torch.')}" + (f" with eps = {eps}" if eps != 1e-6 else "")
        x, weight, _ = make_inputs(M, N, dtype, device=device, seed=M + N)
        if eps != 1e-6:
            x[0] = 0
        loss_weight = make_inputs(N, M, torch.float32, device=device, seed=N)[0]
        cases.append(Case(label, {"x": x, "weight": weight, "loss_weight": loss_weight}, eps))
    return cases


def _watching(function_class, returned: list, saved: list):
    """``function_class`` with its backward's raw return value recorded in ``returned``, ``ctx.saved_tensors`` in
    ``saved`` (and on an error backward raises, as ``error.saved_tensors``: what forward saved names its cause).

    autograd sums a gradient that broadcasts to its input's shape down to that shape (an (M, N) dgamma becomes
    ``partial.sum(0)``): only what backward itself returns shows it.
    """
    learners = function_class.backward

    def backward(ctx, *grads):
        try:
            saved.append(tuple(ctx.saved_tensors))
        except Exception:  # noqa: BLE001 - nothing saved, or ctx misused: the learner's call names it
            saved.append(None)
        try:
            out = learners(ctx, *grads)
        except Exception as error:
            error.saved_tensors = saved[-1]
            raise
        returned.append(out)
        return out

    # Named at creation: autograd names ctx's class after it (<name>Backward), as the learner's own errors read.
    return type(function_class)(function_class.__name__, (function_class,), {"backward": staticmethod(backward)})


def _raw_gradients(returned: list, case: Case) -> None:
    """Refuse what backward returned where autograd would hide it or fail on it: a None for x, an (M, N) dgamma."""
    if not returned or not isinstance(returned[-1], (tuple, list)) or len(returned[-1]) != 3:
        return  # autograd itself names a wrong count
    dx, dgamma, _ = returned[-1]
    M, N = case.inputs["x"].shape
    if dx is None:
        raise Refused(f"on {case.label}, backward returns None for x's gradient: x.grad stays empty. Return dx from "
                      "backward_rows first: `return dx, dgamma, None`.")
    if isinstance(dgamma, torch.Tensor) and dgamma.dim() == 2 and tuple(dgamma.shape) == (M, N):
        raise Refused(f"on {case.label}, backward returns the (M, N) partial as the weight's gradient "
                      f"(shape {tuple(dgamma.shape)}; weight has shape ({N},)): autograd sums it over the rows for "
                      "you, but the exercise is the Triton column sum: return reduce_gamma_gradient(...)'s result, "
                      "`dgamma = reduce_gamma_gradient(partial, weight.dtype)`, `return dx, dgamma, None`.")


def _run(function_class, case: Case) -> dict[str, torch.Tensor]:
    """Apply the learner's Function and back-propagate; refused where the kernels did not run or an input changed."""
    name, label = name_of(function_class), case.label
    x = case.inputs["x"].clone().requires_grad_(True)
    weight = case.inputs["weight"].clone().requires_grad_(True)
    returned: list = []
    saved: list = []
    watched = _watching(function_class, returned, saved)
    with _count_launches() as launches:
        y = calling(f"{name}.forward", watched.apply, x, weight, case.eps)
        if not isinstance(y, torch.Tensor):
            raise Refused(f"on {label}, forward returned a {type(y).__name__}, not the tensor y.")
        if y.dtype != x.dtype or y.shape != x.shape:
            raise Refused(f"on {label}, y is {str(y.dtype).removeprefix('torch.')} of shape {tuple(y.shape)}; "
                          f"x is {str(x.dtype).removeprefix('torch.')} of shape {tuple(x.shape)}: "
                          f"{_not_y(y, case)}")
        loss = (y.t().float() * case.inputs["loss_weight"]).sum()  # dy = loss_weight.t(): not contiguous
        calling(f"{name}.backward", loss.backward)
    _raw_gradients(returned, case)
    for tensor, what in ((x, "x"), (weight, "weight")):
        if not torch.equal(tensor.detach(), case.inputs[what]):
            raise Refused(f"on {label}, {what} changed: your forward or backward wrote into an input "
                          "(an in-place operation such as `mul_`, `+=`, `copy_` on it). Leave the inputs as they are.")
    if launches["forward_op"] == 0:
        raise Refused("forward never called forward_op (the Triton kernel): y must come from the kernel.")
    if launches["backward_rows"] == 0:
        raise Refused("backward never called backward_rows (the dx kernel): dx and dgamma must come from the kernels.")
    if weight.grad is None:
        # What backward returned tells the cause; without it (backward never ran) only the rule is certain.
        none = bool(returned) and isinstance(returned[-1], (tuple, list)) and returned[-1][1] is None
        raise Refused("weight got no gradient (None): " + (
            "backward returns None as its second value, where weight's gradient belongs: "
            "`dgamma = reduce_gamma_gradient(partial, weight.dtype)`, then `return dx, dgamma, None`." if none else
            "backward must return dgamma = reduce_gamma_gradient(partial, weight.dtype) as its second value."))
    if launches["reduce_gamma_gradient"] == 0:
        raise Refused("backward never called reduce_gamma_gradient (the dgamma kernel): weight's gradient comes "
                      "from elsewhere (PyTorch's `partial.sum(0)` gives the right numbers), but the exercise is the "
                      "Triton column sum: `dgamma = reduce_gamma_gradient(partial, weight.dtype)`.")
    if x.grad is None:
        raise Refused(f"on {label}, x got no gradient (None): backward must return dx from backward_rows first.")
    return {"y": y, "x.grad": x.grad, "weight.grad": weight.grad, "backward_rows got": launches["arguments"],
            "saved": saved[-1] if saved else None}


def _oracle(case: Case) -> dict[str, torch.Tensor]:
    x, weight = case.inputs["x"], case.inputs["weight"]
    y64, dx64, dgamma64 = oracle(x, weight, case.inputs["loss_weight"].t().to(x.dtype), case.eps)
    return {"y": y64, "x.grad": dx64, "weight.grad": dgamma64}


HINTS = {"y": "forward must return y from forward_op(x, weight, eps).",
         "x.grad": "backward must return dx from backward_rows first.",
         "weight.grad": "backward must return dgamma = reduce_gamma_gradient(partial, weight.dtype) second."}


_MADE = {"y": "forward_op(x, weight, eps)'s y", "x.grad": "backward_rows's dx",
         "weight.grad": "reduce_gamma_gradient(partial, weight.dtype)'s dgamma"}


def _constant_factor(run: Run, what: str) -> str | None:
    """``what`` is the oracle's times one constant (dgamma / M, dx * 2): name the factor, and M or N where it is one."""
    got, want = run.actual[what].detach().double().cpu(), run.expected[what].detach().double().cpu()
    if got.shape != want.shape:
        return None
    big = want.abs() > 1e-3 * want.abs().max().clamp(min=1e-30)
    if int(big.sum()) < 2:
        return None
    ratio = (got[big] / want[big])
    k = float(ratio.median())
    if not (abs(k) > 1e-12 and abs(k - 1) > 1e-2) or not close(got, want * k, tolerance(run.actual[what])):
        return None
    M, N = run.case.inputs["x"].shape
    named = {M: "M", N: "N"}
    factor = next((f"divided by {named[n]} = {n}" for n in named if n > 1 and abs(k * n - 1) < 1e-3),
                  next((f"multiplied by {named[n]} = {n}" for n in named if n > 1 and abs(k / n - 1) < 1e-3),
                       f"multiplied by {k:.4g}"))
    return (f"on {run.case.label}, {what} is the right gradient {factor}: off by a constant factor. Return "
            f"{_MADE[what]} as it is, without scaling it.")


def _partial_for_dx(run: Run) -> str | None:
    """x.grad is backward_rows's partial: where dgamma is the column sum of dx, the two are swapped at the unpack;
    where dgamma is right, partial is returned in dx's place; else both fit."""
    known = _known(run.case)
    dx, partial = backward_rows(known["x"], known["weight"], known["dy"].contiguous(), known["rstd"], run.case.eps)
    got, dgamma = run.actual["x.grad"], run.actual["weight.grad"]
    if not close(got, partial.to(got.dtype), tolerance(got)):
        return None
    head = f"on {run.case.label}, x.grad is backward_rows's partial (dy · x · rstd, dgamma's rows), not dx"
    unpack = ("backward_rows returns (dx, partial) in that order: `partial, dx = backward_rows(...)` swaps them. "
              "Unpack `dx, partial = backward_rows(x, weight, dy.contiguous(), rstd, eps)`")
    returned = "return dx first, `return dx, dgamma, None`"
    if close(dgamma, dx.double().sum(0).to(dgamma.dtype), tolerance(dgamma)):
        return f"{head}, and weight.grad is the column sum of dx: {unpack}."
    if close(dgamma, run.expected["weight.grad"], tolerance(dgamma)):
        return f"{head}: backward returns partial where dx belongs; {returned}."
    return (f"{head}: either backward_rows's results are unpacked in another order ({unpack}) or backward returns "
            f"partial where dx belongs ({returned}).")


def _compare(run: Run) -> str | None:
    """The first of y, x.grad, weight.grad that differs from the oracle, with what to change."""
    for what in ("y", "x.grad", "weight.grad"):
        got, want = run.actual[what], run.expected[what]
        tol = tolerance(got)
        if not close(got, want, tol):
            if run.case.eps == 1e-6 and (scaled := _constant_factor(run, what)) is not None:
                return scaled
            if what == "x.grad" and (swapped := _partial_for_dx(run)) is not None:
                return swapped
            if what != "y" and (misrouted := _misrouted(run.actual["backward_rows got"], run.actual["saved"],
                                                        run.case)) is not None:
                return misrouted
            shown = evidence(Run(run.case, {what: got}, {what: want}), what, first_difference(got, want, tol))
            hint = HINTS[what]
            if run.case.eps != 1e-6:
                hint = (f"the other cases pass: eps = {run.case.eps} is not passed on. Hand forward's `eps` to "
                        "forward_op(x, weight, eps): the rstd it returns holds eps, and dx depends on eps only "
                        "through that rstd, so backward needs no eps of its own.")
            return f"{shown}: {hint}"
    return None


#: Exercise 06, declared: judged by :func:`rmsnorm_course.checkers.functions.check`.
SPEC = FunctionSpec(
    exercise=EXERCISE,
    reference=RMSNormFunction,
    cases=_cases,
    run=_run,
    oracle=_oracle,
    symptoms=(),
    success=lambda runs: (
        f"y, x.grad and weight.grad match the float64 oracle ({', '.join(r.case.label for r in runs)}), with a "
        "non-contiguous dy; forward_op, backward_rows and reduce_gamma_gradient ran the Triton kernels; the inputs "
        "were left unchanged."),
    example="x = torch.randn(3, 257, requires_grad=True); MyRMSNormFunction.apply(x, torch.ones(257), 1e-6).sum()"
            ".backward()",
    explain=_explain_autograd_error,
    verify=_compare,
)


def check_autograd_function(function_class) -> Feedback:
    """Apply a learner's autograd.Function and say what is wrong with its wiring, in plain words.

    Runs in a separate process (:mod:`rmsnorm_course.checkers.isolate`) with a time limit.

    Args:
        function_class: a subclass of ``torch.autograd.Function`` whose
            ``forward(ctx, x, weight, eps)`` returns y and whose
            ``backward(ctx, dy)`` returns one gradient per input.

    Returns:
        Feedback: "passed", "not done yet" or "wrong". Never raises, never hangs.

    Source: solutions/06_autograd_and_training.ipynb.
    """
    return check(SPEC, function_class)
