"""A training step of a Hugging Face Llama, Gemma 3 or Qwen3.5 with each norm: tokens/s, memory, share, Amdahl.

What a user of the fast path feels is not the kernel, nor the whole call, but the step. For each
size (:data:`SIZES` for Llama, :data:`FAMILY_SIZES` for Gemma 3 and Qwen3.5, built as
:mod:`rmsnorm_lab.model_families` says), each norm (:data:`VARIANTS`: the model's own, ``FastRMSNorm``
swapped in by :func:`rmsnorm.swap_rmsnorm` sharing the weight Parameters, Qwen3.5's gated norms left
in place (``norms_left``); ``fused``, the same swap with ``fuse_residual=True``, each pre-norm decoder layer's
post-attention add + norm one :func:`rmsnorm.rmsnorm_add` call; and Liger's: ``LigerRMSNorm`` swapped in
the same way for Llama, Liger's own patch of the norms for Gemma 3 and Qwen3.5) and each mode (eager,
``torch.compile(model)``), :func:`run_variant` (:mod:`rmsnorm_lab.model_interleaved`: the variants in rounds):

1. builds the variant from one base model (random init, norm weights randomised), AdamW;
2. **checks before timing**: logits on the step's own batch, against a float32 run of the same
   weights; the variant is timed only if its error is at most 1.5× the original's
   (:data:`LOGITS_ERROR_RATIO`), and whether its logits lie within the declared bf16 tolerance of
   the original's is reported beside;
3. times full steps (forward with the loss, backward, ``optimizer.step()``, ``zero_grad``): CUDA
   events around each step, and the host's time to issue it; median, min, max; the peak memory
   of the timed steps above what was allocated before the variant was built (its model copy,
   optimizer state and activations, not the base model or the reference logits);
4. profiles one more step and attributes its kernels (:mod:`rmsnorm_lab.step_profile`; the fused variant's
   by name, eager too: its post-attention norm module is not called, its rmsnorm_add kernel is rmsnorm_fast*):
   the norm's share of the step and the Amdahl bound 1 / (1 − share), the best step speed-up a
   norm that took no time at all could give (reached only when the GPU sets the step's pace).

Needs transformers (the ``models`` extra) and, for Liger, ``liger_kernel``; both imported only
when used. Never asserts a speed.

Source: notebooks/13_into_a_model.ipynb; scripts/benchmark_model.py; Amdahl, "Validity of the single
processor approach to achieving large scale computing capabilities" (AFIPS 1967).
"""

from __future__ import annotations

import contextlib
import copy
import gc
import math
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch

from rmsnorm.swap import randomise_norm_weights, swap_rmsnorm
from rmsnorm.testing import TOLERANCES
from .model_families import Absent, build_model, liger_patch
from .results import _read_csv
from .step_profile import STEP_PARTS, attribute_kernels, norm_scopes, step_region


@dataclass(frozen=True)
class ModelSize:
    """A model config's sizes and the step's batch: ``batch`` sequences of ``seq`` tokens; ``family``: which model."""

    name: str
    layers: int
    hidden: int
    intermediate: int
    heads: int
    seq: int
    batch: int
    vocab: int = 32000
    family: str = "llama"

    @property
    def tokens(self) -> int:
        """Tokens per step."""
        return self.batch * self.seq


#: The GPU-bound size (the issue's 8 layers halved, to fit compiles into the device time) and the host-bound one.
SIZES = (
    ModelSize("gpu_bound", layers=4, hidden=2048, intermediate=5632, heads=16, seq=2048, batch=4),
    ModelSize("host_bound", layers=8, hidden=1024, intermediate=2816, heads=8, seq=512, batch=8),
)
#: ``--quick``: a CPU logic check of the whole run (Triton's interpreter, float32, nothing meaningful timed).
QUICK = ModelSize("quick", layers=2, hidden=64, intermediate=128, heads=4, seq=16, batch=2, vocab=128)
#: Gemma 3 and Qwen3.5 (Qwen3.5: linear attention, then full, alternating): GPU-bound at Llama's GPU-bound size;
#: host-bound at 2 layers and 4 × 1024 tokens, where Gemma 3's step time is mostly the host's.
FAMILY_SIZES = {f: (ModelSize("gpu_bound", layers=4, hidden=2048, intermediate=5632, heads=16, seq=2048, batch=4,
                              family=f),
                    ModelSize("host_bound", layers=2, hidden=2048, intermediate=5632, heads=16, seq=1024, batch=4,
                              family=f))
                for f in ("gemma3", "qwen3_5")}
VARIANTS = ("original", "fast", "fused", "liger")
MODES = ("eager", "compile")
#: A variant is timed only if its logits' error against the float32 run is at most this × the original's.
LOGITS_ERROR_RATIO = 1.5
OUT_OF_TIME = "not run: the time budget would be exceeded"
COLUMNS = (
    "size", "layers", "hidden", "intermediate", "heads", "seq", "batch", "tokens", "variant", "mode", "check",
    "norms_swapped", "logits_rel_err", "logits_err_ratio", "logits_max_abs_diff", "logits_within_tol", "compile_s",
    "steps", "step_ms", "step_ms_min", "step_ms_max", "host_ms", "tokens_per_s", "peak_mem_gib", "gpu_busy_ms",
    "norm_fwd_ms", "norm_bwd_ms", "norm_ms", "norm_share", "amdahl_bound", "model", "norms_left",
)
KERNEL_COLUMNS = ("size", "variant", "mode", "kernel", "part", "norm", "calls", "us", "host_us", "model")
STEP_FILE, KERNELS_FILE, ENVIRONMENT_FILE = "model_step.csv", "model_step_kernels.csv", "model_step_environment.json"


def files(stem: str = "model_step") -> tuple[str, str, str]:
    """The step table's, the kernels' and the environment's file names for a run named ``stem``."""
    return f"{stem}.csv", f"{stem}_kernels.csv", f"{stem}_environment.json"


def amdahl_bound(share: float) -> float:
    """1 / (1 − share): the step's speed-up if a part taking ``share`` of it (a fraction < 1) took no time."""
    return 1.0 / (1.0 - share) if share < 1 else math.inf


def build_base(size: ModelSize, device, dtype: torch.dtype, seed: int = 0) -> torch.nn.Module:
    """``size.family``'s causal LM from a config on ``device`` in ``dtype``: random init, norm weights randomised."""
    torch.manual_seed(seed)
    model = build_model(size.family, size, device).to(dtype)
    randomise_norm_weights(model, seed)
    return model


def _liger(n, eps, weight):
    from liger_kernel.transformers import LigerRMSNorm  # an ImportError is the variant's reason not to run

    norm = LigerRMSNorm(n, eps=eps)  # casting "llama", in place: as apply_liger_kernel_to_llama swaps it in
    norm.weight = weight
    return norm


def make_variant(base: torch.nn.Module, variant: str, dtype: torch.dtype,
                 family: str = "llama") -> tuple[torch.nn.Module, int, int]:
    """A deep copy of ``base`` with its norms as ``variant`` says; (model, norms swapped, norm-like modules left).

    ``fused``: :func:`rmsnorm.swap_rmsnorm` with ``fuse_residual=True``, every norm a FastRMSNorm and each pre-norm
    decoder layer's post-attention add + norm one :func:`rmsnorm.rmsnorm_add` call (:mod:`rmsnorm.fused_layers`).

    Raises:
        Absent: Liger, or its patch for ``family``, is not there; ``fused`` where no decoder layer could be fused.
    """
    model = copy.deepcopy(base)
    if variant == "original":
        return model, 0, 0
    if variant == "liger" and family != "llama":
        return (model, *liger_patch(model, family))
    try:
        swapped = swap_rmsnorm(model, dtype=dtype, build=_liger if variant == "liger" else None,
                               fuse_residual=variant == "fused")
    except ImportError as error:
        raise Absent(f"liger_kernel is not installed ({error})") from None
    if variant == "fused" and not swapped.fused:
        layers = [f"{name}: {why}" for name, why in swapped.left.items() if "layers." in name][:2]
        raise Absent(f"no decoder layer of {family} could be fused ({'; '.join(layers) or 'none found'})")
    return model, int(swapped), len(swapped.left)


def _is_norm(module) -> bool:
    return type(module).__name__.endswith("RMSNorm")


def _sync(cuda: bool) -> None:
    if cuda:
        torch.cuda.synchronize()


def _time_steps(step, steps: int, cuda: bool):
    """(step ms, host ms) per step: CUDA events around each step (wall clock without CUDA), host issue time."""
    step_ms, host_ms = [], []
    for _ in range(steps):
        _sync(cuda)
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        t0 = time.perf_counter()
        step()
        host_ms.append((time.perf_counter() - t0) * 1e3)
        if cuda:
            end.record()
            end.synchronize()
            step_ms.append(start.elapsed_time(end))
        else:
            step_ms.append(host_ms[-1])
    return np.array(step_ms), np.array(host_ms)


def reference_logits(base: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """Logits of a float32 copy of ``base`` on ``ids`` (no grad): what every variant's error is measured against."""
    model = copy.deepcopy(base).float()
    with torch.no_grad():
        logits = model(input_ids=ids).logits.float()
    del model
    return logits


def _check_logits(row: dict, logits: torch.Tensor, refs: dict, dtype: torch.dtype) -> bool:
    """Fill the row's logits columns; True when the variant may be timed (error ≤ 1.5× the original's)."""
    fp32 = refs["fp32"]
    row["logits_rel_err"] = err = float((logits - fp32).norm() / fp32.norm())
    refs.setdefault("original", logits)  # the first variant run is the original, eager
    refs.setdefault("original_err", err)
    row["logits_err_ratio"] = err / refs["original_err"] if refs["original_err"] > 0 else 1.0
    tol, original = TOLERANCES[dtype], refs["original"]
    row["logits_max_abs_diff"] = float((logits - original).abs().max())
    row["logits_within_tol"] = bool(((logits - original).abs() <= tol["atol"] + tol["rtol"] * original.abs()).all())
    if row["logits_err_ratio"] <= LOGITS_ERROR_RATIO:
        return True
    row["check"] = (f"check failed: logits' error against the float32 run is {row['logits_err_ratio']:.2f}x "
                    f"the original's (> {LOGITS_ERROR_RATIO}x); not timed")
    return False


def build_variant(row, size, variant, mode, base, ids, refs, compile_backend="inductor"):
    """Build ``variant`` from ``base``, check its logits, and return (model, step), or None when the check fails.

    Fills the row's ``norms_swapped``, ``norms_left`` and logits columns. ``step()`` runs one training step
    (forward with the loss, backward, ``optimizer.step()``, ``zero_grad``) inside :func:`step_region` scopes.
    """
    dtype = next(base.parameters()).dtype
    model, row["norms_swapped"], row["norms_left"] = make_variant(base, variant, dtype, size.family)
    model.train()
    runner = torch.compile(model, backend=compile_backend) if mode == "compile" else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    logits = runner(input_ids=ids, labels=ids).logits.detach().float()  # with grad: the graph the steps reuse
    if not _check_logits(row, logits, refs, dtype):
        return None
    del logits

    def step():
        with step_region("forward"):
            loss = runner(input_ids=ids, labels=ids).loss
        with step_region("backward"):
            loss.backward()
        with step_region("optimizer"):
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    return model, step


def scoped(variant: str, mode: str) -> bool:
    """Whether a step's norm kernels are told by the norms' profiler scopes (eager) or by name (compiled, and the
    fused variant, whose post-attention norm's module is not called: its rmsnorm_add kernel is named rmsnorm_fast*)."""
    return mode == "eager" and variant != "fused"


def profile_step(row, size, variant, mode, model, step, cuda) -> list[dict]:
    """Profile one more step; fill the row's norm columns (share of its ``step_ms``); return its kernel rows."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    by_scope = scoped(variant, mode)
    with norm_scopes(model, _is_norm) if by_scope else contextlib.nullcontext(), profile(activities=activities) as prof:
        step()
        _sync(cuda)
    kernels = attribute_kernels(prof.events(), "fast" if variant == "fused" else variant, scoped=by_scope)
    norm = {p: sum(k["us"] for k in kernels if k["norm"] and k["part"] == p) / 1e3 for p in STEP_PARTS}
    row.update(gpu_busy_ms=sum(k["us"] for k in kernels) / 1e3, norm_fwd_ms=norm["forward"],
               norm_bwd_ms=norm["backward"], norm_ms=sum(k["us"] for k in kernels if k["norm"]) / 1e3)
    row["tokens_per_s"] = size.tokens / (row["step_ms"] / 1e3)
    row["norm_share"] = row["norm_ms"] / row["step_ms"]
    row["amdahl_bound"] = amdahl_bound(row["norm_share"])
    return [dict(size=size.name, variant=variant, mode=mode, **k, model=size.family) for k in kernels]


def _measure(row, size, variant, mode, base, ids, refs, steps, warmup, compile_backend):
    """run_variant's work; its locals (the model, the optimizer, the compiled graph) go when it returns."""
    cuda, started = ids.is_cuda, time.perf_counter()
    before = torch.cuda.memory_allocated() if cuda else 0  # the base model, the reference logits: not the variant's
    built = build_variant(row, size, variant, mode, base, ids, refs, compile_backend)
    if built is None:
        return []
    model, step = built
    for _ in range(warmup):
        step()
    _sync(cuda)
    row["compile_s"] = time.perf_counter() - started
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    step_ms, host_ms = _time_steps(step, steps, cuda)
    row["peak_mem_gib"] = (torch.cuda.max_memory_allocated() - before) / 2**30 if cuda else math.nan
    row.update(check="ok", steps=steps, step_ms=float(np.median(step_ms)), step_ms_min=float(step_ms.min()),
               step_ms_max=float(step_ms.max()), host_ms=float(np.median(host_ms)))
    return profile_step(row, size, variant, mode, model, step, cuda)


def new_row(size: ModelSize, variant: str, mode: str) -> dict:
    """A step row's first columns: the size's numbers, the variant and the mode."""
    return {**{k: v for k, v in asdict(size).items() if k not in ("name", "vocab", "family")}, "size": size.name,
            "tokens": size.tokens, "variant": variant, "mode": mode, "model": size.family}


def run_variant(size: ModelSize, variant: str, mode: str, base, ids, refs: dict, *, steps: int, warmup: int,
                compile_backend: str = "inductor") -> tuple[dict, list[dict]]:
    """Check, time and profile one (size, variant, mode); see the module docstring.

    Args:
        base: :func:`build_base`'s model; ids: (batch, seq) int64 tokens on its device.
        refs: ``{"fp32": reference_logits(...)}``; the first variant run (the original, eager) adds
            ``"original"`` (its logits) and ``"original_err"`` (their relative error), which later
            variants are held to.
        steps: timed steps; warmup: steps before them (the first compiles, under torch.compile).
        compile_backend: torch.compile's backend ("aot_eager" for the CPU logic check).

    Returns:
        (row with :data:`COLUMNS`: µs-derived times in ms, memory in GiB, share as a fraction;
        kernel rows with :data:`KERNEL_COLUMNS`). A failure anywhere is the row's ``check``
        ("failed: …", or the check's verdict; "absent: …" for a provider not installed), with no times;
        it never raises.
    """
    row = new_row(size, variant, mode)
    try:
        kernels = _measure(row, size, variant, mode, base, ids, refs, steps, warmup, compile_backend)
    except Absent as error:
        row["check"], kernels = f"absent: {error}", []
    except Exception as error:  # noqa: BLE001  (recorded with the reason; the run goes on)
        first = str(error).splitlines()[0][:300] if str(error) else ""
        row["check"], kernels = f"failed: {type(error).__name__}: {first}", []
    gc.collect()
    if ids.is_cuda:
        torch.cuda.empty_cache()
    if mode == "compile":
        torch._dynamo.reset()
    return row, kernels


def load_model_step(path=None, stem: str = "model_step"):
    """The committed step table (``model_step.csv``): one row per (model, size, variant, mode), :data:`COLUMNS`.

    Args:
        path: a folder written by scripts/benchmark_model.py; default :func:`results_dir`'s (results/h200).
        stem: the run's name (``--name``): ``model_step_gemma_qwen`` for Gemma 3 and Qwen3.5.

    Raises:
        FileNotFoundError: the folder or the file is missing (not measured yet).
    """
    return _read_csv(files(stem)[0], path, "run scripts/benchmark_model.py --out <folder> on a GPU")


def load_model_kernels(path=None, stem: str = "model_step"):
    """The kernels of each variant's profiled step (``model_step_kernels.csv``), :data:`KERNEL_COLUMNS`.

    Args:
        path: as for :func:`load_model_step`.

    Raises:
        FileNotFoundError: the folder or the file is missing (not measured yet).
    """
    return _read_csv(files(stem)[1], path, "run scripts/benchmark_model.py --out <folder> on a GPU")
