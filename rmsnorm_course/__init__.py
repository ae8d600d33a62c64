"""rmsnorm_course: the course's machinery, apart from the kernel library it teaches.

- :mod:`rmsnorm_course.backend` — importing the course first chooses where kernels run: on a
  machine without CUDA it switches Triton's interpreter on before triton is imported (the
  library itself never does);
- :mod:`rmsnorm_course.checkers` — one checker per exercise, run on a learner's code in child
  processes, each returning a :class:`~rmsnorm_course.checkers.Feedback`;
- :mod:`rmsnorm_course.teaching` — kernels a lesson or an exercise launches and a model never
  does (the primer, the deliberately buggy kernels, the kernels of exercises 09, 10, 14 and 15);
- :mod:`rmsnorm_course.training` — the small seeded training run of lesson 06;
- ``python -m rmsnorm_course.check_env`` — proves the kernels run here, and says where.

It imports the library (:mod:`rmsnorm`) and the lab (:mod:`rmsnorm_lab`); neither imports it.
Its own dependency beyond theirs is ``cloudpickle`` (the ``course`` extra), with which the
checkers ship a learner's notebook code to a child process.

Source: solutions/01_formula.ipynb … solutions/15_layernorm.ipynb.
"""

from .backend import choose_backend

choose_backend()  # first: before anything of the course imports triton (ask rmsnorm.interpreter_active() after)
