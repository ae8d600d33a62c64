"""How the test suite starts Jupyter kernels: over unix sockets, each kernel's stderr kept.

Why. jupyter_client 8 gives a kernel its five TCP ports by binding port 0, reading the number and
closing the socket (``LocalPortCache.find_available_port``); the kernel binds them once it has
started, a second or more later. ``LocalPortCache`` keeps one process from handing a port out
twice, but nothing stops another process (another pytest-xdist worker starting a notebook at the
same moment) from being handed the same free port in between: Linux picks ``bind(0)`` ports at
random among about 14,000 (the odd ones of 32768-60999), and 32 kernels whose 160 ports are all
chosen before any is bound share about 0.9 such pairs. The kernel that binds second fails with
``zmq.error.ZMQError: Address already in use``: it exits before it answers kernel_info when that
port is its shell, stdin or control port, and hangs, silent, when it is its iopub port. nbval 0.11
sends the kernel's stderr to /dev/null, so all a test log said was "Kernel died before replying to
kernel_info".

What. The managers here start kernels with ``transport="ipc"``: the five sockets are files named
after the connection file, in a directory of this process's own (``kernel_dir()``), so there is
no port to race for. Each kernel's stderr goes to a file beside them, and a kernel that does not
become ready raises :class:`KernelStartError` with its exit code and that stderr.
``tests/test_kernel_start.py`` reproduces the race (a port taken between jupyter_client's choice
and the kernel's bind) and shows these managers out of its reach; ``tools/kernel_start_stress.py``
starts many kernels at once across processes and counts the failures.

Used by conftest.py (nbval's kernels, through :func:`install_in_nbval`),
tests/course/test_notebook_widgets.py (nbclient, with :class:`AsyncKernelManager`) and
tools/kernel_start_stress.py.
"""

from __future__ import annotations

import atexit
import itertools
import os
import shutil
import tempfile
from pathlib import Path

import jupyter_client
from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.blocking import BlockingKernelClient
from traitlets import default

TRANSPORT = "ipc"  # the suite's; "tcp" is jupyter_client's default, kept for the reproduction and the stress tool
CURRENT_ENV_KERNEL = ":nbval-parent-env"  # nbval's name for an ipykernel of this interpreter (--nbval-current-env)
SOCKET_PATH_MAX = 103  # bytes of a unix socket path: sun_path is 108 on Linux, 104 on macOS, the NUL included
STDERR_TAIL = 8000  # characters of a dead kernel's stderr put into the error message

_dir: Path | None = None
_dir_pid: int | None = None
_names = itertools.count(1)


def kernel_dir() -> Path:
    """This process's directory for its kernels' sockets, connection files and stderr (0700, removed at exit).

    Made on first use under ``tempfile.gettempdir()``; a forked child makes its own, so two processes
    never share a socket name.
    """
    global _dir, _dir_pid
    if _dir is None or _dir_pid != os.getpid():
        _dir, _dir_pid = Path(tempfile.mkdtemp(prefix="kernels-")), os.getpid()
        atexit.register(shutil.rmtree, _dir, True)
    return _dir


def _new_kernel_files() -> Path:
    """A fresh name in kernel_dir(), e.g. /tmp/kernels-1a2b3c4d/k7: add .json, .stderr or -ipc-<n>.

    Raises:
        RuntimeError: when a socket path from it would pass SOCKET_PATH_MAX (a very long TMPDIR).
    """
    stem = kernel_dir() / f"k{next(_names)}"
    longest = os.fsencode(f"{stem}-ipc-99")  # jupyter_client names the sockets <ip>-<n>, n = 1..5
    if len(longest) > SOCKET_PATH_MAX:
        raise RuntimeError(f"kernel socket paths would be {len(longest)} bytes, over the {SOCKET_PATH_MAX} a unix "
                           f"socket allows ({longest!r}): set TMPDIR to a shorter directory")
    return stem


class KernelStartError(RuntimeError):
    """A kernel did not become ready; the message has jupyter_client's reason, the exit code, the kernel's stderr.

    Attributes:
        exit_code: the kernel's exit status when the wait ended, or None if it was still running.
        stderr: what the kernel had written to its stderr (whole; the message has the last STDERR_TAIL characters).
    """

    def __init__(self, message: str, exit_code: int | None = None, stderr: str = ""):
        super().__init__(message)
        self.exit_code, self.stderr = exit_code, stderr


class _SuiteKernel:
    """What the suite adds to jupyter_client's managers: ipc sockets in kernel_dir(), stderr kept in a file."""

    def __init__(self, **kwargs):
        self._files = _new_kernel_files()
        if kwargs.setdefault("transport", TRANSPORT) == "ipc":
            kwargs.setdefault("connection_file", f"{self._files}.json")
            # jupyter_client's own naming (ConnectionFileMixin._ip_default), set now: an `ip` read before
            # connection_file is set would default to the relative "kernel-ipc", shared by every kernel.
            kwargs.setdefault("ip", f"{os.path.splitext(kwargs['connection_file'])[0]}-ipc")
        super().__init__(**kwargs)
        self._process = None
        self._stderr_text = ""

    @property
    def stderr_path(self) -> Path:
        """The file the kernel's stderr (file descriptor 2) goes to while it runs."""
        return self._files.with_suffix(".stderr")

    async def _async_launch_kernel(self, kernel_cmd, **kw):
        if kw.get("stderr") is None:
            with open(self.stderr_path, "ab") as stderr:  # Popen dups it; "ab": a restart appends
                await super()._async_launch_kernel(kernel_cmd, **{**kw, "stderr": stderr})
        else:
            await super()._async_launch_kernel(kernel_cmd, **kw)
        self._process = getattr(self.provisioner, "process", None)

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        await super()._async_cleanup_resources(restart=restart)
        if not restart:
            self._stderr_text = self.kernel_stderr()
            self.stderr_path.unlink(missing_ok=True)

    def kernel_stderr(self) -> str:
        """What the kernel wrote to its stderr, also after it was shut down (then as it was at shutdown)."""
        try:
            return self.stderr_path.read_text(errors="replace")
        except FileNotFoundError:
            return self._stderr_text

    def exit_code(self) -> int | None:
        """The kernel process's exit status (negative: killed by that signal); None while it runs or before it ran."""
        return None if self._process is None else self._process.poll()


def start_error(km: KernelManager | AsyncKernelManager, error: Exception) -> KernelStartError:
    """The KernelStartError for `km`, whose kernel failed to become ready with `error`."""
    code, stderr = km.exit_code(), km.kernel_stderr()
    state = "still running when the wait ended" if code is None else f"exit code {code}"
    tail = stderr.strip()
    if len(tail) > STDERR_TAIL:
        tail = "[...]\n" + tail[-STDERR_TAIL:]
    return KernelStartError(f"{error} (transport {km.transport}, {state}); the kernel's stderr:\n{tail or '(empty)'}",
                            exit_code=code, stderr=stderr)


class _BlockingClient(BlockingKernelClient):
    """jupyter_client's blocking client; wait_for_ready raises KernelStartError, with the kernel's stderr."""

    def wait_for_ready(self, timeout: float | None = None) -> None:
        try:
            super().wait_for_ready(timeout=timeout)
        except RuntimeError as error:
            raise start_error(self.parent, error) from error


class _AsyncClient(AsyncKernelClient):
    """jupyter_client's async client; wait_for_ready raises KernelStartError, with the kernel's stderr."""

    async def wait_for_ready(self, timeout: float | None = None) -> None:
        try:
            await super().wait_for_ready(timeout=timeout)
        except RuntimeError as error:
            raise start_error(self.parent, error) from error


class KernelManager(_SuiteKernel, jupyter_client.KernelManager):
    """jupyter_client's KernelManager over ipc sockets (transport="tcp" to ask for ports), stderr kept.

    Its client's wait_for_ready raises KernelStartError, with the kernel's exit code and stderr.
    """

    @default("client_factory")
    def _default_client_factory(self):
        return _BlockingClient


class AsyncKernelManager(_SuiteKernel, jupyter_client.AsyncKernelManager):
    """jupyter_client's AsyncKernelManager over ipc sockets (transport="tcp" to ask for ports), stderr kept.

    Its client's wait_for_ready raises KernelStartError; nbclient takes it as
    ``NotebookClient(..., kernel_manager_class=AsyncKernelManager)``.
    """

    @default("client_factory")
    def _default_client_factory(self):
        return _AsyncClient


def start_kernel(kernel_name: str = CURRENT_ENV_KERNEL, transport: str = TRANSPORT, **kwargs) -> KernelManager:
    """Launch a kernel (not yet waited for), as nbval names it, with the suite's manager.

    Args:
        kernel_name: a kernel spec name; ":nbval-parent-env" is this interpreter's ipykernel.
        transport: "ipc" (the suite's) or "tcp" (ports chosen by jupyter_client, as nbval 0.11 does).
        **kwargs: for KernelManager.start_kernel (Popen's: cwd, env, ...); no stderr, which is kept.

    Returns:
        The KernelManager of the launched kernel.
    """
    from nbval.kernel import NbvalKernelspecManager  # knows ":nbval-parent-env", else as jupyter_client

    km = KernelManager(kernel_name=kernel_name, transport=transport, kernel_spec_manager=NbvalKernelspecManager())
    km.start_kernel(**kwargs)
    return km


def wait_until_ready(km: KernelManager, timeout: float = 60) -> BlockingKernelClient:
    """A started client of `km`'s kernel once that kernel answers kernel_info.

    Raises:
        KernelStartError: the kernel died or did not answer within `timeout` seconds; the kernel is
            then shut down, and the error says why, with its exit code and stderr.
    """
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=timeout)
    except KernelStartError:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
        raise
    return kc


nbval_start_new_kernel = None  # nbval's own, kept by install_in_nbval (the reproduction calls it)


def start_new_kernel(startup_timeout: float = 60, kernel_name: str = "python", **kwargs):
    """nbval.kernel.start_new_kernel (nbval 0.11), with the suite's manager: ipc sockets, stderr kept.

    nbval's RunningKernel.__init__ calls it as ``start_new_kernel(startup_timeout=...,
    kernel_name=..., stderr=open(os.devnull, 'w'), cwd=...)``; the /dev/null file is closed
    and the kernel's stderr goes to its own file instead.

    Returns:
        (km, kc), as nbval's: the manager and a started client of a kernel that answered kernel_info.

    Raises:
        KernelStartError: the kernel did not become ready (see wait_until_ready).
    """
    devnull = kwargs.pop("stderr", None)
    if devnull is not None:
        devnull.close()
    km = start_kernel(kernel_name, **kwargs)
    return km, wait_until_ready(km, startup_timeout)


def install_in_nbval() -> None:
    """Make nbval start its kernels with start_new_kernel above (conftest.py does it, once per pytest process).

    nbval 0.11's RunningKernel.__init__ looks ``start_new_kernel`` up in nbval.kernel when it
    runs, so replacing that one name changes how every notebook's kernel starts and nothing else:
    nbval's kernel_info/iopub handshake (_ensure_iopub_up), execution and shutdown are its own.
    tests/test_kernel_start.py checks that nbval's RunningKernel really gets this manager.
    """
    global nbval_start_new_kernel
    import nbval.kernel

    if nbval.kernel.start_new_kernel is not start_new_kernel:
        nbval_start_new_kernel = nbval.kernel.start_new_kernel
        nbval.kernel.start_new_kernel = start_new_kernel
