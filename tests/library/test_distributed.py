"""The fast path past one process: DDP, FSDP2, DTensor inputs refused, and two GPUs.

A model engineer who outgrows one GPU trains with ``torch.distributed``. What is checked here:

- **On any machine (CI's CPUs, gloo, Triton's interpreter):** two ranks, each a subprocess that
  runs this file as a script (``python tests/library/test_distributed.py cpu RANK WORLD STORE OUT``), meet through a
  ``FileStore`` in ``tmp_path`` (no TCP port to pick, so nothing can race for one). They train
  Linear(16, 37) → FastRMSNorm(37) → Linear(37, 8) for 3 SGD steps on halves of one global
  batch, once under DDP and once under FSDP2 (``fully_shard`` on the norm and on the root, on a
  CPU device mesh), and save what they saw; the test compares it with one process training on
  the whole batch. Under FSDP2 it also records what reached the kernels: a plain (37,) weight,
  never a DTensor shard. A DTensor x sharded over the two ranks must be refused. In a second pair
  of ranks (mode ``cpu-fused``), a tiny Llama whose norms are swapped and whose decoder layers are
  fused (``swap_rmsnorm(fuse_residual=True)``) trains the same way, DDP then FSDP2 (``fully_shard``
  on each decoder layer and on the root), the weight each fused call reads recorded.
- **In this process:** DTensor inputs and weights (on a one-rank mesh) are refused with a
  ContractError naming their placements, before anything is allocated, at the eager entry, the
  module, the registered operators and under torch.compile; plain tensors keep working.
- **On two GPUs (``gpu`` mark, skipped below two):** tensors on cuda:1 while cuda:0 is current and
  the reverse, forward and backward; DDP and FSDP2 with NCCL training a tiny Llama whose norms are
  swapped (and one whose decoder layers are fused too), 20 steps, the loss curve against one GPU;
  step times printed beside the original norm's.

Tolerances are declared here, before any run: float32's row of rmsnorm.testing.TOLERANCES for
losses, parameters and gradients (a DDP gradient is the mean of two half-batch gradients, equal to
the whole batch's up to float32 rounding of the sum); for the 20-step GPU curves, at most twice
the original norm's own DDP-vs-one-GPU distance plus that row (the rule of tests/library/test_swap.py).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import rmsnorm_course  # noqa: F401  (first: the interpreter on the CPU ranks, mended as the course mends it)

# isort: split
import rmsnorm
from rmsnorm import FastRMSNorm, rmsnorm_fast, rmsnorm_fast_forward
from rmsnorm.testing import TOLERANCES, outputs_forbidden, refused_before_allocating

ROOT = Path(__file__).resolve().parents[2]
F32 = TOLERANCES[torch.float32]
N = 37  # the norm's width: not a power of two, and odd, so FSDP2 shards it unevenly over two ranks
BATCH, SEQ, D_IN, D_OUT = 6, 5, 16, 8  # global batch; each of two ranks takes 3 sequences
STEPS, LR = 3, 0.1
WORKER_TIMEOUT_S = 180


# ----------------------------------------------------------------------------- what every run trains


def _model() -> torch.nn.Sequential:
    """Linear(16, 37) → FastRMSNorm(37) → Linear(37, 8), float32, seeded; the norm's weight randomised."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(D_IN, N), FastRMSNorm(N, eps=1e-6), torch.nn.Linear(N, D_OUT))
    with torch.no_grad():
        model[1].weight.uniform_(0.5, 1.5)  # not ones: a weight ignored or applied twice would show
    return model


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(BATCH, SEQ, D_IN, generator=g), torch.randn(BATCH, SEQ, D_OUT, generator=g)


def _mse(model, x, target) -> torch.Tensor:
    return torch.nn.functional.mse_loss(model(x), target)


def _next_token_loss(model, tokens, _target) -> torch.Tensor:
    return model(input_ids=tokens, labels=tokens).loss  # the mean over this rank's tokens (equal halves)


def _train(model, x, target, full=lambda t: t, mean=lambda v: v, loss_of=_mse) -> dict:
    """3 SGD steps of ``loss_of`` (mean-squared error); returns the losses, each step's gradients and the final weights.

    ``full`` turns a parameter or gradient into the whole tensor (FSDP2's DTensor.full_tensor);
    ``mean`` averages a rank's loss over the ranks (the global batch's loss: equal halves).
    """
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    losses, grads = [], []
    for _ in range(STEPS):
        optimizer.zero_grad()
        loss = loss_of(model, x, target)
        loss.backward()
        losses.append(mean(loss.detach()))
        grads.append({name: full(p.grad).detach().clone() for name, p in model.named_parameters()})
        optimizer.step()
    params = {name: full(p.detach()).clone() for name, p in model.named_parameters()}
    return {"losses": torch.stack(losses), "grads": grads, "params": params}


# ----------------------------------------------------------------------------- a rank (run as a script)


def _cpu_worker(rank: int, world: int, store: str, out: str) -> None:
    """One CPU rank: DDP, then FSDP2, then a sharded DTensor x; saves ``out/rank<r>.pt``."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import Shard, distribute_tensor
    from torch.nn.parallel import DistributedDataParallel

    from rmsnorm import autograd as fast_autograd

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    x, target = _batch()
    half = slice(rank * BATCH // world, (rank + 1) * BATCH // world)

    def mean(v):
        dist.all_reduce(v)
        return v / world

    result = {"ddp": _train(DistributedDataParallel(_model()), x[half], target[half], mean=mean)}
    result["ddp"]["params"] = {k.removeprefix("module."): v for k, v in result["ddp"]["params"].items()}
    result["ddp"]["grads"] = [{k.removeprefix("module."): v for k, v in g.items()} for g in result["ddp"]["grads"]]

    mesh = init_device_mesh("cpu", (world,))
    model = _model()
    fully_shard(model[1], mesh=mesh)
    fully_shard(model, mesh=mesh)
    seen = []  # what the eager path hands the kernels, each forward
    launch = fast_autograd.launch_forward

    def recording(x_, gamma, eps, *config_and_offset):
        seen.append((type(x_).__name__, type(gamma).__name__, tuple(gamma.shape)))
        return launch(x_, gamma, eps, *config_and_offset)

    fast_autograd.launch_forward = recording
    try:
        result["fsdp"] = _train(model, x[half], target[half], full=lambda t: t.full_tensor(), mean=mean)
    finally:
        fast_autograd.launch_forward = launch
    result["fsdp"]["seen"] = seen
    result["fsdp"]["sharded_weight"] = (type(model[1].weight).__name__, tuple(model[1].weight.to_local().shape))

    sharded = distribute_tensor(torch.randn(30, 13, generator=torch.Generator().manual_seed(2)), mesh, [Shard(0)])
    try:
        with refused_before_allocating(r"x is a DTensor \(placements \(Shard\(dim=0\),\)"):
            rmsnorm_fast(sharded, None)
        result["dtensor_refused"] = "yes"
    except AssertionError as error:
        result["dtensor_refused"] = str(error)
    _save_and_exit(result, rank, out)


TINY_LLAMA = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=128, max_position_embeddings=64)
TOKENS_BATCH, TOKENS_SEQ = 4, 12  # each of two ranks takes 2 sequences


def _fused_llama() -> torch.nn.Module:
    """A tiny Llama (float32, seeded, norm weights randomised), its norms swapped and its decoder layers fused."""
    import transformers

    from rmsnorm import randomise_norm_weights, swap_rmsnorm

    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**TINY_LLAMA))
    randomise_norm_weights(model, seed=3)
    swapped = swap_rmsnorm(model, fuse_residual=True)
    assert swapped.fused == ("model.layers.0", "model.layers.1"), swapped
    return model


def _token_batch() -> torch.Tensor:
    g = torch.Generator().manual_seed(5)
    return torch.randint(0, TINY_LLAMA["vocab_size"], (TOKENS_BATCH, TOKENS_SEQ), generator=g)


def _cpu_fused_worker(rank: int, world: int, store: str, out: str) -> None:
    """One CPU rank: the fused tiny Llama under DDP, then FSDP2; saves ``out/rank<r>.pt``."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel

    from rmsnorm import fused_layers

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    tokens = _token_batch()[rank * TOKENS_BATCH // world:(rank + 1) * TOKENS_BATCH // world]

    def mean(v):
        dist.all_reduce(v)
        return v / world

    seen = []  # the weight each fused call reads: a plain Parameter, never a DTensor shard
    add = fused_layers.rmsnorm_add

    def recording(x, residual, weight, eps, **offset):
        seen.append((type(weight).__name__, tuple(weight.shape)))
        return add(x, residual, weight, eps, **offset)

    fused_layers.rmsnorm_add = recording
    result = {}
    try:
        ddp = _train(DistributedDataParallel(_fused_llama()), tokens, None, mean=mean, loss_of=_next_token_loss)
        result["ddp"] = {"losses": ddp["losses"], "seen": list(seen),
                         "params": {k.removeprefix("module."): v for k, v in ddp["params"].items()},
                         "grads": [{k.removeprefix("module."): v for k, v in g.items()} for g in ddp["grads"]]}
        seen.clear()
        model, mesh = _fused_llama(), init_device_mesh("cpu", (world,))
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        result["fsdp"] = _train(model, tokens, None, full=lambda t: t.full_tensor(), mean=mean,
                                loss_of=_next_token_loss)
        result["fsdp"]["seen"] = list(seen)
        weight = model.model.layers[0].post_attention_layernorm.weight
        result["fsdp"]["sharded_weight"] = (type(weight).__name__, tuple(weight.to_local().shape))
    finally:
        fused_layers.rmsnorm_add = add
    _save_and_exit(result, rank, out)


def _save_and_exit(result: dict, rank: int, out: str) -> None:
    """Save what this rank saw (``out/rank<r>.pt``), leave the process group, and end the process.

    The process ends with ``os._exit(0)``, as a multiprocessing child does, not by finalising Python.
    Seen once in CI: a rank that had finished its work exited with -6, printing ``terminate called
    without an active exception``. Shown here: after FSDP2, ``destroy_process_group()`` cannot free the
    gloo group, since the DeviceMesh keeps it (``_pg_registry``) and DTensor's sharding-propagation
    cache keeps the mesh; gloo's three threads (``gloo_tcp_loop``, two ``pt_gloo_runloop``) still run
    after ``destroy_process_group()`` and ``gc.collect()``, into the interpreter's finalisation. Inferred,
    not reproduced (no abort in about 500 runs of the two ranks on two loaded cores): a gloo thread that
    drops the last reference to a tensor Python once owned (rank 0 holds the inputs of DTensor's scatter,
    the last collective) takes the GIL to do it; once the main thread is finalising, CPython 3.11 ends
    that thread with ``pthread_exit``, whose unwinding through C++'s noexcept frames calls
    ``std::terminate``. Without finalisation, no thread can meet it. Should a rank still die, the test
    says whether it had saved its result, and PYTHONFAULTHANDLER prints its threads' stacks.
    """
    import torch.distributed as dist

    torch.save(result, os.path.join(out, f"rank{rank}.pt"))
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _launch_ranks(mode: str, tmp_path: Path, world: int = 2, **env_extra: str) -> list[dict]:
    """Start ``world`` ranks of this file in ``mode`` (``env_extra`` added to their environment); wait for all.

    Returns:
        What each rank saved (``out/rank<r>.pt``), in rank order.

    Raises:
        AssertionError: a rank failed or ran past WORKER_TIMEOUT_S; its output is in the message.
    """
    store, out = tmp_path / "store", tmp_path / "out"
    out.mkdir()
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    # PYTHONFAULTHANDLER: a rank killed by a signal prints every Python thread's stack
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=path, PYTHONFAULTHANDLER="1", **env_extra)
    ranks = [
        subprocess.Popen([sys.executable, __file__, mode, str(rank), str(world), str(store), str(out)], env=env,
                         cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for rank in range(world)
    ]
    deadline = time.monotonic() + WORKER_TIMEOUT_S
    failures = []
    for rank, process in enumerate(ranks):
        try:
            output, _ = process.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for other in ranks:
                other.kill()
            output, _ = process.communicate()
            failures.append(f"rank {rank} ran past {WORKER_TIMEOUT_S} s:\n{output[-4000:]}")
            continue
        if process.returncode != 0:
            saved = "after saving its result" if (out / f"rank{rank}.pt").exists() else "before saving its result"
            failures.append(f"rank {rank} exited with {process.returncode}, {saved}:\n{output[-4000:]}")
        elif output.strip():
            print(f"rank {rank}:\n{output}")
    assert not failures, "\n".join(failures)
    return [torch.load(out / f"rank{rank}.pt", weights_only=False) for rank in range(world)]




# ----------------------------------------------------------------------------- two CPU ranks (gloo)

needs_gloo = pytest.mark.skipif(
    not (torch.distributed.is_available() and torch.distributed.is_gloo_available()),
    reason="this torch was built without torch.distributed's gloo backend",
)


def _cpu_ranks_once(tmp_path_factory, mode: str) -> list[dict]:
    """What the two gloo ranks of ``mode`` saved; run once per session, also under pytest-xdist (a file lock)."""
    from filelock import FileLock  # a dependency of torch

    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # one folder per worker: their parent is this session's
        shared = shared.parent
    name = "distributed_" + mode.replace("-", "_")
    with FileLock(str(shared / f"{name}.lock")):
        results = shared / name
        if not (results / "out" / "rank1.pt").exists():
            results.mkdir(exist_ok=True)
            # CPU ranks on any machine: with CUDA hidden, rmsnorm runs the kernels in Triton's interpreter
            _launch_ranks(mode, results, CUDA_VISIBLE_DEVICES="", TRITON_INTERPRET="1", HF_HUB_OFFLINE="1")
        return [torch.load(results / "out" / f"rank{r}.pt", weights_only=False) for r in range(2)]


@pytest.fixture(scope="module")
def cpu_ranks(tmp_path_factory) -> list[dict]:
    """What the two gloo ranks of the plain norm saved."""
    return _cpu_ranks_once(tmp_path_factory, "cpu")


@pytest.fixture(scope="module")
def cpu_fused_ranks(tmp_path_factory) -> list[dict]:
    """What the two gloo ranks of the fused tiny Llama saved."""
    pytest.importorskip("transformers", reason="transformers (the 'models' extra) is not installed")
    return _cpu_ranks_once(tmp_path_factory, "cpu-fused")


def _on_cpu(one: dict) -> dict:
    return {"losses": one["losses"].cpu(), "grads": [{k: v.cpu() for k, v in g.items()} for g in one["grads"]],
            "params": {k: v.cpu() for k, v in one["params"].items()}}


@pytest.fixture(scope="module")
def one_process() -> dict:
    """The same 3 steps in this process, on the whole batch: what the ranks must reproduce (on the CPU)."""
    device = rmsnorm.default_device()  # the interpreter here; the GPU on a GPU machine
    x, target = _batch()
    return _on_cpu(_train(_model().to(device), x.to(device), target.to(device)))


@pytest.fixture(scope="module")
def one_process_fused() -> dict:
    """The fused tiny Llama's 3 steps in this process, on the whole batch of tokens."""
    pytest.importorskip("transformers", reason="transformers (the 'models' extra) is not installed")
    device = rmsnorm.default_device()
    return _on_cpu(_train(_fused_llama().to(device), _token_batch().to(device), None, loss_of=_next_token_loss))


def _assert_trained_as_one_process(run: dict, one: dict, what: str) -> None:
    torch.testing.assert_close(run["losses"], one["losses"], **F32, msg=lambda m: f"{what}, losses: {m}")
    for step, (got, expected) in enumerate(zip(run["grads"], one["grads"], strict=True)):
        assert got.keys() == expected.keys()
        for name in expected:
            torch.testing.assert_close(got[name], expected[name], **F32,
                                       msg=lambda m: f"{what}, step {step + 1}, grad of {name}: {m}")
    for name in one["params"]:
        torch.testing.assert_close(run["params"][name], one["params"][name], **F32,
                                   msg=lambda m: f"{what}, {name} after {STEPS} steps: {m}")


@pytest.mark.slow  # two ranks: two imports of torch, about 10 s on two cores
@needs_gloo
def test_ddp_on_two_cpu_ranks_trains_as_one_process_on_the_whole_batch(cpu_ranks, one_process):
    assert one_process["losses"][-1] < one_process["losses"][0]  # the steps do move the model
    for rank, result in enumerate(cpu_ranks):
        _assert_trained_as_one_process(result["ddp"], one_process, f"DDP rank {rank}")
    for name, p in cpu_ranks[0]["ddp"]["params"].items():  # DDP keeps the replicas identical, bit for bit
        assert torch.equal(p, cpu_ranks[1]["ddp"]["params"][name]), name


@pytest.mark.slow  # two ranks: two imports of torch, about 10 s on two cores
@needs_gloo
def test_fsdp2_unshards_the_weight_before_the_kernels_and_trains_as_one_process(cpu_ranks, one_process):
    for rank, result in enumerate(cpu_ranks):
        fsdp = result["fsdp"]
        # between steps the weight is a DTensor shard, 19 or 18 of the 37 rows; the kernels see it whole
        assert fsdp["sharded_weight"] == ("DTensor", ((N + 1) // 2 if rank == 0 else N // 2,))
        assert fsdp["seen"] == [("Tensor", "Parameter", (N,))] * STEPS
        _assert_trained_as_one_process(fsdp, one_process, f"FSDP2 rank {rank}")


@pytest.mark.slow  # two ranks: two imports of torch, about 10 s on two cores
@needs_gloo
def test_a_dtensor_sharded_over_two_ranks_is_refused_before_anything_is_allocated(cpu_ranks):
    assert [result["dtensor_refused"] for result in cpu_ranks] == ["yes", "yes"]


@pytest.mark.slow  # two ranks: two imports of torch and transformers
@needs_gloo
def test_a_fused_llama_trains_under_ddp_as_one_process_on_the_whole_batch(cpu_fused_ranks, one_process_fused):
    assert one_process_fused["losses"][-1] < one_process_fused["losses"][0]  # the steps do move the model
    for rank, result in enumerate(cpu_fused_ranks):
        assert result["ddp"]["seen"] == [("Parameter", (64,))] * 2 * STEPS  # one fused call a layer, each step
        _assert_trained_as_one_process(result["ddp"], one_process_fused, f"fused Llama, DDP rank {rank}")


@pytest.mark.slow  # two ranks: two imports of torch and transformers
@needs_gloo
def test_a_fused_llama_under_fsdp2_reads_whole_weights_and_trains_as_one_process(cpu_fused_ranks,
                                                                                  one_process_fused):
    for rank, result in enumerate(cpu_fused_ranks):
        fsdp = result["fsdp"]
        assert fsdp["sharded_weight"] == ("DTensor", (32,))  # between steps, half of the 64 rows
        assert fsdp["seen"] == [("Parameter", (64,))] * 2 * STEPS  # unsharded by the layer's fully_shard
        _assert_trained_as_one_process(fsdp, one_process_fused, f"fused Llama, FSDP2 rank {rank}")


# ----------------------------------------------------------------------------- DTensor, in this process


@pytest.fixture(scope="module")
def mesh(tmp_path_factory):
    """A one-rank CPU mesh (gloo, a FileStore): enough to make DTensors of every placement.

    The DTensors are CPU tensors on any machine: the refusal comes before the device rules.
    """
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    if dist.is_initialized():
        pytest.skip("a process group is already initialised in this process")
    store = tmp_path_factory.mktemp("mesh") / "store"
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    try:
        yield init_device_mesh("cpu", (1,))
    finally:
        dist.destroy_process_group()


def _placements():
    from torch.distributed.tensor import Replicate, Shard

    return [Shard(0), Shard(1), Replicate()]


def _dtensor(t, mesh, placement):
    from torch.distributed.tensor import distribute_tensor

    return distribute_tensor(t, mesh, [placement])


@needs_gloo
@pytest.mark.parametrize("placement", _placements() if torch.distributed.is_available() else [], ids=str)
def test_a_dtensor_x_is_refused_naming_its_placements(placement, mesh):
    x = torch.randn(6, 5, N)
    gamma = torch.rand(N) + 0.5
    xd = _dtensor(x, mesh, placement)
    layout = rf"placements \({re.escape(repr(placement))},\).*global shape \(6, 5, {N}\)"
    pattern = rf"x is a DTensor \({layout}.*x\.full_tensor\(\)"
    with refused_before_allocating(pattern):
        rmsnorm_fast(xd, gamma)
    with refused_before_allocating(pattern):
        FastRMSNorm(N)(xd)
    with refused_before_allocating(r"x is a DTensor .*torch\.nn\.RMSNorm"):
        rmsnorm_fast(xd, None)
    with refused_before_allocating(r"x is a DTensor \(placements"):  # the launcher, on (M, N)
        rmsnorm_fast_forward(_dtensor(x.reshape(-1, N), mesh, placement), gamma)


@needs_gloo
@pytest.mark.parametrize("placement", _placements()[::2] if torch.distributed.is_available() else [], ids=str)
def test_a_dtensor_weight_is_refused_and_told_to_unshard(placement, mesh):
    x = torch.randn(7, N)
    norm = FastRMSNorm(N)
    norm.weight = torch.nn.Parameter(_dtensor(norm.weight.detach(), mesh, placement))  # as fully_shard stores it
    pattern = (rf"weight is a DTensor \(placements \({re.escape(repr(placement))},\)"
               r".*fully_shard.*weight\.full_tensor\(\)")
    with refused_before_allocating(pattern):
        norm(x)
    with refused_before_allocating(pattern):
        rmsnorm_fast(x, norm.weight)
    with refused_before_allocating(pattern):
        rmsnorm_fast_forward(x, norm.weight)


@needs_gloo
def test_the_registered_operators_refuse_a_dtensor_with_the_same_error(mesh):
    from torch.distributed.tensor import Replicate, Shard

    x = torch.randn(7, N)
    xd, gd = _dtensor(x, mesh, Shard(0)), _dtensor(torch.ones(N), mesh, Replicate())
    with refused_before_allocating(r"x is a DTensor \(placements \(Shard\(dim=0\),\)"):
        torch.ops.rmsnorm_fast.forward(xd, gd, 1e-6)
    with refused_before_allocating(r"weight is a DTensor \(placements \(Replicate\(\),\)"):
        torch.ops.rmsnorm_fast.forward(x, gd, 1e-6)
    rstd = _dtensor(torch.ones(7), mesh, Shard(0))
    with refused_before_allocating(r"x is a DTensor"):
        torch.ops.rmsnorm_fast.backward(xd, None, rstd, xd)


@needs_gloo
def test_torch_compile_refuses_a_dtensor_the_same_way(mesh, device):
    from torch.distributed.tensor import Shard

    xd = _dtensor(torch.randn(7, N), mesh, Shard(0))
    gamma = torch.ones(N)
    with refused_before_allocating(r"x is a DTensor \(placements \(Shard\(dim=0\),\)"):
        torch.compile(rmsnorm_fast, backend="aot_eager")(xd, gamma)
    # fullgraph=True: Dynamo wraps the ContractError it traced in its Unsupported ("Observed exception")
    torch._dynamo.reset()  # else the frame that raised above is skipped, and runs (and refuses) eagerly
    with pytest.raises(torch._dynamo.exc.Unsupported) as caught, outputs_forbidden():
        torch.compile(rmsnorm_fast, backend="aot_eager", fullgraph=True)(xd, gamma)
    chain = [caught.value, caught.value.__cause__, caught.value.__context__]
    assert any("x is a DTensor (placements (Shard(dim=0),)" in str(e) for e in chain), chain


@needs_gloo
def test_what_the_refusal_advises_gives_the_right_numbers(mesh):
    from torch.distributed.tensor import Replicate, Shard

    x, gamma = torch.randn(7, N), torch.rand(N) + 0.5
    xd, gd = _dtensor(x, mesh, Shard(0)), _dtensor(gamma, mesh, Replicate())
    expected = torch.nn.functional.rms_norm(x, (N,), gamma, 1e-6)
    assert_close = torch.testing.assert_close
    device = rmsnorm.default_device()  # the all-gather, then the kernels (on the GPU where there is one)
    assert_close(rmsnorm_fast(xd.full_tensor().to(device), gamma.to(device), 1e-6).cpu(), expected, **F32)
    y = torch.nn.functional.rms_norm(xd, (N,), gd, 1e-6)  # torch's norm, sharded by DTensor
    assert y.placements == (Shard(0),)
    assert_close(y.full_tensor(), expected, **F32)


def test_plain_tensors_and_parameters_keep_the_quick_path(device):
    from rmsnorm.contract import _plainly_valid

    x = torch.randn(4, N).to(device)
    weight = torch.nn.Parameter(torch.ones(N).to(device))
    assert _plainly_valid(x, weight, 1e-6) == _plainly_valid(x, weight.detach(), 1e-6)
    torch.testing.assert_close(rmsnorm_fast(x, weight, 1e-6), torch.nn.functional.rms_norm(x, (N,), weight, 1e-6),
                               **F32)
# ----------------------------------------------------------------------------- two GPUs (written, not yet run)

GPU = torch.cuda.is_available() and not rmsnorm.device.interpreter_active()
two_gpus = pytest.mark.skipif(
    not (GPU and torch.cuda.device_count() >= 2),
    reason="needs two CUDA GPUs (torch.cuda.device_count() < 2; no two-GPU machine was lent yet)",
)
LLAMA_STEPS, LLAMA_LR, LLAMA_BATCH, LLAMA_SEQ = 20, 0.1, 8, 64
LLAMA = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=512, max_position_embeddings=LLAMA_SEQ)


@pytest.mark.gpu
@two_gpus
@pytest.mark.parametrize("current, other", [(0, 1), (1, 0)],
                         ids=["cuda1-while-cuda0-current", "cuda0-while-cuda1-current"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_tensors_on_the_other_gpu_are_normalised_there_forward_and_backward(current, other, dtype):
    from rmsnorm import backward as fast_backward
    from rmsnorm import forward as fast_forward
    from rmsnorm.testing import assert_close, dgamma_tolerance, make_inputs, oracle

    M, width = 199, 1823  # irregular on purpose
    x0, gamma0, dy0 = make_inputs(M, width, dtype, device="cpu", seed=7)
    y64, dx64, dgamma64 = oracle(x0, gamma0, dy0, 1e-6)
    target = torch.device("cuda", other)
    for device_current in (current, other):  # other's tensors while the other GPU is current, then on their own
        with torch.cuda.device(device_current):
            x = x0.to(target).requires_grad_()
            gamma = gamma0.to(target).requires_grad_()
            y = rmsnorm_fast(x, gamma, 1e-6)
            y.backward(dy0.to(target))
            torch.cuda.synchronize(target)
        assert y.device == x.grad.device == gamma.grad.device == target
        assert_close(y, y64, dtype=dtype, msg=f"y, cuda:{device_current} current")
        assert_close(x.grad, dx64, dtype=dtype, msg=f"dx, cuda:{device_current} current")
        assert_close(gamma.grad, dgamma64, tol=dgamma_tolerance(M, dtype, dtype), msg="dgamma")
    # a kernel is cached only for the device it was compiled on: every key starts with that device's index
    for launcher in (fast_forward._launch, fast_backward._launch, fast_backward._launch_dgamma):
        assert other in {key[0] for key in launcher.cache}, launcher.kernel


NORMS = ("original", "fast", "fused")  # torch's norms; FastRMSNorm; FastRMSNorm and the fused decoder layers


def _llama(norm: str, device) -> torch.nn.Module:
    """A tiny Llama (float32, seeded, norm weights randomised); its norms swapped for FastRMSNorm unless
    ``norm`` is "original", and its decoder layers fused too when it is "fused"."""
    transformers = pytest.importorskip("transformers", reason="transformers (the 'models' extra) is not installed")
    from rmsnorm import randomise_norm_weights, swap_rmsnorm

    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**LLAMA))
    randomise_norm_weights(model, seed=3)
    if norm != "original":
        swapped = swap_rmsnorm(model, fuse_residual=norm == "fused")
        assert swapped == 2 * LLAMA["num_hidden_layers"] + 1
        assert len(swapped.fused) == (LLAMA["num_hidden_layers"] if norm == "fused" else 0)
    return model.to(device)


def _tokens(device) -> torch.Tensor:
    g = torch.Generator().manual_seed(4)
    return torch.randint(0, LLAMA["vocab_size"], (LLAMA_BATCH, LLAMA_SEQ), generator=g).to(device)


def _train_llama(model, tokens, mean=lambda v: v) -> tuple[torch.Tensor, list[float]]:
    """LLAMA_STEPS SGD steps of next-token loss; returns the (global) losses and each step's time in ms."""
    optimizer = torch.optim.SGD(model.parameters(), lr=LLAMA_LR)
    losses, times = [], []
    for _ in range(LLAMA_STEPS):
        torch.cuda.synchronize()
        start = time.perf_counter()
        optimizer.zero_grad()
        loss = model(input_ids=tokens, labels=tokens).loss  # the mean over this rank's tokens
        loss.backward()
        optimizer.step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
        losses.append(mean(loss.detach().float()).cpu())
    return torch.stack(losses), times


def _gpu_worker(rank: int, world: int, store: str, out: str, parallel: str) -> None:
    """One GPU rank (NCCL): the tiny Llama with each norm, under DDP or FSDP2; saves ``out/rank<r>.pt``."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel

    torch.cuda.set_device(rank)
    device = torch.device("cuda", rank)
    dist.init_process_group("nccl", init_method=f"file://{store}", rank=rank, world_size=world, device_id=device)
    tokens = _tokens(device)[rank * LLAMA_BATCH // world:(rank + 1) * LLAMA_BATCH // world]

    def mean(v):
        dist.all_reduce(v)
        return v / world

    result = {}
    for norm in NORMS:
        model = _llama(norm, device)
        if parallel == "ddp":
            model = DistributedDataParallel(model, device_ids=[rank])
        else:
            mesh = init_device_mesh("cuda", (world,))
            for layer in model.model.layers:
                fully_shard(layer, mesh=mesh)
            fully_shard(model, mesh=mesh)
        result[norm] = _train_llama(model, tokens, mean)
    _save_and_exit(result, rank, out)


def _median(times: list[float]) -> float:
    return sorted(times[3:])[len(times[3:]) // 2]  # the first steps compile kernels and warm caches


@pytest.mark.gpu
@two_gpus
@pytest.mark.parametrize("parallel", ["ddp", "fsdp2"])
def test_a_tiny_llama_trains_on_two_gpus_as_on_one(parallel, tmp_path):
    one = {norm: _train_llama(_llama(norm, "cuda:0"), _tokens("cuda:0")) for norm in NORMS}
    ranks = _launch_ranks(f"gpu-{parallel}", tmp_path)
    for rank, result in enumerate(ranks):
        # the original norm's own distance from one GPU (all-reduce order, sharded optimizer steps) sets the bar
        bar = 2 * (result["original"][0] - one["original"][0]).abs().max()
        for norm in NORMS[1:]:
            allowed = bar + F32["atol"] + F32["rtol"] * one[norm][0].abs()
            distance = (result[norm][0] - one[norm][0]).abs()
            assert (distance <= allowed).all(), (
                f"{parallel} rank {rank}: {norm} losses {result[norm][0].tolist()} against one GPU's "
                f"{one[norm][0].tolist()}; allowed {allowed.tolist()}"
            )
            assert result[norm][0][-1] < result[norm][0][0]  # it trains
    print(f"\n{parallel} tiny Llama, median step time (ms, steps 4-{LLAMA_STEPS}), printed, not asserted:")
    for norm in NORMS:
        per_rank = ", ".join(f"rank {r} {_median(result[norm][1]):.2f}" for r, result in enumerate(ranks))
        print(f"  {norm:8s} one GPU {_median(one[norm][1]):.2f}; two GPUs: {per_rank}")


if __name__ == "__main__":
    _mode, _rank, _world, _store, _out = sys.argv[1:6]
    if _mode == "cpu":
        _cpu_worker(int(_rank), int(_world), _store, _out)
    elif _mode == "cpu-fused":
        _cpu_fused_worker(int(_rank), int(_world), _store, _out)
    else:  # gpu-ddp, gpu-fsdp2
        _gpu_worker(int(_rank), int(_world), _store, _out, _mode.removeprefix("gpu-"))


@needs_gloo
def test_the_fused_add_refuses_a_dtensor_residual_and_so_do_its_operators(mesh):
    from torch.distributed.tensor import Shard

    from rmsnorm import rmsnorm_add

    x = torch.randn(7, N)
    rd = _dtensor(torch.randn(7, N), mesh, Shard(0))
    pattern = r"residual is a DTensor \(placements \(Shard\(dim=0\),\).*residual\.full_tensor\(\)"
    with refused_before_allocating(pattern):
        rmsnorm_add(x, rd, torch.ones(N))
    with refused_before_allocating(pattern):
        torch.ops.rmsnorm_fast.add_forward(x, rd, None, 1e-6)
    with refused_before_allocating(r"x is a DTensor \(placements \(Shard\(dim=0\),\)"):
        rmsnorm_add(rd, x, None)


@needs_gloo
def test_a_fused_layer_whose_norm_alone_is_sharded_refuses_the_shard_and_says_how(mesh):
    from torch.distributed.fsdp import fully_shard

    pytest.importorskip("transformers", reason="transformers (the 'models' extra) is not installed")
    if not rmsnorm.interpreter_active():  # the mesh is the CPU's: so must the model be, and its other norms' kernels
        pytest.skip("the one-rank mesh is a CPU mesh, and the model's other norms run on the CPU only in "
                    "Triton's interpreter, which is off where there is a GPU")
    model = _fused_llama()
    norm = model.model.layers[0].post_attention_layernorm
    fully_shard(norm, mesh=mesh)  # its own group: only its own forward, which the fused call skips, unshards it
    # the input norm and the attention run first (and allocate); the fused call refuses before its kernels
    refusal = r"weight is a DTensor \(placements \(Shard\(dim=0\),\).*fully_shard"
    with pytest.raises(rmsnorm.ContractError, match=refusal):
        model(input_ids=_token_batch())
