"""rmsnorm: RMSNorm in Triton, verified before it is accelerated. What a model imports.

Importing it defines the kernels and registers six operators; it changes nothing else in the
caller's process (no environment variable, no Triton setting, no ``torch._dynamo`` import).
The kernels run on a CUDA GPU, or on the CPU in Triton's interpreter when ``TRITON_INTERPRET=1``
was set before triton was first imported (:mod:`rmsnorm.device`).

Public API:

- :func:`rmsnorm` (= :func:`rmsnorm_fast`) (x, weight, eps, offset=0.0) — y = x̂ · (weight + offset)
  (offset 1.0: Gemma's and Qwen3.5's ``1 + weight``); differentiable, any (..., N) with
  N ≤ 262144, float32/float16/bfloat16, row strides; eager calls launch directly, and
  ``torch.compile(fullgraph=True)`` traces two registered operators (``rmsnorm_fast::forward``
  and ``::backward``) whole.
- :func:`rmsnorm_add` (x, residual, weight, eps, offset=0.0) → (y, residual_out) — the pre-norm layer's
  residual add fused with the norm: residual_out = x + residual (rounded as torch rounds it), y = its norm;
  the same kernels with a constexpr switch on, and two more operators (``rmsnorm_fast::add_forward``,
  ``::add_backward``).
- :class:`RMSNorm` (= :class:`FastRMSNorm`) — a ``torch.nn.RMSNorm`` subclass (same constructor and
  state_dict) that calls it.
- :func:`layernorm_fast` (x, weight, bias, eps=1e-5) and :class:`FastLayerNorm` (a ``torch.nn.LayerNorm``
  subclass) — Part III's other norm: the same kernels with ``IS_LAYERNORM`` on, the same contract, two more
  operators (``rmsnorm_fast::layernorm_forward``, ``::layernorm_backward``; :mod:`rmsnorm.layernorm`);
  :func:`layernorm_fast_forward`, :func:`layernorm_fast_backward` — its launchers
  (:mod:`rmsnorm.layernorm_launchers`); :func:`swap_layernorm` — a model's LayerNorms swapped for
  :class:`FastLayerNorm`, the Parameters kept (:mod:`rmsnorm.swap_layernorm`).
- :func:`swap_rmsnorm` — a model's RMSNorm modules swapped for :class:`FastRMSNorm`, recognised by
  behaviour, the weight Parameters kept; with ``fuse_residual=True`` each pre-norm decoder layer's
  post-attention add + norm also becomes one :func:`rmsnorm_add` call (:mod:`rmsnorm.fused_layers`).
- :func:`rmsnorm_fast_forward`, :func:`rmsnorm_fast_backward` — the launchers; :class:`FastConfig`,
  :func:`forward_config`, :func:`backward_config` — the configuration table.
- :func:`launch_path` — which path launches the compiled kernels in this process (``"native"``, rmsnorm's C++
  launcher, by default; ``"triton-launcher"`` with ``RMSNORM_NATIVE_LAUNCH=0`` or where it cannot be built:
  :mod:`rmsnorm.launch`).
- :class:`ContractError` — what every refused input raises, before anything is written.
- :func:`rmsnorm_reference`, :func:`manual_backward` — the PyTorch oracle; :mod:`rmsnorm.testing` —
  tolerances and checks.

The article's simple kernels, which lessons 03–08 teach (rows up to 4096, float32/float16), are in
:mod:`rmsnorm.article` (``rmsnorm.article.rmsnorm``, ``rmsnorm.article.RMSNorm``).

File order as in Liger and quack: kernels and launchers (forward.py, backward.py, with config.py,
launch.py and native_launch.py; layernorm_launchers.py) → operators, autograd and the functional (autograd.py,
fused_add.py, layernorm.py) → module (module.py) → the model swap (swap.py, and fused_layers.py for the decoder
layers; swap_layernorm.py).

Source: notebooks/01_formula.ipynb … 13_into_a_model.ipynb.
"""

from .autograd import rmsnorm_fast
from .backward import rmsnorm_fast_backward, rmsnorm_fast_backward_kernel, rmsnorm_fast_dgamma_kernel
from .config import FastConfig, backward_config, forward_config, grid_size, num_programs, row_align_hint, row_alignment
from .contract import (
    FAST_DTYPES,
    FAST_MAX_N,
    INTERPRETER_BF16_REASON,
    ContractError,
    InterpreterUnavailableError,
    check_fast_inputs,
    check_offset,
    refuse_dtensor,
)
from .device import default_device, describe_backend, interpreter_active
from .forward import rmsnorm_fast_forward, rmsnorm_fast_forward_kernel
from .fused_add import rmsnorm_add
from .launch import launch_path
from .layernorm import layernorm_fast
from .layernorm_launchers import layernorm_fast_backward, layernorm_fast_forward
from .module import FastLayerNorm, FastRMSNorm
from .reference import manual_backward, rmsnorm_reference
from .swap import randomise_norm_weights, swap_rmsnorm
from .swap_layernorm import swap_layernorm

#: The library's RMSNorm: the fast path under the names a user looks for first.
rmsnorm = rmsnorm_fast
RMSNorm = FastRMSNorm

__all__ = [
    "FAST_DTYPES",
    "FAST_MAX_N",
    "FastConfig",
    "FastLayerNorm",
    "FastRMSNorm",
    "INTERPRETER_BF16_REASON",
    "ContractError",
    "InterpreterUnavailableError",
    "RMSNorm",
    "backward_config",
    "check_fast_inputs",
    "check_offset",
    "default_device",
    "describe_backend",
    "forward_config",
    "grid_size",
    "interpreter_active",
    "launch_path",
    "layernorm_fast",
    "layernorm_fast_backward",
    "layernorm_fast_forward",
    "manual_backward",
    "num_programs",
    "randomise_norm_weights",
    "refuse_dtensor",
    "rmsnorm",
    "rmsnorm_add",
    "rmsnorm_fast",
    "rmsnorm_fast_backward",
    "rmsnorm_fast_backward_kernel",
    "rmsnorm_fast_dgamma_kernel",
    "rmsnorm_fast_forward",
    "rmsnorm_fast_forward_kernel",
    "rmsnorm_reference",
    "row_align_hint",
    "row_alignment",
    "swap_layernorm",
    "swap_rmsnorm",
]
