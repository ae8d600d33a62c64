"""Checker of exercise 11: the fake (meta) implementations of the fast path's two custom ops.

A fake implementation tells ``torch.compile`` (and ``torch.library.opcheck``)
what an operator returns — shapes, dtypes, device — from its inputs' shapes,
dtypes and device alone, without data and without launching a kernel. The
learner writes ``fake_forward(x, weight, eps) -> (y, rstd)`` and
``fake_backward(x, weight, rstd, dy) -> (dx, dgamma)``.

The checker calls them on ``meta`` tensors (shapes and dtypes, no storage)
for three cases — float16 x with float16 weight (17 × 257), bfloat16 x with
float32 weight (5 × 96: mixed precision), float32 x without a weight (3 × 40)
— and compares every output's shape, dtype and device with what the
package's registered fakes (``torch.ops.rmsnorm_fast.forward`` / ``backward``
on the same meta tensors) return. Nothing is hard-coded: the package is the
oracle.

The exercise is a :class:`~rmsnorm_course.checkers.spec.FunctionSpec` (:data:`SPEC`), judged by
:func:`rmsnorm_course.checkers.functions.check`. Recognised, each with its own message: rstd in x's
dtype instead of float32; rstd with a trailing dimension ((M, 1) or (M, N)) instead of (M,); y in
weight's dtype instead of x's; dgamma in x's dtype instead of weight's; None for dgamma when there
is no weight (an operator returns tensors); outputs allocated on the CPU instead of x's device; the
real kernel launched from the fake; a bare tensor where a pair is expected. Any other exception
becomes a message naming the learner's line.

Source: solutions/11_extending_the_contract.ipynb; PyTorch "Python Custom
Operators" (``register_fake``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rmsnorm.article.contract import ContractError
from .diagnose import Case, Run
from .feedback import Feedback, name_of
from .functions import calling, check
from .spec import FunctionSpec, Refused

EXERCISE = "11 · fake implementation"
EPS = 1e-6


@dataclass(frozen=True)
class FakeCase:
    """Meta inputs of one check: x (M, N), weight (N,) or None, rstd (M,), dy like x."""

    label: str
    M: int
    N: int
    x_dtype: torch.dtype
    weight_dtype: torch.dtype | None

    def inputs(self):
        x = torch.empty(self.M, self.N, dtype=self.x_dtype, device="meta")
        weight = None if self.weight_dtype is None else torch.empty(self.N, dtype=self.weight_dtype, device="meta")
        rstd = torch.empty(self.M, dtype=torch.float32, device="meta")
        return x, weight, rstd, torch.empty_like(x)


CASES = (
    FakeCase("x (17, 257) float16 with float16 weight", 17, 257, torch.float16, torch.float16),
    FakeCase("x (5, 96) bfloat16 with float32 weight (mixed precision)", 5, 96, torch.bfloat16, torch.float32),
    FakeCase("x (3, 40) float32 without a weight (weight None)", 3, 40, torch.float32, None),
)


def _dtype(d) -> str:
    return str(d).removeprefix("torch.")


def _oracle(case: Case) -> dict:
    """What the package's registered fake returns for this case: its two meta tensors, by name."""
    import rmsnorm  # noqa: F401  (registers the operators)

    x, weight, rstd, dy = case.inputs["fake"].inputs()
    op = case.inputs["op"]
    if op == "forward":
        return dict(zip(NAMES[op], torch.ops.rmsnorm_fast.forward(x, weight, EPS)))
    return dict(zip(NAMES[op], torch.ops.rmsnorm_fast.backward(x, weight, rstd, dy)))


#: The outputs of each operator, in the order its fake returns them.
NAMES = {"forward": ("y", "rstd"), "backward": ("dx", "dgamma")}


def _cases(answer) -> list[Case]:
    """Each :data:`CASES` for fake_forward, then again for fake_backward (when given)."""
    fake_forward, fake_backward = answer
    ops = (("forward", fake_forward),) + ((("backward", fake_backward),) if fake_backward is not None else ())
    return [Case(fake.label, {"fake": fake, "op": op, "name": name_of(fn)}) for op, fn in ops for fake in CASES]


def _run(answer, case: Case) -> dict:
    """The learner's fake on the case's meta tensors: its pair, refused when it is not a pair."""
    op, name = case.inputs["op"], case.inputs["name"]
    fn = answer[0] if op == "forward" else answer[1]
    x, weight, rstd, dy = case.inputs["fake"].inputs()
    got = calling(name, fn, x, weight, EPS) if op == "forward" else calling(name, fn, x, weight, rstd, dy)
    names = NAMES[op]
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        raise Refused(f"{name} must return a pair ({names[0]}, {names[1]}); on {case.label} it returned "
                      f"{type(got).__name__}. An operator with two outputs returns a tuple of two tensors.")
    return dict(zip(names, got))


def _explain(error: BaseException, case: Case) -> str | None:
    """A fake that launched the kernel or read a value: meta tensors have no data."""
    if isinstance(error, ContractError) or (isinstance(error, RuntimeError) and "meta" in str(error).lower()):
        return (f"{case.inputs['name']} ran real work on {case.label}: {type(error).__name__}: "
                f"{str(error).splitlines()[0][:160]}. A fake implementation never launches the kernel or reads "
                "values (its inputs have shapes but no data): only allocate the outputs, "
                "e.g. x.new_empty(shape, dtype=...).")
    weight = case.inputs["fake"].inputs()[1]
    if weight is None and isinstance(error, (AttributeError, TypeError)) and "NoneType" in str(error):
        dgamma = "dgamma is `x.new_empty(0)`" if case.inputs["op"] == "backward" else "y keeps x's dtype"
        return (f"{case.inputs['name']} raised {type(error).__name__} on {case.label}: {str(error).splitlines()[0]}. "
                f"weight is None here (an RMSNorm without a weight), and your code uses it as a tensor: test "
                f"`weight is None` first; then {dgamma}.")
    return None


def _verify(run: Run) -> str | None:
    x, weight = run.case.inputs["fake"].inputs()[:2]
    for name, out in run.actual.items():
        message = _mismatch(name, out, run.expected[name], x, weight)
        if message:
            return f"{run.case.inputs['name']}, {run.case.label}: {message}"
    return None


def _mismatch(name, out, exp, x, weight) -> str | None:
    """The first difference between a learner's output and the registered fake's, in plain words."""
    if out is None and name == "dgamma":
        return ("dgamma is None. An operator must return tensors: without a weight, return an empty tensor "
                "(x.new_empty(0)) for dgamma; the autograd formula turns it into None.")
    if not isinstance(out, torch.Tensor):
        return f"{name} must be a tensor; got {type(out).__name__}."
    if out.device != exp.device:
        return (f"{name} is on {out.device}, x is on {x.device}. Allocate on x's device (x.new_empty(...), or "
                "device=x.device): a fake for a CUDA input must describe a CUDA output.")
    if name == "rstd" and tuple(out.shape) != tuple(exp.shape):
        return (f"rstd has shape {tuple(out.shape)}, expected {tuple(exp.shape)}: one value per row, shape (M,), "
                "as the kernel stores it (no trailing dimension).")
    if tuple(out.shape) != tuple(exp.shape):
        return f"{name} has shape {tuple(out.shape)}, expected {tuple(exp.shape)}."
    if out.dtype == exp.dtype:
        return None
    if name == "rstd":
        return (f"rstd is {_dtype(out.dtype)}, expected float32 whatever x's dtype: the kernel keeps one float32 "
                "rstd per row for the backward.")
    if name in ("y", "dx") and weight is not None and out.dtype == weight.dtype:
        return (f"{name} is {_dtype(out.dtype)}, weight's dtype; expected x's, {_dtype(exp.dtype)}. With float32 "
                "weights and bf16 activations the activations stay bf16.")
    if name == "dgamma" and out.dtype == x.dtype:
        return (f"dgamma is {_dtype(out.dtype)}, x's dtype; expected weight's, {_dtype(exp.dtype)}: a gradient has "
                "its parameter's dtype (an fp32 weight gets an fp32 gradient).")
    return f"{name} is {_dtype(out.dtype)}, expected {_dtype(exp.dtype)}."


def _success(runs) -> str:
    if all(run.case.inputs["op"] == "forward" for run in runs):
        return (f"fake_forward: on all {len(CASES)} cases y has x's shape and dtype, rstd is (M,) float32, on x's "
                "device. Now the backward.")
    return (f"on all {len(CASES)} cases (float16, bf16 x with float32 weight, no weight) your fakes give the shapes, "
            "dtypes and device of the registered ones: y and dx in x's dtype, rstd (M,) float32, dgamma in weight's "
            "dtype or empty.")


#: Exercise 11, declared: judged by :func:`rmsnorm_course.checkers.functions.check`; the answer is the pair
#: (fake_forward, fake_backward), fake_backward None for 11.1.
SPEC = FunctionSpec(
    exercise=EXERCISE,
    reference=_oracle,  # the package's registered fakes (torch.ops.rmsnorm_fast), which the learner writes again
    cases=_cases,
    run=_run,
    oracle=_oracle,
    symptoms=(),
    success=_success,
    explain=_explain,
    verify=_verify,
)


def check_fake_implementation(fake_forward, fake_backward=None) -> Feedback:
    """Check the learner's fake implementations against the package's registered ones, in a child process.

    Args:
        fake_forward: ``(x, weight, eps) -> (y, rstd)``; x (M, N), weight (N,) or None.
        fake_backward: ``(x, weight, rstd, dy) -> (dx, dgamma)``; dgamma an
            empty tensor when weight is None. None: check the forward only
            (exercise 11.1).

    Returns:
        Feedback: "passed", "not done yet" or "wrong" with the first mismatch
        (case, output, what it is, what it should be). Never raises, never hangs.

    Source: solutions/11_extending_the_contract.ipynb.
    """
    return check(SPEC, (fake_forward, fake_backward))
