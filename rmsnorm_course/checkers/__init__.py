"""Checkers of the exercises: run a learner's code on the course's cases and say what is wrong.

One checker per exercise (one module each, ``exNN_*.py``); each returns a
:class:`Feedback` ("passed", "not done yet" or "wrong" with a plain-words
message naming the mistake and the numbers that show it). A checker never
raises, never crashes and never hangs, whatever the learner's code does: the
learner's code runs in a child process with one time limit
(:mod:`rmsnorm_course.checkers.isolate`). Every kernel exercise (03, 04, 05, 08's
fix, 09, 10) is judged by one harness (:mod:`rmsnorm_course.checkers.kernels`): the
kernel is read first (:mod:`rmsnorm_course.checkers.preflight`), then compiled for a
CUDA target (under the interpreter) while its cases run in child processes, each
tensor inside a NaN-guarded buffer (:mod:`rmsnorm_course.checkers.guards`), in
Triton's interpreter on every machine and also on the GPU where there is one, so a
verdict does not depend on the device. Each exercise module launches the kernel
itself, on the guarded copies (its ``launch``/``_launch``): 03, 04, 05 and 08's fix
with the grid and arguments the package's launchers give their kernels
(``forward_op``, ``backward_rows``, ``reduce_gamma_gradient``), so the kernel must
have the signature of the package kernel it replaces; 09 and 10 with signatures of
their own (those of :mod:`rmsnorm_course.teaching.long_row` and
:mod:`rmsnorm_course.teaching.one_pass`). Exercises 01, 02, 06, 07 and 11–13 check
functions, classes and readings, not kernels.

Source: solutions/01_formula.ipynb … solutions/13_into_a_model.ipynb.
"""

from .ex01_by_hand import check_by_hand
from .ex02_reference import check_reference
from .ex03_forward import check_forward_kernel
from .ex04_dx import check_dx_kernel
from .ex05_dgamma import check_dgamma_kernel
from .ex06_autograd import check_autograd_function
from .ex07_benchmark import check_benchmark_reading, check_prediction
from .ex08_n_vs_block import check_fixed_dx_kernel, check_hypothesis
from .ex11_fake import check_fake_implementation  # noqa: E402  (Part II, appended)
from .ex12_reading import check_copy_fraction, check_pick_config  # noqa: E402  (Part II, appended)
from .feedback import Feedback

__all__ = [
    "Feedback",
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

# Part II (lessons 09-10): checkers with signatures of their own, judged by the same harness (see kernels.py).
from .ex09_long_row import check_long_row_kernel  # noqa: E402
from .ex10_one_pass import check_one_pass_kernel  # noqa: E402

__all__ += ["check_long_row_kernel", "check_one_pass_kernel"]
