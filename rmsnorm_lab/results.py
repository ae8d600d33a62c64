"""Bytes, tables and files: what turns timings into comparable numbers, on any machine.

Nothing here times anything, so it all works without a GPU: the declared byte
count (one convention for every implementation), the summary and difference
tables, the environment record, and reading the committed results.

Source: notebooks/07_benchmark.ipynb; GB/s from a declared byte count follows
Triton's tutorials and quack's ``benchmarks/benchmark_rmsnorm.py``.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
import triton

import rmsnorm
from .eager import eager_provenance
from .timing import gbps

#: Environment variable naming a results folder to read instead of the checkout's results/h200.
RESULTS_DIR_ENV = "RMSNORM_RESULTS_DIR"
#: Where the committed H200 results live: $RMSNORM_RESULTS_DIR, else results/h200 of the checkout that
#: holds this package (rmsnorm_lab/results.py → two levels up). The one place that finds it.
RESULTS_DIR = Path(os.environ.get(RESULTS_DIR_ENV) or Path(__file__).resolve().parents[1] / "results" / "h200")
#: Columns of the summary statistics (all in µs per call, except ``samples``).
STAT_COLUMNS = ("median_us", "mean_us", "min_us", "max_us", "std_us", "samples")
#: Sweep rate columns and the time column each is computed from.
RATE_COLUMNS = {
    "gbps_whole": "whole_call_us",
    "gbps_graph": "graph_us",
    "gbps_device": "device_us",
    "gbps_cold": "cold_us",
}
#: The byte convention, in words (written to environment.json by scripts/benchmark.py).
BYTE_CONVENTION = (
    "minimum traffic, the same for every implementation (a lower bound): forward 2*M*N*s + N*s_w + 4*M, "
    "backward 3*M*N*s + 2*N*s_w + 4*M (s, s_w: bytes per element of x and gamma; rstd float32); "
    "no implementation is charged its scratch"
)


def results_dir(path: str | Path | None = None) -> Path:
    """The folder committed results are read from: ``path``, else :data:`RESULTS_DIR`.

    Every reader of committed results asks this function (``load_results``, the side-by-side
    and whole-call loaders, tools/readme_fast_table.py), so that one place knows where they are.

    Args:
        path: a folder written by scripts/benchmark*.py, or None for :data:`RESULTS_DIR`.

    Returns:
        The folder, which exists.

    Raises:
        FileNotFoundError: it does not exist; for the default, the message says that the
            package was installed without the checkout's results/ and how to point at a copy.
    """
    folder = Path(path) if path is not None else RESULTS_DIR
    if folder.is_dir():
        return folder
    if path is None:
        raise FileNotFoundError(
            f"rmsnorm_lab: no results folder at {folder}. The committed results live in the course's checkout "
            f"(results/h200/), and this rmsnorm package was installed without it. Pass the folder explicitly, or set "
            f"{RESULTS_DIR_ENV}=/path/to/checkout/results/h200"
        )
    raise FileNotFoundError(f"rmsnorm_lab: no results folder at {folder}")


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def forward_bytes(M: int, N: int, dtype: torch.dtype = torch.float32, weight_dtype: torch.dtype | None = None) -> int:
    """Declared bytes of one RMSNorm forward: read x, gamma; write y, rstd.

    The **minimum** traffic of any implementation that reads each input once
    and writes each output once, so a lower bound on what any implementation
    moves: scratch and intermediates (the reference's temporaries, for
    instance) are charged to no one. Every implementation is charged these same
    bytes, so a rate computed from them is an effective rate, comparable across
    implementations and never above the real traffic rate.

    Args:
        M, N: shape of x.
        dtype: dtype of x and y (s bytes per element).
        weight_dtype: dtype of gamma (s_w bytes); default ``dtype``.

    Returns:
        ``2·M·N·s + N·s_w + 4·M`` bytes (rstd: one float32 per row).

    Source: notebooks/07_benchmark.ipynb §7.
    """
    s, s_w = _itemsize(dtype), _itemsize(weight_dtype or dtype)
    return 2 * M * N * s + N * s_w + 4 * M


def backward_bytes(M: int, N: int, dtype: torch.dtype = torch.float32, weight_dtype: torch.dtype | None = None) -> int:
    """Declared bytes of one RMSNorm backward: read x, dy, gamma, rstd; write dx, dgamma.

    A lower bound, like :func:`forward_bytes`: the article path's (M, N) fp32
    dgamma partials (written, then read: 8·M·N bytes), Liger's per-program
    partials and autograd's temporaries are charged to no one.

    Returns:
        ``3·M·N·s + 2·N·s_w + 4·M`` bytes.

    Source: notebooks/07_benchmark.ipynb §7.
    """
    s, s_w = _itemsize(dtype), _itemsize(weight_dtype or dtype)
    return 3 * M * N * s + 2 * N * s_w + 4 * M


def forward_backward_bytes(
    M: int, N: int, dtype: torch.dtype = torch.float32, weight_dtype: torch.dtype | None = None
) -> int:
    """:func:`forward_bytes` + :func:`backward_bytes`: ``5·M·N·s + 3·N·s_w + 8·M`` bytes, a lower bound."""
    return forward_bytes(M, N, dtype, weight_dtype) + backward_bytes(M, N, dtype, weight_dtype)


def fused_add_forward_bytes(M: int, N: int, dtype: torch.dtype = torch.float32,
                            weight_dtype: torch.dtype | None = None, residual_dtype: torch.dtype | None = None) -> int:
    """Declared bytes of one fused residual add + RMSNorm forward (:func:`rmsnorm.rmsnorm_add`).

    Read x, residual, gamma; write y, residual_out (residual's dtype), rstd. A lower bound, like
    :func:`forward_bytes`, which it extends by the residual's read and residual_out's write.

    Args:
        dtype: dtype of x and y (s bytes); weight_dtype: gamma's (s_w, default ``dtype``);
        residual_dtype: residual's and residual_out's (s_r, default ``dtype``; float32 for a float32 stream).

    Returns:
        ``2·M·N·(s + s_r) + N·s_w + 4·M`` bytes.
    """
    return forward_bytes(M, N, dtype, weight_dtype) + 2 * M * N * _itemsize(residual_dtype or dtype)


def fused_add_backward_bytes(M: int, N: int, dtype: torch.dtype = torch.float32,
                             weight_dtype: torch.dtype | None = None, residual_dtype: torch.dtype | None = None) -> int:
    """Declared bytes of the fused add's backward: read residual_out, dy, d_residual_out, gamma, rstd; write dh, dgamma.

    dy has y's dtype (s); residual_out, d_residual_out and dh have residual's (s_r). With a float32
    residual and a 16-bit x, autograd's cast of dh to x's dtype for dx is charged to no one (a lower bound).

    Returns:
        ``M·N·(3·s_r + s) + 2·N·s_w + 4·M`` bytes.
    """
    s, s_r, s_w = _itemsize(dtype), _itemsize(residual_dtype or dtype), _itemsize(weight_dtype or dtype)
    return M * N * (3 * s_r + s) + 2 * N * s_w + 4 * M


def layernorm_forward_bytes(M: int, N: int, dtype: torch.dtype = torch.float32,
                            weight_dtype: torch.dtype | None = None) -> int:
    """Declared bytes of one LayerNorm forward: read x, weight, bias; write y, mean, rstd (float32).

    Returns:
        ``2·M·N·s + 2·N·s_w + 8·M`` bytes (s: x's element size, s_w: the weight's and the bias's); a lower bound.
    """
    return 2 * M * N * _itemsize(dtype) + 2 * N * _itemsize(weight_dtype or dtype) + 8 * M


def layernorm_backward_bytes(M: int, N: int, dtype: torch.dtype = torch.float32,
                             weight_dtype: torch.dtype | None = None) -> int:
    """Declared bytes of one LayerNorm backward: read x, dy, weight, mean, rstd; write dx, dweight, dbias.

    Returns:
        ``3·M·N·s + 3·N·s_w + 8·M`` bytes; a lower bound (the partials' round trip is charged to no one).
    """
    return 3 * M * N * _itemsize(dtype) + 3 * N * _itemsize(weight_dtype or dtype) + 8 * M


def bytes_moved(path: str, M: int, N: int, dtype: torch.dtype = torch.float32) -> int:
    """:func:`forward_bytes` for ``path == 'forward'``, :func:`forward_backward_bytes` for ``'forward_backward'``.

    Raises:
        ValueError: another path.
    """
    if path == "forward":
        return forward_bytes(M, N, dtype)
    if path == "forward_backward":
        return forward_backward_bytes(M, N, dtype)
    raise ValueError(f"path must be 'forward' or 'forward_backward'; got {path!r}")


def recompute_rates(sweep: pd.DataFrame) -> pd.DataFrame:
    """The sweep with ``bytes`` and every ``gbps_*`` column recomputed from its times.

    Uses the current byte convention (:func:`bytes_moved`) and :func:`gbps` on
    each time column present (:data:`RATE_COLUMNS`). This is how results
    measured under an older byte count are brought to the current one: the
    times are measurements, the bytes a declaration.

    Returns:
        A copy of ``sweep``.

    Source: notebooks/07_benchmark.ipynb §7.
    """
    out = sweep.copy()
    out["bytes"] = [
        bytes_moved(p, m, n, getattr(torch, d)) for p, m, n, d in zip(out["path"], out["M"], out["N"], out["dtype"])
    ]
    for rate, time in RATE_COLUMNS.items():
        if time in out.columns:
            out[rate] = [gbps(b, us) for b, us in zip(out["bytes"], out[time])]
    return out


def summarize(samples: pd.DataFrame, keys=("path", "provider", "repeat", "M", "N", "dtype")) -> pd.DataFrame:
    """Median, mean, min, max, std (µs per call) and sample count per group of samples.

    Args:
        samples: long DataFrame with a ``us_per_call`` column (from :func:`rmsnorm_lab.run_protocol`).
        keys: grouping columns present in ``samples``.

    Returns:
        One row per group: the keys, then :data:`STAT_COLUMNS`.
    """
    keys = [k for k in keys if k in samples.columns]
    stats = samples.groupby(keys, sort=False)["us_per_call"].agg(["median", "mean", "min", "max", "std", "count"])
    stats.columns = list(STAT_COLUMNS)
    return stats.reset_index()


def difference_table(
    table: pd.DataFrame, value: str = "median_us", keys=("path",), reference: str = "reference"
) -> pd.DataFrame:
    """The article's comparison: provider − reference in µs, and as % of the reference.

    ``percent = 100 · (impl_us − reference_us) / reference_us``: the difference divided
    by the reference's time, as in the article. Negative means the provider took
    less time than the reference on this measurement; nothing more.

    Args:
        table: one row per (keys…, provider) with a ``value`` column in µs.
        value: the column compared (``median_us``, ``whole_call_us``, ``cold_us``…).
        keys: the columns that identify one comparison (e.g. path, repeat, M, N).
        reference: the provider every other provider is compared with.

    Returns:
        Columns: keys…, provider, impl_us (the provider's time), reference_us, difference_us, percent.
    """
    keys = list(keys)
    ref = table[table["provider"] == reference][keys + [value]].rename(columns={value: "reference_us"})
    other = table[table["provider"] != reference][keys + ["provider", value]].rename(columns={value: "impl_us"})
    out = other.merge(ref, on=keys, how="inner", validate="many_to_one")
    out["difference_us"] = out["impl_us"] - out["reference_us"]
    out["percent"] = 100 * out["difference_us"] / out["reference_us"]
    return out.reset_index(drop=True)


#: The library, whose sources' digest names the code a run measured (:func:`code_provenance`).
LIBRARY = Path(__file__).resolve().parent.parent / "rmsnorm"


def is_library_source(path: str) -> bool:
    """Whether ``path`` (relative to rmsnorm/, with ``/``) is one of the sources the digest covers: its modules,
    its subpackages' modules (rmsnorm/article) and the C++ of its native launch (csrc/)."""
    parts = path.split("/")
    return (len(parts) == 1 and path.endswith(".py")) or (
        len(parts) == 2 and (parts[0] == "csrc" or parts[1].endswith(".py")) and parts[0] != "__pycache__")


def source_digest(files: dict[str, bytes]) -> str:
    """sha256 over ``files`` (path relative to rmsnorm/ → bytes), in path order: the same for the same sources
    whether they are read from a checkout or from a commit (tools/which_commit.py)."""
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(path.encode() + b"\0" + hashlib.sha256(files[path]).digest())
    return digest.hexdigest()


def library_files(root: Path = LIBRARY) -> dict[str, bytes]:
    """The library's source files under ``root`` (:func:`is_library_source`), path relative to it → bytes."""
    return {rel: path.read_bytes() for path in root.rglob("*")
            if path.is_file() and is_library_source(rel := path.relative_to(root).as_posix())}


def code_provenance() -> dict[str, Any]:
    """Which code a run measured: the digest of rmsnorm/'s sources (``rmsnorm_sha256``, which
    ``python tools/which_commit.py DIGEST`` turns back into commits) and how many files it covers. A digest, not
    ``git rev-parse``: a run's copy of the checkout may carry no history, or a stale one."""
    files = library_files()
    return {"rmsnorm_sha256": source_digest(files), "rmsnorm_files": len(files)}


def environment_info() -> dict[str, Any]:
    """Where and when: device, versions, date (UTC). Works without a GPU too.

    Returns:
        dict with ``date_utc`` (ISO 8601), ``python``, ``torch``, ``triton``,
        ``cuda`` (torch's CUDA runtime, None on CPU builds), ``numpy``, ``pandas``,
        ``liger_kernel`` (version, or None), and ``device``: name, compute
        capability, multiprocessors, memory and L2 in bytes, driver — or
        ``{"name": "none (no CUDA GPU)"}``, ``eager_rms_norm``: which kernel eager
        ``F.rms_norm`` runs here (:func:`rmsnorm_lab.eager.eager_provenance`), ``code``: which library
        sources ran (:func:`code_provenance`), and ``launch_path``: how the fast path's eager calls launch
        (:func:`rmsnorm.launch_path`, whose host time the whole-call rows include) with ``native_failure``, why
        the native launch is not running where it was meant to (None where it runs or was switched off).

    Source: notebooks/07_benchmark.ipynb.
    """
    info: dict[str, Any] = {
        "date_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "numpy": np.__version__,
        "pandas": pd.__version__,
        "eager_rms_norm": eager_provenance(),
        "code": code_provenance(),
        "launch_path": rmsnorm.launch_path(),
        "native_failure": rmsnorm.native_launch.state.failure,
    }
    try:
        from importlib.metadata import version

        info["liger_kernel"] = version("liger-kernel")
    except Exception:  # noqa: BLE001  (not installed, or unreadable metadata: recorded as None)
        info["liger_kernel"] = None
    if not torch.cuda.is_available():
        info["device"] = {"name": "none (no CUDA GPU)"}
        return info
    props = torch.cuda.get_device_properties(0)
    info["device"] = {
        "name": props.name,
        "compute_capability": f"{props.major}.{props.minor}",
        "multiprocessors": props.multi_processor_count,
        "memory_bytes": props.total_memory,
        "l2_cache_bytes": getattr(props, "L2_cache_size", None),
    }
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True)
        info["device"]["driver"] = smi.stdout.strip().splitlines()[0]
    except Exception:  # noqa: BLE001  (no nvidia-smi, a time-out or no output: recorded as None)
        info["device"]["driver"] = None
    return info


@dataclass(frozen=True)
class Results:
    """The committed benchmark results (see :func:`load_results`).

    Attributes:
        samples: one row per sample of the 128×257 protocol (µs per call).
        summary: median/mean/min/max/std per (path, provider, repeat).
        differences: provider − reference per (path, repeat), µs and %.
        sweep: whole-call, graph-replay and device-kernel µs and GB/s per (path, provider, M, N);
            with ``cold_us`` and ``gbps_cold`` (L2-cold kernel time) when the run measured them.
        kernels: device operations per (path, provider, M, N): launches and µs per call (L2-warm).
        environment: device, versions, date, protocol parameters (environment.json).
    """

    samples: pd.DataFrame
    summary: pd.DataFrame
    differences: pd.DataFrame
    sweep: pd.DataFrame
    kernels: pd.DataFrame
    environment: dict[str, Any]

    @property
    def l2_cold(self) -> bool:
        """True when the sweep has L2-cold kernel times (``cold_us``)."""
        return "cold_us" in self.sweep.columns


#: File names of :class:`Results`, one CSV per DataFrame plus environment.json.
RESULT_FILES = {name: f"{name}.csv" for name in ("samples", "summary", "differences", "sweep", "kernels")}


def load_results(path: str | Path | None = None) -> Results:
    """Read committed results (CSV files + environment.json) into pandas.

    Args:
        path: folder written by ``scripts/benchmark.py``; default :data:`RESULTS_DIR` (results/h200).

    Returns:
        A :class:`Results`.

    Raises:
        FileNotFoundError: a file is missing (names the file and how to make it).

    Source: notebooks/07_benchmark.ipynb.
    """
    folder = results_dir(path)
    frames = {}
    for name, filename in RESULT_FILES.items():
        file = folder / filename
        if not file.is_file():
            raise FileNotFoundError(f"{file} is missing; run scripts/benchmark.py --out {folder} on a GPU")
        frames[name] = pd.read_csv(file)
    environment = json.loads((folder / "environment.json").read_text(encoding="utf-8"))
    return Results(**frames, environment=environment)


def _read_csv(name: str, path: str | Path | None, how: str) -> pd.DataFrame:
    file = results_dir(path) / name
    if not file.is_file():
        raise FileNotFoundError(f"{file} is missing; {how}")
    return pd.read_csv(file)


def load_fast_table(path: str | Path | None = None) -> pd.DataFrame:
    """The fast path's side-by-side (``fast.csv``): kernel time per (M, N, dtype, pass_, provider), µs.

    Args:
        path: results folder; default :func:`results_dir`'s.

    Raises:
        FileNotFoundError: the folder or the file is missing.
    """
    return _read_csv("fast.csv", path, "run scripts/benchmark_fast.py --out <folder> on a GPU")


#: File of the whole-call benchmark (scripts/benchmark_whole_call.py), beside its environment record.
WHOLE_CALL_FILE = "whole_call.csv"
WHOLE_CALL_ENVIRONMENT = "whole_call_environment.json"


def load_whole_call(path: str | Path | None = None) -> pd.DataFrame:
    """The whole-call benchmark (``whole_call.csv``): one row per (M, N, dtype, provider, pass_).

    Columns are :data:`rmsnorm_lab.wholecall.COLUMNS` (µs per call; NaN where not measured).

    Args:
        path: results folder; default :func:`results_dir`'s.

    Raises:
        FileNotFoundError: the folder or the file is missing (then it was not measured yet).
    """
    return _read_csv(WHOLE_CALL_FILE, path, "run scripts/benchmark_whole_call.py --out <folder> on a GPU")
