"""Start many Jupyter kernels at once, across processes, the way the test suite does, and count the deaths.

    python tools/kernel_start_stress.py                                  # the suite's start path (ipc)
    python tools/kernel_start_stress.py --transport tcp                  # ports chosen by jupyter_client (nbval 0.11)
    python tools/kernel_start_stress.py --kernels 32 --rounds 10 --processes 16

Each round starts --processes processes (spawned, as pytest-xdist workers are separate
interpreters); each builds its share of the --kernels managers, waits at a barrier with the
others, then launches its kernels one after another (tests/kernel_start.py: start_kernel) and
waits for each to answer kernel_info (wait_until_ready), as nbval does, then shuts them down.
The barrier puts every port choice of the round within milliseconds: the race of issue 18 is
between jupyter_client choosing a port (bind to port 0, close) and the kernel binding it, in
another process than the one choosing the same port.

Prints each failed start (round, process, exit code and the kernel's stderr), then one line:
``rounds=10 kernels=32 processes=16 transport=ipc deaths=0``, where deaths counts kernels that
exited before answering and ``timeouts=`` (shown when not 0) those still silent after --timeout.
Exit status 1 when any start failed.

To make the TCP race frequent on a small machine, narrow the port range in a network namespace
of its own (nothing else on the machine sees it):
    unshare -rn sh -c 'ip link set lo up; echo "40000 40999" > /proc/sys/net/ipv4/ip_local_port_range;
                       exec python tools/kernel_start_stress.py --transport tcp'
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import queue
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import kernel_start  # noqa: E402


def _worker(index: int, kernels: int, transport: str, timeout: float, barrier, results) -> None:
    """Start `kernels` kernels after the barrier; put (index, [(outcome, exit code, message) per kernel])."""
    outcomes, managers = [], []
    try:
        barrier.wait(timeout=120)
        managers = [kernel_start.start_kernel(transport=transport) for _ in range(kernels)]
        for km in managers:
            try:
                kernel_start.wait_until_ready(km, timeout).stop_channels()
                outcomes.append(("ready", None, ""))
            except kernel_start.KernelStartError as error:  # exit_code: as the wait ended, before the shutdown
                outcomes.append(("timeout" if error.exit_code is None else "death", error.exit_code, str(error)))
    except Exception as error:  # noqa: BLE001 - reported: the kernels it did not get to count as errors
        outcomes += [("error", None, f"{type(error).__name__}: {error}")] * (kernels - len(outcomes))
    finally:
        for km in managers:
            if km.has_kernel:
                km.shutdown_kernel(now=True)
        results.put((index, outcomes))


def run_round(kernels: int, processes: int, transport: str, timeout: float = 60) -> list[tuple]:
    """One round: `kernels` kernels split over `processes` spawned processes, all started at once.

    Returns:
        One (process index, outcome, exit code or None, message) per kernel; outcome is "ready",
        "death" (exited before answering kernel_info), "timeout" (alive, silent after `timeout` s)
        or "error" (the worker process itself failed or never reported).
    """
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(processes), ctx.Queue()
    shares = [kernels // processes + (i < kernels % processes) for i in range(processes)]
    workers = [ctx.Process(target=_worker, args=(i, n, transport, timeout, barrier, results))
               for i, n in enumerate(shares)]
    for w in workers:
        w.start()
    reports, deadline = {}, time.monotonic() + 180 + timeout * max(shares)
    while len(reports) < processes and time.monotonic() < deadline:
        try:
            index, outcomes = results.get(timeout=1)
            reports[index] = outcomes
        except queue.Empty:
            if not any(w.is_alive() for w in workers) and results.empty():
                break
    for w in workers:
        w.join(timeout=30)
        if w.is_alive():
            w.kill()
    missing = ("error", None, "the worker process ended without a report")
    return [(i, *o) for i, n in enumerate(shares) for o in reports.get(i, [missing] * n)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kernels", type=int, default=32, help="kernels started at once in each round (default 32)")
    parser.add_argument("--rounds", type=int, default=10, help="rounds (default 10)")
    parser.add_argument("--processes", type=int, default=min(32, os.cpu_count() or 2),
                        help="processes the kernels are split over (default: the CPU count, at most 32)")
    parser.add_argument("--transport", choices=("ipc", "tcp"), default=kernel_start.TRANSPORT,
                        help="ipc: the suite's start path; tcp: ports chosen by jupyter_client, as nbval 0.11 does")
    parser.add_argument("--timeout", type=float, default=60, help="seconds a kernel may take to answer (default 60)")
    args = parser.parse_args(argv)
    processes = max(1, min(args.processes, args.kernels))

    counts = {"death": 0, "timeout": 0, "error": 0}
    started = time.monotonic()
    for round_ in range(1, args.rounds + 1):
        t = time.monotonic()
        outcomes = run_round(args.kernels, processes, args.transport, args.timeout)
        for index, outcome, code, message in outcomes:
            if outcome != "ready":
                counts[outcome] += 1
                print(f"--- round {round_}, process {index}: {outcome}, exit code {code}\n{message}\n", flush=True)
        ready = sum(o[1] == "ready" for o in outcomes)
        print(f"round {round_}: {ready}/{args.kernels} ready ({time.monotonic() - t:.1f} s)", flush=True)
    extra = "".join(f" {name}s={counts[name]}" for name in ("timeout", "error") if counts[name])
    print(f"# {time.monotonic() - started:.0f} s, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    print(f"rounds={args.rounds} kernels={args.kernels} processes={processes} transport={args.transport} "
          f"deaths={counts['death']}{extra}")
    return 1 if any(counts.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
