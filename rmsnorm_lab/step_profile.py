"""Which kernels of a training step are the norm's: attribution from one ``torch.profiler`` step.

A step is three regions, :data:`STEP_PARTS` (``record_function`` around the forward, the
backward and the optimizer); every kernel belongs to the region in which the host launched it.
Which of them are the norm's work:

- **Eager** (:func:`norm_scopes`): every norm module's forward runs inside a ``record_function``
  scope. Its forward kernels are those launched by any op inside it, its own unfused ops
  included (``LlamaRMSNorm`` is eight: two casts, pow, mean, add, rsqrt, two multiplies). Its
  autograd nodes are the ones created inside the scope: sequence numbers from the smallest an
  op of the scope recorded to that of the output's ``grad_fn`` (a marker event inside the
  scope carries it; sequence numbers grow by one per node on the forward's thread). Its
  backward kernels are those launched inside the autograd engine's ``evaluate_function`` of
  one of those nodes (the profiler links each to its forward node and thread). Nothing is
  counted by kernel name, so an elementwise kernel is the norm's only when the norm launched it.
- **Compiled** (:data:`NAME_RULES`): no module's forward runs (the graph does), so kernels are
  told by name: ``rmsnorm_fast*`` (the fast path's opaque operator keeps its kernels),
  ``*_rms_norm_*`` (Liger's), and for the original, Inductor's kernels whose fused ops include
  ``rsqrt`` or ``pow`` (the norm's forward and the rsqrt's gradient, -0.5·grad·rstd³). Such a
  kernel also does whatever Inductor fused with the norm (the residual add, the casts), and it
  is counted whole: an upper bound on the norm's own work in it. A column sum in a kernel of its
  own (the weight's gradient, when not fused) carries neither name and is not counted.

On a machine without CUDA (the benchmark's ``--quick`` logic check) there are no kernels: each
op's self CPU time stands in, and the numbers mean nothing.

Source: notebooks/13_into_a_model.ipynb; PyTorch's profiler (``FunctionEvent.kernels``,
``sequence_nr``, ``fwd_thread``) and its recipe.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict

import torch
from torch.autograd.profiler import record_function

#: The step's regions, in order; a kernel launched outside them is "other".
STEP_PARTS = ("forward", "backward", "optimizer")
REGION = "rmsnorm_bench::step::"
NORM_SCOPE = "rmsnorm_bench::norm"
NODES_MARKER = "rmsnorm_bench::norm_nodes::"
EVALUATE = "autograd::engine::evaluate_function: "
UNLINKED = "(device work linked to no host op)"


def _fast_name(name: str) -> bool:
    return name.startswith("rmsnorm_fast")


def _liger_name(name: str) -> bool:
    return "_rms_norm_" in name


def _inductor_norm_name(name: str) -> bool:
    return name.startswith("triton_") and bool({"rsqrt", "pow"} & set(name.split("_")))


#: Compiled steps: the kernel-name rule of each variant, and the rule in words (for the results' json).
NAME_RULES = {"fast": _fast_name, "liger": _liger_name, "original": _inductor_norm_name}
NAME_RULE_WORDS = {
    "fast": "kernels named rmsnorm_fast* (the opaque operator's own kernels)",
    "liger": "kernels named *_rms_norm_* (Liger's Triton kernels); its torch-side dgamma sum is not counted",
    "original": "Inductor kernels whose fused ops include rsqrt or pow, counted whole (they also do what was fused "
                "with the norm: an upper bound on the norm's work in them); a dgamma column sum of its own is not "
                "counted",
}
SCOPE_WORDS = ("every kernel launched inside a norm module's forward (profiler scope) or inside the autograd "
               "evaluation of a node that forward created (sequence numbers)")


@contextlib.contextmanager
def step_region(part: str):
    """``record_function`` around one region of a step (``part`` in :data:`STEP_PARTS`)."""
    with record_function(REGION + part):
        yield


@contextlib.contextmanager
def norm_scopes(model: torch.nn.Module, is_norm):
    """Within the block, every module ``is_norm(module)`` runs its forward in a profiler scope (eager only).

    The scope closes with a marker event naming the sequence number of the output's ``grad_fn``
    (the last autograd node the norm created; -1 when none was). Hooks are removed on exit.
    """
    handles, open_scopes = [], []

    def enter(module, args):
        scope = record_function(NORM_SCOPE)
        scope.__enter__()
        open_scopes.append(scope)

    def leave(module, args, out):
        node = getattr(out, "grad_fn", None)
        with record_function(NODES_MARKER + str(node._sequence_nr() if node is not None else -1)):
            pass
        open_scopes.pop().__exit__(None, None, None)

    for module in model.modules():
        if is_norm(module):
            handles += [module.register_forward_pre_hook(enter), module.register_forward_hook(leave)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _subtree(event):
    stack = [event]
    while stack:
        e = stack.pop()
        yield e
        stack.extend(e.cpu_children)


def _launches(event, on_cuda: bool):
    """(kernel name, µs) of the kernels this CPU event launched itself; its own self time without CUDA."""
    if on_cuda:
        return [(k.name, k.duration) for k in event.kernels]
    return [(event.name, event.self_cpu_time_total)] if event.self_cpu_time_total > 0 else []


def _norm_event_ids(cpu_events) -> set[int]:
    """ids of the CPU events whose kernels are the norm's, forward and backward (eager attribution)."""
    ids, nodes = set(), set()
    for scope in (e for e in cpu_events if e.name == NORM_SCOPE):
        inside = list(_subtree(scope))
        ids.update(id(e) for e in inside)
        seqs = [e.sequence_nr for e in inside if e.sequence_nr >= 0]
        last = [int(e.name[len(NODES_MARKER):]) for e in inside if e.name.startswith(NODES_MARKER)]
        if seqs and last and last[0] >= 0:
            nodes.update((scope.thread, s) for s in range(min(seqs), last[0] + 1))
    for e in cpu_events:
        if e.name.startswith(EVALUATE) and (e.fwd_thread, e.sequence_nr) in nodes:
            ids.update(id(d) for d in _subtree(e))
    return ids


def attribute_kernels(events, variant: str, scoped: bool) -> list[dict]:
    """One profiled step's kernels, each with its region and whether it is the norm's.

    Args:
        events: ``prof.events()`` of a profile that recorded exactly one step (CPU and, where
            there is one, CUDA activity), with the step's regions (:func:`step_region`) and,
            when ``scoped``, the norms' scopes (:func:`norm_scopes`).
        variant: "original", "fast" or "liger": the name rule used when not ``scoped``.
        scoped: True for eager steps run inside :func:`norm_scopes`.

    Returns:
        One dict per (kernel, part, norm): ``kernel`` (name), ``part`` (a :data:`STEP_PARTS`
        entry or "other"), ``norm`` (bool), ``calls``, ``us`` (their summed device time, µs;
        self CPU time without CUDA) and ``host_us`` (the self CPU time of the host ops that
        launched them, µs: the host's side of the same work); plus one :data:`UNLINKED` row for device time the
        profiler tied to no host op, so that the rows add up to the step's device time. The spans that
        ``record_function`` scopes leave on the GPU's timeline (user annotations) are not device time: counted,
        they had doubled the regions' kernels (on the H200, 67 ms of "busy" GPU in a 44 ms step).

    Source: this module's docstring (the two rules).
    """
    cpu = [e for e in events if e.device_type == torch.autograd.DeviceType.CPU]
    on_cuda = any(e.device_type == torch.autograd.DeviceType.CUDA for e in events)
    regions = [(e.time_range.start, e.time_range.end, e.name[len(REGION):]) for e in cpu if e.name.startswith(REGION)]
    norm_ids = _norm_event_ids(cpu) if scoped else set()
    rule = NAME_RULES[variant]
    table: dict[tuple, list] = defaultdict(lambda: [0, 0.0, 0.0])
    for e in cpu:
        if not on_cuda and e.name.startswith((REGION, NORM_SCOPE, NODES_MARKER)):
            continue  # without CUDA, self time stands in for kernels: the bench's own events are not ops
        part = next((p for start, end, p in regions if start <= e.time_range.start <= end), "other")
        for i, (name, us) in enumerate(_launches(e, on_cuda)):
            norm = id(e) in norm_ids if scoped else rule(name)
            cell = table[(name, part, norm)]
            cell[0] += 1
            cell[1] += us
            cell[2] += e.self_cpu_time_total if i == 0 else 0.0  # the host op's own time, once per op
    rows = [dict(kernel=k, part=p, norm=n, calls=c, us=us, host_us=h) for (k, p, n), (c, us, h) in table.items()]
    # A record_function scope (the step's regions, the norms' scopes) also leaves a span on the GPU's
    # timeline, a "user annotation" as long as the kernels it encloses: it is no device work of its own.
    device = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA
              and not getattr(e, "is_user_annotation", False)]
    unlinked = sum(e.time_range.elapsed_us() for e in device) - sum(r["us"] for r in rows)
    if on_cuda and unlinked > 0.5:  # device work the profiler linked to no host op: in the total, nobody's norm
        rows.append(dict(kernel=UNLINKED, part="other", norm=False, calls=len(device) - sum(r["calls"] for r in rows),
                         us=unlinked, host_us=0.0))
    return rows
