"""tools/readme_fast_table.py: the tables of README.md and results/h200/README.md are generated from the CSVs.

The renderers are checked on the committed results and on a fixture (tests/data/whole_call_fixture.csv,
made-up numbers in whole_call.csv's columns); the pages themselves by the --check of tests/lab/test_sidebyside.py.
The claims the results page makes in words are checked here as relations on the CSVs, never as sentences.
"""

import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import checkout_scripts
from rmsnorm_lab import RESULTS_DIR, load_fast_table, wholecall

ROOT = Path(__file__).resolve().parents[2]
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
    readme = (RESULTS_DIR / "README.md").read_text()
    fast = load_fast_table()
    before = tool.updated(readme, fast, None)
    assert f"{tool.WHOLE_START}\n{tool.WHOLE_END}" in before
    after = tool.updated(readme, fast, whole)
    block = after.split(tool.WHOLE_START, 1)[1].split(tool.WHOLE_END, 1)[0]
    assert "fast: whole call" in block  # the run's own table, between the block's markers
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
    assert "fast: CUDA graph" in (results / "README.md").read_text()


def test_what_the_results_page_says_of_the_kernel_table_holds_in_fast_csv():
    """The backward is ahead of QuACK at every shape; the forward's largest gap to QuACK is at the widest row."""
    fast = load_fast_table(RESULTS_DIR)
    times = fast.pivot_table(index=["M", "N", "dtype", "pass_"], columns="provider", values="us")
    ratio = times["quack"] / times["fast"]  # QuACK in fast.csv: the same run
    assert (ratio.xs("backward", level="pass_") > 1).all()
    forward = ratio.xs("forward", level="pass_")
    assert forward.idxmin()[1] == forward.index.get_level_values("N").max()


def test_what_the_results_page_says_of_the_whole_call_holds_in_whole_call_csv():
    """Only at the largest shape does the kernel decide; the forward + backward's host time is never within 1.5×
    eager's."""
    from rmsnorm_lab.results import WHOLE_CALL_FILE
    from rmsnorm_lab.wholecall import targets

    table = pd.read_csv(RESULTS_DIR / WHOLE_CALL_FILE)
    fast = table[(table.provider == "fast") & (table.pass_ == "forward_backward")]
    kernel_decides = fast[fast.whole_call_us <= 2 * fast.kernel_us]
    assert set(kernel_decides.M * kernel_decides.N) == {(fast.M * fast.N).max()}
    verdicts = targets(table).groupby("target")["met"]
    assert not verdicts.any()["host, forward + backward ≤ 1.5 × eager"]


def test_what_the_results_page_says_of_the_weak_grid_holds_in_fast_weak_csv(tool):
    """The fast path loses the forward at rows of 65536 and wider, to QuACK; both passes at 65536 × 257 and the
    backward at 16384 × 4097 bf16, to compile; and leads the backward at 4096 × 12289."""
    from rmsnorm_lab.sidebyside import best_peer_table

    weak = pd.read_csv(RESULTS_DIR / tool.WEAK_FILE)
    best = best_peer_table(weak)
    forward, backward = best.xs("forward", level="pass_"), best.xs("backward", level="pass_")
    wide = forward[forward.index.get_level_values("N") >= 65536]
    assert len(wide) and (wide["ratio"] < 1).all() and (wide["best_peer"] == "quack").all()
    def at(table, M, N, dtype="bfloat16"):
        return table.xs((M, N, dtype), level=("M", "N", "dtype")).iloc[0]

    for table, M, N in ((forward, 65536, 257), (backward, 65536, 257), (backward, 16384, 4097)):
        assert at(table, M, N)["ratio"] < 1 and at(table, M, N)["best_peer"] == "compile", (M, N)
    assert at(backward, 4096, 12289)["ratio"] > 1
    text = tool.render_weak(weak)  # the peers that failed, and why
    assert "liger at 512 × 131072 bfloat16: failed: RuntimeError: Cannot launch Triton kernel" in text


def test_the_summary_block_names_the_runs_versions_and_each_grids_worst_shape():
    import json

    from rmsnorm_lab.pages import render_summary
    from rmsnorm_lab.sidebyside import best_peer_table

    env = json.loads((RESULTS_DIR / "fast_environment.json").read_text())
    fast = load_fast_table(RESULTS_DIR)
    text = render_summary([("tuned", fast)], [env])
    torch_minor, triton_minor = ".".join(env["torch"].split(".")[:2]), ".".join(env["triton"].split(".")[:2])
    assert f"torch {torch_minor} and triton {triton_minor}" in text and env["device"] in text
    best = best_peer_table(fast).xs("backward", level="pass_")["ratio"]
    row = next(line for line in text.splitlines() if line.startswith("| tuned | backward |"))
    assert row.rstrip(" |").split(": ")[-1].startswith(f"{best.min():.2f}×")


def test_the_generated_blocks_are_empty_where_their_file_is_missing(tool, tmp_path):
    results = tmp_path / "h200"
    shutil.copytree(RESULTS_DIR, results, copy_function=shutil.copyfile)
    (results / "cliffs.csv").unlink()
    page = tool.updated_results((RESULTS_DIR / "README.md").read_text(), results)
    assert "<!-- cliffs-table:start -->\n<!-- cliffs-table:end -->" in page
    assert "| dtype | pass | widths timed" not in page and "| sweep | dtype | N |" in page


def test_another_cards_page_is_rendered_from_its_own_folder_without_fast_csv(tool, tmp_path):
    """results/h100/README.md holds the blocks of the runs made on an H100, from results/h100's files (no fast.csv
    there): its committed text is what its own folder renders, and a block empties when its file goes."""
    h100 = ROOT / "results" / "h100"
    assert not (h100 / "fast.csv").is_file() and (h100 / "launch_path.csv").is_file()
    page = (h100 / "README.md").read_text()
    assert tool.updated_results(page, h100) == page
    copy = tmp_path / "h100"
    shutil.copytree(h100, copy, copy_function=shutil.copyfile)
    (copy / "launch_path.csv").unlink()
    emptied = tool.updated_results(page, copy)
    assert "<!-- launch-path-table:start -->\n<!-- launch-path-table:end -->" in emptied
    assert "| shape | pass | fast µs | Liger |" in emptied  # the LayerNorm's block, whose files stay


def test_an_ab_reads_each_checkouts_mean_and_its_spread_and_names_the_cases_that_moved():
    from rmsnorm_lab.pages import AB_TOLERANCE, ab_moved, new_over_old

    cells = ("norm", "M", "N", "dtype", "weight_dtype", "pass")
    rms, ln = ("rmsnorm", 64, 4096, "bfloat16", "bfloat16", "forward"), ("layernorm", 8, 768, "float16", "float32",
                                                                          "forward")
    times = {("old", rms): (10.0, 12.0), ("new", rms): (9.0, 9.0), ("old", ln): (20.0, 20.0), ("new", ln): (20.2, 20.2)}
    run = pd.DataFrame([dict(checkout=c, run=i, **dict(zip(cells, case)), kernel_us=us)
                        for (c, case), pair in times.items() for i, us in enumerate(pair)])
    table = new_over_old(run)
    assert table.loc[rms, ["old_us", "new_us"]].tolist() == [11.0, 9.0]  # each checkout's mean of its runs
    assert table.loc[rms, "new_over_old"] == 9.0 / 11.0 and table.loc[rms, "old_spread"] == 12.0 / 10.0 - 1
    assert abs(table.loc[ln, "new_over_old"] - 1) <= AB_TOLERANCE  # 1 %: inside
    assert list(ab_moved(table).index) == [rms]  # 18 % faster: beyond, and named


def test_the_forward_layout_change_speeds_the_case_it_is_for():
    """results/h100/forward_layout_ab.csv: where the change is aimed, a float32 weight beside bf16 rows one row a
    step, the new forward is faster than the old by more than the A/B's tolerance at both norms, beyond either
    checkout's run-to-run spread."""
    from rmsnorm_lab.pages import AB_TOLERANCE, new_over_old

    table = new_over_old(pd.read_csv(ROOT / "results" / "h100" / "forward_layout_ab.csv"))
    for norm in ("rmsnorm", "layernorm"):
        case = table.loc[(norm, 4096, 12288, "bfloat16", "float32", "forward")]
        assert case["new_over_old"] < 1 - max(AB_TOLERANCE, case["new_spread"], case["old_spread"]), case


def test_the_whole_call_table_compares_every_provider_the_whole_call_timed():
    """A kernel run that timed fewer providers than the whole call (eager left out) still leaves the whole call's
    eager ratio on the page: the whole-call table reads its providers from its own rows."""
    from rmsnorm_lab.pages import render_layernorm

    kernel = pd.DataFrame([dict(M=64, N=256, dtype="float16", weight_dtype="float16", provider=p, pass_=pass_, us=us,
                                check="ok") for p, us in (("fast", 10.0), ("compile", 12.0))
                           for pass_ in ("forward", "backward")])
    timed = (("fast", 20.0), ("compile", 40.0), ("eager", 10.0))
    whole = pd.DataFrame([dict(M=1, N=4096, dtype="bfloat16", provider=p, pass_="forward", whole_call_us=us,
                               host_us=us, check="ok") for p, us in timed])
    rows = [line for line in render_layernorm(kernel, whole).splitlines() if line.startswith("| 1 × 4096")]
    assert len(rows) == 1
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    assert cells[-2:] == [f"{40.0 / 20.0:.2f}×", f"{10.0 / 20.0:.2f}×"]  # compile's and eager's over the fast one's
