"""rmsnorm_course: the course's machinery, apart from the kernel library it teaches.

- :mod:`rmsnorm_course.checkers` — one checker per exercise, run on a learner's code in child
  processes, each returning a :class:`~rmsnorm_course.checkers.Feedback`;
- :mod:`rmsnorm_course.training` — the small seeded training run of lesson 06.

It imports the library (:mod:`rmsnorm`); the library never imports it, except where an old import
path is asked for: ``rmsnorm.checkers`` and ``rmsnorm.training`` still name these very modules
(:mod:`rmsnorm._aliases`). Its own dependency beyond the library's is ``cloudpickle`` (the
``course`` extra), with which the checkers ship a learner's notebook code to a child process.

Source: solutions/01_formula.ipynb … solutions/13_into_a_model.ipynb; tracker issue 19.
"""

import rmsnorm  # noqa: F401  (first, as before the move: chooses where kernels run before any checker imports triton)
