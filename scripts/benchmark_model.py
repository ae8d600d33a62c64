"""Training steps of a Hugging Face Llama with each norm on a GPU: tokens/s, peak memory, the norm's share, Amdahl.

    python3 scripts/benchmark_model.py --out results/h200        # model_step.csv, model_step_kernels.csv, its json
    python3 scripts/benchmark_model.py --out /tmp/m --quick      # a CPU logic check: tiny model, interpreter
    python3 scripts/benchmark_model.py --out results/h200 --models gemma3,qwen3_5 --name model_step_gemma_qwen

--models picks the families (rmsnorm_lab.model_families): llama at its two sizes, as below; gemma3 and
qwen3_5 at rmsnorm_lab.model.FAMILY_SIZES (hidden 2048; GPU-bound as Llama's, host-bound at 2 layers and
4 x 1024 tokens), Liger's variant
being its own patch of the norms there; Qwen3.5's gated norms stay in place (norms_left). --name
names the three files (default model_step).

transformers' LlamaForCausalLM from a config (random init, norm weights randomised), bf16 weights,
AdamW; the norms as they are ("original", LlamaRMSNorm), FastRMSNorm and Liger's LigerRMSNorm, both
swapped in by rmsnorm.swap_rmsnorm sharing the weights; each in eager mode and under
torch.compile(model). Sizes (rmsnorm_lab.model.SIZES): GPU-bound, 4 layers, hidden 2048,
intermediate 5632, 16 heads, 4 × 2048 tokens (the issue's 8 layers halved: two sizes, six eager and
three compiled variants fit in about 150 s of an H200, compiles included; --layers 8 for the issue's
size); host-bound, 8 layers, hidden 1024, intermediate 2816, 8 heads, 8 × 512 tokens. Per variant: its
logits checked against a float32 run before any timing (rmsnorm_lab.model), 3 warm-up steps (the
first compiles), 10 timed steps (median, min, max), one profiled step (the norm's share, attributed as
rmsnorm_lab.step_profile says). Order: eager at both sizes, then compiled at the GPU-bound one;
a variant that would overrun --budget-s is recorded as not run. The CSVs are rewritten after every
variant, so a run cut short keeps what it measured. Prints a short table last; never asserts a speed;
without a GPU (and without --quick) it says so and exits 0.

The ``fused`` variant is swap_rmsnorm(model, fuse_residual=True): FastRMSNorm everywhere and each decoder
layer's post-attention add + norm one rmsnorm_add call. With --interleave the variants of one (size, mode) are
built and warmed up together and timed in rounds of one step each (rmsnorm_lab.model_interleaved), the median
step with its 95 % interval (step_ms_lo, step_ms_hi); peak memory is not recorded then. With --decode, greedy
model.generate tokens/s (eager, batches 1 and 16, 128-token prompt, --decode-new-tokens made by every call),
--decode-rounds calls per variant and batch in rounds, median and 95 % interval, at --decode-sizes, into
<name>_decode.csv; its time is kept out of the steps' budget (DECODE_ESTIMATE_S).

    python3 scripts/benchmark_model.py --out results/h200 --name model_fused --interleave --steps 50 --decode

Source: notebooks/13_into_a_model.ipynb; rmsnorm_lab/model.py.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout, for `import rmsnorm`

import rmsnorm  # noqa: E402  (the checkout's package, found through the path above)

# isort: split
import pandas as pd  # noqa: E402
import torch  # noqa: E402

from rmsnorm_lab import model as bench  # noqa: E402
from rmsnorm_lab import model_interleaved as rounds  # noqa: E402
from rmsnorm_lab.eager import eager_provenance  # noqa: E402
from rmsnorm_lab.model_families import FAMILIES  # noqa: E402

#: Seconds a variant is expected to take before one of its mode has been timed at that size (a guess, for the budget).
FIRST_ESTIMATE_S = {"eager": 10.0, "compile": 45.0}
#: Seconds kept out of the steps' budget for --decode at one size (4 variants, 2 batches, 20 rounds of 64 tokens).
DECODE_ESTIMATE_S = 90.0
#: --quick's estimate for a variant of either mode and for its decode (a tiny model, aot_eager).
QUICK_ESTIMATE_S = 5.0


def _write(out: Path, rows, kernels, stem, columns=bench.COLUMNS):
    """Both CSVs, rewritten whole (after every variant: a run cut short keeps what it measured); the step table."""
    step = pd.DataFrame(rows, columns=list(columns))
    step.to_csv(out / bench.files(stem)[0], index=False, float_format="%.6g")
    pd.DataFrame(kernels, columns=list(bench.KERNEL_COLUMNS)).to_csv(out / bench.files(stem)[1], index=False,
                                                                     float_format="%.6g")
    return step


def _table(step):
    """The short table: tokens/s against the original of the same size and mode, memory, share, bound."""
    t = step.copy()
    base = t[t["variant"] == "original"].set_index(["model", "size", "mode"])["tokens_per_s"]
    t["vs_original"] = [r.tokens_per_s / base.get((r.model, r.size, r.mode), math.nan) - 1 for r in t.itertuples()]
    out = pd.DataFrame({
        "model": t["model"], "size": t["size"], "mode": t["mode"], "variant": t["variant"],
        "step ms": t["step_ms"].round(1),
        "spread ms": (t["step_ms_max"] - t["step_ms_min"]).round(1), "host ms": t["host_ms"].round(1),
        "k tokens/s": (t["tokens_per_s"] / 1e3).round(1), "vs original": (100 * t["vs_original"]).round(1),
        "peak GiB": t["peak_mem_gib"].round(2), "norm share %": (100 * t["norm_share"]).round(1),
        "Amdahl x": t["amdahl_bound"].round(3), "check": t["check"].str.slice(0, 60)})
    if "step_ms_lo" in t:  # --interleave: the median's 95 % interval beside it
        out.insert(5, "95 % ms", [f"{lo:.1f}-{hi:.1f}" for lo, hi in zip(t["step_ms_lo"], t["step_ms_hi"])])
    return out.to_string(index=False)


def _environment(args, asked: dict, rows, started, *, complete: bool) -> dict:
    """Write the run's environment file (what was asked, what ran so far) and return it.

    Written before the first step and again at the end, so a run cut by its caller keeps its provenance."""
    import transformers

    from rmsnorm_lab import environment_info
    from rmsnorm_lab.step_profile import NAME_RULE_WORDS, SCOPE_WORDS

    env = environment_info()
    env["transformers"] = transformers.__version__
    env["model_step"] = asked | {
        "optimizer": "torch.optim.AdamW(lr=1e-5), defaults otherwise", "quick": args.quick, "budget_s": args.budget_s,
        "step": "model(input_ids, labels=input_ids).loss; loss.backward(); optimizer.step(); "
                "optimizer.zero_grad(set_to_none=True)",
        "step_ms": "CUDA events around each step, median of the timed steps (min and max beside)",
        "host_ms": "CPU wall time to issue one step (the events' end is waited for after it)",
        "peak_mem_gib": "torch.cuda.max_memory_allocated() over the timed steps, minus what was allocated before the "
                        "variant was built (the base model and the reference logits), GiB",
        "check": f"logits on the step's batch against a float32 run of the same weights; timed only if the relative "
                 f"error is at most {bench.LOGITS_ERROR_RATIO}x the original's; logits_within_tol: within the declared "
                 f"{asked['dtype']} tolerance of the original's logits",
        "norm_share": "norm kernels' device time in one profiled step / the median step time; "
                      "amdahl_bound = 1 / (1 - share)",
        "attribution": {"eager": SCOPE_WORDS, **{f"compile, {k}": v for k, v in NAME_RULE_WORDS.items()}},
        "liger": "llama: LigerRMSNorm swapped in by swap_rmsnorm; gemma3, qwen3_5: liger_kernel.transformers' "
                 "apply_liger_kernel_to_<family> on the instance, rms_norm=True, every other switch False",
        "norms_left": "norm-like modules left in place: Qwen3.5's gated norms (Qwen3_5RMSNormGated)",
        "fused": "swap_rmsnorm(model, fuse_residual=True): FastRMSNorm everywhere, each pre-norm decoder layer's "
                 "post-attention add + norm one rmsnorm_add call; its norm kernels are told by name "
                 "(rmsnorm_fast*, the fused kernel counted whole), eager and compiled",
        "interleave": args.interleave and "the variants of one (size, mode) built and warmed up together, then "
                      "timed in rounds of one step each, the order rotated each round; step_ms_lo/hi: the "
                      "distribution-free 95 % interval of the median (model_interleaved.median_interval); "
                      "peak_mem_gib not recorded",
        "decode": args.decode and {
            "sizes": args.decode_sizes, "batches": list(rounds.DECODE_BATCHES), "prompt": decode_prompt(args),
            "new_tokens": args.decode_new_tokens, "rounds": args.decode_rounds,
            "call": "model.generate(input_ids, attention_mask, do_sample=False, max_new_tokens=min_new_tokens="
                    "new_tokens), eval, no grad, KV cache; synchronised wall time per call, prefill included",
            "tokens_per_s": "batch * new_tokens / median call time; _lo/_hi from the 95 % interval of the median",
            "check": "prompt logits against a float32 run, at most LOGITS_ERROR_RATIO x the original's error; "
                     "tokens_match: share of generated tokens equal to the original's (reported)"},
        "not_run": sorted({f"{r['model']} {r['size']} {r.get('mode', 'decode')} {r['variant']}: {r['check']}"
                           for r in rows if r["check"] != "ok"}),
        "wall_seconds": round(time.perf_counter() - started, 1),
        "complete": complete,  # False: the run was cut before its end; the CSVs hold the variants done by then
    }
    env["eager"] = eager_provenance()
    (args.out / bench.files(args.name)[2]).write_text(json.dumps(env, indent=2) + "\n", encoding="utf-8")
    return env


def decode_prompt(args) -> int:
    """Prompt tokens of the decode measurement (4 in --quick, whose model has 16 positions)."""
    return 4 if args.quick else rounds.DECODE_PROMPT


def _base(bases: dict, size, device, dtype):
    """(base model, step token ids, {"fp32": reference logits}) of ``size``, built once."""
    key = (size.family, size.name)
    if key not in bases:
        base = bench.build_base(size, device, dtype)
        g = torch.Generator().manual_seed(0)
        ids = torch.randint(0, size.vocab, (size.batch, size.seq), generator=g).to(device)
        bases[key] = base, ids, {"fp32": bench.reference_logits(base, ids)}
    return bases[key]


def run_plan(sizes, variants, eager_sizes, compile_sizes) -> list[tuple]:
    """(size, variant, mode) in the order they run: every eager size's variants, then every compiled size's."""
    return [(s, v, "eager") for s in sizes if s.name in eager_sizes for v in variants] + \
           [(s, v, "compile") for s in sizes if s.name in compile_sizes for v in variants]


def main(argv=None) -> int:
    """Parse arguments, run, write the files; return the exit status (0 also without a GPU)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("results/h200"), help="folder for the CSVs and the json")
    parser.add_argument("--quick", action="store_true", help="CPU logic check: a tiny model in float32, 1 + 2 steps")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per variant (median, min, max)")
    parser.add_argument("--warmup", type=int, default=3, help="steps before timing (the first one compiles)")
    parser.add_argument("--budget-s", type=float, default=150.0, help="no variant is started that would end past this")
    parser.add_argument("--variants", default=",".join(bench.VARIANTS), help="comma-separated, original first")
    parser.add_argument("--compile-sizes", default=None,
                        help="sizes also run under torch.compile ('' for none; default gpu_bound, --quick all)")
    parser.add_argument("--eager-sizes", default=None,
                        help="sizes run eagerly ('' for none, so that a call can spend its budget compiled; "
                             "default all)")
    parser.add_argument("--layers", type=int, default=None, help="layers of the GPU-bound size (default 4)")
    parser.add_argument("--models", default="llama", help="comma-separated: llama, gemma3, qwen3_5")
    parser.add_argument("--name", default="model_step", help="the files' stem: <name>.csv, <name>_kernels.csv, …")
    parser.add_argument("--interleave", action="store_true", help="time each (size, mode)'s variants in rounds")
    parser.add_argument("--decode", action="store_true", help="also greedy decode tokens/s, eager, batches 1 and 16")
    parser.add_argument("--decode-sizes", default="gpu_bound", help="comma-separated sizes decoded (--quick: all)")
    parser.add_argument("--decode-rounds", type=int, default=20, help="timed generate calls per variant and batch")
    parser.add_argument("--decode-new-tokens", type=int, default=rounds.DECODE_NEW_TOKENS,
                        help="tokens every generate call makes")
    args = parser.parse_args(argv)
    cuda = torch.cuda.is_available()
    if not cuda and not args.quick:
        print("benchmark_model: no CUDA GPU here, nothing timed (--quick runs the logic on the CPU)")
        return 0
    try:
        import transformers
    except ImportError:
        print("benchmark_model: transformers is not installed (pip install -e '.[models]'), nothing timed")
        return 0
    started = time.perf_counter()
    models = args.models.split(",")
    unknown = sorted(set(models) - set(FAMILIES))
    if unknown:
        parser.error(f"--models: {', '.join(unknown)} unknown; known: {', '.join(FAMILIES)}")
    if args.quick:
        sizes = [dataclasses.replace(bench.QUICK, family=m) for m in models]
    else:
        sizes = [s for m in models for s in (bench.SIZES if m == "llama" else bench.FAMILY_SIZES[m])]
    if args.layers and not args.quick:
        sizes[0] = dataclasses.replace(sizes[0], layers=args.layers)
    if args.compile_sizes is None:
        args.compile_sizes = ",".join(s.name for s in sizes) if args.quick else "gpu_bound"
    compile_sizes = set(filter(None, args.compile_sizes.split(",")))
    names = {s.name for s in sizes}
    eager_sizes = names if args.eager_sizes is None else set(filter(None, args.eager_sizes.split(",")))
    unknown = sorted((compile_sizes | eager_sizes) - names)
    if unknown:
        parser.error(f"--eager-sizes/--compile-sizes: {', '.join(unknown)} unknown; known: {', '.join(sorted(names))}")
    variants = args.variants.split(",")
    steps, warmup = (2, 1) if args.quick else (args.steps, args.warmup)
    device, dtype = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float32)
    plan = run_plan(sizes, variants, eager_sizes, compile_sizes)
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"kernels run on: {rmsnorm.describe_backend()} | torch {torch.__version__} | transformers "
          f"{transformers.__version__} | {len(plan)} variants, budget {args.budget_s:.0f} s")
    bases, rows, kernels, took = {}, [], [], {}
    asked = {"models": models, "sizes": [dataclasses.asdict(s) for s in sizes], "compile_sizes": sorted(compile_sizes),
             "eager_sizes": sorted(eager_sizes), "variants": variants, "dtype": str(dtype).removeprefix("torch."),
             "steps": steps, "warmup": warmup}
    _environment(args, asked, rows, started, complete=False)
    decode_sizes = [s for s in sizes if args.quick or s.name in args.decode_sizes.split(",")] if args.decode else []
    decode_estimate = QUICK_ESTIMATE_S if args.quick else DECODE_ESTIMATE_S
    reserve = decode_estimate * len(decode_sizes)  # the decode's time, kept out of the steps' budget
    columns = rounds.STEP_COLUMNS if args.interleave else bench.COLUMNS
    groups = ([(s, m, variants) for s, m in dict.fromkeys((s, m) for s, _, m in plan)] if args.interleave
              else [(s, m, [v]) for s, v, m in plan])
    for size, mode, group in groups:
        now, key = time.perf_counter(), (size.family, size.name)
        # Another family's time says little (Qwen3.5's linear attention compiles for minutes, Gemma 3 in seconds).
        estimate = took.get((*key, mode), QUICK_ESTIMATE_S if args.quick else FIRST_ESTIMATE_S[mode]) * len(group)
        if now + estimate > started + args.budget_s - reserve:
            reason = f"{bench.OUT_OF_TIME} ({args.budget_s:.0f} s)"
            for variant in group:
                rows.append(dict(size=size.name, variant=variant, mode=mode, check=reason, model=size.family))
                print(f"{size.family} {size.name} {mode} {variant}: {rows[-1]['check']}")
            continue
        base, ids, refs = _base(bases, size, device, dtype)
        backend = "inductor" if cuda else "aot_eager"
        if args.interleave:
            new, ks = rounds.run_interleaved(size, group, mode, base, ids, refs, steps=steps, warmup=warmup,
                                             compile_backend=backend)
        else:
            row, ks = bench.run_variant(size, group[0], mode, base, ids, refs, steps=steps, warmup=warmup,
                                        compile_backend=backend)
            new = [row]
        rows += new
        kernels += ks
        took[(*key, mode)] = (time.perf_counter() - now) / len(group)
        _write(args.out, rows, kernels, args.name, columns)
        for row in new:
            print(f"{size.family} {size.name} {mode} {row['variant']}: {row['check']} ({took[(*key, mode)]:.0f} s "
                  f"a variant; at {time.perf_counter() - started:.0f} s)")
    decode = []
    for size in decode_sizes:
        if time.perf_counter() + decode_estimate > started + args.budget_s:
            decode += [dict(model=size.family, size=size.name, variant=v, batch=b, check=f"{bench.OUT_OF_TIME} "
                            f"({args.budget_s:.0f} s)") for v in variants for b in rounds.DECODE_BATCHES]
        else:
            quick = dict(batches=(1, 2), new_tokens=3, rounds=2, warmup=1) if args.quick else dict(
                new_tokens=args.decode_new_tokens, rounds=args.decode_rounds)
            now = time.perf_counter()
            decode += rounds.run_decode(size, variants, _base(bases, size, device, dtype)[0],
                                        prompt=decode_prompt(args), **quick)
            decode_estimate = max(decode_estimate, time.perf_counter() - now)  # the next size: at least this long
            print(f"decode {size.family} {size.name}: {time.perf_counter() - now:.0f} s; "
                  f"at {time.perf_counter() - started:.0f} s")
        pd.DataFrame(decode, columns=list(rounds.DECODE_COLUMNS)).to_csv(
            args.out / f"{args.name}_decode.csv", index=False, float_format="%.6g")
    if decode:
        shown = ["size", "variant", "batch", "check", "call_ms", "tokens_per_s", "tokens_per_s_lo", "tokens_per_s_hi",
                 "tokens_match"]
        print(pd.DataFrame(decode, columns=list(rounds.DECODE_COLUMNS))[shown].to_string(index=False))
    step = _write(args.out, rows, kernels, args.name, columns)
    env = _environment(args, asked, rows + decode, started, complete=True)
    pd.set_option("display.width", 250)
    print(_table(step))
    print(f"\nwrote {args.out / bench.files(args.name)[0]} in {env['model_step']['wall_seconds']} s; "
          f"not run or not ok: {env['model_step']['not_run'] or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
