"""Checkers of the exercises: run a learner's code on the course's cases and say what is wrong.

One checker per exercise (one module each, ``exNN_*.py``); each returns a
:class:`Feedback` ("passed", "not done yet" or "wrong" with a plain-words
message naming the mistake and the numbers that show it). A checker never
raises, never crashes and never hangs, whatever the learner's code does: the
learner's code runs in a child process with one time limit
(:mod:`rmsnorm_course.checkers.isolate`). Every kernel exercise (03, 04, 05, 08's
fix, 09, 10) is declared once, as a frozen spec (:class:`~rmsnorm_course.checkers.spec.ExerciseSpec`:
reference, signatures, cases, launch, oracle, symptoms, messages; ``SPEC`` in its module), and
judged by one harness, ``check(spec, kernel)`` (:mod:`rmsnorm_course.checkers.kernels`): the
kernel is read first (:mod:`rmsnorm_course.checkers.preflight`), then compiled for a
CUDA target (under the interpreter) while its cases run in child processes, each
tensor inside a NaN-guarded buffer (:mod:`rmsnorm_course.checkers.guards`), in
Triton's interpreter on every machine and also on the GPU where there is one, so a
verdict does not depend on the device. The spec and the kernel's source travel to
the child as data (cloudpickled); the child runs the harness's one run loop on them.
Each spec's ``launch`` launches the kernel on the guarded copies: 03, 04, 05 and 08's fix
with the grid and arguments the package's launchers give their kernels
(``forward_op``, ``backward_rows``, ``reduce_gamma_gradient``), so the kernel must
have the signature of the package kernel it replaces; 09 and 10 with signatures of
their own (those of :mod:`rmsnorm_course.teaching.long_row` and
:mod:`rmsnorm_course.teaching.one_pass`). Exercises 01, 02, 06, 07, 08's hypothesis and 11–13
check a function, a class or a reading against an oracle: each checked answer is a frozen
:class:`~rmsnorm_course.checkers.spec.FunctionSpec` (reference, cases, the learner's run, oracle,
symptoms, messages; ``SPEC`` in its module, ``PREDICTION_SPEC``/``READING_SPEC`` in 07's,
``HYPOTHESIS_SPEC`` in 08's, ``FRACTION_SPEC``/``PICK_SPEC`` in 12's), judged in the same child,
under the same time limit, by one harness, ``check(spec, answer, **given)``
(:mod:`rmsnorm_course.checkers.functions`; ``given`` is what the notebook hands along, such as a
table of samples).

Source: solutions/01_formula.ipynb … solutions/15_layernorm.ipynb.
"""

from . import (
    ex03_forward,
    ex04_dx,
    ex05_dgamma,
    ex08_n_vs_block,
    ex09_long_row,
    ex10_one_pass,
    ex14_fused_add,
    ex15_layernorm,
)
from .ex01_by_hand import check_by_hand
from .ex02_reference import check_reference
from .ex06_autograd import check_autograd_function
from .ex07_benchmark import check_benchmark_reading, check_prediction
from .ex08_n_vs_block import check_hypothesis
from .ex11_fake import check_fake_implementation  # noqa: E402  (Part II, appended)
from .ex12_reading import check_copy_fraction, check_pick_config  # noqa: E402  (Part II, appended)
from .feedback import Feedback
from .kernels import check
from .spec import ExerciseSpec, FunctionSpec

__all__ = [
    "ExerciseSpec",
    "FunctionSpec",
    "Feedback",
    "check",
    "check_autograd_function",
    "check_benchmark_reading",
    "check_by_hand",
    "check_dgamma_kernel",
    "check_dx_kernel",
    "check_fixed_dx_kernel",
    "check_forward_kernel",
    "check_hypothesis",
    "check_prediction",
    "check_reference",
    "check_fake_implementation",
    "check_copy_fraction",
    "check_pick_config",
]

__all__ += ["check_long_row_kernel", "check_one_pass_kernel", "check_fused_add_kernel",
            "check_fused_add_backward_kernel", "check_layernorm_kernel", "check_layernorm_backward_kernel"]


def check_forward_kernel(kernel) -> Feedback:
    """Exercise 03: a forward kernel with the signature of :func:`rmsnorm.article.rmsnorm_forward_kernel`,
    launched as ``forward_op(x, gamma, eps, kernel=kernel)`` launches it.

    Returns:
        Feedback: "passed", "not done yet" (the skeleton) or "wrong" with the mistake named or the first
        mismatch. Never raises, never hangs.

    Source: solutions/03_forward_kernel.ipynb.
    """
    return check(ex03_forward.SPEC, kernel)


def check_dx_kernel(kernel) -> Feedback:
    """Exercise 04: a dx kernel with the signature of :func:`rmsnorm.article.rmsnorm_dx_kernel`, launched as
    ``backward_rows`` launches it, with rstd from the package's forward (dx and partial are both checked).

    Source: solutions/04_backward_derivation.ipynb.
    """
    return check(ex04_dx.SPEC, kernel)


def check_dgamma_kernel(kernel) -> Feedback:
    """Exercise 05: a column-sum kernel with the signature of :func:`rmsnorm.article.rmsnorm_dgamma_kernel`,
    launched as ``reduce_gamma_gradient`` launches it.

    Source: solutions/05_gamma_reduction.ipynb.
    """
    return check(ex05_dgamma.SPEC, kernel)


def check_fixed_dx_kernel(kernel) -> Feedback:
    """Exercise 08's fix: a dx kernel whose mean(u · x) divides by N, checked as exercise 04, under 08's name.

    Source: solutions/08_n_vs_block_exercise.ipynb.
    """
    return check(ex08_n_vs_block.SPEC_FIX, kernel)


def _kernel_checker(spec: ExerciseSpec, computes: str):
    """``check(spec, kernel)`` as the one-argument function a notebook calls, its docstring said from the spec.

    Args:
        spec: the exercise; its reference is a teaching kernel whose signature the learner's keeps, and its
            launch's docstring says how the kernel is launched.
        computes: what the kernel computes, in a few words (the docstring's first sentence).
    """
    reference, launch = spec.reference.fn, spec.launch

    def checker(kernel) -> Feedback:
        return check(spec, kernel)

    checker.__doc__ = (
        f"Exercise {spec.exercise}: {computes}; the kernel has the signature of "
        f":func:`{reference.__module__}.{reference.__name__}`.\n\n"
        f"Launched as :func:`{launch.__module__}.{launch.__name__}` says: {launch.__doc__.splitlines()[0]}\n\n"
        "Returns:\n    Feedback: \"passed\", \"not done yet\" (the skeleton) or \"wrong\" with the mistake named or "
        "the first mismatch. Never raises, never hangs.\n\n"
        f"Source: the solution notebook whose kernel :mod:`{reference.__module__}` holds, line for line.")
    return checker


check_long_row_kernel = _kernel_checker(ex09_long_row.SPEC, "y, by a loop over the row's blocks")
check_one_pass_kernel = _kernel_checker(ex10_one_pass.SPEC, "dx and a dgamma partial per program")
check_fused_add_kernel = _kernel_checker(ex14_fused_add.FORWARD_SPEC, "y, residual_out and rstd")
check_fused_add_backward_kernel = _kernel_checker(ex14_fused_add.BACKWARD_SPEC, "dh, d_residual_out included")
check_layernorm_kernel = _kernel_checker(ex15_layernorm.FORWARD_SPEC, "y, mean and rstd")
check_layernorm_backward_kernel = _kernel_checker(ex15_layernorm.BACKWARD_SPEC, "dx and the dweight and dbias partials")
