"""Training steps interleaved across the variants, and decode tokens/s: medians with distribution-free 95 % intervals.

Timed one variant after the other, a step moves with the host's state by more than a norm's share of it
(results/h200/qwen_order.csv: Qwen3.5's unchanged original, 1.31x slower last than first). Here the variants
of one (size, mode) are built, checked and warmed up together, then timed in turns:

- :func:`run_interleaved`: ``steps`` rounds, each one training step of every variant, the order rotated by
  one each round (no variant always follows the same one). Per variant: the median step and its 95 %
  interval (:func:`median_interval`), then one profiled step (:func:`rmsnorm_lab.model.profile_step`). The
  variants share the device, so no peak memory is recorded (NaN).
- :func:`run_decode`: greedy ``model.generate`` (eager, KV cache, ``max_new_tokens = min_new_tokens``: every
  call makes the same number of tokens) from a fixed prompt, at each batch, in rounds as above. Before timing,
  each variant's prompt logits (eval mode, no grad) are checked against a float32 run as the steps' are
  (:data:`rmsnorm_lab.model.LOGITS_ERROR_RATIO`); ``tokens_match`` is the share of generated tokens equal to
  the original's (bf16 rounding may flip a near tie; reported, not a check). ``tokens_per_s`` = batch ×
  new tokens / the median call time (prefill of the prompt included, synchronised before and after).

Source: rmsnorm_lab/model.py; Conover, *Practical Nonparametric Statistics* (the order-statistic interval
for a median).
"""

from __future__ import annotations

import gc
import math
import time

import numpy as np
import torch

from . import model as step_bench
from .model_families import Absent

#: Columns the interleaved step table adds to rmsnorm_lab.model.COLUMNS: the 95 % interval of the median step.
INTERVAL_COLUMNS = ("step_ms_lo", "step_ms_hi")
STEP_COLUMNS = step_bench.COLUMNS + INTERVAL_COLUMNS
DECODE_COLUMNS = ("model", "size", "variant", "batch", "prompt", "new_tokens", "check", "logits_rel_err",
                  "logits_err_ratio", "tokens_match", "rounds", "call_ms", "call_ms_lo", "call_ms_hi",
                  "tokens_per_s", "tokens_per_s_lo", "tokens_per_s_hi")
#: Batches, prompt length and new tokens of the decode measurement.
DECODE_BATCHES, DECODE_PROMPT, DECODE_NEW_TOKENS = (1, 16), 128, 64


def median_interval(samples, confidence: float = 0.95) -> tuple[float, float, float]:
    """(median, lo, hi): the distribution-free interval [x_(c+1), x_(n−c)] around the median of ``samples``.

    c is the largest count with 2·P(Binomial(n, ½) ≤ c) ≤ 1 − confidence, so the interval holds the true
    median with at least that probability for any continuous distribution of independent samples; below
    6 samples no such c exists and the interval is (min, max), with less coverage. n = 50: x_(18)..x_(33).
    """
    x = np.sort(np.asarray(samples, dtype=float))
    n, cdf, c = len(x), 0.0, -1  # cdf = P(Binomial(n, ½) ≤ c)
    while 2 * (cdf + math.comb(n, c + 1) / 2**n) <= 1 - confidence:
        cdf, c = cdf + math.comb(n, c + 1) / 2**n, c + 1
    c = max(c, 0)
    return float(np.median(x)), float(x[c]), float(x[n - 1 - c])


def _rounds(names, rounds: int):
    """Each round: the names in an order rotated by one from the last round's."""
    for i in range(rounds):
        k = i % len(names)
        yield list(names[k:]) + list(names[:k])


def _fail(row: dict, error: Exception) -> None:
    if isinstance(error, Absent):
        row["check"] = f"absent: {error}"
    else:
        first = str(error).splitlines()[0][:300] if str(error) else ""
        row["check"] = f"failed: {type(error).__name__}: {first}"


def run_interleaved(size, variants, mode: str, base, ids, refs: dict, *, steps: int, warmup: int,
                    compile_backend: str = "inductor", log=print) -> tuple[list[dict], list[dict]]:
    """Build, check and warm up every variant, then time ``steps`` rounds of one step each; see the module docstring.

    Args:
        size, base, ids, refs, warmup, compile_backend: as :func:`rmsnorm_lab.model.run_variant` takes them
            (``variants`` starts with "original" when ``refs`` has no original yet).
        steps: rounds, each timing one step of every variant that passed its check.

    Returns:
        (rows of :data:`STEP_COLUMNS`, kernel rows of the profiled steps). A variant that fails anywhere has
        the reason in ``check`` and no times; it never raises.
    """
    cuda = ids.is_cuda
    rows = {v: step_bench.new_row(size, v, mode) for v in variants}
    built = {}
    for variant in variants:
        row, started = rows[variant], time.perf_counter()
        try:
            made = step_bench.build_variant(row, size, variant, mode, base, ids, refs, compile_backend)
            if made is not None:
                for _ in range(warmup):
                    made[1]()
                step_bench._sync(cuda)
                built[variant] = made
                row["compile_s"] = time.perf_counter() - started
        except Exception as error:  # noqa: BLE001  (recorded with the reason; the run goes on)
            _fail(row, error)
        log(f"  {size.family} {size.name} {mode} {variant}: built, {row.get('check') or 'checked'}")
    times = {v: ([], []) for v in built}
    for order in _rounds(list(built), steps):
        for variant in filter(built.__contains__, order):
            try:
                step_ms, host_ms = step_bench._time_steps(built[variant][1], 1, cuda)
            except Exception as error:  # noqa: BLE001  (an out-of-memory step: that variant stops, the rest go on)
                _fail(rows[variant], error)
                del built[variant], times[variant]
                continue
            times[variant][0].append(step_ms[0])
            times[variant][1].append(host_ms[0])
    kernels = []
    for variant, (model, step) in built.items():
        row, step_ms = rows[variant], np.array(times[variant][0])
        median, row["step_ms_lo"], row["step_ms_hi"] = median_interval(step_ms)
        row.update(check="ok", steps=len(step_ms), step_ms=median, step_ms_min=float(step_ms.min()),
                   step_ms_max=float(step_ms.max()), host_ms=float(np.median(times[variant][1])),
                   peak_mem_gib=math.nan)
        try:
            kernels += step_bench.profile_step(row, size, variant, mode, model, step, cuda)
        except Exception as error:  # noqa: BLE001
            row["check"] = f"ok; profile failed: {type(error).__name__}: {str(error)[:200]}"
    built.clear()  # the variants' models, optimizers and graphs go before the next (size, mode)
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    if mode == "compile":
        torch._dynamo.reset()
    return list(rows.values()), kernels


def _generate(model, prompt, new_tokens):
    with torch.no_grad():
        return model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                              max_new_tokens=new_tokens, min_new_tokens=new_tokens, pad_token_id=0)


def run_decode(size, variants, base, *, batches=DECODE_BATCHES, prompt: int = DECODE_PROMPT,
               new_tokens: int = DECODE_NEW_TOKENS, rounds: int = 20, warmup: int = 2, log=print) -> list[dict]:
    """Greedy decode tokens/s of every variant at every batch, timed in rounds; rows of :data:`DECODE_COLUMNS`.

    Args:
        size: the model's size (its ``batch`` and ``seq`` are not used; prompt + new_tokens ≤ ``size.seq``).
        variants: names of :data:`rmsnorm_lab.model.VARIANTS`, "original" first (the others' logits are held to
            its error).
        base: :func:`rmsnorm_lab.model.build_base`'s model.
        rounds: timed calls per (variant, batch); warmup: calls before them.

    Returns:
        One row per (variant, batch); a variant that fails its check or cannot be built has the reason in
        ``check`` and no times. Never raises for a variant's fault.
    """
    device, dtype = next(base.parameters()).device, next(base.parameters()).dtype
    cuda = device.type == "cuda"
    g = torch.Generator().manual_seed(1)
    prompts = {b: torch.randint(0, size.vocab, (b, prompt), generator=g).to(device) for b in batches}
    refs = {"fp32": step_bench.reference_logits(base, prompts[max(batches)])}
    rows = {(v, b): dict(model=size.family, size=size.name, variant=v, batch=b, prompt=prompt, new_tokens=new_tokens)
            for v in variants for b in batches}
    models, tokens = {}, {}
    for variant in variants:
        checked = {}
        try:
            model = step_bench.make_variant(base, variant, dtype, size.family)[0].eval()
            with torch.no_grad():
                logits = model(input_ids=prompts[max(batches)]).logits.float()
            if step_bench._check_logits(checked, logits, refs, dtype):
                models[variant], checked["check"] = model, "ok"
                tokens[variant] = {b: _generate(model, prompts[b], new_tokens) for b in batches}
        except Exception as error:  # noqa: BLE001  (recorded with the reason; the run goes on)
            _fail(checked, error)
        for b in batches:
            rows[(variant, b)].update(checked)
        log(f"  decode {size.family} {size.name} {variant}: {checked.get('check')}")
    times = {key: [] for key in rows if key[0] in models}
    for i, order in enumerate(_rounds(list(models), warmup + rounds)):
        for b in batches:
            for variant in filter(models.__contains__, order):
                step_bench._sync(cuda)
                started = time.perf_counter()
                try:
                    _generate(models[variant], prompts[b], new_tokens)
                    step_bench._sync(cuda)
                except Exception as error:  # noqa: BLE001  (that variant stops, the rest go on)
                    for key in [k for k in times if k[0] == variant]:
                        _fail(rows[key], error)
                        del times[key]
                    del models[variant]
                    continue
                if i >= warmup:
                    times[(variant, b)].append((time.perf_counter() - started) * 1e3)
    for (variant, b), ms in times.items():
        row, made = rows[(variant, b)], b * new_tokens
        row["call_ms"], row["call_ms_lo"], row["call_ms_hi"] = median_interval(ms)
        row.update(rounds=len(ms), tokens_per_s=made / row["call_ms"] * 1e3,
                   tokens_per_s_lo=made / row["call_ms_hi"] * 1e3, tokens_per_s_hi=made / row["call_ms_lo"] * 1e3)
        original = tokens.get("original", {}).get(b)
        if original is not None:
            row["tokens_match"] = float((tokens[variant][b][:, prompt:] == original[:, prompt:]).float().mean())
    del models
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return [{k: r.get(k, math.nan) for k in DECODE_COLUMNS} for r in rows.values()]
