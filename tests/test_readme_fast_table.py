"""tools/readme_fast_table.py: the README's fast-path tables are generated from the CSVs, never typed.

The whole-call block is checked against a fixture (tests/data/whole_call_fixture.csv, made-up
numbers in whole_call.csv's columns) until the H200's whole_call.csv is committed; then the
README check of tests/test_sidebyside.py covers the real one.
"""

import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import checkout_scripts
from rmsnorm_lab import RESULTS_DIR, load_fast_table, wholecall

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "data" / "whole_call_fixture.csv"


def _tool():
    return checkout_scripts.load("tools/readme_fast_table.py")


@pytest.fixture(scope="module")
def tool():
    return _tool()


@pytest.fixture(scope="module")
def whole():
    return pd.read_csv(FIXTURE)


def test_the_fixture_has_whole_call_csvs_columns():
    assert list(pd.read_csv(FIXTURE).columns) == list(wholecall.COLUMNS)


def test_the_whole_call_block_sets_kernel_time_beside_whole_call_time_and_says_which_a_model_feels(tool, whole):
    text = tool.render_whole_call(whole)
    header = next(line for line in text.splitlines() if line.startswith("| M × N"))
    assert header.index("fast: kernels") < header.index("fast: whole call") < header.index("fast: CUDA graph")
    assert "feels the\n**whole call**" in text and "Forward + backward" in text and "Forward, inference" in text
    fast = whole[(whole.provider == "fast") & (whole.pass_ == "forward_backward")].iloc[0]
    row = next(line for line in text.splitlines() if line.startswith(f"| {fast['M']} × {fast['N']} {fast['dtype']} |"))
    assert row.split(" | ")[1:3] == [f"{fast.kernel_us:.1f}", f"{fast.whole_call_us:.1f}"]  # from the CSV, not typed
    slow = whole[(whole.provider == "fast") & (whole.pass_ == "forward_backward")]
    assert f"At {int((slow.whole_call_us > 2 * slow.kernel_us).sum())} of {len(slow)} shapes" in text


def test_a_provider_not_timed_shows_a_dash_and_its_reason(tool, whole):
    text = tool.render_whole_call(whole)
    assert "article, refused: the article's contract: x must be float32 or float16" in text
    assert "quack, wrong: AssertionError" in text
    bf16 = next(line for line in text.splitlines() if line.startswith("| 64 × 4096 bfloat16 |"))
    assert bf16.rstrip(" |").endswith("—")  # the article's column, refused at bf16


def test_the_whole_call_block_is_empty_until_whole_call_csv_exists(tool, whole):
    readme = (ROOT / "README.md").read_text()
    fast = load_fast_table()
    before = tool.updated(readme, fast, None)
    assert f"{tool.WHOLE_START}\n{tool.WHOLE_END}" in before
    after = tool.updated(readme, fast, whole)
    assert "fast: whole call" in after and "fast: whole call" not in before
    assert tool.updated(after, fast, None) == before  # and the block can be emptied again


@pytest.mark.slow
def test_the_check_finds_a_readme_out_of_date_once_whole_call_csv_is_committed(tmp_path, whole):
    results = tmp_path / "h200"
    shutil.copytree(RESULTS_DIR, results, copy_function=shutil.copyfile)  # contents, not modes: a read-only checkout
    readme = tmp_path / "README.md"
    shutil.copyfile(ROOT / "README.md", readme)
    tool = str(ROOT / "tools" / "readme_fast_table.py")
    command = [sys.executable, tool, "--readme", str(readme), "--results", str(results)]
    assert subprocess.run(command + ["--check"], capture_output=True).returncode == 0
    whole.to_csv(results / "whole_call.csv", index=False)
    done = subprocess.run(command + ["--check"], capture_output=True, text=True)
    assert done.returncode == 1 and "run tools/readme_fast_table.py" in done.stdout
    assert subprocess.run(command, capture_output=True).returncode == 0  # --write is the default
    assert subprocess.run(command + ["--check"], capture_output=True).returncode == 0
    assert "fast: CUDA graph" in readme.read_text()


def test_the_readme_prose_under_the_kernel_table_is_what_the_csvs_say():
    """"behind torch.compile by 1–13 % at five shapes (13 % at 1024 × 4096 bf16"; QuACK, in the same
    run: "1–2 % at three shapes and by 30 % at 1024 × 65536", "the backward is ahead of QuACK at every
    shape"."""
    from rmsnorm_lab.results import load_fast_table

    readme = (ROOT / "README.md").read_text()
    fast = load_fast_table(ROOT / "results" / "h200")
    keys = ["M", "N", "dtype", "pass_"]
    times = fast.pivot_table(index=keys, columns="provider", values="us")
    behind = 1 - (times["compile"] / times["fast"]).xs("forward", level="pass_")
    behind = behind.round(2)
    behind = behind[behind > 0]  # behind by at least half a percent
    assert len(behind) == 5 and behind.min() >= 0.01 and behind.max() == behind.loc[(1024, 4096, "bfloat16")] == 0.13
    flat = " ".join(readme.split())
    assert "behind torch.compile by 1–13 % at five shapes (13 % at 1024 × 4096 bf16, a 6 µs kernel)" in flat
    assert round(times.loc[(1024, 4096, "bfloat16", "forward"), "fast"]) == 6
    compile_rate = fast[(fast.provider == "compile") & (fast.pass_ == "forward")].set_index(keys[:3])["copy_fraction"]
    there = compile_rate.loc[behind.index].round(2)
    assert there.min() == 0.76 and there.max() == 1.00
    assert "compile's forward reaches 76–100 % of the device's copy rate" in flat
    assert "Against QuACK, timed in the same run" in flat
    ratio = times["quack"] / times["fast"]  # QuACK in fast.csv: the same run
    trails = (1 - ratio.xs("forward", level="pass_")).round(2)
    trails = trails[trails > 0]
    assert trails.loc[(1024, 65536, "bfloat16")] == 0.30
    others = trails.drop((1024, 65536, "bfloat16"))
    assert len(others) == 3 and others.min() >= 0.01 and others.max() <= 0.02
    assert (ratio.xs("backward", level="pass_") > 1).all()
    assert "trails by 1–2 % at three shapes and by 30 % at 1024 × 65536" in " ".join(readme.split())
    assert "the backward is ahead of QuACK at every" in " ".join(readme.split())


def test_the_readme_prose_under_the_whole_call_table_is_what_the_csv_says():
    """"only at 32768 × 4096 does the kernel decide"; "the forward's host time is within 5 µs of the floor at
    most shapes"; "the forward + backward's is not within 1.5× eager's"."""
    from rmsnorm_lab.results import WHOLE_CALL_FILE
    from rmsnorm_lab.wholecall import targets

    readme = " ".join((ROOT / "README.md").read_text().split())
    table = pd.read_csv(ROOT / "results" / "h200" / WHOLE_CALL_FILE)
    fast = table[(table.provider == "fast") & (table.pass_ == "forward_backward")]
    kernel_decides = fast[fast.whole_call_us <= 2 * fast.kernel_us]
    assert list(zip(kernel_decides.M, kernel_decides.N)) == [(32768, 4096)]
    assert "only at 32768 × 4096 does the kernel decide" in readme
    verdicts = targets(table).groupby("target")["met"]
    assert verdicts.mean()["host, forward ≤ floor + 5 µs"] > 0.5
    assert not verdicts.all()["host, forward + backward ≤ 1.5 × eager"]
    assert ("The forward's host time is within 5 µs of the floor at most shapes (the targets above); the "
            "forward + backward's is not within 1.5× eager's") in readme


def test_the_weak_grid_block_and_the_prose_above_it_are_what_fast_weak_csv_says(tool):
    """"below 0.97× at 15 of 20 shapes, by about 30 % at rows of 65536 and wider ... by 3–22 % elsewhere; and the
    backward at odd widths (0.53–0.79×)"."""
    from rmsnorm_lab.sidebyside import best_peer_table

    weak = pd.read_csv(RESULTS_DIR / tool.WEAK_FILE)
    text = tool.render_weak(weak)  # in the README: test_sidebyside's --check
    best = best_peer_table(weak)["ratio"]
    forward, backward = best.xs("forward", level="pass_"), best.xs("backward", level="pass_")
    n = forward.index.get_level_values("N")
    behind = forward[forward < 0.97]
    wide, rest = behind[behind.index.get_level_values("N") >= 65536], behind[behind.index.get_level_values("N") < 65536]
    assert len(behind) == 15 and len(forward) == 20 and len(wide) == (n >= 65536).sum() == 3
    assert (1 - wide).round(1).eq(0.3).all()
    assert (round(1 - rest.max(), 2), round(1 - rest.min(), 2)) == (0.03, 0.22)
    odd = backward[backward.index.get_level_values("N") % 2 == 1]
    assert (round(odd.min(), 2), round(odd.max(), 2)) == (0.53, 0.79) and (odd < 1).all()
    flat = " ".join((ROOT / "README.md").read_text().split())
    assert ("the forward, below 0.97× at 15 of 20 shapes, by about 30 % at rows of 65536 and wider, where QuACK keeps "
            "each row on chip across a cluster of thread blocks, and by 3–22 % elsewhere; and the backward at odd "
            "widths (0.53–0.79×)") in flat
    assert "liger at 512 × 131072 bfloat16: failed: RuntimeError: Cannot launch Triton kernel" in text  # and why
