"""Shared fixtures: the known-answer canary first, NaN-poisoned kernel outputs, one large GPU test at a time."""

import gc

import pytest
import torch

import rmsnorm_course  # noqa: F401  (first: without a GPU it switches Triton's interpreter on, as a lesson does)
from rmsnorm.device import default_device
from rmsnorm.testing import check_canary, outputs_forbidden, poisoned_outputs

# tests/browser drives JupyterLab in a headless Chromium: only `make test-browser` runs it
# (it names the folder, which collect_ignore does not block).
collect_ignore = ["browser"]


@pytest.fixture(scope="session", autouse=True)
def _canary():
    """Before any test of this folder (on every xdist worker): a row of 257 ones
    must give 0.9999995. If it doesn't, stop: nothing else is worth reading."""
    try:
        check_canary()
    except AssertionError as error:
        pytest.exit(f"canary failed, nothing else is worth reading: {error}", returncode=1)


@pytest.fixture(autouse=True)
def _poison_outputs():
    with poisoned_outputs():
        yield


@pytest.fixture(autouse=True)
def _dynamo_forgets():
    """After each test, Dynamo forgets what it compiled and what it gave up on (``torch._dynamo.reset()``,
    as PyTorch's own ``torch._dynamo.test_case.TestCase`` does around each test).

    Dynamo keeps both per code object, and every FastRMSNorm shares one ``forward``: a test whose compiled
    call was refused left ``FastRMSNorm.forward`` and ``rmsnorm_fast`` skipped for whatever test ran next on
    the same xdist worker, and the README's ``torch.compile(norm, fullgraph=True)`` then failed or passed by
    the order the tests were handed out. What a user meets in that state is tested on purpose
    (tests/library/test_fast_user_code.py, a norm compiled after Dynamo gave up on ours).
    """
    yield
    torch._dynamo.reset()


@pytest.fixture
def device() -> torch.device:
    return default_device()


@pytest.fixture
def no_allocation():
    """Fail the test if a launcher (article's or fast) allocates an output before refusing."""
    with outputs_forbidden():
        yield


@pytest.fixture
def large_gpu_memory(tmp_path_factory):
    """One test that takes GiBs of GPU memory at a time, across pytest-xdist workers; its cache freed after.

    `make test PYTHON=python3 JOBS=15` on one H200 (139 GiB) ran several of the fast path's widest
    campaign cases at once on different workers (4097 × 262144 holds about 17 GiB of inputs and
    outputs in float32, and its float64 oracle more), and each worker's caching allocator kept what
    it had reserved after its test: 22 tests, notebooks and child processes elsewhere then failed
    with CUDA out of memory (`CUBLAS_STATUS_ALLOC_FAILED`, `cudaErrorMemoryAllocation`). Such tests
    take a file lock in the session's temporary folder, which every worker of one run shares
    (pytest-xdist's recipe for session-wide work), and give their cached blocks back to the device
    when they end. filelock is a dependency of torch. Without CUDA it does nothing.
    """
    if not torch.cuda.is_available():
        yield
        return
    from filelock import FileLock

    with FileLock(str(tmp_path_factory.getbasetemp().parent / "large_gpu_memory.lock")):
        try:
            yield
        finally:
            gc.collect()
            torch.cuda.empty_cache()
