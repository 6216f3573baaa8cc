# SPDX-License-Identifier: Apache-2.0
"""mxkit's quantize, dequantize and GEMM as torch.library custom ops (torch >= 2.4), so that
torch.compile(fullgraph=True) traces a function that calls them instead of breaking its graph.

    import torch, mxkit.torch_ops  # registers torch.ops.mxkit.{quantize, dequantize, gemm}

    @torch.compile(fullgraph=True)
    def round_trip(x):
        codes, scales = torch.ops.mxkit.quantize(x, "mxfp8_e4m3")
        return torch.ops.mxkit.dequantize(codes, scales, "mxfp8_e4m3", x.shape[0], x.shape[1])

Each op is a thin wrapper over the package's function of the same name: the numerics, the
argument checks and the choice of host or device path are mxkit.quantize / dequantize / gemm's.
Each has a fake (meta) implementation that gives the outputs' shapes without running anything:
quantize's from the copy description the package itself computes (CopyDescription.data_shape,
.scale_shape), dequantize's and gemm's from their arguments ([rows, cols], [P, Q]).

The ops are registered from Python, not in the module's C++: the module links no libtorch
(tensors cross by DLPack), so one build serves every torch >= 2.4. TORCH_LIBRARY would tie the
build to one torch's C++ ABI; the LibTorch stable ABI (STABLE_TORCH_LIBRARY) would make it
forward compatible, but only from the torch it was built against (2.10 at the earliest) and with
torch's headers at build time and its C shim at import. `import mxkit` never imports torch or
this module.
"""
from typing import Optional, Tuple

import torch
from torch import Tensor

import mxkit

if not (hasattr(torch, "library") and hasattr(torch.library, "custom_op") and hasattr(torch.library, "register_fake")):
    raise ImportError(f"mxkit.torch_ops needs torch >= 2.4 (torch.library.custom_op and register_fake); "
                      f"this is torch {torch.__version__}")

__all__ = ["quantize", "dequantize", "gemm"]

_OUT_DTYPES = ("float32", "bfloat16")


def _one_axis(func, axis):
    """An op returns one (codes, scales) pair: axis="both" (two copies) is two calls."""
    if axis == "both":
        raise ValueError(f"mxkit::{func}: axis must be 'rowwise' or 'columnwise' (call the op once per axis for both)")


def _out_dtype(func, out_dtype):
    if out_dtype not in _OUT_DTYPES:
        raise ValueError(f"mxkit::{func}: out_dtype {out_dtype!r} is not one of {', '.join(_OUT_DTYPES)}")
    return getattr(torch, out_dtype)


@torch.library.custom_op("mxkit::quantize", mutates_args=())
def quantize(x: Tensor, fmt: str, axis: str = "rowwise", scale_layout: str = "row_major", hadamard: bool = False,
             rule: Optional[str] = None, rounding: Optional[str] = None, seed: int = 0,
             philox_stream: int = 0) -> Tuple[Tensor, Tensor]:
    """mxkit.quantize(x, fmt, axis, rule, rounding, hadamard, scale_layout, seed=seed,
    philox_stream=philox_stream) as an op:
    (codes, scales) as uint8 tensors on x's device (CPU: the host reference; CUDA: the device
    quantizer on the current stream). One axis per call; preset, out= and stream= are the
    function's only."""
    _one_axis("quantize", axis)
    codes, scales = mxkit.quantize(x, fmt, axis, rule, rounding, hadamard, scale_layout, seed=seed, philox_stream=philox_stream)
    return codes, scales


@quantize.register_fake
def _quantize_fake(x, fmt, axis="rowwise", scale_layout="row_major", hadamard=False, rule=None, rounding=None, seed=0,
                   philox_stream=0):
    _one_axis("quantize", axis)
    rows, cols = mxkit._shape2(x, "mxkit::quantize")  # a symbolic size is specialized here (int())
    d = mxkit._describe("mxkit::quantize", rows, cols, fmt, axis, "mxkit", scale_layout, rule, rounding, hadamard,
                        False, seed, philox_stream=philox_stream)
    return x.new_empty(d.data_shape, dtype=torch.uint8), x.new_empty(d.scale_shape, dtype=torch.uint8)


@torch.library.custom_op("mxkit::dequantize", mutates_args=())
def dequantize(codes: Tensor, scales: Tensor, fmt: str, rows: int, cols: int, axis: str = "rowwise",
               scale_layout: str = "row_major", hadamard: bool = False, out_dtype: str = "float32") -> Tensor:
    """mxkit.dequantize(codes, scales, fmt, (rows, cols), axis, scale_layout, hadamard=hadamard)
    as an op: the [rows, cols] values on codes' device. The package dequantizes on the host (CUDA
    codes are copied there and the values back); out_dtype "bfloat16" is torch's cast of the
    float32 values (exact for MX values, rounded once after a Hadamard rotation is undone)."""
    _one_axis("dequantize", axis)
    dtype = _out_dtype("dequantize", out_dtype)
    y = mxkit.dequantize(codes, scales, fmt, (rows, cols), axis, scale_layout, hadamard=hadamard)
    if not isinstance(y, Tensor):  # CUDA codes: the host result as an mxkit.Tensor
        y = torch.from_dlpack(y)
    return y.to(device=codes.device, dtype=dtype)


@dequantize.register_fake
def _dequantize_fake(codes, scales, fmt, rows, cols, axis="rowwise", scale_layout="row_major", hadamard=False,
                     out_dtype="float32"):
    _one_axis("dequantize", axis)
    return codes.new_empty((rows, cols), dtype=_out_dtype("dequantize", out_dtype))


@torch.library.custom_op("mxkit::gemm", mutates_args=(), device_types="cuda")
def gemm(a_codes: Tensor, a_scales: Tensor, b_codes: Tensor, b_scales: Tensor, fmt: str, b_fmt: Optional[str] = None,
         k: Optional[int] = None, out_dtype: str = "float32", alpha: float = 1.0, hadamard: bool = False) -> Tensor:
    """mxkit.gemm as an op: D[P, Q] = alpha * A[P, K] . B[Q, K]^T from two CUDA copies in
    mxkit's storage (quantize with scale_layout="row_major", rowwise along K), on the current
    stream. CUDA only (the package's GEMM is a device GEMM); out= and stream= are the function's."""
    return mxkit.gemm(a_codes, a_scales, b_codes, b_scales, fmt, b_fmt, k, out_dtype=out_dtype, alpha=alpha,
                      hadamard=hadamard)


@gemm.register_fake
def _gemm_fake(a_codes, a_scales, b_codes, b_scales, fmt, b_fmt=None, k=None, out_dtype="float32", alpha=1.0,
               hadamard=False):
    return a_codes.new_empty((a_codes.shape[0], b_codes.shape[0]), dtype=_out_dtype("gemm", out_dtype))
