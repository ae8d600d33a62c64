"""Imported once by the checkers' forkserver under the interpreter: every child forks from a warm process.

Importing :mod:`rmsnorm` and its checkers and running each package kernel once
on a tiny input takes about a second in a fresh process (imports, and the
interpreter's first launch); done here once, each child of
:mod:`rmsnorm_course.checkers.isolate` starts with it done. On a GPU machine only the
second server imports it, the one whose children interpret their kernels, with
CUDA out of sight: the first server's children use CUDA, and a process that
touched CUDA cannot fork children that use it.

Source: solutions/03_forward_kernel.ipynb … 10_one_pass_backward.ipynb.
"""

from __future__ import annotations

import importlib.util
import warnings

import torch

import rmsnorm.article
from rmsnorm.device import interpreter_active
from rmsnorm_course import checkers  # noqa: F401  (the checkers' modules, imported once)


def _warm_up() -> None:
    if not interpreter_active():
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        x = torch.ones(2, 33)
        gamma = torch.ones(33)
        _, rstd = rmsnorm.article.forward_op(x, gamma)
        _, partial = rmsnorm.article.backward_rows(x, gamma, x.clone(), rstd, 1e-6)
        rmsnorm.article.reduce_gamma_gradient(partial, torch.float32)
    if importlib.util.find_spec("pandas") is not None:  # exercise 07's samples are a DataFrame
        import pandas  # noqa: F401


_warm_up()
