# SPDX-License-Identifier: Apache-2.0
"""mxkit.torch_ops (issue 45, section 3): torch.ops.mxkit.quantize / dequantize / gemm pass
torch.library.opcheck (schema, fake tensors, autograd registration, AOT dispatch) on the CPU and
on CUDA; their fake implementations give the real outputs' shapes, dtypes and devices over every
format, both axes, every scale layout and ragged shapes; torch.compile(fullgraph=True) of a
function that calls them gives the eager bytes and values bit for bit. Skipped without torch >=
2.4; the CUDA cases without a GPU or a module built with MXKIT_GPU=CUDA."""
import pytest

import mxkit

torch = pytest.importorskip("torch")
if not all(hasattr(torch.library, name) for name in ("custom_op", "register_fake", "opcheck")):
    pytest.skip(f"mxkit.torch_ops needs torch >= 2.4, this is {torch.__version__}", allow_module_level=True)

from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

from mxkit import torch_ops  # noqa: E402,F401  registers torch.ops.mxkit.*

ops = torch.ops.mxkit
CUDA = torch.cuda.is_available() and mxkit.has_gpu()
needs_cuda = pytest.mark.skipif(not CUDA, reason="no CUDA device, or mxkit built without MXKIT_GPU=CUDA")
DEVICES = ["cpu", pytest.param("cuda", marks=needs_cuda)]


def matrix(rows, cols, device, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(rows, cols, generator=g) * 4).to(dtype).to(device)


def metadata(t):
    return tuple(t.shape), t.dtype, t.device


def fake_outputs(op, *args, **kwargs):
    """op's outputs from its fake implementation: tensor arguments become fake tensors."""
    mode = FakeTensorMode()
    fake = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args]
    with mode:
        out = op(*fake, **kwargs)
    return out if isinstance(out, tuple) else (out,)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fmt", mxkit.FORMATS)
@pytest.mark.parametrize("axis,layout", [("rowwise", "row_major"), ("columnwise", "row_major"),
                                         ("rowwise", "cublas_128x4"), ("columnwise", "cublas_128x4"),
                                         ("rowwise", "aiter_shuffle"), ("columnwise", "aiter_shuffle")])
def test_fake_shapes_equal_real(device, fmt, axis, layout):
    for rows, cols in ((64, 64), (96, 80), (200, 160), (1, 32), (300, 544)):
        x = matrix(rows, cols, device)
        kw = dict(axis=axis, scale_layout=layout)
        real = ops.quantize(x, fmt, **kw)
        fake = fake_outputs(ops.quantize, x, fmt, **kw)
        assert [metadata(f) for f in fake] == [metadata(r) for r in real], (rows, cols)
        assert all(r.dtype == torch.uint8 and r.device == x.device for r in real)
        for out_dtype in ("float32", "bfloat16"):
            y = ops.dequantize(*real, fmt, rows, cols, out_dtype=out_dtype, **kw)
            assert metadata(y) == ((rows, cols), getattr(torch, out_dtype), x.device)
            assert [metadata(f) for f in fake_outputs(ops.dequantize, *real, fmt, rows, cols, out_dtype=out_dtype, **kw)] \
                == [metadata(y)]


@pytest.mark.parametrize("device", DEVICES)
def test_ops_are_the_package_functions(device):
    """The ops return what mxkit.quantize / dequantize return, byte for byte and value for value."""
    x = matrix(96, 128, device, dtype=torch.bfloat16)
    kw = dict(axis="columnwise", scale_layout="cublas_128x4", hadamard=True, rounding="stochastic", seed=9,
              philox_stream=12345)
    codes, scales = ops.quantize(x, "mxfp4", **kw)
    copy = mxkit.quantize(x, "mxfp4", **kw)
    assert torch.equal(codes, copy.codes) and torch.equal(scales, copy.scales)
    y = ops.dequantize(codes, scales, "mxfp4", 96, 128, axis="columnwise", scale_layout="cublas_128x4", hadamard=True)
    want = mxkit.dequantize(copy)  # a host result: torch for CPU codes, mxkit.Tensor for CUDA ones
    want = want if isinstance(want, torch.Tensor) else torch.from_dlpack(want)
    assert torch.equal(y.cpu(), want)
    yb = ops.dequantize(codes, scales, "mxfp4", 96, 128, axis="columnwise", scale_layout="cublas_128x4", hadamard=True,
                        out_dtype="bfloat16")
    assert torch.equal(yb.cpu(), want.to(torch.bfloat16))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fmt,axis,layout,extra", [
    ("mxfp4", "rowwise", "row_major", {}),
    ("mxfp8_e4m3", "columnwise", "cublas_128x4", {"rule": "round_up"}),
    ("mxfp6_e3m2", "rowwise", "aiter_shuffle", {"hadamard": True}),
    ("mxint8", "columnwise", "row_major", {"rounding": "stochastic", "seed": 5}),
    ("mxfp4", "columnwise", "row_major", {"rounding": "stochastic", "seed": 5, "philox_stream": 77}),
])
def test_opcheck_quantize_and_dequantize(device, fmt, axis, layout, extra):
    x = matrix(96, 64, device)
    kw = dict(axis=axis, scale_layout=layout, **extra)
    torch.library.opcheck(ops.quantize.default, (x, fmt), kw)
    torch.library.opcheck(ops.quantize.default, (x.to(torch.bfloat16), fmt), kw)
    codes, scales = ops.quantize(x, fmt, **kw)
    dq = dict(axis=axis, scale_layout=layout, hadamard=extra.get("hadamard", False))
    for out_dtype in ("float32", "bfloat16"):
        torch.library.opcheck(ops.dequantize.default, (codes, scales, fmt, 96, 64), dict(dq, out_dtype=out_dtype))


@needs_cuda
@pytest.mark.parametrize("fa,fb,out_dtype,alpha", [("mxfp8_e4m3", "mxfp8_e4m3", "float32", 1.0),
                                                   ("mxfp4", "mxfp4", "bfloat16", 0.5),
                                                   ("mxfp8_e5m2", "mxfp4", "float32", 2.0)])
def test_opcheck_gemm(fa, fb, out_dtype, alpha):
    a, b = matrix(256, 512, "cuda"), matrix(192, 512, "cuda", seed=1)
    ca, cb = ops.quantize(a, fa), ops.quantize(b, fb)
    kw = dict(b_fmt=fb, out_dtype=out_dtype, alpha=alpha)
    torch.library.opcheck(ops.gemm.default, (*ca, *cb, fa), kw)
    d = ops.gemm(*ca, *cb, fa, **kw)
    assert torch.equal(d, mxkit.gemm(*ca, *cb, fa, fb, out_dtype=out_dtype, alpha=alpha))
    assert [metadata(f) for f in fake_outputs(ops.gemm, *ca, *cb, fa, **kw)] == [metadata(d)]
    assert metadata(d) == ((256, 192), getattr(torch, out_dtype), a.device)


def test_misuse_is_an_error():
    x = matrix(64, 64, "cpu")
    with pytest.raises(ValueError, match="axis"):
        ops.quantize(x, "mxfp4", axis="both")
    with pytest.raises(ValueError, match="axis"):
        fake_outputs(ops.quantize, x, "mxfp4", axis="both")
    codes, scales = ops.quantize(x, "mxfp4")
    with pytest.raises(ValueError, match="out_dtype"):
        ops.dequantize(codes, scales, "mxfp4", 64, 64, out_dtype="float16")
    with pytest.raises(ValueError, match="out_dtype"):
        fake_outputs(ops.dequantize, codes, scales, "mxfp4", 64, 64, out_dtype="float16")
    with pytest.raises(ValueError, match="format"):
        fake_outputs(ops.quantize, x, "fp7")
    with pytest.raises(NotImplementedError):  # the GEMM is a device GEMM: no CPU kernel
        ops.gemm(codes, scales, codes, scales, "mxfp4")


# torch.compile: the CPU case through AOT autograd without code generation (no C++ compiler
# needed), the CUDA case through Inductor.
COMPILE = [("cpu", "aot_eager"), pytest.param("cuda", "inductor", marks=needs_cuda)]


@pytest.mark.parametrize("device,backend", COMPILE)
@pytest.mark.parametrize("fmt,layout,hadamard,dtype", [("mxfp4", "row_major", False, torch.float32),
                                                       ("mxfp8_e4m3", "cublas_128x4", True, torch.bfloat16),
                                                       ("mxint8", "aiter_shuffle", False, torch.float32)])
def test_compiled_round_trip_equals_eager(device, backend, fmt, layout, hadamard, dtype):
    torch._dynamo.reset()

    def round_trip(x):
        codes, scales = ops.quantize(x, fmt, scale_layout=layout, hadamard=hadamard)
        y = ops.dequantize(codes, scales, fmt, x.shape[0], x.shape[1], scale_layout=layout, hadamard=hadamard)
        return codes, scales, y

    x = matrix(128, 256, device, dtype=dtype)
    eager = round_trip(x)
    compiled = torch.compile(round_trip, fullgraph=True, backend=backend)(x)
    for e, c in zip(eager, compiled):
        assert metadata(e) == metadata(c) and torch.equal(e, c)


@needs_cuda
@pytest.mark.parametrize("fmt,out_dtype", [("mxfp8_e4m3", "bfloat16"), ("mxfp4", "float32")])
def test_compiled_gemm_equals_eager(fmt, out_dtype):
    torch._dynamo.reset()

    def mx_linear(a, w):  # relu(A . W^T) with both operands quantized along K
        d = ops.gemm(*ops.quantize(a, fmt), *ops.quantize(w, fmt), fmt, out_dtype=out_dtype)
        return torch.relu(d)

    a, w = matrix(256, 512, "cuda"), matrix(384, 512, "cuda", seed=2)
    eager = mx_linear(a, w)
    compiled = torch.compile(mx_linear, fullgraph=True)(a, w)
    assert metadata(eager) == metadata(compiled) and torch.equal(eager, compiled)
