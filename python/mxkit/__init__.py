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
    copy = mxkit.quantize(x, "mxfp4", scale_layout="cublas_128x4")
    print(mxkit.validate(x, copy).summary())        # the copy carries its description
    y = mxkit.dequantize(copy)                       # so does dequantize
    codes, scales = copy                             # a foreign copy: described by keywords
    r = mxkit.validate(x, codes, scales, fmt="mxfp4", preset="torchao_floor", scale_layout="cublas_128x4")

NVFP4 (E2M1, an E4M3 scale per 16 elements, an fp32 tensor scale): ``quantize(x, "nvfp4", ...)``
returns an NVFP4Copy, ``codes, scales, tensor_scale = copy``, which dequantize and validate read
as MX copies are read; presets "te_nvfp4" and "torchao_nvfp4" reproduce TransformerEngine's and
torchao's quantizers byte for byte (host tensors). CUDA tensors go to mxkit's device NVFP4
quantizer (preset "mxkit": the host reference's bytes), whose copies keep the tensor scale on the
device as a 1-element float32 tensor (reading it as a Python float would wait for the device);
``gemm(a, b)`` multiplies two device NVFP4 copies on the GPU.

Names (formats, axes, rules, roundings, scale layouts) are mxkit's own (``mxkit.FORMATS``...);
formats also take the short names e2m1/fp4, e4m3, e5m2, e2m3, e3m2, int8 and torch dtypes. One
keyword per concept in every function (``scale_layout``, ``nibbles``); the 0.2 spellings
``layout=``, ``a_layout=``, ``b_layout=`` and ``order=`` still work with a DeprecationWarning.
Every argument is checked before any work: a bad one raises ValueError (a value out of its
range) or TypeError (a value of the wrong kind) naming it.
"""
import contextlib
import functools
import numbers
import sys as _sys
import warnings

from . import _mxkit

__all__ = [
    "quantize", "dequantize", "encode", "decode", "pack_fp4", "unpack_fp4", "validate", "validate_gemm", "gemm",
    "MXCopy", "Tensor", "Report", "GemmReport", "FORMATS", "PRESETS", "SCALE_LAYOUTS", "has_gpu", "__version__",
    "NVFP4Copy", "NVFP4Report", "NVFP4_PRESETS", "NVFP4_BLOCKS", "nvfp4_amax", "nvfp4_tensor_scale",
]

__version__ = _mxkit.version
Tensor = _mxkit.Tensor
Report = _mxkit.ValidationResult
GemmReport = _mxkit.GemmValidationResult
NVFP4Report = _mxkit.NVFP4ValidationResult

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
_PRESET_FORMAT = {"te_mxfp8": "mxfp8_e4m3", "rocm_te_mxfp4": "mxfp4", "rocm_te_mxfp4_software": "mxfp4",
                  "te_nvfp4": "nvfp4", "torchao_nvfp4": "nvfp4"}
# NVFP4: its presets (mxkit's rule, TransformerEngine's and torchao's quantizers; the device
# quantizer writes mxkit's) and block shapes (1x16; 16x16 for TE's 2-D weight scaling).
NVFP4_PRESETS = ("mxkit", "te_nvfp4", "torchao_nvfp4")
NVFP4_BLOCKS = ("1x16", "16x16")


def __getattr__(name):
    """mxkit.linear, mxkit.torch and mxkit.torch_ops load on first use: `import mxkit` never
    imports torch (mxkit.torch and mxkit.torch_ops do)."""
    if name in ("linear", "torch", "torch_ops"):
        import importlib
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'mxkit' has no attribute {name!r}")


def has_gpu():
    """Whether this build has the device half (built with MXKIT_GPU=CUDA)."""
    return bool(_mxkit.gpu)


# ---- argument checks: every public argument is checked here or in _mxkit before any work, so a
# bad one is a ValueError / TypeError naming it, never pybind11's signature dump or a wrong number.
_INDEX_MAX = 2 ** 63 - 1
_MAX_THREADS = 1024  # the host reference starts n threads when asked for n


def _integer(func, name, value, lo=0, hi=_INDEX_MAX):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{func}: {name} must be an integer, got {value!r}")
    value = int(value)
    if not lo <= value <= hi:
        raise ValueError(f"{func}: {name}={value} is out of range [{lo}, {hi}]")
    return value


def _flag(func, name, value, optional=False):
    if value is None and optional:
        return None
    if isinstance(value, bool) or type(value).__name__ == "bool_":  # NumPy's bool too
        return bool(value)
    raise TypeError(f"{func}: {name} must be True or False{' or None' if optional else ''}, got {value!r}")


def _name(func, name, value, optional=True):
    """A keyword that takes one of mxkit's names: its kind here, its value in _mxkit (the names
    live once, in the C++ enum_names)."""
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{func}: {name} must be a string{' or None' if optional else ''}, got {value!r}")
    return value


def _real(func, name, value, lo=None):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{func}: {name} must be a real number, got {value!r}")
    value = float(value)
    if value != value or value in (float("inf"), float("-inf")) or (lo is not None and value < lo):
        raise ValueError(f"{func}: {name}={value!r} is out of range ({'a finite number' if lo is None else f'finite, >= {lo}'})")
    return value


def _stream_arg(func, stream):
    if stream is None:
        return None
    return _integer(func, "stream", stream, 0, 2 ** 64 - 1)


def _renamed(**old_to_new):
    """Keeps a keyword's 0.2 spelling for one release: it warns and means the new one."""
    def wrap(f):
        @functools.wraps(f)
        def call(*args, **kwargs):
            for old, new in old_to_new.items():
                if old in kwargs:
                    if new in kwargs:
                        raise TypeError(f"{f.__name__}: give {new}= only ({old}= is its deprecated spelling)")
                    warnings.warn(f"{f.__name__}: {old}= is deprecated; use {new}= (same meaning)", DeprecationWarning,
                                  stacklevel=2)
                    kwargs[new] = kwargs.pop(old)
            return f(*args, **kwargs)
        return call
    return wrap


def _format(fmt, func="mxkit", name="fmt"):
    if fmt is None:
        return None
    if not isinstance(fmt, str) and type(fmt).__module__.split(".")[0] != "torch":
        raise TypeError(f"{func}: {name} must be a format name or a torch dtype, got {fmt!r}")
    short = str(fmt).rsplit(".", 1)[-1]  # torch.float8_e4m3fn -> float8_e4m3fn
    short = _ALIASES.get(short, short)
    if short not in FORMATS:
        raise ValueError(f"{func}: {name}: format {fmt!r} is not one of {', '.join(FORMATS)} "
                         "(or e2m1, e4m3, e5m2, e2m3, e3m2, int8)")
    return short


def _framework(x):
    mod = type(x).__module__.split(".")[0]
    return mod if mod in ("torch", "cupy", "numpy") else None


def _is_device(x):
    if _framework(x) == "torch" and x.is_cuda:  # without torch's __dlpack_device__ (Python code)
        return True
    if hasattr(x, "__dlpack_device__") and not isinstance(x, _mxkit.Tensor):
        try:
            return int(x.__dlpack_device__()[0]) not in (1, 3)  # kDLCPU, kDLCUDAHost
        except Exception:  # a broken producer: _import names it
            return False
    return isinstance(x, _mxkit.Tensor) and x.device != "cpu"


def _bytes_view(x):
    """A one-byte-per-element tensor as uint8 (torch float8 / float4x2 / e8m0 dtypes included)."""
    if _framework(x) == "torch" and x.element_size() == 1 and str(x.dtype) not in ("torch.uint8", "torch.int8"):
        import torch
        return x.view(torch.uint8)
    return x


def _torch_stream(x, stream):
    """torch's stream object for a DLPack stream integer on x's device."""
    import torch
    if stream == 1:
        return torch.cuda.default_stream(x.device)
    return torch.cuda.ExternalStream(stream, device=x.device)


def _caller_stream(x, stream):
    """The CUDA stream (a DLPack integer) mxkit works on for device tensor x."""
    if stream is not None:
        return int(stream) or 1
    fw = _framework(x)
    if fw == "torch":
        ptr = _torch_current_stream(x)
    elif fw == "cupy":
        import cupy
        ptr = cupy.cuda.get_current_stream().ptr
    else:
        ptr = 0
    return ptr or 1  # DLPack: 1 is the legacy default stream (0 is not a valid stream argument)


@functools.lru_cache(maxsize=None)
def _torch_helpers():
    """torch's current raw stream of a device index, and the DLPack (code, bits) of its dtypes
    that mxkit reads (one-byte float types as bytes, as _bytes_view reads them).
    torch._C._cuda_getCurrentRawStream is what torch's own generated code calls for the stream
    handle; where a torch lacks it, the public Stream object gives the same handle, slower."""
    import torch
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is None:
        def raw(index):
            return torch.cuda.current_stream(index).cuda_stream
    codes = {torch.float32: (2, 32), torch.float16: (2, 16), torch.bfloat16: (4, 16), torch.uint8: (1, 8),
             torch.int8: (0, 8), torch.int32: (0, 32), torch.int64: (0, 64), torch.bool: (6, 8)}
    for name in ("float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu", "float4_e2m1fn_x2"):
        if hasattr(torch, name):
            codes[getattr(torch, name)] = (1, 8)
    return raw, codes


def _torch_current_stream(x):
    """The handle of torch's current stream on CUDA tensor x's device (0: the legacy default)."""
    return _torch_helpers()[0](x.get_device())


def _torch_cuda_ref(x, stream):
    """A CUDA torch tensor as an mxkit.Tensor from its own attributes, no DLPack export (torch's
    __dlpack__ is Python code costing tens of microseconds a tensor). Only where mxkit works on x's
    current stream, which orders x's producer before mxkit's work as __dlpack__(stream) would;
    None otherwise (the DLPack path then orders them)."""
    if not x.is_cuda:
        return None
    raw, codes = _torch_helpers()
    code = codes.get(x.dtype)
    if code is None or stream is None or (raw(x.get_device()) or 1) != stream:
        return None
    return _mxkit.cuda_tensor(x.data_ptr(), code[0], code[1], x.shape, x.stride(), x.get_device(), x)


def _import(x, stream=None):
    """An mxkit.Tensor reading x in place. It owns what it reads (the producer's DLPack tensor,
    a buffer view, or the torch tensor itself), so a temporary x may die as soon as this returns."""
    if _framework(x) == "torch":
        t = _torch_cuda_ref(x, stream)
        if t is not None:
            return t
    x = _bytes_view(x)
    if _framework(x) == "torch" and x.requires_grad:
        x = x.detach()  # torch refuses to export a tensor that requires grad; mxkit only reads it
    return _mxkit.import_tensor(x, stream)


def _import_arg(func, name, x, stream=None):
    """_import with the argument's name in any error (a list, a producer that refuses)."""
    if isinstance(x, (MXCopy, NVFP4Copy)):
        raise TypeError(f"{func}: {name} is an {type(x).__name__}; pass its codes or scales, or the copy where the function "
                        "takes one")
    try:
        return _import(x, stream)
    except (ValueError, BufferError, RuntimeError) as e:
        raise ValueError(f"{func}: {name}: {e}") from None
    except (TypeError, AttributeError) as e:
        raise TypeError(f"{func}: {name} must be an array (NumPy, torch, CuPy or DLPack), got {type(x).__name__}: {e}") from None


def _record_stream(x, stream):
    """Tells torch's caching allocator that device tensor x is read or written on `stream` (a
    DLPack integer), when that is not x's current stream: otherwise, once the caller frees x, its
    memory may be handed to a new tensor while mxkit's kernel still uses it."""
    if _framework(x) != "torch" or not x.is_cuda:
        return
    if (_torch_current_stream(x) or 1) == stream:
        return
    x.record_stream(_torch_stream(x, stream))


def _device_empty(x, shapes, dtype, stream):
    """Empty results from device tensor x's framework (torch's caching allocator, CuPy's pool) on
    x's device, owned by `stream`; None for other frameworks (mxkit's stream-ordered pool then)."""
    fw = _framework(x)
    if fw == "torch":
        import torch
        if (_torch_current_stream(x) or 1) == stream:
            return [torch.empty(shape, dtype=getattr(torch, dtype), device=x.device) for shape in shapes]
        with torch.cuda.stream(_torch_stream(x, stream)):
            return [torch.empty(shape, dtype=getattr(torch, dtype), device=x.device) for shape in shapes]
    if fw == "cupy" and dtype != "bfloat16":  # CuPy has no bfloat16
        import cupy
        current = cupy.cuda.get_current_stream()
        ctx = contextlib.nullcontext() if (current.ptr or 1) == stream else cupy.cuda.ExternalStream(stream)
        with x.device, ctx:
            return [cupy.empty(shape, dtype=dtype) for shape in shapes]
    return None


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


def _shape2(t, func, name="x"):
    shape = tuple(int(s) for s in t.shape)
    if len(shape) != 2:
        raise ValueError(f"{func}: {name} must be 2-D [rows, cols], got shape {shape}")
    return shape


def _shape_arg(func, shape):
    try:
        dims = tuple(shape)
    except TypeError:
        raise TypeError(f"{func}: shape must be (rows, cols), got {shape!r}") from None
    if len(dims) != 2:
        raise ValueError(f"{func}: shape must be (rows, cols), got {shape!r}")
    return tuple(_integer(func, "shape", d) for d in dims)


class MXCopy(tuple):
    """One quantized copy: ``codes, scales = copy``; ``copy.description`` says how it is stored
    and was quantized (format, axis, shape, scale layout, rule, rounding, Hadamard...), so
    ``dequantize(copy)`` and ``validate(x, copy)`` need no argument that could disagree with it.

    codes: the element codes (one byte each; MXFP4 two per byte, low nibble first unless the
    description says otherwise), [lines, bytes per line]. scales: the E8M0 bytes, [lines, blocks]
    row-major, or the flat padded buffer of a tiled layout (cublas_128x4, aiter_shuffle).
    """

    def __new__(cls, codes, scales, description):
        if not isinstance(description, _mxkit.CopyDescription):
            raise TypeError(f"MXCopy: description must be a copy description (an MXCopy's .description), got "
                            f"{type(description).__name__}")
        self = super().__new__(cls, (codes, scales))
        self.description = description
        return self

    codes = property(lambda self: self[0])
    scales = property(lambda self: self[1])

    def __repr__(self):
        return f"MXCopy({self.description!r})"


def _layout_alias(d):
    warnings.warn("CopyDescription.layout is deprecated; use .scale_layout (same meaning)", DeprecationWarning,
                  stacklevel=2)
    return d.scale_layout


_mxkit.CopyDescription.layout = property(_layout_alias)


# ---- NVFP4 ---------------------------------------------------------------------------------
# The NVFP4 copies of the host reference (include/mxkit/ref/nvfp4_quantize.hpp) and the TE and
# torchao presets (validation/nvfp4_presets.hpp), behind the same quantize / dequantize / validate;
# on CUDA tensors the device quantizer (gpu/quantize_nvfp4.hpp) and GEMM (gpu/gemm/nvfp4.hpp).
# Every rule is the C++ library's; this layer checks the arguments' kinds and routes.
class NVFP4Copy(tuple):
    """One NVFP4 copy: ``codes, scales, tensor_scale = copy``; ``copy.description`` says how it is
    stored and was quantized (block shape, axis, shape, scale layout, preset and its formula,
    rounding, Hadamard...), so ``dequantize(copy)`` and ``validate(x, copy)`` take nothing that
    could disagree with it. The tensor scale is part of the copy: its values are code x E4M3
    scale x the decode scale the tensor scale gives, and without it they are off by that factor.

    codes: E2M1 codes two per byte, element 2i in the low nibble, [lines, bytes per line].
    scales: the E4M3 bytes, [lines, blocks] row-major (TE: its padded allocation), or the flat
    buffer of cublas_128x4. tensor_scale: a float, as the preset stores it (mxkit and torchao:
    the decode scale amax / 2688; TE: the copy's amax). A device copy (quantize of a CUDA tensor)
    keeps it where the device quantizer wrote it: a 1-element float32 tensor of the codes'
    framework on their device (``float(copy.tensor_scale)`` reads it, waiting for the device).
    """

    def __new__(cls, codes, scales, tensor_scale, description):
        if not isinstance(description, _mxkit.NVFP4Description):
            raise TypeError(f"NVFP4Copy: description must be an NVFP4 copy description (an NVFP4Copy's .description), "
                            f"got {type(description).__name__}")
        if not _is_device(tensor_scale):  # a device tensor scale is left unread (reading it waits for the device)
            tensor_scale = _real("NVFP4Copy", "tensor_scale", tensor_scale)
        self = super().__new__(cls, (codes, scales, tensor_scale))
        self.description = description
        return self

    codes = property(lambda self: self[0])
    scales = property(lambda self: self[1])
    tensor_scale = property(lambda self: self[2])

    def __repr__(self):
        t = self.tensor_scale
        shown = repr(t) if isinstance(t, float) else f"<on {getattr(t, 'device', 'the device')}>"  # not read: no wait
        return f"NVFP4Copy({self.description!r}, tensor_scale={shown})"


def _is_nvfp4(fmt):
    return isinstance(fmt, str) and fmt == "nvfp4"


def _nvfp4_form(func, codes, fmt, preset):
    """How dequantize / validate got an NVFP4 copy: "copy" (an NVFP4Copy), "loose" (arrays with
    fmt="nvfp4" or an NVFP4 preset), or None (MX)."""
    if isinstance(codes, NVFP4Copy):
        return "copy"
    if _is_nvfp4(fmt) or (fmt is None and isinstance(preset, str) and _PRESET_FORMAT.get(preset) == "nvfp4"):
        return "loose"
    return None


def _refuse(func, fmt, **given):
    """Keywords of the other family of formats: an error naming them, never silently ignored."""
    named = [k for k, v in given.items() if v is not None]
    if named:
        what, this = ("MX formats only", "fmt='nvfp4'") if _is_nvfp4(fmt) else ("fmt='nvfp4' only", f"fmt={fmt!r}")
        raise ValueError(f"{func}: {', '.join(named)} applies to {what}, not {this}; leave it out")


def _tensor_scale(func, value):
    """A given tensor scale as a float (its range is the preset's formula's: the C++ checks it).
    A device copy's (a 1-element float32 tensor on the GPU) is copied to the host: the host
    reference reads it there, as it reads the copy's codes (this waits for the device)."""
    if value is None:
        return None
    if _is_device(value) or (not isinstance(value, numbers.Real) and hasattr(value, "shape")):
        import numpy as np
        arr = np.asarray(_host(value))
        if arr.size != 1 or arr.dtype != np.float32:
            raise ValueError(f"{func}: tensor_scale must be one float32 value (as a device copy holds it), got "
                             f"{arr.dtype} of shape {arr.shape}")
        value = float(arr.reshape(()))
    return _real(func, "tensor_scale", value)


def _nvfp4_describe(func, rows, cols, axis="rowwise", preset="mxkit", block=None, scale_layout=None, rounding=None,
                    hadamard=None, random_signs=False, seed=0, tensor_scale_from_amax=True, philox_stream=0):
    if not isinstance(preset, str):
        raise TypeError(f"{func}: preset must be a string, got {preset!r}")
    if preset not in NVFP4_PRESETS:
        raise ValueError(f"{func}: preset {preset!r} is not an NVFP4 preset (one of {', '.join(NVFP4_PRESETS)})")
    block = _name(func, "block", block) or "1x16"
    if block not in NVFP4_BLOCKS:
        raise ValueError(f"{func}: block {block!r} is not one of {', '.join(NVFP4_BLOCKS)}")
    return _mxkit.describe_nvfp4(
        rows, cols, block, _name(func, "axis", axis, optional=False), preset, layout=_name(func, "scale_layout", scale_layout),
        rounding=_name(func, "rounding", rounding), hadamard=_flag(func, "hadamard", hadamard, optional=True),
        random_signs=_flag(func, "random_signs", random_signs), seed=_integer(func, "seed", seed, 0, 2 ** 64 - 1),
        philox_stream=_integer(func, "philox_stream", philox_stream, 0, 2 ** 32 - 1),
        tensor_scale_from_amax=_flag(func, "tensor_scale_from_amax", tensor_scale_from_amax))


def _quantize_nvfp4(x, axis, rounding, hadamard, scale_layout, preset, random_signs, seed, threads, block, tensor_scale,
                    stream=None, philox_stream=0):
    f = "quantize"
    given = _tensor_scale(f, tensor_scale)
    axes = ("rowwise", "columnwise") if isinstance(axis, str) and axis == "both" else (axis,)
    if _is_device(x):
        return _quantize_nvfp4_device(x, axes, rounding, hadamard, scale_layout, preset, random_signs, seed, block, given,
                                      stream, philox_stream)
    t = _import_arg(f, "x", x)
    rows, cols = _shape2(t, f)
    copies = []
    for a in axes:
        d = _nvfp4_describe(f, rows, cols, a, preset, block, scale_layout, rounding, hadamard, random_signs, seed,
                            tensor_scale_from_amax=given is None, philox_stream=philox_stream)
        codes, scales, stored, _ = _mxkit.nvfp4_quantize_host(t, d, given, threads)
        copies.append(NVFP4Copy(_like(x, codes), _like(x, scales), stored, d))
    return tuple(copies) if len(copies) == 2 else copies[0]


def _device_matrix(func, x, stream):
    """A device matrix x read in place on the caller's stream: (stream, x, rows, cols); a
    RuntimeError where the module has no GPU backend."""
    if not has_gpu():
        raise RuntimeError(f"{func}: x is a device tensor, but mxkit was built without a GPU backend: rebuild the "
                           "module with MXKIT_GPU=CUDA (docs/python.md)")
    s = _caller_stream(x, stream)
    t = _import_arg(func, "x", x, s)
    rows, cols = _shape2(t, func)
    return s, t, rows, cols


def _quantize_nvfp4_device(x, axes, rounding, hadamard, scale_layout, preset, random_signs, seed, block, given, stream,
                           philox_stream=0):
    """The device NVFP4 quantizer (gpu::quantize_nvfp4, both copies from one pass) on the
    caller's stream: codes, scales and each copy's tensor scale (one float32) allocated by x's
    framework (mxkit's pool for other DLPack producers), nothing read back. It writes mxkit's
    copies; the peers' presets are the host reference's, refused here before x is read."""
    f = "quantize"
    if isinstance(preset, str) and preset != "mxkit" and preset in NVFP4_PRESETS:
        raise ValueError(f"{f}: preset {preset!r} with a device tensor: the device NVFP4 quantizer writes mxkit's copies "
                         "only (preset='mxkit'); quantize a host copy of x for the peer's preset")
    s, t, rows, cols = _device_matrix(f, x, stream)
    descs = [_nvfp4_describe(f, rows, cols, a, preset, block, scale_layout, rounding, hadamard, random_signs, seed,
                             tensor_scale_from_amax=given is None, philox_stream=philox_stream) for a in axes]
    _record_stream(x, s)
    made = _device_empty(x, [shape for d in descs for shape in (tuple(d.data_shape), tuple(d.scale_shape))], "uint8", s)
    scalars = _device_empty(x, [(1,)] * len(descs), "float32", s) if made is not None else None
    arrays = None
    if made is not None and scalars is not None:
        arrays = [a for i in range(len(descs)) for a in (made[2 * i], made[2 * i + 1], scalars[i])]
    refs = None if arrays is None else [_import_arg(f, "out", a, s) for a in arrays]
    written = _mxkit.nvfp4_quantize_device(t, descs, given, s, refs)
    if arrays is not None:
        triples = [tuple(arrays[3 * i:3 * i + 3]) for i in range(len(descs))]
    else:
        triples = [tuple(_like(x, part) for part in triple) for triple in written]
    copies = [NVFP4Copy(*triple, d) for triple, d in zip(triples, descs)]
    return tuple(copies) if len(copies) == 2 else copies[0]


def _describe(func, rows, cols, fmt, axis, preset="mxkit", scale_layout=None, rule=None, rounding=None, hadamard=None,
              random_signs=False, seed=0, nibbles=None, columnwise=None, padding_stored=None, philox_stream=0):
    """The copy description of these arguments, checked, made once per distinct argument tuple:
    a description is immutable, and making one costs a call into C++ per call of quantize.
    typed=True keeps True and 1 apart (the checks accept one, refuse the other); arguments that
    cannot be hashed are described afresh (their checks then name them)."""
    args = (func, rows, cols, fmt, axis, preset, scale_layout, rule, rounding, hadamard, random_signs, seed, nibbles,
            columnwise, padding_stored, philox_stream)
    try:
        return _describe_cached(*args)
    except TypeError:
        return _describe_checked(*args)


def _describe_checked(func, rows, cols, fmt, axis, preset, scale_layout, rule, rounding, hadamard, random_signs, seed,
                      nibbles, columnwise, padding_stored, philox_stream=0):
    if not isinstance(preset, str):
        raise TypeError(f"{func}: preset must be a string, got {preset!r}")
    if preset in NVFP4_PRESETS and preset != "mxkit":
        raise ValueError(f"{func}: preset {preset!r} is an NVFP4 preset; it takes fmt='nvfp4', not {fmt!r}")
    if preset not in PRESETS:
        raise ValueError(f"{func}: preset {preset!r} is not one of {', '.join(PRESETS)}")
    fmt = _format(fmt, func) or _PRESET_FORMAT.get(preset)
    if fmt is None:
        raise ValueError(f"{func}: give the element format (fmt=...), e.g. 'mxfp4' or 'mxfp8_e4m3'")
    return _mxkit.describe_copy(
        rows, cols, fmt, _name(func, "axis", axis, optional=False), preset=preset,
        layout=_name(func, "scale_layout", scale_layout), rule=_name(func, "rule", rule),
        rounding=_name(func, "rounding", rounding), hadamard=_flag(func, "hadamard", hadamard, optional=True),
        random_signs=_flag(func, "random_signs", random_signs), seed=_integer(func, "seed", seed, 0, 2 ** 64 - 1),
        philox_stream=_integer(func, "philox_stream", philox_stream, 0, 2 ** 32 - 1), nibbles=_name(func, "nibbles", nibbles), columnwise=_name(func, "columnwise", columnwise),
        padding_stored=_flag(func, "padding_stored", padding_stored, optional=True))


_describe_cached = functools.lru_cache(maxsize=512, typed=True)(_describe_checked)


def _outputs(func, out, copies):
    """out= as a flat list [codes, scales, ...]: (codes, scales) for one copy, ((codes, scales),
    (codes, scales)) for axis="both"."""
    if out is None:
        return None
    try:
        flat = list(out) if copies == 1 else [a for pair in out for a in pair]
    except TypeError:
        flat = None
    if flat is None or len(flat) != 2 * copies or any(isinstance(a, (tuple, list)) for a in flat):
        want = "(codes, scales)" if copies == 1 else "((codes, scales), (codes, scales))"
        raise ValueError(f"{func}: out must be {want} for this axis, got {out!r}"[:400])
    return flat


@functools.lru_cache(maxsize=512, typed=True)
def _quantize_plan(rows, cols, fmt, axis, preset, scale_layout, rule, rounding, hadamard, random_signs, seed, nibbles,
                   philox_stream):
    """The copy descriptions of a quantize call and their stored shapes, checked, made once per
    distinct argument tuple (as _describe's); raises as quantize does for a bad argument."""
    f = "quantize"
    axes = ("rowwise", "columnwise") if isinstance(axis, str) and axis == "both" else (_name(f, "axis", axis, optional=False),)
    descs = tuple(_describe(f, rows, cols, fmt, a, preset, scale_layout, rule, rounding, hadamard, random_signs, seed, nibbles,
                            philox_stream=philox_stream) for a in axes)
    return descs, tuple(shape for d in descs for shape in (tuple(d.data_shape), tuple(d.scale_shape)))


def _quantize_torch_current(x, fmt, axis, preset, scale_layout, rule, rounding, hadamard, random_signs, seed, nibbles,
                            philox_stream):
    """quantize of a 2-D CUDA torch tensor (torch.Tensor or nn.Parameter, not a subclass that
    reinterprets data_ptr) on its current stream, results from torch's caching allocator: the
    common call with nothing but pointers crossing into C++ (issue 45: <= 20 us a call). None
    where this does not apply; quantize's general path then takes the call."""
    torch = _sys.modules.get("torch")
    if torch is None or type(x) not in (torch.Tensor, torch.nn.Parameter) or not x.is_cuda or _is_nvfp4(fmt):
        return None
    raw, codes = _torch_helpers()
    code = codes.get(x.dtype)
    shape = x.shape
    if code is None or len(shape) != 2 or (x.stride(1) != 1 and shape[1] > 1):
        return None
    rows, cols = shape
    try:
        descs, shapes = _quantize_plan(rows, cols, fmt, axis, preset, scale_layout, rule, rounding, hadamard, random_signs,
                                       seed, nibbles, philox_stream)
    except TypeError as e:  # an argument that cannot be hashed: the general path names it
        if "unhashable" in str(e):
            return None
        raise
    device = x.get_device()
    stream = raw(device) or 1
    arrays = [x.new_empty(s, dtype=torch.uint8) for s in shapes]  # x's device, its current stream
    _mxkit.quantize_device_raw(x.data_ptr(), code[0], code[1], rows, cols, x.stride(0) if rows > 1 else cols, device, descs[0],
                               descs[1] if len(descs) == 2 else None, stream, [a.data_ptr() for a in arrays])
    copies = [MXCopy(arrays[2 * i], arrays[2 * i + 1], d) for i, d in enumerate(descs)]
    return tuple(copies) if len(copies) == 2 else copies[0]


def quantize(x, fmt, axis="rowwise", rule=None, rounding=None, hadamard=None, scale_layout="row_major", *,
             preset="mxkit", random_signs=False, seed=0, nibbles=None, stream=None, threads=0, out=None, block=None,
             tensor_scale=None, philox_stream=0):
    """Quantizes a 2-D float32 / bfloat16 / float16 tensor to MX format `fmt`, or to NVFP4.

    axis: "rowwise" (blocks of 32 along a row), "columnwise" (along a column; stored transposed),
    or "both" (returns the two copies, one launch on the GPU). rule: floor (OCP, default), even,
    round_up (RCEIL), ceil. rounding: nearest_even (default), nearest_away, toward_zero,
    stochastic: Philox bits of key `seed` and stream `philox_stream` (a 32-bit integer: tensors
    rounded with one seed draw apart by stream; a columnwise copy flips its top bit, so the two
    copies of one call draw apart too; mxkit.linear takes the C++ layer's streams). hadamard: the
    16-point rotation. scale_layout: row_major,
    cublas_128x4 (torch._scaled_mm / torchao to_blocked), aiter_shuffle. preset: a peer's
    quantizer reproduced byte for byte (host only), e.g. "torchao_rceil".

    out: arrays to write the copy into, (codes, scales) (for axis="both", one pair per copy):
    bytes of exactly the shapes quantize returns, contiguous, on x's device; they are returned.

    Host input: the host reference. CUDA input: mxkit's device quantizer, on `stream` (a CUDA
    stream handle; default: the framework's current stream), without a host or device
    synchronization; the results are allocated by x's framework (torch's caching allocator,
    CuPy's pool) on that stream, or by mxkit's stream-ordered pool for other DLPack producers.
    Returns an MXCopy (codes, scales), or (rowwise, columnwise) for axis="both".

    fmt="nvfp4": block "1x16" (default) or "16x16"; tensor_scale None (computed from the copy's
    amax) or the value to store (mxkit, torchao: a decode scale; te_nvfp4: an amax); preset
    "mxkit", "te_nvfp4" (hadamard: the RHT on the columnwise copy) or "torchao_nvfp4"; rounding,
    hadamard, random_signs, seed, scale_layout (row_major, cublas_128x4, aiter_shuffle for mxkit)
    as for MX; rule, nibbles and out do not apply. Returns an NVFP4Copy (codes, scales,
    tensor_scale), or one per copy for axis="both" (each with the tensor scale of its own amax).
    CUDA input: mxkit's device NVFP4 quantizer, with the host reference's bytes (codes, scales,
    tensor scale) for every option of preset "mxkit" (both block shapes and axes, every rounding,
    stochastic with the host's draws for the same seed, the rotation and its random signs, a
    given tensor scale); the peers' presets raise ValueError (host tensors only). On `stream`,
    without a synchronization, as for MX; the copy's codes, scales and tensor scale are tensors of
    x's framework on x's device, the tensor scale a 1-element float32 tensor: it is computed on the
    device from the amax, and returning a Python float would wait for the device
    (``float(copy.tensor_scale)`` reads it when wanted).
    """
    f = "quantize"
    if out is None and stream is None and type(threads) is int and threads == 0 and block is None and tensor_scale is None:
        fast = _quantize_torch_current(x, fmt, axis, preset, scale_layout, rule, rounding, hadamard, random_signs, seed,
                                       nibbles, philox_stream)
        if fast is not None:
            return fast
    threads = _integer(f, "threads", threads, 0, _MAX_THREADS)
    stream = _stream_arg(f, stream)
    if _is_nvfp4(fmt):
        _refuse(f, fmt, rule=rule, nibbles=nibbles, out=out)
        return _quantize_nvfp4(x, axis, rounding, hadamard, scale_layout, preset, random_signs, seed, threads, block,
                               tensor_scale, stream, philox_stream)
    _refuse(f, fmt, block=block, tensor_scale=tensor_scale)
    if isinstance(axis, str) and axis == "both":
        axes = ("rowwise", "columnwise")
    else:
        axes = (_name(f, "axis", axis, optional=False),)
    device = _is_device(x)
    s = _caller_stream(x, stream) if device else None
    t = _import_arg(f, "x", x, s)
    rows, cols = _shape2(t, f)
    descs = [_describe(f, rows, cols, fmt, a, preset, scale_layout, rule, rounding, hadamard, random_signs, seed, nibbles,
                       philox_stream=philox_stream) for a in axes]
    given = _outputs(f, out, len(descs))
    if device:
        _record_stream(x, s)
        shapes = [shape for d in descs for shape in (d.data_shape, d.scale_shape)]
        arrays = given if given is not None else _device_empty(x, shapes, "uint8", s)
        refs = None if arrays is None else [_import_arg(f, "out", a, s) for a in arrays]
        made = _mxkit.quantize_device(t, descs, s, refs)
        if given is not None:
            for a in given:
                _record_stream(a, s)
        pairs = [(arrays[i], arrays[i + 1]) for i in range(0, len(arrays), 2)] if arrays is not None else \
            [(_like(x, c), _like(x, sc)) for c, sc in made]
    else:
        pairs = []
        for i, d in enumerate(descs):
            pair = None if given is None else given[2 * i:2 * i + 2]
            refs = None if pair is None else [_import_arg(f, "out", a) for a in pair]
            codes, scales = _mxkit.quantize_host(t, d, threads, refs)
            pairs.append(tuple(pair) if pair is not None else (_like(x, codes), _like(x, scales)))
    copies = [MXCopy(c, sc, d) for (c, sc), d in zip(pairs, descs)]
    return tuple(copies) if len(copies) == 2 else copies[0]


def _format_of_codes(codes):
    name = str(getattr(codes, "dtype", ""))
    return {"torch.float8_e4m3fn": "mxfp8_e4m3", "torch.float8_e5m2": "mxfp8_e5m2",
            "torch.float4_e2m1fn_x2": "mxfp4"}.get(name)


def _copy_form(func, copy, **loose):
    """The description of an MXCopy given where a loose copy could be: the keywords that describe
    a copy must then be left out (they could only disagree with the copy's own)."""
    given = [k for k, v in loose.items() if v is not None]
    if given:
        raise TypeError(f"{func}: an MXCopy carries its description; leave out {', '.join(given)} "
                        "(or pass codes and scales with the keywords that describe them)")
    return copy.description


def nvfp4_amax(x, axis="rowwise", block="1x16", hadamard=False, random_signs=False, seed=0, *, stream=None):
    """The amax an NVFP4 copy of x (quantize(x, "nvfp4", axis=..., block=..., hadamard=...,
    random_signs=..., seed=...)) takes its tensor scale from: mxkit's rule, the largest finite
    magnitude among the values the copy quantizes (after the rotation when hadamard; NaN and Inf
    are left out; 0 for no element).

    For the parts of a tensor that live apart (a rank's rows of a sharded weight, whole 16-row
    blocks each): the maximum of the parts' amaxes is the whole tensor's, and
    quantize(part, "nvfp4", ..., tensor_scale=nvfp4_tensor_scale(maximum)) gives the part's rows
    of the whole tensor's copy, byte for byte (mxkit's full sharding gathers NVFP4 weights so).

    A float for a host x; for a device x, a 1-element float32 tensor on its device from x's
    framework, written on `stream` (default: the framework's current one) without a
    synchronization."""
    f = "nvfp4_amax"
    if not isinstance(axis, str) or axis not in ("rowwise", "columnwise"):
        raise ValueError(f"{f}: axis {axis!r} is not 'rowwise' or 'columnwise' (the amax of one copy; a rotated copy's "
                         "depends on its axis)")
    if _is_device(x):
        s, t, rows, cols = _device_matrix(f, x, stream)
        d = _nvfp4_describe(f, rows, cols, axis, "mxkit", block, None, None, hadamard, random_signs, seed)
        _record_stream(x, s)
        made = _device_empty(x, [(1,)], "float32", s)
        written = _mxkit.nvfp4_amax_device(t, d, s, None if made is None else _import_arg(f, "out", made[0], s))
        return made[0] if made is not None else _like(x, written)
    t = _import_arg(f, "x", x)
    rows, cols = _shape2(t, f)
    return _mxkit.nvfp4_amax_host(t, _nvfp4_describe(f, rows, cols, axis, "mxkit", block, None, None, hadamard, random_signs, seed))


def nvfp4_tensor_scale(amax):
    """mxkit's NVFP4 tensor scale of an amax (block/nvfp4_scale.hpp): amax / (448 x 6) in fp32,
    at least 2^-126, and 1 for an amax of 0. A float; amax a finite number >= 0."""
    return _mxkit.nvfp4_tensor_scale(_real("nvfp4_tensor_scale", "amax", amax, 0.0))


def dequantize(codes, scales=None, fmt=None, shape=None, axis=None, scale_layout=None, *, preset=None, hadamard=None,
               random_signs=None, seed=None, nibbles=None, columnwise=None, padding_stored=None, block=None,
               tensor_scale=None):
    """The logical [rows, cols] float32 values of a copy (the rotation undone).

    dequantize(copy): an MXCopy from quantize, read as its description says.
    dequantize(codes, scales, fmt, shape, ...): a foreign copy described by keywords (as in
    validate); the codes must hold exactly what that description stores.

    Host arrays (device ones are copied to the host first). Returns NumPy (torch for torch
    host input).

    NVFP4: dequantize(copy) of an NVFP4Copy, or dequantize(codes, scales, "nvfp4", shape,
    tensor_scale=..., preset=..., block=...): never without the tensor scale, which the values
    are multiplied by (as its preset's formula decodes it: TE stores the amax)."""
    f = "dequantize"
    nvfp4 = _nvfp4_form(f, codes, fmt, preset)
    if nvfp4 == "copy":
        d = _copy_form(f, codes, scales=scales, fmt=fmt, shape=shape, axis=axis, scale_layout=scale_layout,
                       preset=preset, hadamard=hadamard, random_signs=random_signs, seed=seed, nibbles=nibbles,
                       columnwise=columnwise, padding_stored=padding_stored, block=block, tensor_scale=tensor_scale)
        codes, scales, tensor_scale = codes
    elif nvfp4 == "loose":
        if scales is None or shape is None or tensor_scale is None:
            raise TypeError(f"{f}: pass an NVFP4Copy, or codes, scales, fmt='nvfp4', shape=(rows, cols) and tensor_scale "
                            "(an NVFP4 copy's values are code x scale x its tensor scale: never dequantized without it)")
        _refuse(f, "nvfp4", nibbles=nibbles, columnwise=columnwise, padding_stored=padding_stored)
        rows, cols = _shape_arg(f, shape)
        d = _nvfp4_describe(f, rows, cols, axis or "rowwise", preset or "mxkit", block, scale_layout, None, hadamard,
                            False if random_signs is None else random_signs, 0 if seed is None else seed)
    if nvfp4:
        out = _mxkit.nvfp4_dequantize_host(_import_arg(f, "codes", _host(_bytes_view(codes))),
                                           _import_arg(f, "scales", _host(_bytes_view(scales))), d,
                                           _tensor_scale(f, tensor_scale))
        return _like(codes, out) if not _is_device(codes) else out
    _refuse(f, fmt, block=block, tensor_scale=tensor_scale)
    if isinstance(codes, MXCopy):
        d = _copy_form(f, codes, scales=scales, fmt=fmt, shape=shape, axis=axis, scale_layout=scale_layout,
                       preset=preset, hadamard=hadamard, random_signs=random_signs, seed=seed, nibbles=nibbles,
                       columnwise=columnwise, padding_stored=padding_stored)
        codes, scales = codes
    else:
        if scales is None or shape is None:
            raise TypeError(f"{f}: pass an MXCopy, or codes, scales, fmt and shape=(rows, cols)")
        rows, cols = _shape_arg(f, shape)
        d = _describe(f, rows, cols, _format(fmt, f) or _format_of_codes(codes), axis or "rowwise", preset or "mxkit",
                      scale_layout, None, None, hadamard, bool(random_signs) if random_signs is not None else False,
                      0 if seed is None else seed, nibbles, columnwise, padding_stored)
    out = _mxkit.dequantize_host(_import_arg(f, "codes", _host(_bytes_view(codes))),
                                 _import_arg(f, "scales", _host(_bytes_view(scales))), d)
    return _like(codes, out) if not _is_device(codes) else out


def _float32_values(func, name, x):
    """x's values as a contiguous float32 NumPy array, refusing any value float32 does not hold
    exactly: encoding a rounded copy would round twice."""
    import numpy as np
    if _framework(x) == "torch":
        import torch
        t = x.detach().cpu()
        x = t.float().numpy() if t.dtype in (torch.float16, torch.bfloat16, torch.float32) else t.numpy()
    else:
        x = _host(x)
    try:
        arr = np.asarray(x)
    except Exception as e:
        raise TypeError(f"{func}: {name} must be an array of real numbers, got {type(x).__name__}: {e}") from None
    if arr.dtype.kind not in "fiu":
        raise TypeError(f"{func}: {name} must hold real numbers (float32 preferred), got dtype {arr.dtype}")
    f32 = np.ascontiguousarray(arr, dtype=np.float32)
    if arr.dtype != np.float32:
        with np.errstate(invalid="ignore"):
            exact = np.array_equal(f32.astype(arr.dtype), arr, equal_nan=arr.dtype.kind == "f")
        if not exact:
            raise ValueError(f"{func}: {name} holds {arr.dtype} values that float32 cannot hold exactly; they would be "
                             f"rounded twice (pass {name}.astype(np.float32) if that is meant)")
    return f32


def _code_bytes(func, name, codes):
    """Codes as a contiguous host byte array, never cast from another dtype: a float array is not
    codes. Python lists of integers 0 to 255 are taken."""
    import numpy as np
    if isinstance(codes, (MXCopy, NVFP4Copy)):  # tuples, but not of codes
        return _import_arg(func, name, codes)
    if isinstance(codes, (list, tuple, int)) and not isinstance(codes, bool):
        arr = np.asarray(codes)
        if arr.dtype.kind not in "iu" or (arr.size and (arr.min() < 0 or arr.max() > 255)):
            raise ValueError(f"{func}: {name} must be integers from 0 to 255, got {codes!r}"[:300])
        return arr.astype(np.uint8)
    codes = _host(_bytes_view(codes))
    if _framework(codes) == "torch":
        return codes.contiguous()
    if isinstance(codes, np.ndarray):
        return np.ascontiguousarray(codes)
    return codes


def encode(x, fmt, rounding="nearest_even", saturate=True):
    """Element codes of float32 values, one byte each (MXFP4: not packed, see pack_fp4).
    saturate=False overflows as torch's casts do (E4M3: NaN, E5M2: Inf), so
    encode(x, "e4m3", saturate=False) equals x.to(torch.float8_e4m3fn).view(torch.uint8).
    Values of other dtypes are taken where float32 holds them exactly."""
    f = "encode"
    fmt = _format(fmt, f)
    if fmt is None:
        raise TypeError(f"{f}: fmt is required")
    rounding = _name(f, "rounding", rounding, optional=False)
    overflow = "saturate" if _flag(f, "saturate", saturate) else "propagate"
    return _mxkit.encode(_import_arg(f, "x", _float32_values(f, "x", x)), fmt, rounding, overflow)


def decode(codes, fmt):
    """float32 values of element codes (one code per byte; MXFP4 unpacked, see unpack_fp4). A
    byte with bits above the format's width is a ValueError."""
    f = "decode"
    fmt = _format(fmt, f)
    if fmt is None:
        raise TypeError(f"{f}: fmt is required")
    return _mxkit.decode(_import_arg(f, "codes", _code_bytes(f, "codes", codes)), fmt)


@_renamed(order="nibbles")
def pack_fp4(codes, nibbles="low_first"):
    """Two FP4 codes (0 to 15) per byte along the last axis: element 2i in the low nibble
    (low_first, as torch.float4_e2m1fn_x2), or in the high nibble (high_first)."""
    f = "pack_fp4"
    nibbles = _name(f, "nibbles", nibbles, optional=False)
    return _mxkit.pack_fp4(_import_arg(f, "codes", _code_bytes(f, "codes", codes)), nibbles)


@_renamed(order="nibbles")
def unpack_fp4(packed, nibbles="low_first"):
    """The inverse of pack_fp4."""
    f = "unpack_fp4"
    nibbles = _name(f, "nibbles", nibbles, optional=False)
    return _mxkit.unpack_fp4(_import_arg(f, "packed", _code_bytes(f, "packed", packed)), nibbles)


@_renamed(layout="scale_layout")
def validate(x, codes, scales=None, fmt=None, axis=None, preset=None, scale_layout=None, *, rule=None, rounding=None,
             hadamard=None, random_signs=None, seed=None, nibbles=None, columnwise=None, padding_stored=None,
             max_reported=16, diagnose=True, strict_nan_blocks=False, check_padding=True, threads=0, block=None,
             tensor_scale=None, tensor_scale_from_amax=None, philox_stream=None):
    """Checks an MX or NVFP4 copy against mxkit's reference, byte for byte.

    validate(x, copy): an MXCopy (from quantize, or built by hand), checked as its description
    says. validate(x, codes, scales, ...): a copy another kernel wrote, described by keywords:
    preset (how the peer quantizes and stores: mxkit, torchao_floor / _rceil / _ceil / _even,
    te_mxfp8, rocm_te_mxfp4[_software]); scale_layout (row_major, cublas_128x4, aiter_shuffle);
    rule, rounding (stochastic: with seed and philox_stream), hadamard, nibbles (low_first,
    high_first; MXFP4 only), columnwise (transposed, not_transposed), padding_stored override the
    preset. fmt may be left out for torch float8 / float4 code tensors and for presets of one
    format. x: the high-precision input [rows, cols]. Device tensors are copied to the host.

    Returns a Report: ok, counts, summary(), str() (the full report), mismatches (arrays: kind,
    row, column, line, block, index, expected, actual, expected_value, actual_value, scale, ...)
    and, when it fails and diagnose is on, diagnosis / passing_change: the common mistake
    (nibble order, scale layout, columnwise storage, scale rule) that would make it pass.

    NVFP4: validate(x, copy) of an NVFP4Copy, or validate(x, codes, scales, fmt="nvfp4",
    tensor_scale=..., preset="mxkit" | "te_nvfp4" | "torchao_nvfp4", axis, block, scale_layout,
    hadamard, rounding, seed, philox_stream): tensor_scale as the copy stores it (TE: the amax), checked against
    the copy's amax unless tensor_scale_from_amax=False (a given, calibrated one). Returns an
    NVFP4Report: the MX Report's fields plus the tensor scale's (tensor_scale_checked,
    expected_tensor_scale, actual_tensor_scale, tensor_scale_mismatches); its diagnosis tries
    NVFP4's mistakes (nibbles, scale layout, block shape, tensor scale, a forgotten rotation).
    """
    f = "validate"
    options = dict(max_reported=_integer(f, "max_reported", max_reported),
                   strict_nan_blocks=_flag(f, "strict_nan_blocks", strict_nan_blocks),
                   check_padding=_flag(f, "check_padding", check_padding), diagnose=_flag(f, "diagnose", diagnose),
                   threads=_integer(f, "threads", threads, 0, _MAX_THREADS))
    xh = _import_arg(f, "x", _host(x))
    nvfp4 = _nvfp4_form(f, codes, fmt, preset)
    if nvfp4 == "copy":
        d = _copy_form(f, codes, scales=scales, fmt=fmt, axis=axis, preset=preset, scale_layout=scale_layout, rule=rule,
                       rounding=rounding, hadamard=hadamard, random_signs=random_signs, seed=seed, nibbles=nibbles,
                       columnwise=columnwise, padding_stored=padding_stored, block=block, tensor_scale=tensor_scale,
                       tensor_scale_from_amax=tensor_scale_from_amax, philox_stream=philox_stream)
        codes, scales, tensor_scale = codes
    elif nvfp4 == "loose":
        if scales is None or tensor_scale is None:
            raise TypeError(f"{f}: pass an NVFP4Copy, or codes, scales and tensor_scale (as the copy stores it: mxkit, "
                            "torchao the decode scale, TE the amax)")
        _refuse(f, "nvfp4", rule=rule, nibbles=nibbles, columnwise=columnwise, padding_stored=padding_stored)
        rows, cols = _shape2(xh, f)
        d = _nvfp4_describe(f, rows, cols, axis or "rowwise", preset or "mxkit", block, scale_layout, rounding, hadamard,
                            False if random_signs is None else random_signs, 0 if seed is None else seed,
                            True if tensor_scale_from_amax is None else tensor_scale_from_amax,
                            0 if philox_stream is None else philox_stream)
    if nvfp4:
        return _mxkit.nvfp4_validate_host(xh, _import_arg(f, "codes", _host(_bytes_view(codes))),
                                          _import_arg(f, "scales", _host(_bytes_view(scales))), d,
                                          _tensor_scale(f, tensor_scale), **options)
    _refuse(f, fmt, block=block, tensor_scale=tensor_scale, tensor_scale_from_amax=tensor_scale_from_amax)
    if isinstance(codes, MXCopy):
        d = _copy_form(f, codes, scales=scales, fmt=fmt, axis=axis, preset=preset, scale_layout=scale_layout, rule=rule,
                       rounding=rounding, hadamard=hadamard, random_signs=random_signs, seed=seed, nibbles=nibbles,
                       columnwise=columnwise, padding_stored=padding_stored, philox_stream=philox_stream)
        codes, scales = codes
    else:
        if scales is None:
            raise TypeError(f"{f}: pass an MXCopy, or codes and scales")
        rows, cols = _shape2(xh, f)
        d = _describe(f, rows, cols, _format(fmt, f) or _format_of_codes(codes), axis or "rowwise", preset or "mxkit",
                      scale_layout, rule, rounding, hadamard, False if random_signs is None else random_signs,
                      0 if seed is None else seed, nibbles, columnwise, padding_stored,
                      0 if philox_stream is None else philox_stream)
    return _mxkit.validate_host(xh, _import_arg(f, "codes", _host(_bytes_view(codes))),
                                _import_arg(f, "scales", _host(_bytes_view(scales))), d, **options)


def _operand(func, side, codes, fmt, k, preset, scale_layout, nibbles, rule, rounding, hadamard):
    """The description of GEMM operand `side` (a or b) from its codes: K given or read from them;
    a K whose copy would not fill the codes' lines is an error (k=0 read a whole copy as empty)."""
    fmt = _format(fmt, func, "fmt" if side == "a" else "b_fmt") or _format_of_codes(codes) or _PRESET_FORMAT.get(preset)
    if fmt is None:
        raise ValueError(f"{func}: give the operands' element format (fmt=...)")
    lines, line_bytes = _shape2(codes, func, f"{side}_codes")
    inferred = line_bytes * (2 if fmt == "mxfp4" else 1)
    k = inferred if k is None else _integer(func, "k", k)
    d = _describe(func, lines, k, fmt, "rowwise", preset, scale_layout, rule, rounding, hadamard, nibbles=nibbles)
    if lines and d.data_shape[1] != line_bytes:
        raise ValueError(f"{func}: k={k} does not match {side}_codes, whose lines hold {line_bytes} bytes "
                         f"({fmt}: a copy with k={k} stores {d.data_shape[1]})")
    return d


@_renamed(a_layout="a_scale_layout", b_layout="b_scale_layout")
def validate_gemm(a_codes, a_scales, b_codes, b_scales, d, fmt=None, b_fmt=None, k=None, *, preset="mxkit",
                  a_scale_layout=None, b_scale_layout=None, nibbles=None, rule=None, rounding=None, hadamard=None,
                  alpha=1.0, sample_rows=0, rows=None, accumulation="tensor_core", relative=0.0, absolute=0.0,
                  max_reported=8, threads=0):
    """Checks D[P,Q] = alpha * A[P,K] . B[Q,K]^T from two MX copies (both blocked along K, as a
    TN GEMM reads them) against the host reference within the accumulation bound
    (validation/validate_gemm.hpp). d: float32 or bfloat16 [P, Q]. Returns a GemmReport."""
    f = "validate_gemm"
    h = lambda name, t: _import_arg(f, name, _host(_bytes_view(t)))  # noqa: E731
    ac, asc, bc, bsc = h("a_codes", a_codes), h("a_scales", a_scales), h("b_codes", b_codes), h("b_scales", b_scales)
    a = _operand(f, "a", ac, fmt or _format_of_codes(a_codes), k, preset, a_scale_layout, nibbles, rule, rounding,
                 hadamard)
    b = _operand(f, "b", bc, b_fmt or fmt or _format_of_codes(b_codes), k, preset, b_scale_layout, nibbles, rule,
                 rounding, hadamard)
    if rows is None:
        rows = []
    elif isinstance(rows, (str, bytes)) or not hasattr(rows, "__iter__"):
        raise TypeError(f"{f}: rows must be a list of row indices, got {rows!r}")
    rows = [_integer(f, "rows", r) for r in rows]
    return _mxkit.validate_gemm_host(ac, asc, a, bc, bsc, b, _import_arg(f, "d", _host(d)),
                                     alpha=_real(f, "alpha", alpha), sample_rows=_integer(f, "sample_rows", sample_rows),
                                     rows=rows, accumulation=_name(f, "accumulation", accumulation, optional=False),
                                     relative=_real(f, "relative", relative, 0.0),
                                     absolute=_real(f, "absolute", absolute, 0.0),
                                     max_reported=_integer(f, "max_reported", max_reported),
                                     threads=_integer(f, "threads", threads, 0, _MAX_THREADS))


def gemm(a_codes, a_scales=None, b_codes=None, b_scales=None, fmt=None, b_fmt=None, k=None, *, out_dtype="float32",
         alpha=1.0, hadamard=None, stream=None, out=None):
    """D[P,Q] = alpha * A[P,K] . B[Q,K]^T on the GPU from two device MX copies in mxkit's storage
    (quantize(..., scale_layout="row_major") of A and of B, rowwise along K). out_dtype:
    "float32" or "bfloat16". Runs on `stream` (default: the framework's current stream) without a
    synchronization; D is allocated by the inputs' framework (or mxkit's pool), or written into
    `out` ([P, Q] of out_dtype on their device), and returned in the inputs' framework. On
    Hopper an MXFP8 pair is expanded to its exact bf16 values and multiplied by cuBLASLt where
    it loads (gpu/gemm/sm90/dispatch.hpp): the same products, summed in cuBLASLt's order.

    gemm(a, b, out_dtype=..., alpha=..., stream=..., out=...): two device NVFP4Copy objects
    (quantize of CUDA tensors, preset "mxkit"; any block shape and scale layout, the same
    rotation), multiplied by the device NVFP4 GEMM (gpu/gemm/nvfp4.hpp) with each copy's tensor
    scale read on the device: D[P,Q] = alpha * A . B^T, P and Q the copies' lines, both blocked
    along K (a rowwise copy of X[P,K]; a columnwise copy of Y[K,P]). The copies carry their
    description: fmt, k and hadamard are left out. Its results differ from the host oracle only
    in the order of the fp32 additions (every product is exact)."""
    f = "gemm"
    if isinstance(a_codes, NVFP4Copy) or isinstance(a_scales, NVFP4Copy):
        return _gemm_nvfp4(a_codes, a_scales, out_dtype, alpha, stream, out,
                           dict(b_codes=b_codes, b_scales=b_scales, fmt=fmt, b_fmt=b_fmt, k=k, hadamard=hadamard))
    if a_scales is None or b_codes is None or b_scales is None or fmt is None:
        raise TypeError(f"{f}: pass a_codes, a_scales, b_codes, b_scales and fmt (two MX copies), or two NVFP4 copies "
                        "gemm(a, b)")
    if not has_gpu():
        raise RuntimeError("mxkit.gemm needs the device half: build the module with MXKIT_GPU=CUDA")
    if _name(f, "out_dtype", out_dtype, optional=False) not in ("float32", "bfloat16"):
        raise ValueError(f"{f}: out_dtype {out_dtype!r} is not float32 or bfloat16")
    alpha = _real(f, "alpha", alpha)
    s = _caller_stream(a_codes, _stream_arg(f, stream))
    t = [_import_arg(f, name, v, s) for name, v in
         (("a_codes", a_codes), ("a_scales", a_scales), ("b_codes", b_codes), ("b_scales", b_scales))]
    a = _operand(f, "a", t[0], fmt, k, "mxkit", "row_major", None, None, None, hadamard)
    b = _operand(f, "b", t[2], b_fmt or fmt, k, "mxkit", "row_major", None, None, None, hadamard)
    for v in (a_codes, a_scales, b_codes, b_scales):
        _record_stream(v, s)
    result = out
    if result is None and _is_device(a_codes):
        made = _device_empty(a_codes, [(a.rows, b.rows)], out_dtype, s)
        result = made[0] if made else None
    ref = None if result is None else _import_arg(f, "out", result, s)
    d = _mxkit.gemm_device(t[0], t[1], a, t[2], t[3], b, out_dtype == "bfloat16", alpha, s, ref)
    if out is not None:
        _record_stream(out, s)
    return result if result is not None else _like(a_codes, d)


def _gemm_nvfp4(a, b, out_dtype, alpha, stream, out, loose):
    """gemm(a, b) of two device NVFP4 copies: checked here (kinds, devices) and in C++ (storage,
    shapes, rotation, tensor scales) before the device GEMM runs on the caller's stream."""
    f = "gemm"
    for name, c in (("a", a), ("b", b)):
        if not isinstance(c, NVFP4Copy):
            raise TypeError(f"{f}: {name} must be an NVFP4Copy (quantize(x, 'nvfp4') of a CUDA tensor), got "
                            f"{type(c).__name__}; MX copies go as gemm(a_codes, a_scales, b_codes, b_scales, fmt)")
    given = [name for name, v in loose.items() if v is not None]
    if given:
        raise TypeError(f"{f}: NVFP4 copies carry their description; leave out {', '.join(given)}")
    on_device = {name: _is_device(c.codes) for name, c in (("a", a), ("b", b))}
    if not all(on_device.values()):
        where = lambda name: "a device" if on_device[name] else "a host"  # noqa: E731
        raise ValueError(f"{f}: a is {where('a')} NVFP4 copy and b is {where('b')} one; the NVFP4 GEMM runs on the GPU "
                         "and takes two device copies (quantize CUDA tensors)")
    for name, c in (("a", a), ("b", b)):
        if not _is_device(c.tensor_scale):
            raise ValueError(f"{f}: {name}.tensor_scale is {c.tensor_scale!r}, a host value; a device NVFP4 copy keeps "
                             "its tensor scale on the device (a 1-element float32 tensor, as quantize returns it)")
        if c.description.preset != "mxkit":
            raise ValueError(f"{f}: {name} is a preset {c.description.preset!r} copy; the device NVFP4 GEMM takes mxkit's "
                             "copies (preset='mxkit')")
    if _name(f, "out_dtype", out_dtype, optional=False) not in ("float32", "bfloat16"):
        raise ValueError(f"{f}: out_dtype {out_dtype!r} is not float32 or bfloat16")
    alpha = _real(f, "alpha", alpha)
    if not has_gpu():
        raise RuntimeError("mxkit.gemm needs the device half: build the module with MXKIT_GPU=CUDA")
    s = _caller_stream(a.codes, _stream_arg(f, stream))
    parts = [(f"{name}.{part}", getattr(c, part)) for name, c in (("a", a), ("b", b))
             for part in ("codes", "scales", "tensor_scale")]
    t = [_import_arg(f, name, v, s) for name, v in parts]
    for _, v in parts:
        _record_stream(v, s)
    result = out
    if result is None:
        made = _device_empty(a.codes, [(a.description.rows if a.description.axis == "rowwise" else a.description.cols,
                                        b.description.rows if b.description.axis == "rowwise" else b.description.cols)],
                             out_dtype, s)
        result = made[0] if made else None
    ref = None if result is None else _import_arg(f, "out", result, s)
    d = _mxkit.nvfp4_gemm_device(t[0], t[1], t[2], a.description, t[3], t[4], t[5], b.description,
                                 out_dtype == "bfloat16", alpha, s, ref)
    if out is not None:
        _record_stream(out, s)
    return result if result is not None else _like(a.codes, d)
