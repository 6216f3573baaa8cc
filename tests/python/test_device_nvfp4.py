# SPDX-License-Identifier: Apache-2.0
"""NVFP4 on a CUDA GPU from Python (issue 46), skipped without CUDA, torch, or a module built with
MXKIT_GPU=CUDA: the device quantizer's codes, scales and tensor scale equal the host reference's
byte for byte (every shape class: ragged, tiny, empty, NaN / Inf / zero blocks; each axis and
block shape; every input dtype, rounding, the rotation with and without random signs, a given
tensor scale, each scale layout; stochastic rounding with the host's draws for the same seed, as
tests/gpu/catch2_test_quantize_nvfp4.cu shows the C++ quantizers agree); dequantize and validate
of device copies; the device NVFP4 GEMM equal to the host oracle (ref/nvfp4_gemm.hpp) exactly
where every sum is exact in fp32, within the fp32 summation bound of
tests/gpu/catch2_test_gemm_nvfp4.cu elsewhere; results in torch's caching allocator (mxkit's
pool for other DLPack producers), no cudaMalloc / cudaFree / synchronization per call, and a
call on a busy stream returns before it is done; bad input refused naming the argument.
scripts/gpu.sh python -k nvfp4 runs it."""
import numpy as np
import pytest

import mxkit

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)
if not mxkit.has_gpu():
    pytest.skip("mxkit was built without MXKIT_GPU=CUDA", allow_module_level=True)

from test_device import DLPackOnly, cuda_api_calls  # noqa: E402  (the MX device tests' helpers)

DEV = torch.device("cuda")
U = 2.0 ** -24


def host_bytes(t):
    if isinstance(t, mxkit.Tensor):
        t = torch.from_dlpack(t)
    return t.cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)


def float_bits(v):
    return int(np.float32(v).view(np.uint32))


def adversarial(rows, cols, seed, dtype=torch.float32, specials=True):
    """Gaussian values over rows of very different magnitudes, with an all-zero block, NaN, +-Inf
    and a subnormal where the shape has room (float32 values first, then the dtype's rounding)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=g) * torch.logspace(-3, 3, max(rows, 1))[:rows, None]
    if specials and rows >= 4 and cols >= 48:
        x[1, 16:32] = 0.0
        x[2, 5] = float("nan")
        x[3, 40] = float("inf")
        x[0, 33] = float("-inf")
        x[min(5, rows - 1), 1] = 1e-40
    return x.to(dtype).to(DEV)


def assert_same_copy(dev, host, x):
    """A device copy equal to the host reference's: codes, scales and tensor scale, bit for bit."""
    assert dev.description.axis == host.description.axis and dev.description.block == host.description.block
    for part in (dev.codes, dev.scales, dev.tensor_scale):
        assert isinstance(part, torch.Tensor) and part.device == x.device, part
    assert dev.codes.dtype == torch.uint8 and dev.scales.dtype == torch.uint8
    assert dev.tensor_scale.dtype == torch.float32 and tuple(dev.tensor_scale.shape) == (1,)
    np.testing.assert_array_equal(host_bytes(dev.codes), host_bytes(host.codes))
    np.testing.assert_array_equal(host_bytes(dev.scales), host_bytes(host.scales))
    assert float_bits(dev.tensor_scale.item()) == float_bits(host.tensor_scale), (dev.tensor_scale.item(), host.tensor_scale)


def check_against_host(x, axis="both", **kw):
    got = mxkit.quantize(x, "nvfp4", axis=axis, **kw)
    want = mxkit.quantize(x.cpu(), "nvfp4", axis=axis, **kw)
    pairs = zip(got, want) if axis == "both" else [(got, want)]
    for g, w in pairs:
        assert_same_copy(g, w, x)
    return got


SHAPES = [(128, 256), (200, 160), (100, 70), (16, 16), (1, 48), (33, 17), (0, 64), (64, 0), (0, 0)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("axis", ["rowwise", "columnwise", "both"])
@pytest.mark.parametrize("block", ["1x16", "16x16"])
def test_device_quantize_equals_host_byte_for_byte(shape, axis, block):
    dtype = [torch.float32, torch.bfloat16, torch.float16][(shape[0] + shape[1]) % 3]
    x = adversarial(*shape, seed=shape[0] * 1000 + shape[1], dtype=dtype)
    check_against_host(x, axis=axis, block=block)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("kw", [
    dict(hadamard=True),
    dict(hadamard=True, random_signs=True, seed=0x51),
    dict(rounding="stochastic", seed=1234),
    dict(rounding="stochastic", seed=99, hadamard=True, random_signs=True, block="16x16"),
    dict(rounding="nearest_away"),
    dict(rounding="toward_zero", block="16x16"),
    dict(tensor_scale=0.0078125),
    dict(tensor_scale=3e-3, hadamard=True, block="16x16"),
    dict(scale_layout="cublas_128x4"),
    dict(scale_layout="aiter_shuffle", block="16x16"),
    dict(scale_layout="cublas_128x4", hadamard=True, rounding="stochastic", seed=7),
    dict(rounding="stochastic", seed=7, philox_stream=0xDEADBEEF),
    dict(rounding="stochastic", seed=5, hadamard=True, random_signs=True, philox_stream=3),
])
def test_device_quantize_options_equal_host(dtype, kw):
    x = adversarial(200, 176, seed=17, dtype=dtype)
    check_against_host(x, **kw)


def test_the_comparison_sees_one_bit():
    """The byte-for-byte checks can fail: one bit of a code, of a scale, or one ulp of the tensor
    scale planted into a device copy is caught."""
    x = adversarial(64, 96, seed=21)
    got, want = mxkit.quantize(x, "nvfp4"), mxkit.quantize(x.cpu(), "nvfp4")
    assert_same_copy(got, want, x)
    codes, scales = got.codes.clone(), got.scales.clone()
    codes[9, 11] ^= 0x01
    scales[4, 2] ^= 0x01
    ulp = torch.from_numpy(np.nextafter(got.tensor_scale.cpu().numpy(), np.float32(1))).to(DEV)
    for planted in (mxkit.NVFP4Copy(codes, got.scales, got.tensor_scale, got.description),
                    mxkit.NVFP4Copy(got.codes, scales, got.tensor_scale, got.description),
                    mxkit.NVFP4Copy(got.codes, got.scales, ulp, got.description)):
        with pytest.raises(AssertionError):
            assert_same_copy(planted, want, x)


def test_stochastic_rounding_follows_the_seed():
    x = torch.randn(64, 128, device=DEV)
    a = mxkit.quantize(x, "nvfp4", rounding="stochastic", seed=1)
    b = mxkit.quantize(x, "nvfp4", rounding="stochastic", seed=2)
    assert not torch.equal(a.codes, b.codes)
    assert torch.equal(a.codes, mxkit.quantize(x, "nvfp4", rounding="stochastic", seed=1).codes)


def test_special_values_and_zeros():
    for fill in (0.0, float("nan"), float("inf"), 1e-40):
        x = torch.full((32, 64), fill, device=DEV)
        check_against_host(x)
        check_against_host(x, block="16x16", hadamard=True)
    x = torch.zeros(48, 96, device=DEV)
    x[7, 9] = -0.0  # a signed zero keeps its sign bit in the code
    check_against_host(x, axis="rowwise")


def test_strided_input_and_input_that_requires_grad():
    base = torch.randn(70, 192, device=DEV, dtype=torch.bfloat16)
    check_against_host(base[3:67, :160])  # a storage offset and ld > cols
    w = torch.nn.Parameter(torch.randn(64, 96, device=DEV))
    check_against_host(w)


def test_dequantize_and_validate_device_copies():
    x = adversarial(96, 160, seed=3)
    for kw in ({}, dict(hadamard=True, block="16x16", scale_layout="cublas_128x4")):
        row, col = mxkit.quantize(x, "nvfp4", axis="both", **kw)
        hrow, hcol = mxkit.quantize(x.cpu(), "nvfp4", axis="both", **kw)
        for d, h in ((row, hrow), (col, hcol)):
            np.testing.assert_array_equal(np.asarray(mxkit.dequantize(d)), np.asarray(mxkit.dequantize(h)))
            r = mxkit.validate(x, d)
            assert r.ok, str(r)
    bad = row.codes.clone()
    bad[40, 7] ^= 0x10  # row 40, column 15: outside the NaN-scale 16 x 16 tiles of rows 0-15, whose codes are not compared
    r = mxkit.validate(x, mxkit.NVFP4Copy(bad, row.scales, row.tensor_scale, row.description), diagnose=False)
    assert r.element_mismatches == 1
    off = row.tensor_scale * 2
    r = mxkit.validate(x, mxkit.NVFP4Copy(row.codes, row.scales, off, row.description), diagnose=False)
    assert r.tensor_scale_mismatches == 1


def test_results_live_in_torchs_caching_allocator_or_mxkits_pool():
    x = torch.randn(256, 512, device=DEV)
    mxkit.quantize(x, "nvfp4", axis="both")  # warm
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    row, col = mxkit.quantize(x, "nvfp4", axis="both")
    assert torch.cuda.memory_allocated() > before
    del row, col
    assert torch.cuda.memory_allocated() == before
    pooled = mxkit.quantize(DLPackOnly(x), "nvfp4", axis="both", hadamard=True)
    want = mxkit.quantize(x.cpu(), "nvfp4", axis="both", hadamard=True)
    for p, w in zip(pooled, want):
        assert all(isinstance(t, mxkit.Tensor) for t in p)
        np.testing.assert_array_equal(host_bytes(p.codes), host_bytes(w.codes))
        np.testing.assert_array_equal(host_bytes(p.scales), host_bytes(w.scales))
        assert float_bits(host_bytes(p.tensor_scale)[0]) == float_bits(w.tensor_scale)


def test_non_default_stream_without_device_synchronize():
    producer = torch.cuda.Stream()
    with torch.cuda.stream(producer):
        torch.cuda._sleep(100_000_000)  # a missing order would read x unwritten
        x = torch.randn(512, 1024, device=DEV)
        c = mxkit.quantize(x, "nvfp4", axis="both")
        got = [(t.codes.cpu().numpy(), t.scales.cpu().numpy(), t.tensor_scale.cpu().numpy()) for t in c]
        xh = x.cpu()
    want = mxkit.quantize(xh, "nvfp4", axis="both")
    for (codes, scales, ts), w in zip(got, want):
        np.testing.assert_array_equal(codes, w.codes.numpy())
        np.testing.assert_array_equal(scales, w.scales.numpy())
        assert float_bits(ts[0]) == float_bits(w.tensor_scale)


# ---- the GEMM ------------------------------------------------------------------------------
E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=np.float32)


def grid_matrix(rows, cols, seed, c):
    """E2M1 values with a 6 in every block and tile, times c (a power of two, given as the tensor
    scale): the copy holds them exactly, and every GEMM sum is exact in fp32."""
    rng = np.random.default_rng(seed)
    x = rng.choice(np.concatenate([E2M1, -E2M1]), size=(rows, cols)).astype(np.float32)
    x[:, ::16] = 6.0
    return torch.from_numpy(x * np.float32(c)).to(DEV)


def host_copy(c):
    """A device copy's host twin (the same bytes, its tensor scale as a float)."""
    return mxkit.NVFP4Copy(c.codes.cpu().numpy(), c.scales.cpu().numpy(), c.tensor_scale.item(), c.description)


def oracle(a, b, bf16=False, absolute=False):
    """The host reference GEMM of two device copies (ref/nvfp4_gemm.hpp); absolute: of |A| and |B|
    (each code's sign bit cleared), the sum S of |a b| t_a t_b that bounds an fp32 reordering."""
    a, b = host_copy(a), host_copy(b)
    out = np.empty((a.codes.shape[0], b.codes.shape[0]), dtype=np.float32)
    t = mxkit._mxkit.import_tensor
    ca, cb = (a.codes & 0x77, b.codes & 0x77) if absolute else (a.codes, b.codes)
    mxkit._mxkit.nvfp4_gemm_host(t(np.ascontiguousarray(ca)), t(a.scales), a.description, a.tensor_scale,
                                 t(np.ascontiguousarray(cb)), t(b.scales), b.description, b.tensor_scale, t(out), bf16)
    return out


def assert_within_bound(d, a, b, bf16=False):
    """|d - ref| <= (2K + 2K/16 + 8) u S per element (+ 2^-7 |d| for a bf16 output), the bound of
    tests/gpu/catch2_test_gemm_nvfp4.cu: every product is exact, only the fp32 adds' order differs."""
    k = a.description.cols if a.description.axis == "rowwise" else a.description.rows
    got = d.float().cpu().numpy().astype(np.float64)
    ref = oracle(a, b, bf16=bf16).astype(np.float64)
    s = oracle(a, b, absolute=True).astype(np.float64) * (1 + 1e-6)
    bound = (2 * k + 2 * k / 16 + 8) * U * s + (2.0 ** -7 * np.abs(got) if bf16 else 0)
    finite = np.isfinite(ref)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    over = np.abs(got - ref)[finite] > bound[finite]
    assert not over.any(), f"{over.sum()} elements over the bound; worst {np.abs(got - ref)[finite].max()}"


@pytest.mark.parametrize("a_kw,b_kw", [({}, {}), (dict(block="16x16"), dict(scale_layout="cublas_128x4")),
                                       (dict(scale_layout="aiter_shuffle"), dict(block="16x16", scale_layout="cublas_128x4"))])
@pytest.mark.parametrize("out_dtype", ["float32", "bfloat16"])
def test_device_gemm_equals_the_oracle_on_exact_copies(a_kw, b_kw, out_dtype):
    x, w = grid_matrix(200, 144, 1, 0.25), grid_matrix(72, 144, 2, 8.0)  # ragged P, Q; K = 9 blocks
    a = mxkit.quantize(x, "nvfp4", tensor_scale=0.25, **a_kw)
    b = mxkit.quantize(w, "nvfp4", tensor_scale=8.0, **b_kw)
    d = mxkit.gemm(a, b, out_dtype=out_dtype)
    assert isinstance(d, torch.Tensor) and d.is_cuda and tuple(d.shape) == (200, 72) and d.dtype == getattr(torch, out_dtype)
    want = oracle(a, b, bf16=out_dtype == "bfloat16")
    np.testing.assert_array_equal(d.float().cpu().numpy(), want)
    want64 = (x.double() @ w.double().T).float().cpu().numpy()
    if out_dtype == "float32":
        np.testing.assert_array_equal(want, want64)  # the oracle is the exact product here


@pytest.mark.parametrize("kw", [{}, dict(hadamard=True), dict(hadamard=True, random_signs=True, seed=5),
                                dict(rounding="stochastic", seed=11, block="16x16")])
@pytest.mark.parametrize("out_dtype", ["float32", "bfloat16"])
def test_device_gemm_within_the_bound_of_the_oracle(kw, out_dtype):
    x, w = torch.randn(256, 512, device=DEV) * 3, torch.randn(192, 512, device=DEV, dtype=torch.bfloat16)
    a, b = mxkit.quantize(x, "nvfp4", **kw), mxkit.quantize(w, "nvfp4", **kw)
    d = mxkit.gemm(a, b, out_dtype=out_dtype, alpha=1.0)
    assert_within_bound(d, a, b, bf16=out_dtype == "bfloat16")
    # A wrong scale shows: the other operand's tensor scale doubled moves every output.
    twice = mxkit.NVFP4Copy(b.codes, b.scales, b.tensor_scale * 2, b.description)
    far = mxkit.gemm(a, twice).cpu().numpy()
    assert np.abs(far - oracle(a, b)).max() > 0.1 * np.abs(oracle(a, b)).max()


def test_device_gemm_training_products_and_nan_blocks():
    x, dy = adversarial(64, 96, seed=8, specials=False), adversarial(64, 80, seed=9, specials=False)
    xc, dyc = mxkit.quantize(x, "nvfp4", axis="columnwise"), mxkit.quantize(dy, "nvfp4", axis="columnwise")
    dw = mxkit.gemm(dyc, xc)  # wgrad: dW[N, K] = dY^T X, both copies blocked along M
    assert tuple(dw.shape) == (80, 96)
    assert_within_bound(dw, dyc, xc)
    y = adversarial(32, 64, seed=10)  # NaN and Inf blocks: NaN rows, as the oracle's
    a, b = mxkit.quantize(y, "nvfp4"), mxkit.quantize(torch.randn(16, 64, device=DEV), "nvfp4")
    assert_within_bound(mxkit.gemm(a, b), a, b)


def test_device_gemm_out_stream_and_pool():
    a = mxkit.quantize(torch.randn(64, 128, device=DEV), "nvfp4")
    b = mxkit.quantize(torch.randn(32, 128, device=DEV), "nvfp4")
    d = torch.empty(64, 32, device=DEV)
    assert mxkit.gemm(a, b, out=d) is d
    assert torch.equal(d, mxkit.gemm(a, b))
    with pytest.raises(ValueError, match="gemm: out must hold bfloat16"):
        mxkit.gemm(a, b, out=d, out_dtype="bfloat16")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())  # a and b were written on the current stream
    with torch.cuda.stream(side):
        e = mxkit.gemm(a, b, alpha=2.0)  # on the side stream, allocated there
    side.synchronize()
    assert torch.equal(e, 2 * d)  # alpha * (sum * t_a t_b): doubling is exact
    pa = mxkit.quantize(DLPackOnly(torch.randn(64, 128, device=DEV)), "nvfp4")
    pb = mxkit.quantize(DLPackOnly(torch.randn(32, 128, device=DEV)), "nvfp4")
    pd = mxkit.gemm(pa, pb)  # mxkit's pool for the result too
    assert isinstance(pd, mxkit.Tensor)
    as_torch = [mxkit.NVFP4Copy(*(torch.from_dlpack(t) for t in c), c.description) for c in (pa, pb)]
    assert_within_bound(torch.from_dlpack(pd), *as_torch)


@pytest.mark.parametrize("what", ["quantize", "pool", "gemm"])
def test_no_cuda_malloc_or_free_or_synchronization_per_call(what):
    x = torch.randn(512, 512, device=DEV)
    a, b = mxkit.quantize(x, "nvfp4"), mxkit.quantize(x[:256], "nvfp4")
    calls = {"quantize": lambda: mxkit.quantize(x, "nvfp4", axis="both", hadamard=True),
             "pool": lambda: mxkit.quantize(DLPackOnly(x), "nvfp4", axis="both"),
             "gemm": lambda: mxkit.gemm(a, b)}
    names = cuda_api_calls(calls[what])
    for call in ("cudaMalloc", "cudaFree", "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaMemcpy"):
        assert call not in names, (call, sorted(set(names)))


@pytest.mark.parametrize("what", ["quantize", "gemm"])
def test_a_call_on_a_busy_side_stream_returns_before_the_stream_is_done(what):
    x = torch.randn(2048, 1024, device=DEV)
    a, b = mxkit.quantize(x, "nvfp4"), mxkit.quantize(x[:512], "nvfp4")
    calls = {"quantize": lambda: mxkit.quantize(x, "nvfp4", axis="both"), "gemm": lambda: mxkit.gemm(a, b)}
    calls[what]()
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(2_000_000_000)
        result = calls[what]()
        still_busy = not side.query()
    assert still_busy, f"{what}: the call synchronized the side stream"
    side.synchronize()
    assert result is not None


# ---- bad input -----------------------------------------------------------------------------
def test_bad_input_names_the_argument():
    x = torch.randn(32, 64, device=DEV)
    with pytest.raises(ValueError, match="x must be float32, bfloat16 or float16"):
        mxkit.quantize(x.double(), "nvfp4")
    with pytest.raises(ValueError, match="x must be float32, bfloat16 or float16"):
        mxkit.quantize(x.to(torch.int32), "nvfp4")
    with pytest.raises(ValueError, match="x must be 2-D"):
        mxkit.quantize(x[0], "nvfp4")
    with pytest.raises(ValueError, match="x's columns must be contiguous"):
        mxkit.quantize(x.t(), "nvfp4")
    with pytest.raises(ValueError, match="preset 'te_nvfp4'"):
        mxkit.quantize(x, "nvfp4", preset="te_nvfp4")
    with pytest.raises(ValueError, match="tensor_scale"):
        mxkit.quantize(x, "nvfp4", tensor_scale=-1.0)
    with pytest.raises(ValueError, match="rounding"):
        mxkit.quantize(x, "nvfp4", rounding="upward")
    with pytest.raises(ValueError, match="random_signs"):
        mxkit.quantize(x, "nvfp4", random_signs=True)
    a = mxkit.quantize(x, "nvfp4")
    ragged = mxkit.quantize(torch.randn(32, 40, device=DEV), "nvfp4")
    with pytest.raises(ValueError, match="K=40"):  # the GEMM's blocks: K a multiple of 16
        mxkit.gemm(ragged, ragged)
    with pytest.raises(ValueError, match="reduction lengths differ"):
        mxkit.gemm(a, ragged)
    with pytest.raises(ValueError, match="rotat|hadamard"):
        mxkit.gemm(a, mxkit.quantize(x, "nvfp4", hadamard=True))
    with pytest.raises(ValueError, match="a is a host NVFP4 copy and b is a device one"):
        mxkit.gemm(host_copy(a), a)
    with pytest.raises(ValueError, match="b.tensor_scale"):
        mxkit.gemm(a, mxkit.NVFP4Copy(a.codes, a.scales, a.tensor_scale.item(), a.description))
    with pytest.raises(ValueError, match="a.tensor_scale must be one float32"):
        mxkit.gemm(mxkit.NVFP4Copy(a.codes, a.scales, a.tensor_scale.double(), a.description), a)
    with pytest.raises(ValueError, match="a.codes holds"):
        mxkit.gemm(mxkit.NVFP4Copy(a.codes[:16], a.scales, a.tensor_scale, a.description), a)


@pytest.mark.parametrize("kw", [dict(), dict(axis="columnwise", block="16x16"), dict(hadamard=True, random_signs=True, seed=5)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_device_amax_equals_host_and_parts_make_the_whole_copy(kw, dtype):
    """nvfp4_amax of a CUDA tensor (gpu::nvfp4_amax) is the host's bit for bit, a float32 tensor on
    the device; parts quantized on the device with the whole amax's tensor scale are the whole
    copy's rows."""
    x = adversarial(96, 64, 46, dtype)
    a = mxkit.nvfp4_amax(x, **kw)
    assert isinstance(a, torch.Tensor) and a.is_cuda and a.dtype == torch.float32 and a.shape == (1,)
    assert float_bits(a.item()) == float_bits(mxkit.nvfp4_amax(x.cpu(), **kw))
    parts = [x[0:32], x[32:48], x[48:96]]
    most = max(mxkit.nvfp4_amax(p, **kw).item() for p in parts)
    assert most == a.item()
    whole = mxkit.quantize(x, "nvfp4", **kw)
    copies = [mxkit.quantize(p, "nvfp4", tensor_scale=mxkit.nvfp4_tensor_scale(most), **kw) for p in parts]
    axis = 0 if kw.get("axis", "rowwise") == "rowwise" else 1
    np.testing.assert_array_equal(np.concatenate([host_bytes(c.codes) for c in copies], axis=axis), host_bytes(whole.codes))
    np.testing.assert_array_equal(np.concatenate([host_bytes(c.scales) for c in copies], axis=axis), host_bytes(whole.scales))
