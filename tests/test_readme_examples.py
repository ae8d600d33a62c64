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


PAGES = ("README.md", "CONTRIBUTING.md", "INSTRUCTORS.md", "room/README.md", "notebooks/TROUBLESHOOTING.md",
         "results/h200/README.md")


@pytest.mark.parametrize("page", PAGES)
def test_every_relative_link_of_a_page_points_to_a_file_of_the_checkout(page):
    path = README.parent / page
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text())
    missing = [link for link in links if "://" not in link and not (path.parent / link).exists()]
    assert missing == []
