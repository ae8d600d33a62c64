"""scripts/benchmark_offset.py: on a machine without CUDA it says so in one line and writes nothing."""

import importlib.util
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "benchmark_offset.py"


def _load_script():
    spec = importlib.util.spec_from_file_location("benchmark_offset", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_without_cuda_the_script_says_so_in_one_line_and_writes_nothing(capsys, tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the refusal is for machines without one")
    assert _load_script().main(["--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("benchmark_offset: no CUDA GPU here, nothing timed")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("option", ["--calls", "--repeats"])
def test_a_count_below_one_is_refused_before_anything_runs(option, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        _load_script().main(["--out", str(tmp_path / "out"), option, "0"])
    assert exit_.value.code == 2 and f"{option} must be at least 1; got 0" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
