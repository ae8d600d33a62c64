"""Every Python block of the README runs as written, on this machine's device (GPU or the interpreter)."""

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```", README.read_text(), flags=re.S | re.M)


def test_the_readme_has_its_examples():
    assert len(BLOCKS) >= 2, "the fast path's and the swap's examples"


@pytest.mark.parametrize("source", BLOCKS, ids=[block.splitlines()[-1][:40] for block in BLOCKS])
def test_a_readme_example_runs_as_written(source):
    if "import transformers" in source:
        pytest.importorskip("transformers", reason="transformers (the 'models' extra) is not installed")
    exec(compile(source, str(README), "exec"), {"__name__": "readme_example"})  # noqa: S102  (the README's own code)


def test_the_readme_names_the_versions_the_h200_results_were_measured_with():
    import json

    text = " ".join(README.read_text().split())
    for name in ("fast_environment.json", "whole_call_environment.json", "model_step_environment.json"):
        env = json.loads((README.parent / "results" / "h200" / name).read_text())
        torch_minor, triton_minor = ".".join(env["torch"].split(".")[:2]), ".".join(env["triton"].split(".")[:2])
        assert f"torch {torch_minor} and triton {triton_minor}" in text, name
