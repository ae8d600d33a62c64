"""How the suite starts Jupyter kernels (tests/kernel_start.py): the race it avoids, shown, and the stderr it keeps.

Issue 18: under ``make test JOBS=14`` on a 16-core machine a notebook's kernel sometimes died
before replying to kernel_info, and nbval's /dev/null hid why. The kernel's stderr says it:
``zmq.error.ZMQError: Address already in use``. jupyter_client chooses a TCP port by binding port 0
and closing it; another process can be handed the same free port before the kernel binds it. The
``port_thief`` fixture makes that happen every time: it lets jupyter_client choose, then binds the
port first, as the other kernel does. Which port is lost decides the symptom: the shell, stdin or
control port kills the kernel, the iopub port leaves it hung and silent, the heartbeat port goes
unnoticed. Over unix sockets (the suite's transport) there is no port.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import nbval.kernel
import pytest
import zmq
from jupyter_client.connect import LocalPortCache

import kernel_start

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import kernel_start_stress  # noqa: E402

DEATH = "deliberate death at start: this kernel exits 3"


# The order in which jupyter_client 8's LocalProvisioner.pre_launch asks LocalPortCache for the ports.
# The tests check it: each compares the port taken with the one the manager then hands the kernel.
PORT_CHOICE_ORDER = ("shell", "iopub", "stdin", "hb", "control")


@pytest.fixture
def port_thief(monkeypatch):
    """steal(name): jupyter_client chooses a kernel's ports as ever, but the one for `name` is bound by a
    ZMQ socket before the kernel can bind it, as by the kernel of another process handed the same free
    port. steal returns the list of ports taken: one once jupyter_client has chosen, none before."""
    choose, sockets = LocalPortCache.find_available_port, []

    def steal(name):
        chosen, taken = [], []

        def choose_then_lose(self, ip):
            port = choose(self, ip)
            chosen.append(port)
            if len(chosen) == 1 + PORT_CHOICE_ORDER.index(name):
                other = zmq.Context.instance().socket(zmq.ROUTER)
                other.linger = 0
                other.bind(f"tcp://{ip}:{port}")
                sockets.append(other)
                taken.append(port)
            return port

        monkeypatch.setattr(LocalPortCache, "find_available_port", choose_then_lose)
        return taken

    yield steal
    for other in sockets:
        other.close()


def _wait_for_text(path: Path, text: str, timeout: float = 120) -> None:
    """Wait until the file at `path` contains `text` (the kernel has reached that point of its start)."""
    deadline = time.monotonic() + timeout
    while not (path.exists() and text in path.read_text(errors="replace")):
        assert time.monotonic() < deadline, f"{path} has no {text!r} after {timeout} s"
        time.sleep(0.1)


@pytest.fixture
def kernel_specs(tmp_path, monkeypatch):
    """Two kernel specs in a JUPYTER_PATH of their own: "dying" writes DEATH to stderr and exits 3;
    "silent" lives and never answers.

    "silent" ignores SIGINT, as a real kernel does (ipykernel turns it into an interrupt): jupyter_client's
    shutdown_kernel(now=True) sends SIGINT first, then SIGKILL, and a bare ``time.sleep`` would die of
    whichever the scheduler let it see first (-2 or -9: the suite once saw -2 under 8 workers on 2 cores)."""
    codes = {"dying": f"import sys; print({DEATH!r}, file=sys.stderr); sys.exit(3)",
             "silent": "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(600)"}
    for name, code in codes.items():
        spec = tmp_path / "jupyter" / "kernels" / name
        spec.mkdir(parents=True)
        spec.joinpath("kernel.json").write_text(json.dumps(
            {"argv": [sys.executable, "-c", code, "{connection_file}"], "display_name": name, "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    return codes


def test_nbvals_own_start_loses_a_taken_port_and_says_only_kernel_died(port_thief):
    """The H200 symptom, on demand: nbval 0.11's start path, stderr to /dev/null, the shell port taken in the gap."""
    assert kernel_start.nbval_start_new_kernel is not None, "conftest.py did not install kernel_start in nbval"
    taken = port_thief("shell")
    with pytest.raises(RuntimeError) as caught, open(os.devnull, "w") as devnull:
        kernel_start.nbval_start_new_kernel(startup_timeout=60, kernel_name=kernel_start.CURRENT_ENV_KERNEL,
                                            stderr=devnull)
    assert len(taken) == 1
    assert str(caught.value) == "Kernel died before replying to kernel_info"  # and nothing says why


@pytest.mark.parametrize("name", ["shell", "control"])
def test_a_kernel_whose_socket_port_was_taken_dies_saying_address_already_in_use(port_thief, name):
    """The same start over TCP with the kernel's stderr kept: the kernel exits 1 of the taken port."""
    taken = port_thief(name)
    km = kernel_start.start_kernel(transport="tcp")
    with pytest.raises(kernel_start.KernelStartError) as caught:
        kernel_start.wait_until_ready(km, timeout=60)
    assert taken == [getattr(km, f"{name}_port")]
    assert caught.value.exit_code == 1
    assert str(caught.value).startswith("Kernel died before replying to kernel_info (transport tcp, exit code 1)")
    assert f"zmq.error.ZMQError: Address already in use (addr='tcp://127.0.0.1:{taken[0]}')" in str(caught.value)
    assert not km.has_kernel  # shut down and cleaned up by wait_until_ready


def test_a_kernel_whose_iopub_port_was_taken_hangs_and_never_answers(port_thief):
    """The other symptom: when the iopub bind fails, ipykernel 7's exit waits on a ZMQ context whose
    iopub socket it never closes, so the kernel lives on, silent (nbval: "Kernel didn't respond in 60 s")."""
    taken = port_thief("iopub")
    km = kernel_start.start_kernel(transport="tcp")
    _wait_for_text(km.stderr_path, "Address already in use")
    with pytest.raises(kernel_start.KernelStartError) as caught:
        kernel_start.wait_until_ready(km, timeout=1)
    assert taken == [km.iopub_port]
    assert caught.value.exit_code is None
    assert str(caught.value).startswith("Kernel didn't respond in 1 seconds (transport tcp, still running")
    assert f"zmq.error.ZMQError: Address already in use (addr='tcp://127.0.0.1:{taken[0]}')" in str(caught.value)


def test_a_kernel_whose_heartbeat_port_was_taken_answers_with_a_dead_heartbeat(port_thief):
    """The third: the heartbeat thread dies of the taken port and the kernel answers anyway; only its stderr says so."""
    taken = port_thief("hb")
    km = kernel_start.start_kernel(transport="tcp")
    kc = kernel_start.wait_until_ready(km, timeout=60)
    try:
        assert taken == [km.hb_port]
        _wait_for_text(km.stderr_path, f"Address already in use (addr='tcp://127.0.0.1:{taken[0]}')")
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def test_the_suites_start_path_has_no_port_to_lose(port_thief, tmp_path):
    """nbval's start function as the suite installs it: over unix sockets, so jupyter_client chooses no port."""
    taken = port_thief("shell")
    km, kc = nbval.kernel.start_new_kernel(startup_timeout=60, kernel_name=kernel_start.CURRENT_ENV_KERNEL,
                                           stderr=open(os.devnull, "w"), cwd=str(tmp_path))  # noqa: SIM115  (the kernel's for its life)
    try:
        assert taken == []
        assert km.transport == "ipc"
        sockets = sorted(Path(km.ip).parent.glob(Path(km.ip).name + "-*"))
        assert [p.name for p in sockets] == [f"{Path(km.ip).name}-{n}" for n in range(1, 6)]
        assert all(len(os.fsencode(p)) <= kernel_start.SOCKET_PATH_MAX for p in sockets)
        reply = kc.execute_interactive("import os; print(os.getcwd())", timeout=60, output_hook=lambda msg: None)
        assert reply["content"]["status"] == "ok"
        assert "Kernel is running over TCP" not in km.kernel_stderr()  # ipykernel's warning, over TCP only
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    assert not any(Path(km.ip).parent.glob(Path(km.ip).name + "-*")), "the socket files outlived the kernel"


def test_nbvals_running_kernel_starts_on_the_suites_manager_and_talks_as_before(tmp_path):
    """nbval's own RunningKernel (kernel_info, iopub handshake, execute, stream output) over the suite's manager."""
    kernel = nbval.kernel.RunningKernel(kernel_start.CURRENT_ENV_KERNEL, cwd=str(tmp_path), startup_timeout=60)
    try:
        assert isinstance(kernel.km, kernel_start.KernelManager) and kernel.km.transport == "ipc"
        code = "import os, sys; print(6 * 7, os.getcwd()); print('to stderr', file=sys.stderr)"
        msg_id = kernel.execute_cell_input(code)
        kernel.await_reply(msg_id, timeout=60)
        streams = {}
        while True:
            msg = kernel.get_message("iopub", timeout=10)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "stream":
                streams[msg["content"]["name"]] = streams.get(msg["content"]["name"], "") + msg["content"]["text"]
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                break
        assert streams == {"stdout": f"42 {tmp_path}\n", "stderr": "to stderr\n"}
    finally:
        kernel.stop()
    assert not kernel.is_alive()


def test_16_kernels_started_at_once_in_4_processes_all_answer():
    """The stress of tools/kernel_start_stress.py, one round: every kernel answers kernel_info, none dies.
    (About 5 s on 2 idle cores. Over TCP, a round of 32 kernels in 16 processes lost one about every third
    round on 2 cores: a rare race, which the deterministic tests above show instead.)"""
    outcomes = kernel_start_stress.run_round(kernels=16, processes=4, transport=kernel_start.TRANSPORT, timeout=120)
    assert len(outcomes) == 16
    failed = [o for o in outcomes if o[1] != "ready"]
    assert failed == [], "\n\n".join(f"process {i}: {outcome}, exit code {code}\n{message}"
                                     for i, outcome, code, message in failed)


def test_a_kernel_that_dies_at_start_puts_its_stderr_and_exit_code_into_the_nbval_report(kernel_specs):
    """pytest + nbval on a notebook under the checkout (so the root conftest.py applies, as in make test),
    with a kernel that dies at start: the error of its cell has the exit code and the kernel's stderr."""
    (ROOT / "build").mkdir(exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="test-kernel-start-", dir=ROOT / "build"))  # build/ is git-ignored
    try:
        notebook = folder / "one_cell.ipynb"
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")]), notebook)
        run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-q",
                              "--nbval-lax", "--nbval-kernel-name", "dying", str(notebook)],
                             cwd=ROOT, capture_output=True, text=True, timeout=300)
    finally:
        shutil.rmtree(folder)
    output = run.stdout + run.stderr
    assert run.returncode == 1, output
    assert "1 error" in run.stdout.splitlines()[-1], output  # pytest's closing line (plugins may warn on stderr)
    assert "kernel_start.KernelStartError: Kernel died before replying to kernel_info (transport ipc, exit code 3)" \
        in output, output
    assert DEATH in output, output


def test_nbclient_on_the_suites_manager_raises_the_kernels_stderr(kernel_specs):
    """tests/course/test_notebook_widgets.py's way: nbclient on kernel_start.AsyncKernelManager."""
    from nbclient import NotebookClient

    client = NotebookClient(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")]),
                            kernel_name="dying", kernel_manager_class=kernel_start.AsyncKernelManager,
                            startup_timeout=60)
    with pytest.raises(kernel_start.KernelStartError) as caught:
        client.execute()
    # nbclient 0.11 registers its cleanup at exit before the start and, when the start fails, leaves it there
    # to fail at exit ("assert self.km is not None"): take it back.
    atexit.unregister(client._cleanup_kernel)
    assert "Kernel died before replying to kernel_info (transport ipc, exit code 3)" in str(caught.value)
    assert DEATH in str(caught.value)


def test_a_kernel_that_never_answers_is_reported_running_then_shut_down(kernel_specs):
    """A wait that ends on its timeout says the kernel was alive (no exit code), and stops it."""
    km = kernel_start.start_kernel("silent")
    with pytest.raises(kernel_start.KernelStartError) as caught:
        kernel_start.wait_until_ready(km, timeout=2)
    assert str(caught.value).startswith("Kernel didn't respond in 2 seconds (transport ipc, still running when "
                                        "the wait ended); the kernel's stderr:\n(empty)")
    assert not km.has_kernel
    assert km.exit_code() == -9  # shut down with now=True: SIGKILL


def test_socket_paths_fit_a_unix_socket_or_the_start_says_so(monkeypatch):
    """The suite's socket paths fit sun_path (103 bytes, macOS's); in a too-long TMPDIR the start refuses, naming it."""
    km = kernel_start.KernelManager(kernel_name=kernel_start.CURRENT_ENV_KERNEL)
    assert len(os.fsencode(f"{km.ip}-5")) <= kernel_start.SOCKET_PATH_MAX
    assert Path(km.connection_file).parent == kernel_start.kernel_dir()
    monkeypatch.setattr(kernel_start, "_dir", Path("/tmp") / ("x" * 100))
    with pytest.raises(RuntimeError, match="set TMPDIR to a shorter directory"):
        kernel_start.KernelManager(kernel_name=kernel_start.CURRENT_ENV_KERNEL)
