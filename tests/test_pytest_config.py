"""The test suite's own configuration: it collects with and without pytest-xdist."""

import re
import subprocess
import sys
from pathlib import Path

from rmsnorm.testing import CAMPAIGN

ROOT = Path(__file__).resolve().parent.parent


def test_collects_without_pytest_xdist():
    # CONTRIBUTING.md says pytest-xdist is optional: its xdist_group mark must be registered, or
    # --strict-markers (pyproject.toml) stops the collection of tests/library/test_campaigns.py.
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:xdist", "--collect-only", "-q", "tests/library/test_campaigns.py"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    collected = int(re.search(r"(\d+) tests? collected", done.stdout).group(1))
    assert collected >= 3 * len(CAMPAIGN)  # forward, dx and dgamma of every campaign case
