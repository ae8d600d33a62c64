"""How a learner's Python function or class is judged: one harness for exercises 01, 02, 06, 07, 08 and 11–13.

:func:`check` ships the exercise's :class:`~rmsnorm_course.checkers.spec.FunctionSpec`, the
learner's answer and what the notebook hands along with it (a table of samples, a committed CSV)
to the checker's child process (:func:`~rmsnorm_course.checkers.isolate.run_python_check`:
the one time limit of every exercise), where :func:`judge` runs the spec: its cases, the learner's
code on each, the oracle and ``verify``, then the symptoms (:func:`~rmsnorm_course.checkers.diagnose.diagnose`).
An error of the learner's code becomes "not done yet" (the skeleton's NotImplementedError) or
"wrong" with the learner's line (:func:`~rmsnorm_course.checkers.feedback.describe_error`).

Source: solutions/01_formula.ipynb, 02_reference.ipynb, 06_autograd_and_training.ipynb, 07_benchmark.ipynb,
08_n_vs_block_exercise.ipynb (the hypothesis),
11_extending_the_contract.ipynb, 12_tuning_and_side_by_side.ipynb, 13_into_a_model.ipynb.
"""

from __future__ import annotations

from . import isolate, progress
from .diagnose import Case, Run, diagnose
from .feedback import Feedback, checker_failed, describe_error, is_not_implemented, name_of, not_done, passed, wrong
from .spec import FunctionSpec, Raised, Refused


def check(spec: FunctionSpec, answer, **given) -> Feedback:
    """Judge a learner's function or class against an exercise's spec, in a child process with a time limit.

    Args:
        spec: the exercise (:class:`~rmsnorm_course.checkers.spec.FunctionSpec`).
        answer: the learner's function or class (or whatever the learner passed); a tuple where the
            exercise asks for several functions (07's reading, 11's fakes).
        **given: what the notebook hands along with the answer (a table of samples, a committed CSV),
            passed on to ``spec.cases``.

    Returns:
        A :class:`Feedback`: "passed", "not done yet" or "wrong"; never raises, never hangs.
    """
    who = "your functions" if isinstance(answer, tuple) else f"your {name_of(answer)}"
    try:
        return isolate.run_python_check(spec.exercise, judge, [spec, answer, given], who)
    except Exception as error:  # noqa: BLE001 - a checker never raises in a learner's notebook
        return checker_failed(spec.exercise, error)


def judge(spec: FunctionSpec, answer, given: dict | None = None) -> Feedback:
    """In the checker's child process: run ``answer`` on the spec's cases (made with ``given``), say what is wrong."""
    case = None
    runs = []
    try:
        for case in spec.cases(answer, **(given or {})):
            progress.say(f"the case {case.label}")
            run = Run(case, spec.run(answer, case), spec.oracle(case))
            problem = spec.verify(run) if spec.verify is not None else None
            if problem is not None:
                return wrong(spec.exercise, problem)
            runs.append(run)
    except Refused as refusal:
        return wrong(spec.exercise, str(refusal))
    except Raised as raised:
        return _raised(spec, raised, case)
    problem = next((message for look in spec.first_looks if (message := look(runs)) is not None), None)
    if problem is not None:
        return wrong(spec.exercise, problem)
    if spec.verify is not None and not spec.symptoms:  # verify compared every output: nothing left to diagnose
        return passed(spec.exercise, spec.success(runs))
    return diagnose(spec.exercise, runs, spec.symptoms, spec.success(runs))


def _raised(spec: FunctionSpec, raised: Raised, case: Case | None) -> Feedback:
    if is_not_implemented(raised.error):
        return not_done(spec.exercise, raised.where)
    explained = spec.explain(raised.error, case) if spec.explain is not None else None
    if explained is not None:
        return wrong(spec.exercise, explained)
    on_case = f"on {case.label}: " if spec.name_the_case and case is not None else ""
    return wrong(spec.exercise, on_case + describe_error(raised.where, raised.error, raised.example or spec.example))


def calling(where: str, fn, *args, example: str = ""):
    """``fn(*args)``: the learner's code; what it raises comes back as :class:`Raised` (``where`` names it,
    ``example`` is a call that shows the whole traceback, in place of the spec's).

    Raises:
        Refused: ``fn`` cannot be called (the learner passed a name, a result or None instead of the function).
    """
    if not callable(fn):
        raise Refused(f"the answer, of type {type(fn).__name__}, is not a function: pass your function itself, "
                      "not its name or what it returns.")
    try:
        return fn(*args)
    except Exception as error:  # noqa: BLE001 - any learner error becomes feedback
        raise Raised(where, error, example) from error
