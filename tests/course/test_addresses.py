"""The reading of a stray access's lanes (rmsnorm_course.checkers.addresses): each slip's address pattern, named.

The lanes are built as the interpreter hands them over (every lane's element offset, masked lanes included); the
checkers' tests run the same readings on real kernels (wrong_variants*.py, the blocks of walk 8).
"""

from __future__ import annotations

import numpy as np

from rmsnorm_course.checkers.addresses import Lanes, reading

#: A (1, 257) x and y, a (257,) gamma and a (1,) rstd, as ex03's first case lays them out.
SHAPES = {"x": ((1, 257), 257), "y": ((1, 257), 257), "gamma": ((257,), 1), "rstd": ((1,), 1)}
COLS = np.arange(512)


def test_a_column_index_times_the_row_stride_is_a_transposed_address():
    lanes = Lanes(COLS * 257, COLS < 257, 0, SHAPES)
    assert reading("x", lanes).startswith("x's address is transposed: neighbouring lanes (neighbouring columns) lie "
                                          "257 elements apart")


def test_a_mask_one_lane_too_wide_is_named_as_less_or_equal():
    lanes = Lanes(COLS.copy(), COLS <= 257, 0, SHAPES)
    assert reading("x", lanes) == ("The mask lets exactly one lane past x's last column through (index 257, and none "
                                   "further): `<=` where `<` belongs, `cols < N`.")


def test_a_per_row_value_read_at_column_offsets_is_named():
    lanes = Lanes(COLS.copy(), COLS < 257, 0, SHAPES)
    assert reading("rstd", lanes).startswith("rstd holds one value per row (1 of them), but it is loaded as a block")


def test_a_row_offset_from_another_tensors_stride_names_that_tensor():
    shapes = {"x": ((6, 257), 300), "y": ((6, 257), 316)}
    lanes = Lanes(316 + COLS, COLS < 257, 1, shapes)
    assert reading("x", lanes) == ("row 1's block of x starts 316 elements in, 1 × 316: y's row stride, where x's own "
                                   "row stride, 300, belongs: the row's offset is the row times its tensor's row "
                                   "stride.")


def test_a_row_offset_that_is_no_number_of_the_launch_says_nothing():
    shapes = {"x": ((17, 257), 257), "dx": ((17, 257), 257)}
    assert reading("x", Lanes(4369 + COLS, COLS < 257, 1, shapes)) == ""  # row 17 of a loop, program 1


def test_swapped_mask_axes_of_a_tile_are_named():
    shapes = {"partial": ((17, 256), 256), "dgamma": ((256,), 1)}
    rows, cols = np.arange(32)[:, None], np.arange(32)[None, :]
    offsets = (rows + 0) * 256 + cols
    swapped = (cols < 17) & (rows < 256)
    assert reading("partial", Lanes(offsets, swapped, 0, shapes)).startswith("The mask's axes are swapped")


def test_addresses_that_fit_no_slip_say_nothing():
    lanes = Lanes(COLS.copy(), COLS < 257, 0, SHAPES)
    assert reading("x", lanes) == "" and reading(None, lanes) == "" and reading("x", None) == ""
