"""Probe: a row held on chip as power-of-two pieces (5120 = 4096 + 1024) instead of one padded block (8192).

    python3 scripts/probe_row_pieces.py               # on a GPU: each variant checked, then timed (L2-cold)
    python3 scripts/probe_row_pieces.py --registers   # any machine: ptxas for sm_90 on each variant, no GPU

A block is a power of two, so the fast kernels hold a row of N columns in a block of the next power of two:
8192 for 4097, 5120 and 7168, 16384 for 12288 and 12289. The masked columns take registers like the others:
at 16384 × 4097 bf16 the backward's one program per SM runs 8 warps (issue 37: 0.71× compile), and at 5120,
7168 and 12288 the forward loops over the row in 2048- or 4096-wide blocks and reads it twice (0.89–0.92× the
best peer). Here a row is the sum of up to three power-of-two pieces, the last one masked where N is not a sum
of three: 4097 = 4096 + 1, 5120 = 4096 + 1024, 7168 = 4096 + 2048 + 1024, 12289 = 8192 + 4096 + 1 (:func:`pieces`).

Simplified kernels of the plain RMSNorm with a weight (no fused add, no LayerNorm, N compiled in): the forward
one program per BLOCK_M rows, the backward one persistent program per SM (two with ``per_sm`` 2) summing its
dgamma share in registers. Each runs with one padded block (``padded``) and with the pieces (``pieces``), at the
same warps, so the difference is the layout alone; beside them the library's kernels at their table
configuration (``table``). Every output is checked against the float64 oracle first. Prints only: a result
goes to results/ once a kernel of the library takes it.

Source: issue 37 (the backward's weak rows; forwards that lead at every shape).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout, for `import rmsnorm`

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

#: (M, N, dtype): the widths that are not powers of two among the grids' misses, and a power of two as control.
SHAPES = (
    (16384, 4097, torch.bfloat16), (8192, 5120, torch.bfloat16), (8192, 7168, torch.bfloat16),
    (4096, 12288, torch.bfloat16), (4096, 12289, torch.bfloat16), (32768, 1536, torch.bfloat16),
    (8192, 3072, torch.bfloat16), (4096, 4096, torch.bfloat16),
)
#: The most pieces a row is held in.
MOST_PIECES = 3


def pieces(N: int, most: int = MOST_PIECES) -> tuple[int, ...]:
    """The row's pieces, widest first: N's largest powers of two, the last the power of two covering the rest.

    ``pieces(5120) == (4096, 1024)``; ``pieces(4097) == (4096, 1)``; ``pieces(1000) == (512, 256, 256)`` (the last
    masked); ``pieces(4096) == (4096,)``. Their sum is at least N and at most the padded block's width.
    """
    if N < 1 or most < 1:
        raise ValueError(f"pieces: N and most must be positive, got N={N}, most={most}")
    out, rest = [], N
    while rest and len(out) < most - 1:
        out.append(1 << (rest.bit_length() - 1))
        rest -= out[-1]
    if rest:
        out.append(triton.next_power_of_2(rest))
    return tuple(out)


@triton.jit
def _piece(ptr, row_stride, rows, row_mask, START: tl.constexpr, P: tl.constexpr, N: tl.constexpr):
    """Columns START … START + P − 1 of BLOCK_M rows: their pointers and mask."""
    cols = START + tl.arange(0, P)
    return ptr + rows[:, None] * row_stride + cols[None, :], row_mask[:, None] & (cols < N)[None, :]


@triton.jit
def _weight(w_ptr, START: tl.constexpr, P: tl.constexpr, N: tl.constexpr):
    cols = START + tl.arange(0, P)
    return tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)


@triton.jit
def forward_kernel(x_ptr, w_ptr, y_ptr, rstd_ptr, M, row_stride, eps, N: tl.constexpr, BLOCK_M: tl.constexpr,
                   P0: tl.constexpr, P1: tl.constexpr, P2: tl.constexpr):
    """y = x · rstd · w for BLOCK_M rows, each held as pieces P0, P1, P2 (0: no such piece)."""
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_mask = rows < M
    p0, m0 = _piece(x_ptr, row_stride, rows, row_mask, 0, P0, N)
    x0 = tl.load(p0, mask=m0, other=0.0).to(tl.float32)
    sum_sq = tl.sum(x0 * x0, axis=1)
    if P1 > 0:
        p1, m1 = _piece(x_ptr, row_stride, rows, row_mask, P0, P1, N)
        x1 = tl.load(p1, mask=m1, other=0.0).to(tl.float32)
        sum_sq += tl.sum(x1 * x1, axis=1)
    if P2 > 0:
        p2, m2 = _piece(x_ptr, row_stride, rows, row_mask, P0 + P1, P2, N)
        x2 = tl.load(p2, mask=m2, other=0.0).to(tl.float32)
        sum_sq += tl.sum(x2 * x2, axis=1)
    rstd = tl.rsqrt(sum_sq / N + eps)
    tl.store(rstd_ptr + rows, rstd, mask=row_mask)
    q0, _ = _piece(y_ptr, row_stride, rows, row_mask, 0, P0, N)
    tl.store(q0, x0 * rstd[:, None] * _weight(w_ptr, 0, P0, N)[None, :], mask=m0)
    if P1 > 0:
        q1, _ = _piece(y_ptr, row_stride, rows, row_mask, P0, P1, N)
        tl.store(q1, x1 * rstd[:, None] * _weight(w_ptr, P0, P1, N)[None, :], mask=m1)
    if P2 > 0:
        q2, _ = _piece(y_ptr, row_stride, rows, row_mask, P0 + P1, P2, N)
        tl.store(q2, x2 * rstd[:, None] * _weight(w_ptr, P0 + P1, P2, N)[None, :], mask=m2)


@triton.jit
def _backward_piece(x_ptr, dy_ptr, row_stride, rows, row_mask, rstd, w, START: tl.constexpr, P: tl.constexpr,
                    N: tl.constexpr):
    """One piece's x̂, dy and u = dy · w, and its share of Σ u · x̂."""
    px, mask = _piece(x_ptr, row_stride, rows, row_mask, START, P, N)
    pdy, _ = _piece(dy_ptr, row_stride, rows, row_mask, START, P, N)
    x_hat = tl.load(px, mask=mask, other=0.0).to(tl.float32) * rstd[:, None]
    dy = tl.load(pdy, mask=mask, other=0.0).to(tl.float32)
    u = dy * w[None, :]
    return x_hat, dy, u, tl.sum(u * x_hat, axis=1)


@triton.jit
def _store_dx(dx_ptr, row_stride, rows, row_mask, x_hat, u, mean_ux, rstd, START: tl.constexpr, P: tl.constexpr,
              N: tl.constexpr):
    pdx, mask = _piece(dx_ptr, row_stride, rows, row_mask, START, P, N)
    tl.store(pdx, (u - x_hat * mean_ux[:, None]) * rstd[:, None], mask=mask)


@triton.jit
def backward_kernel(x_ptr, w_ptr, rstd_ptr, dy_ptr, dx_ptr, partial_ptr, M, row_stride, N: tl.constexpr,
                    BLOCK_M: tl.constexpr, P0: tl.constexpr, P1: tl.constexpr, P2: tl.constexpr):
    """dx for the program's row blocks, and its share of dgamma in row program_id of partial (P, N)."""
    pid = tl.program_id(0)
    w0 = _weight(w_ptr, 0, P0, N)
    acc0 = tl.zeros([BLOCK_M, P0], dtype=tl.float32)
    if P1 > 0:
        w1 = _weight(w_ptr, P0, P1, N)
        acc1 = tl.zeros([BLOCK_M, P1], dtype=tl.float32)
    if P2 > 0:
        w2 = _weight(w_ptr, P0 + P1, P2, N)
        acc2 = tl.zeros([BLOCK_M, P2], dtype=tl.float32)
    for block in tl.range(pid, tl.cdiv(M, BLOCK_M), tl.num_programs(0)):
        rows = tl.cast(block, tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
        row_mask = rows < M
        rstd = tl.load(rstd_ptr + rows, mask=row_mask, other=0.0)
        x_hat0, dy0, u0, ux = _backward_piece(x_ptr, dy_ptr, row_stride, rows, row_mask, rstd, w0, 0, P0, N)
        if P1 > 0:
            x_hat1, dy1, u1, ux1 = _backward_piece(x_ptr, dy_ptr, row_stride, rows, row_mask, rstd, w1, P0, P1, N)
            ux += ux1
        if P2 > 0:
            x_hat2, dy2, u2, ux2 = _backward_piece(x_ptr, dy_ptr, row_stride, rows, row_mask, rstd, w2, P0 + P1, P2,
                                                   N)
            ux += ux2
        mean_ux = ux / N
        _store_dx(dx_ptr, row_stride, rows, row_mask, x_hat0, u0, mean_ux, rstd, 0, P0, N)
        acc0 += dy0 * x_hat0
        if P1 > 0:
            _store_dx(dx_ptr, row_stride, rows, row_mask, x_hat1, u1, mean_ux, rstd, P0, P1, N)
            acc1 += dy1 * x_hat1
        if P2 > 0:
            _store_dx(dx_ptr, row_stride, rows, row_mask, x_hat2, u2, mean_ux, rstd, P0 + P1, P2, N)
            acc2 += dy2 * x_hat2
    row = partial_ptr + pid.to(tl.int64) * N
    cols = tl.arange(0, P0)
    tl.store(row + cols, tl.sum(acc0, axis=0), mask=cols < N)
    if P1 > 0:
        cols = P0 + tl.arange(0, P1)
        tl.store(row + cols, tl.sum(acc1, axis=0), mask=cols < N)
    if P2 > 0:
        cols = P0 + P1 + tl.arange(0, P2)
        tl.store(row + cols, tl.sum(acc2, axis=0), mask=cols < N)


def _constexprs(layout: tuple[int, ...]) -> dict:
    padded = tuple(layout) + (0,) * (3 - len(layout))
    return dict(zip(("P0", "P1", "P2"), padded))


def run_forward(x, w, eps: float, layout: tuple[int, ...], block_m: int, num_warps: int):
    """(y, rstd) of the forward kernel with the row held as ``layout`` (pieces, or one padded block)."""
    M, N = x.shape
    y, rstd = torch.empty_like(x), torch.empty(M, dtype=torch.float32, device=x.device)
    forward_kernel[(triton.cdiv(M, block_m),)](x, w, y, rstd, M, x.stride(0), eps, N=N, BLOCK_M=block_m,
                                               num_warps=num_warps, **_constexprs(layout))
    return y, rstd


def run_backward(x, w, rstd, dy, layout: tuple[int, ...], block_m: int, num_warps: int, programs: int):
    """(dx, dgamma) of the backward kernel on ``programs`` persistent programs; dgamma = the partials' sum."""
    M, N = x.shape
    programs = max(1, min(programs, triton.cdiv(M, block_m)))
    dx = torch.empty_like(x)
    partial = torch.empty(programs, N, dtype=torch.float32, device=x.device)
    backward_kernel[(programs,)](x, w, rstd, dy, dx, partial, M, x.stride(0), N=N, BLOCK_M=block_m,
                                 num_warps=num_warps, **_constexprs(layout))
    return dx, partial.sum(0).to(w.dtype)


def layouts(N: int) -> list[tuple[str, tuple[int, ...]]]:
    """("padded", (next power of two,)), and ("pieces", pieces(N)) where that differs."""
    out = [("padded", (triton.next_power_of_2(N),))]
    if pieces(N) != out[0][1]:
        out.append(("pieces", pieces(N)))
    return out


def variants(N: int, pass_: str) -> list[tuple[str, tuple[int, ...], int, int, int]]:
    """(name, layout, BLOCK_M, warps, programs per SM) to try: each layout at 4, 8 and 16 warps, one row a step;
    the backward also with two programs per SM."""
    out = []
    for name, layout in layouts(N):
        for warps in (4, 8, 16):
            for per_sm in ((1, 2) if pass_ == "backward" else (1,)):
                out.append((f"{name} {'+'.join(map(str, layout))} w{warps}" + (f" x{per_sm}" if per_sm > 1 else ""),
                            layout, 1, warps, per_sm))
    return out


def registers() -> None:
    """ptxas for sm_90 on each variant's kernel (no GPU): registers a thread and bytes spilled."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
    torch.cuda.is_available = lambda: True  # compile only
    from ptx_vector_accesses import _ptx, registers_and_spills

    for _M, N, dtype in SHAPES:
        t = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}[dtype]
        for pass_ in ("forward", "backward"):
            for name, layout, block_m, warps, per_sm in variants(N, pass_):
                if per_sm > 1:
                    continue  # the same kernel
                common = {"N": N, "BLOCK_M": block_m, **_constexprs(layout)}
                stride = N % 16 == 0  # Triton's launcher marks a row stride divisible by 16 when it is
                if pass_ == "forward":
                    ptx = _ptx(forward_kernel, {"x_ptr": f"*{t}", "w_ptr": f"*{t}", "y_ptr": f"*{t}",
                                                "rstd_ptr": "*fp32", "M": "i32", "row_stride": "i32", "eps": "fp32"},
                               common, (0, 1, 2, 3), warps, (5,) if stride else ())
                else:
                    ptx = _ptx(backward_kernel, {"x_ptr": f"*{t}", "w_ptr": f"*{t}", "rstd_ptr": "*fp32",
                                                 "dy_ptr": f"*{t}", "dx_ptr": f"*{t}", "partial_ptr": "*fp32",
                                                 "M": "i32", "row_stride": "i32"}, common, (0, 1, 2, 3, 4, 5), warps,
                               (7,) if stride else ())
                use = registers_and_spills(ptx)
                print(f"N={N:6d} {t} {pass_:8s} {name:32s} {use['registers']:4d} registers, "
                      f"{use['spill_bytes']:5d} bytes spilled", flush=True)


def timed() -> None:
    from rmsnorm import rmsnorm_fast_backward, rmsnorm_fast_forward
    from rmsnorm.testing import assert_close, dgamma_tolerance, make_inputs, oracle
    from rmsnorm_lab.timing import kernel_time_us

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, triton {triton.__version__}; L2-cold µs")
    for M, N, dtype in SHAPES:
        x, w, dy = make_inputs(M, N, dtype, "cuda", draw_on_device=True)
        y64, dx64, dg64 = oracle(x, w, dy, on="cuda")
        _, rstd = rmsnorm_fast_forward(x, w, 1e-6)
        for pass_ in ("forward", "backward"):
            if pass_ == "forward":
                calls = {"table": lambda: rmsnorm_fast_forward(x, w, 1e-6)}
                for name, layout, block_m, warps, _ in variants(N, pass_):
                    calls[name] = (lambda layout=layout, block_m=block_m, warps=warps:
                                   run_forward(x, w, 1e-6, layout, block_m, warps))
            else:
                calls = {"table": lambda: rmsnorm_fast_backward(x, w, rstd, dy)}
                for name, layout, block_m, warps, per_sm in variants(N, pass_):
                    calls[name] = (lambda layout=layout, block_m=block_m, warps=warps, per_sm=per_sm:
                                   run_backward(x, w, rstd, dy, layout, block_m, warps, per_sm * sms))
            times = {}
            for name, call in calls.items():
                try:
                    out = call()
                    if pass_ == "forward":
                        assert_close(out[0], y64, dtype=dtype)
                    else:
                        assert_close(out[0], dx64, dtype=dtype)
                        assert_close(out[1], dg64, tol=dgamma_tolerance(M, dtype, w.dtype))
                    times[name] = kernel_time_us(call)
                except Exception as err:  # noqa: BLE001 (wrong numbers, or Triton's CompilationError/OutOfResources)
                    print(f"  {M}x{N} {pass_} {name}: {type(err).__name__}: {str(err)[:160]}")
            table = times.get("table", float("nan"))
            print(f"{M}x{N} {str(dtype)[6:]} {pass_}: table {table:.2f} µs", flush=True)
            for name, t in sorted(times.items(), key=lambda item: item[1]):
                print(f"    {name:32s} {t:8.2f} µs  table/this {table / t:.3f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--registers", action="store_true", help="ptxas for sm_90 only (no GPU needed)")
    args = parser.parse_args(argv)
    if args.registers:
        registers()
    elif not torch.cuda.is_available():
        print("no CUDA GPU: run with --registers for what ptxas says, or on a GPU for the times", file=sys.stderr)
        return 2
    else:
        timed()
    return 0


if __name__ == "__main__":
    sys.exit(main())
