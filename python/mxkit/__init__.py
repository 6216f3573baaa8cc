# SPDX-License-Identifier: Apache-2.0
"""mxkit from Python: quantize, dequantize and validate OCP Microscaling (MX) tensors.

Tensors cross without a copy: NumPy arrays through the buffer protocol, torch / CuPy / JAX
tensors through DLPack (``__dlpack__``). Host arrays go to mxkit's host reference (the oracle),
CUDA tensors to its device kernels, on the caller's stream. Results are NumPy arrays for NumPy
input, torch tensors for torch input (``torch.from_dlpack``), CuPy arrays for CuPy input, and
``mxkit.Tensor`` (DLPack and buffer protocol) otherwise. No Python framework is imported unless
its tensors are passed in.

    import mxkit, numpy as np
    x = np.random.randn(128, 256).astype(np.float32)
    codes, scales = mxkit.quantize(x, "mxfp4", scale_layout="cublas_128x4")
    r = mxkit.validate(x, codes, scales, fmt="mxfp4", preset="torchao_floor", layout="cublas_128x4")
    print(r.summary())

Names (formats, axes, rules, roundings, scale layouts) are mxkit's own (``mxkit.FORMATS``...);
formats also take the short names e2m1/fp4, e4m3, e5m2, e2m3, e3m2, int8 and torch dtypes.
"""
from . import _mxkit

__all__ = [
    "quantize", "dequantize", "encode", "decode", "pack_fp4", "unpack_fp4", "validate", "validate_gemm", "gemm",
    "MXCopy", "Tensor", "Report", "GemmReport", "FORMATS", "PRESETS", "SCALE_LAYOUTS", "has_gpu", "__version__",
]

__version__ = _mxkit.version
Tensor = _mxkit.Tensor
Report = _mxkit.ValidationResult
GemmReport = _mxkit.GemmValidationResult

FORMATS = ("mxfp4", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp8_e4m3", "mxfp8_e5m2", "mxint8")
SCALE_LAYOUTS = ("row_major", "cublas_128x4", "aiter_shuffle")
PRESETS = ("mxkit", "torchao_floor", "torchao_rceil", "torchao_ceil", "torchao_even", "te_mxfp8", "rocm_te_mxfp4",
           "rocm_te_mxfp4_software")
_ALIASES = {
    "fp4": "mxfp4", "e2m1": "mxfp4", "float4_e2m1fn_x2": "mxfp4",
    "fp6_e2m3": "mxfp6_e2m3", "e2m3": "mxfp6_e2m3", "float6_e2m3fn": "mxfp6_e2m3",
    "fp6_e3m2": "mxfp6_e3m2", "e3m2": "mxfp6_e3m2", "float6_e3m2fn": "mxfp6_e3m2",
    "fp8_e4m3": "mxfp8_e4m3", "e4m3": "mxfp8_e4m3", "float8_e4m3fn": "mxfp8_e4m3",
    "fp8_e5m2": "mxfp8_e5m2", "e5m2": "mxfp8_e5m2", "float8_e5m2": "mxfp8_e5m2",
    "int8": "mxint8",
}
# The element format each peer preset implies when none is given.
_PRESET_FORMAT = {"te_mxfp8": "mxfp8_e4m3", "rocm_te_mxfp4": "mxfp4", "rocm_te_mxfp4_software": "mxfp4"}


def has_gpu():
    """Whether this build has the device half (built with MXKIT_GPU=CUDA)."""
    return bool(_mxkit.gpu)


def _format(fmt):
    if fmt is None:
        return None
    name = str(fmt).rsplit(".", 1)[-1]  # torch.float8_e4m3fn -> float8_e4m3fn
    name = _ALIASES.get(name, name)
    if name not in FORMATS:
        raise ValueError(f"format {fmt!r} is not one of {', '.join(FORMATS)} (or e2m1, e4m3, e5m2, e2m3, e3m2, int8)")
    return name


def _framework(x):
    mod = type(x).__module__.split(".")[0]
    return mod if mod in ("torch", "cupy", "numpy") else None


def _is_device(x):
    if hasattr(x, "__dlpack_device__") and not isinstance(x, _mxkit.Tensor):
        return int(x.__dlpack_device__()[0]) not in (1, 3)  # kDLCPU, kDLCUDAHost
    return isinstance(x, _mxkit.Tensor) and x.device != "cpu"


def _bytes_view(x):
    """A one-byte-per-element tensor as uint8 (torch float8 / float4x2 / e8m0 dtypes included)."""
    if _framework(x) == "torch" and x.element_size() == 1 and str(x.dtype) not in ("torch.uint8", "torch.int8"):
        import torch
        return x.view(torch.uint8)
    return x


def _caller_stream(x, stream):
    """The CUDA stream (a DLPack integer) mxkit works on for device tensor x."""
    if stream is not None:
        return int(stream) or 1
    fw = _framework(x)
    if fw == "torch":
        import torch
        ptr = torch.cuda.current_stream(x.device).cuda_stream
    elif fw == "cupy":
        import cupy
        ptr = cupy.cuda.get_current_stream().ptr
    else:
        ptr = 0
    return ptr or 1  # DLPack: 1 is the legacy default stream (0 is not a valid stream argument)


def _import(x, stream=None):
    """An mxkit.Tensor reading x in place. It owns what it reads (the producer's DLPack tensor or
    a buffer view), so a temporary x may die as soon as this returns."""
    x = _bytes_view(x)
    if _framework(x) == "torch" and x.requires_grad:
        x = x.detach()  # torch refuses to export a tensor that requires grad; mxkit only reads it
    return _mxkit.import_tensor(x, stream)


def _record_stream(x, stream):
    """Tells torch's caching allocator that device tensor x is read on `stream` (a DLPack
    integer), when that is not x's current stream: otherwise, once the caller frees x, its memory
    may be handed to a new tensor while mxkit's kernel still reads it."""
    if _framework(x) != "torch" or not x.is_cuda:
        return
    import torch
    current = torch.cuda.current_stream(x.device)
    if (current.cuda_stream or 1) == stream:
        return
    s = torch.cuda.default_stream(x.device) if stream == 1 else torch.cuda.ExternalStream(stream, device=x.device)
    x.record_stream(s)


def _host(x):
    """x on the host: a device tensor is copied (validation is a host oracle); host ones are read
    in place. The copy is returned for _import, whose tensor keeps it alive."""
    if not _is_device(x):
        return x
    if _framework(x) == "torch":
        return x.detach().cpu()
    if hasattr(x, "get"):
        return x.get()
    if hasattr(x, "cpu"):
        return x.cpu()
    raise ValueError(f"cannot bring {type(x).__name__} to the host; pass a host array")


def _like(x, arr):
    """Result `arr` (a NumPy array or mxkit.Tensor) in input x's framework."""
    fw = _framework(x)
    if fw == "torch":
        import torch
        return torch.from_dlpack(arr)
    if fw == "cupy":
        import cupy
        return cupy.from_dlpack(arr)
    return arr


def _shape2(x):
    shape = tuple(int(s) for s in x.shape)
    if len(shape) != 2:
        raise ValueError(f"expected a 2-D [rows, cols] tensor, got shape {shape}")
    return shape


class MXCopy(tuple):
    """One quantized copy: ``codes, scales = copy``; ``copy.description`` says its layout.

    codes: the element codes (one byte each; MXFP4 two per byte, low nibble first unless the
    description says otherwise), [lines, bytes per line]. scales: the E8M0 bytes, [lines, blocks]
    row-major, or the flat padded buffer of a tiled layout (cublas_128x4, aiter_shuffle).
    """

    def __new__(cls, codes, scales, description):
        self = super().__new__(cls, (codes, scales))
        self.description = description
        return self

    codes = property(lambda self: self[0])
    scales = property(lambda self: self[1])

    def __repr__(self):
        return f"MXCopy({self.description!r})"


def _describe(rows, cols, fmt, axis, preset="mxkit", layout=None, rule=None, rounding=None, hadamard=None,
              random_signs=False, seed=0, nibbles=None, columnwise=None, padding_stored=None):
    if preset not in PRESETS:
        raise ValueError(f"preset {preset!r} is not one of {', '.join(PRESETS)}")
    fmt = _format(fmt) or _PRESET_FORMAT.get(preset)
    if fmt is None:
        raise ValueError("give the element format (fmt=...), e.g. 'mxfp4' or 'mxfp8_e4m3'")
    return _mxkit.describe_copy(rows, cols, fmt, axis, preset=preset, layout=layout, rule=rule, rounding=rounding,
                                hadamard=hadamard, random_signs=random_signs, seed=seed, nibbles=nibbles,
                                columnwise=columnwise, padding_stored=padding_stored)


def quantize(x, fmt, axis="rowwise", rule=None, rounding=None, hadamard=None, scale_layout="row_major", *,
             preset="mxkit", random_signs=False, seed=0, nibbles=None, stream=None, threads=0):
    """Quantizes a 2-D float32 / bfloat16 / float16 tensor to MX format `fmt`.

    axis: "rowwise" (blocks of 32 along a row), "columnwise" (along a column; stored transposed),
    or "both" (returns the two copies, one launch on the GPU). rule: floor (OCP, default), even,
    round_up (RCEIL), ceil. rounding: nearest_even (default), nearest_away, toward_zero,
    stochastic (with seed). hadamard: the 16-point rotation. scale_layout: row_major,
    cublas_128x4 (torch._scaled_mm / torchao to_blocked), aiter_shuffle. preset: a peer's
    quantizer reproduced byte for byte (host only), e.g. "torchao_rceil".

    Host input: the host reference. CUDA input: mxkit's device quantizer, on `stream` (a CUDA
    stream handle; default: the framework's current stream), without a host synchronization.
    Returns an MXCopy (codes, scales), or (rowwise, columnwise) for axis="both".
    """
    device = _is_device(x)
    s = _caller_stream(x, stream) if device else None
    t = _import(x, s)
    if device:
        _record_stream(x, s)
    rows, cols = _shape2(t)
    both = axis == "both"
    first_axis = "rowwise" if both else axis
    desc = _describe(rows, cols, fmt, first_axis, preset, scale_layout, rule, rounding, hadamard, random_signs, seed,
                     nibbles)
    if device:
        outs = _mxkit.quantize_device(t, desc, both, s)
        descs = [desc]
        if both:
            descs.append(_describe(rows, cols, fmt, "columnwise", preset, scale_layout, rule, rounding, hadamard,
                                   random_signs, seed, nibbles))
        copies = [MXCopy(_like(x, c), _like(x, sc), d) for (c, sc), d in zip(outs, descs)]
        return tuple(copies) if both else copies[0]
    copies = []
    for a in (("rowwise", "columnwise") if both else (axis,)):
        d = desc if a == first_axis else _describe(rows, cols, fmt, a, preset, scale_layout, rule, rounding, hadamard,
                                                   random_signs, seed, nibbles)
        codes, scales = _mxkit.quantize_host(t, d, threads)
        copies.append(MXCopy(_like(x, codes), _like(x, scales), d))
    return tuple(copies) if both else copies[0]


def dequantize(codes, scales, fmt, shape, axis="rowwise", scale_layout="row_major", *, preset="mxkit",
               hadamard=None, random_signs=False, seed=0, nibbles=None, columnwise=None, padding_stored=None):
    """The logical [rows, cols] float32 values of a stored copy (the rotation undone). Host arrays
    (device ones are copied to the host first). Returns NumPy (or torch for torch input)."""
    rows, cols = (int(s) for s in shape)
    desc = _describe(rows, cols, fmt, axis, preset, scale_layout, None, None, hadamard, random_signs, seed, nibbles,
                     columnwise, padding_stored)
    out = _mxkit.dequantize_host(_import(_host(codes)), _import(_host(scales)), desc)
    return _like(codes, out) if not _is_device(codes) else out


def encode(x, fmt, rounding="nearest_even", saturate=True):
    """Element codes of float32 values, one byte each (MXFP4: not packed, see pack_fp4).
    saturate=False overflows as torch's casts do (E4M3: NaN, E5M2: Inf), so
    encode(x, "e4m3", saturate=False) equals x.to(torch.float8_e4m3fn).view(torch.uint8)."""
    import numpy as np
    arr = np.ascontiguousarray(np.asarray(_host(x), dtype=np.float32))
    return _mxkit.encode(_import(arr), _format(fmt), rounding, "saturate" if saturate else "propagate")


def decode(codes, fmt):
    """float32 values of element codes (one code per byte; MXFP4 unpacked, see unpack_fp4)."""
    import numpy as np
    arr = np.ascontiguousarray(np.asarray(_host(_bytes_view(codes)), dtype=np.uint8))
    return _mxkit.decode(_import(arr), _format(fmt))


def pack_fp4(codes, order="low_first"):
    """Two FP4 codes per byte along the last axis: element 2i in the low nibble (low_first, as
    torch.float4_e2m1fn_x2), or in the high nibble (high_first)."""
    import numpy as np
    c = np.asarray(codes, dtype=np.uint8) & 0xF
    if c.shape[-1] % 2:
        raise ValueError(f"pack_fp4: the last axis has {c.shape[-1]} codes, not an even number")
    even, odd = c[..., 0::2], c[..., 1::2]
    return (even | (odd << 4)) if order == "low_first" else (odd | (even << 4))


def unpack_fp4(packed, order="low_first"):
    """The inverse of pack_fp4."""
    import numpy as np
    p = np.asarray(_host(_bytes_view(packed)), dtype=np.uint8)
    lo, hi = p & 0xF, p >> 4
    first, second = (lo, hi) if order == "low_first" else (hi, lo)
    out = np.empty(p.shape[:-1] + (2 * p.shape[-1],), dtype=np.uint8)
    out[..., 0::2], out[..., 1::2] = first, second
    return out


def _format_of_codes(codes):
    name = str(getattr(codes, "dtype", ""))
    return {"torch.float8_e4m3fn": "mxfp8_e4m3", "torch.float8_e5m2": "mxfp8_e5m2",
            "torch.float4_e2m1fn_x2": "mxfp4"}.get(name)


def validate(x, codes, scales, fmt=None, axis="rowwise", preset="mxkit", layout=None, *, rule=None, rounding=None,
             hadamard=None, random_signs=False, seed=0, nibbles=None, columnwise=None, padding_stored=None,
             max_reported=16, diagnose=True, strict_nan_blocks=False, check_padding=True, threads=0):
    """Checks an MX copy another kernel wrote against mxkit's reference, byte for byte.

    x: the high-precision input [rows, cols]; codes, scales: the copy as stored. preset: how the
    peer quantizes and stores (mxkit, torchao_floor / _rceil / _ceil / _even, te_mxfp8,
    rocm_te_mxfp4[_software]); layout: the scale layout (row_major, cublas_128x4, aiter_shuffle);
    rule, rounding, hadamard, nibbles (low_first, high_first), columnwise (transposed,
    not_transposed), padding_stored override the preset. fmt may be left out for torch float8 /
    float4 code tensors and for presets of one format. Device tensors are copied to the host.

    Returns a Report: ok, counts, summary(), str() (the full report), mismatches (arrays: kind,
    row, column, line, block, index, expected, actual, expected_value, actual_value, scale, ...)
    and, when it fails and diagnose is on, diagnosis / passing_change: the common mistake
    (nibble order, scale layout, columnwise storage, scale rule) that would make it pass.
    """
    fmt = _format(fmt) or _format_of_codes(codes)
    xh = _import(_host(x))
    rows, cols = _shape2(xh)
    desc = _describe(rows, cols, fmt, axis, preset, layout, rule, rounding, hadamard, random_signs, seed, nibbles,
                     columnwise, padding_stored)
    return _mxkit.validate_host(xh, _import(_host(_bytes_view(codes))), _import(_host(_bytes_view(scales))),
                                desc, max_reported=max_reported, strict_nan_blocks=strict_nan_blocks,
                                check_padding=check_padding, diagnose=diagnose, threads=threads)


def _operand(codes, fmt, k, preset, layout, nibbles, rule, rounding, hadamard):
    fmt = _format(fmt) or _format_of_codes(codes) or _PRESET_FORMAT.get(preset)
    if fmt is None:
        raise ValueError("give the operand's element format (fmt=...)")
    lines, line_bytes = _shape2(codes)
    if k is None:
        k = line_bytes * (2 if fmt == "mxfp4" else 1)
    return _describe(lines, int(k), fmt, "rowwise", preset, layout, rule, rounding, hadamard, nibbles=nibbles)


def validate_gemm(a_codes, a_scales, b_codes, b_scales, d, fmt=None, b_fmt=None, k=None, *, preset="mxkit",
                  a_layout=None, b_layout=None, nibbles=None, rule=None, rounding=None, hadamard=None, alpha=1.0,
                  sample_rows=0, rows=None, accumulation="tensor_core", relative=0.0, absolute=0.0, max_reported=8,
                  threads=0):
    """Checks D[P,Q] = alpha * A[P,K] . B[Q,K]^T from two MX copies (both blocked along K, as a
    TN GEMM reads them) against the host reference within the accumulation bound
    (validation/validate_gemm.hpp). d: float32 or bfloat16 [P, Q]. Returns a GemmReport."""
    b_fmt = b_fmt or fmt
    a = _operand(a_codes, fmt, k, preset, a_layout, nibbles, rule, rounding, hadamard)
    b = _operand(b_codes, b_fmt, k, preset, b_layout, nibbles, rule, rounding, hadamard)
    h = lambda t: _import(_host(_bytes_view(t)))  # noqa: E731
    return _mxkit.validate_gemm_host(h(a_codes), h(a_scales), a, h(b_codes), h(b_scales), b, _import(_host(d)),
                                     alpha=alpha, sample_rows=sample_rows, rows=list(rows or []),
                                     accumulation=accumulation, relative=relative, absolute=absolute,
                                     max_reported=max_reported, threads=threads)


def gemm(a_codes, a_scales, b_codes, b_scales, fmt, b_fmt=None, k=None, *, out_dtype="float32", alpha=1.0,
         hadamard=None, stream=None):
    """D[P,Q] = alpha * A[P,K] . B[Q,K]^T on the GPU from two device MX copies in mxkit's storage
    (quantize(..., scale_layout="row_major") of A and of B, rowwise along K). out_dtype:
    "float32" or "bfloat16". Runs on `stream` (default: the framework's current stream) and
    returns the output as the inputs' framework's tensor (DLPack)."""
    if not has_gpu():
        raise RuntimeError("mxkit.gemm needs the device half: build the module with MXKIT_GPU=CUDA")
    a = _operand(a_codes, fmt, k, "mxkit", "row_major", None, None, None, hadamard)
    b = _operand(b_codes, b_fmt or fmt, k, "mxkit", "row_major", None, None, None, hadamard)
    if out_dtype not in ("float32", "bfloat16"):
        raise ValueError(f"out_dtype {out_dtype!r} is not float32 or bfloat16")
    s = _caller_stream(a_codes, stream)
    t = [_import(v, s) for v in (a_codes, a_scales, b_codes, b_scales)]
    for v in (a_codes, a_scales, b_codes, b_scales):
        _record_stream(v, s)
    out = _mxkit.gemm_device(t[0], t[1], a, t[2], t[3], b, out_dtype == "bfloat16", float(alpha), s)
    return _like(a_codes, out)
