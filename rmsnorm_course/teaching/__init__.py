"""Teaching kernels: written to be read, launched by a lesson or an exercise, never by a model.

- :mod:`rmsnorm_course.teaching.primer` — :func:`~rmsnorm_course.teaching.primer.center_rows_kernel`, the first
  kernel of lesson 03 (each row minus its mean).
- :mod:`rmsnorm_course.teaching.buggy` — the deliberately wrong kernels of lesson 08 (divide by
  BLOCK_SIZE, not N), each its correct counterpart with one line changed.
- :mod:`rmsnorm_course.teaching.long_row` — exercise 09's looped forward kernel (a row wider than its block).
- :mod:`rmsnorm_course.teaching.one_pass` — exercise 10's persistent-grid loop of the one-pass backward.
- :mod:`rmsnorm_course.teaching.fused_add` — exercise 14's residual add fused into the norm, forward and backward.
- :mod:`rmsnorm_course.teaching.layernorm` — exercise 15's LayerNorm, forward and backward (dweight and dbias
  partials).

The 09, 10, 14 and 15 kernels are the exercises' references (the signatures their checkers launch) and
the solutions' kernels, which tests/course/test_teaching.py holds to the same code. The library
(:mod:`rmsnorm`) never imports them.

Source: notebooks/03_forward_kernel.ipynb, notebooks/08_n_vs_block_exercise.ipynb,
solutions/09_the_long_row.ipynb, solutions/10_one_pass_backward.ipynb,
solutions/14_fusing_the_residual.ipynb, solutions/15_layernorm.ipynb.
"""
