# SPDX-License-Identifier: Apache-2.0
"""The mxkit module on a CUDA GPU with torch tensors (skipped without CUDA, torch, or a module
built with MXKIT_GPU=CUDA): the device quantizer equals the host oracle byte for byte; copies
written by torch's own casts (with this test's block scaling) and by a Triton kernel written
here validate as torchao FLOOR copies; work on a non-default stream is ordered without a device
synchronization; the device GEMM passes validate_gemm. Issue 45's allocation rules: results
from torch's caching allocator (mxkit's pool for other producers) with the same bytes, out=
filled in place, no cudaMalloc / cudaFree / synchronization per call (torch.profiler), and a
call on a busy side stream returns before the stream is done. scripts/gpu.sh python runs it."""
import numpy as np
import pytest

import mxkit

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)
if not mxkit.has_gpu():
    pytest.skip("mxkit was built without MXKIT_GPU=CUDA", allow_module_level=True)

DEV = torch.device("cuda")


def host_bytes(t):
    return t.cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)


@pytest.mark.parametrize("fmt", ["mxfp4", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp8_e4m3", "mxfp8_e5m2", "mxint8"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("layout", ["row_major", "cublas_128x4", "aiter_shuffle"])
def test_device_quantize_equals_host_oracle(fmt, dtype, layout):
    g = torch.Generator(device="cpu").manual_seed(7)
    x = (torch.randn(200, 160, generator=g) * 4).to(dtype).to(DEV)  # ragged rows: padding stored
    row, col = mxkit.quantize(x, fmt, axis="both", scale_layout=layout, rule="round_up")
    assert row.codes.is_cuda and row.codes.device == x.device
    hrow, hcol = mxkit.quantize(x.cpu(), fmt, axis="both", scale_layout=layout, rule="round_up")
    for dev_copy, host_copy in ((row, hrow), (col, hcol)):
        np.testing.assert_array_equal(host_bytes(dev_copy.codes), host_bytes(host_copy.codes))
        np.testing.assert_array_equal(host_bytes(dev_copy.scales), host_bytes(host_copy.scales))
    r = mxkit.validate(x, row.codes, row.scales, fmt=fmt, scale_layout=layout, rule="round_up")
    assert r.ok, str(r)


@pytest.mark.parametrize("philox_stream", [0, 0x9E3779B9])
def test_device_quantize_hadamard_and_stochastic_equal_host(philox_stream):
    x = torch.randn(128, 256, device=DEV)
    kw = dict(hadamard=True, rounding="stochastic", seed=1234, philox_stream=philox_stream)
    for d, h in zip(mxkit.quantize(x, "mxfp4", axis="both", **kw), mxkit.quantize(x.cpu(), "mxfp4", axis="both", **kw)):
        np.testing.assert_array_equal(host_bytes(d.codes), host_bytes(h.codes))
        np.testing.assert_array_equal(host_bytes(d.scales), host_bytes(h.scales))


def torch_mxfp8_floor(x):
    """MXFP8 E4M3 by torch's own cast: FLOOR block scales (torchao's rule), x / scale clamped to
    +-448, then .to(torch.float8_e4m3fn) (round to nearest even)."""
    m, k = x.shape
    blocks = x.reshape(m, k // 32, 32)
    amax = blocks.abs().amax(dim=2)
    _, exp = torch.frexp(amax)  # amax = f * 2^exp, f in [0.5, 1): floor(log2 amax) = exp - 1
    unbiased = (exp - 1 - 8).clamp(-127, 127)
    scale = torch.exp2(unbiased.to(torch.float32))
    data = (blocks / scale[:, :, None]).clamp(-448.0, 448.0).reshape(m, k)
    codes = data.to(torch.float8_e4m3fn)
    return codes, (unbiased + 127).to(torch.uint8)


def test_validate_a_copy_from_torch_casts():
    x = torch.randn(256, 512, device=DEV) * 3
    codes, scales = torch_mxfp8_floor(x)
    r = mxkit.validate(x, codes, scales, preset="torchao_floor")  # the format from codes' dtype
    assert r.ok, str(r)
    assert r.elements_checked == 256 * 512
    bad = codes.view(torch.uint8).clone()
    bad[17, 33] ^= 1
    r = mxkit.validate(x, bad, scales, fmt="e4m3", preset="torchao_floor")
    assert r.element_mismatches == 1 and (r.mismatches["row"][0], r.mismatches["column"][0]) == (17, 33)


try:
    import triton
    import triton.language as tl
except ImportError:  # the Triton test below skips itself
    triton = None

if triton is not None:
    @triton.jit
    def fp4_code(v, scale):
        """E2M1 code of v / scale: round to nearest even (ties go to the even code), saturating at 6."""
        a = tl.minimum(tl.abs(v / scale), 6.0)
        c = ((a > 0.25).to(tl.int32) + (a >= 0.75).to(tl.int32) + (a > 1.25).to(tl.int32) + (a >= 1.75).to(tl.int32)
             + (a > 2.5).to(tl.int32) + (a >= 3.5).to(tl.int32) + (a > 5.0).to(tl.int32))
        sign = (v.to(tl.int32, bitcast=True) < 0).to(tl.int32)
        return c | (sign << 3)


    @triton.jit
    def mxfp4_floor_kernel(x_ptr, codes_ptr, scales_ptr, K, HIGH_FIRST: tl.constexpr):
        """One 32-element block of one row per program: torchao FLOOR scale, E2M1 codes, two per
        byte (low nibble first unless HIGH_FIRST)."""
        row = tl.program_id(0)
        blk = tl.program_id(1)
        i = tl.arange(0, 16)
        base = x_ptr + row * K + blk * 32
        even = tl.load(base + 2 * i)
        odd = tl.load(base + 2 * i + 1)
        amax = tl.maximum(tl.max(tl.abs(even), axis=0), tl.max(tl.abs(odd), axis=0))
        field = (amax.to(tl.int32, bitcast=True) >> 23) & 0xFF
        biased = tl.minimum(tl.maximum(field - 2, 0), 254)
        biased = tl.where(amax == 0.0, 0, biased)
        scale = (biased << 23).to(tl.float32, bitcast=True)  # 2^(biased - 127), exact
        scale = tl.where(amax == 0.0, 1.0, scale)  # a zero block (scale byte 0): codes 0, never 0 / 0
        lo = fp4_code(even, scale)
        hi = fp4_code(odd, scale)
        if HIGH_FIRST:
            packed = (lo << 4) | hi
        else:
            packed = lo | (hi << 4)
        tl.store(codes_ptr + row * (K // 2) + blk * 16 + i, packed.to(tl.uint8))
        tl.store(scales_ptr + row * (K // 32) + blk, biased.to(tl.uint8))


def triton_mxfp4(x, high_first=False):
    m, k = x.shape
    codes = torch.empty(m, k // 2, dtype=torch.uint8, device=x.device)
    scales = torch.empty(m, k // 32, dtype=torch.uint8, device=x.device)
    mxfp4_floor_kernel[(m, k // 32)](x, codes, scales, k, HIGH_FIRST=high_first)
    return codes, scales


@pytest.mark.skipif(triton is None, reason="no Triton")
def test_validate_a_copy_from_a_triton_kernel():
    x = torch.randn(128, 256, device=DEV) * 2
    x[3, 64:96] = 0  # a zero block: FLOOR writes 0x00 there, as torchao
    codes, scales = triton_mxfp4(x)
    r = mxkit.validate(x, codes, scales, fmt="mxfp4", preset="torchao_floor")
    assert r.ok, str(r)
    # The same kernel with the nibbles the other way round: named by the diagnosis.
    swapped, scales2 = triton_mxfp4(x, high_first=True)
    r = mxkit.validate(x, swapped, scales2, fmt="mxfp4", preset="torchao_floor")
    assert not r.ok and r.passing_change == "high_first nibbles", str(r)


def test_non_default_stream_without_device_synchronize():
    producer, consumer = torch.cuda.Stream(), torch.cuda.Stream()
    with torch.cuda.stream(producer):
        torch.cuda._sleep(100_000_000)  # a long wait first: a missing order would read x unwritten
        x = torch.randn(1024, 1024, device=DEV)
        c = mxkit.quantize(x, "mxfp8_e4m3")  # the current stream (producer), no synchronization
        # Read back on the producer stream: .cpu() waits for that stream only.
        got_codes, got_scales, xh = c.codes.cpu().numpy(), c.scales.cpu().numpy(), x.cpu()
    want = mxkit.quantize(xh, "mxfp8_e4m3")
    np.testing.assert_array_equal(got_codes, want.codes.numpy())
    np.testing.assert_array_equal(got_scales, want.scales.numpy())
    # stream= another stream than the current one: the torch results are allocated on it and
    # written there; the consumer orders its reads after it, as after any torch op on a side stream.
    with torch.cuda.stream(producer):
        torch.cuda._sleep(100_000_000)
        y = torch.randn(512, 2048, device=DEV)
    with torch.cuda.stream(consumer):
        d = mxkit.quantize(y, "mxfp4", stream=producer.cuda_stream)
        consumer.wait_stream(producer)
        got = d.codes.cpu().numpy()  # on the consumer stream
    with torch.cuda.stream(producer):
        yh = y.cpu()
    np.testing.assert_array_equal(got, mxkit.quantize(yh, "mxfp4").codes.numpy())
    # A result of mxkit's pool (an input from another DLPack producer) handed to a consumer
    # stream through DLPack: the consumer waits on an event (mxkit.Tensor.__dlpack__(stream=
    # consumer)), not on the device.
    with torch.cuda.stream(producer):
        torch.cuda._sleep(100_000_000)
        z = torch.randn(512, 2048, device=DEV)
        pooled = mxkit.quantize(DLPackOnly(z), "mxfp4")
    assert isinstance(pooled.codes, mxkit.Tensor)
    with torch.cuda.stream(consumer):
        got = torch.from_dlpack(pooled.codes).cpu().numpy()
    with torch.cuda.stream(producer):
        zh = z.cpu()
    np.testing.assert_array_equal(got, mxkit.quantize(zh, "mxfp4").codes.numpy())


def test_current_stream_calls_read_torch_tensors_without_dlpack(monkeypatch):
    """On the tensor's current stream, quantize and gemm read torch tensors from their own
    attributes (mxkit._torch_cuda_ref), not through torch's __dlpack__ (tens of microseconds a
    tensor): with __dlpack__ made to fail, the calls still give the host oracle's bytes, for
    a view with a storage offset and row padding (ld > cols) and for float8 bytes."""
    base = torch.randn(70, 192, device=DEV, dtype=torch.bfloat16)
    x = base[3:67, :160]  # offset 3 rows, ld 192
    want = mxkit.quantize(x.cpu(), "mxfp8_e4m3", axis="both")
    b = torch.randn(96, 160, device=DEV)
    want_b = mxkit.quantize(b.cpu(), "mxfp8_e4m3")

    def refuse(self, *args, **kwargs):
        raise AssertionError("torch's __dlpack__ was called on the current-stream path")
    monkeypatch.setattr(torch.Tensor, "__dlpack__", refuse)
    row, col = mxkit.quantize(x, "mxfp8_e4m3", axis="both")
    for got, ref in ((row, want[0]), (col, want[1])):
        np.testing.assert_array_equal(host_bytes(got.codes), host_bytes(ref.codes))
        np.testing.assert_array_equal(host_bytes(got.scales), host_bytes(ref.scales))
    cb = mxkit.quantize(b, "mxfp8_e4m3")
    as_f8 = (row.codes.view(torch.float8_e4m3fn), row.scales)  # one-byte float dtypes read as bytes
    d = mxkit.gemm(*as_f8, *cb, "mxfp8_e4m3")
    monkeypatch.undo()
    r = mxkit.validate_gemm(*want[0], *want_b, d, fmt="mxfp8_e4m3")
    assert r.ok, str(r)
    # Another stream than the tensor's current one still goes through __dlpack__(stream=...).
    side = torch.cuda.Stream()
    calls = []
    original = torch.Tensor.__dlpack__

    def counted(self, *args, **kwargs):
        calls.append(kwargs.get("stream"))
        return original(self, *args, **kwargs)
    monkeypatch.setattr(torch.Tensor, "__dlpack__", counted)
    mxkit.quantize(b, "mxfp8_e4m3", stream=side.cuda_stream)
    torch.cuda.synchronize()
    assert side.cuda_stream in calls


@pytest.mark.parametrize("fa,fb", [("mxfp8_e4m3", "mxfp8_e4m3"), ("mxfp4", "mxfp4"), ("mxfp8_e5m2", "mxfp4")])
@pytest.mark.parametrize("out_dtype", ["float32", "bfloat16"])
def test_device_gemm_passes_validate_gemm(fa, fb, out_dtype):
    a = torch.randn(256, 512, device=DEV)
    b = torch.randn(192, 512, device=DEV)
    ca, cb = mxkit.quantize(a, fa), mxkit.quantize(b, fb)
    d = mxkit.gemm(*ca, *cb, fa, fb, out_dtype=out_dtype)
    assert d.is_cuda and tuple(d.shape) == (256, 192) and d.dtype == getattr(torch, out_dtype)
    r = mxkit.validate_gemm(*ca, *cb, d, fmt=fa, b_fmt=fb)
    assert r.ok, str(r)


def test_results_live_and_die_through_dlpack_in_any_order():
    """Issue 30's device crash came inside validate after a passing device quantize: every
    lifetime of a device result is exercised here (torch tensors over mxkit memory dropped
    before and after the host copies, re-imported through torch's own capsule, collected by
    the cyclic GC), each round validated, so a deleter called twice or too early shows up as a
    wrong byte or a crash in this test rather than in a later one."""
    import gc
    x = torch.randn(96, 160, device=DEV)
    want = mxkit.quantize(x.cpu(), "mxfp8_e4m3", axis="both")
    for i in range(40):
        row, col = mxkit.quantize(x, "mxfp8_e4m3", axis="both")
        again = torch.from_dlpack(mxkit._mxkit.import_tensor(row.codes))  # torch -> mxkit -> torch
        assert again.data_ptr() == row.codes.data_ptr()
        if i % 2:
            del row  # the re-imported view must keep the memory
        else:
            r = mxkit.validate(x, row.codes, row.scales, fmt="mxfp8_e4m3")
            assert r.ok, str(r)
        np.testing.assert_array_equal(again.cpu().numpy(), want[0].codes.numpy())
        np.testing.assert_array_equal(col.scales.cpu().numpy(), want[1].scales.numpy())
        cycle = [again, col]
        cycle.append(cycle)  # freed by the cyclic GC, at a moment of its choosing
        del again, col, cycle
        if i % 5 == 0:
            gc.collect()
    gc.collect()
    torch.cuda.synchronize()


def test_inputs_that_require_grad_and_empty_inputs():
    x = torch.randn(64, 128, device=DEV, requires_grad=True)
    c = mxkit.quantize(x, "mxfp4")
    h = mxkit.quantize(x.detach().cpu(), "mxfp4")
    np.testing.assert_array_equal(host_bytes(c.codes), host_bytes(h.codes))
    assert mxkit.validate(x, c.codes, c.scales, fmt="mxfp4").ok
    empty = torch.empty(0, 64, device=DEV)
    row, col = mxkit.quantize(empty, "mxfp8_e5m2", axis="both", scale_layout="cublas_128x4")
    assert row.codes.is_cuda and tuple(row.codes.shape) == (0, 64) and tuple(col.codes.shape) == (64, 0)
    assert mxkit.validate(empty, row.codes, row.scales, fmt="mxfp8_e5m2", scale_layout="cublas_128x4").elements_checked == 0


def test_numpy_and_mxkit_tensors_cross_with_this_numpy():
    """NumPy >= 2.1 asks for versioned capsules (max_version, dl_device, copy): mxkit's host
    results and NumPy arrays cross both ways with whatever NumPy the device image has."""
    x = np.random.default_rng(3).standard_normal((64, 96)).astype(np.float32)
    t = mxkit._mxkit.import_tensor(x)
    y = np.from_dlpack(t)
    assert np.shares_memory(x, y)
    codes, scales = mxkit.quantize(torch.from_numpy(x), "mxfp4")  # torch CPU in, torch CPU out
    assert isinstance(codes, torch.Tensor) and not codes.is_cuda
    np.testing.assert_array_equal(codes.numpy(), mxkit.quantize(x, "mxfp4").codes)
    ro = x.copy()
    ro.setflags(write=False)
    assert mxkit.validate(ro, codes, scales, fmt="mxfp4").ok


# ---- issue 45, section 1: results allocated by the caller's framework, no synchronization ------
class DLPackOnly:
    """A device tensor seen only through DLPack (a producer mxkit cannot allocate for, as JAX):
    its results come from mxkit's stream-ordered pool."""

    def __init__(self, t):
        self.t = t

    def __dlpack__(self, stream=None, max_version=None):
        return self.t.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()


def test_framework_and_pool_results_equal_the_host_bytes():
    x = torch.randn(300, 200, device=DEV) * 3
    for kw in (dict(axis="both", scale_layout="cublas_128x4"), dict(hadamard=True), dict(axis="columnwise", rule="round_up")):
        torch_copies = mxkit.quantize(x, "mxfp4", **kw)
        pool_copies = mxkit.quantize(DLPackOnly(x), "mxfp4", **kw)
        host_copies = mxkit.quantize(x.cpu(), "mxfp4", **kw)
        if isinstance(torch_copies, mxkit.MXCopy):
            torch_copies, pool_copies, host_copies = (torch_copies,), (pool_copies,), (host_copies,)
        for t, p, h in zip(torch_copies, pool_copies, host_copies):
            assert isinstance(t.codes, torch.Tensor) and t.codes.device == x.device and t.codes.dtype == torch.uint8
            assert isinstance(p.codes, mxkit.Tensor)
            for part in (0, 1):
                np.testing.assert_array_equal(host_bytes(t[part]), host_bytes(h[part]))
                np.testing.assert_array_equal(torch.from_dlpack(p[part]).cpu().numpy(), host_bytes(h[part]))
    a, b = mxkit.quantize(torch.randn(128, 256, device=DEV), "mxfp8_e4m3"), mxkit.quantize(torch.randn(64, 256, device=DEV), "mxfp8_e4m3")
    d = mxkit.gemm(*a, *b, "mxfp8_e4m3")
    dp = mxkit.gemm(*(DLPackOnly(v) for v in (*a, *b)), "mxfp8_e4m3")
    assert isinstance(d, torch.Tensor) and isinstance(dp, mxkit.Tensor)
    np.testing.assert_array_equal(d.cpu().numpy(), torch.from_dlpack(dp).cpu().numpy())


def test_out_is_filled_in_place_and_checked():
    x = torch.randn(256, 128, device=DEV)
    want = mxkit.quantize(x, "mxfp8_e5m2", scale_layout="cublas_128x4")
    codes, scales = torch.empty_like(want.codes), torch.empty_like(want.scales)
    ptrs = codes.data_ptr(), scales.data_ptr()
    got = mxkit.quantize(x, "mxfp8_e5m2", scale_layout="cublas_128x4", out=(codes, scales))
    assert got.codes is codes and got.scales is scales and (codes.data_ptr(), scales.data_ptr()) == ptrs
    assert torch.equal(codes, want.codes) and torch.equal(scales, want.scales)
    f8 = torch.empty(want.codes.shape, dtype=torch.float8_e5m2, device=DEV)  # a float8 buffer takes the bytes too
    mxkit.quantize(x, "mxfp8_e5m2", scale_layout="cublas_128x4", out=(f8, scales))
    assert torch.equal(f8.view(torch.uint8), want.codes)
    bad = [((codes.cpu(), scales), r"out \(codes\) is uint8 .* on cpu, but x is .* cuda:0"),
           ((codes.float(), scales), r"out \(codes\) must hold bytes"),
           ((codes[:-1], scales), r"out \(codes\) has shape \[255, 128\], but this result has shape \[256, 128\]"),
           ((torch.empty(128, 256, dtype=torch.uint8, device=DEV).t(), scales), r"out \(codes\) must be contiguous")]
    for out, msg in bad:
        with pytest.raises(ValueError, match=msg):
            mxkit.quantize(x, "mxfp8_e5m2", scale_layout="cublas_128x4", out=out)
    a, b = mxkit.quantize(torch.randn(64, 128, device=DEV), "mxfp4"), mxkit.quantize(torch.randn(32, 128, device=DEV), "mxfp4")
    d = torch.empty(64, 32, device=DEV)
    assert mxkit.gemm(*a, *b, "mxfp4", out=d) is d
    assert torch.equal(d, mxkit.gemm(*a, *b, "mxfp4"))
    with pytest.raises(ValueError, match=r"gemm: out must hold bfloat16"):
        mxkit.gemm(*a, *b, "mxfp4", out=d, out_dtype="bfloat16")


def test_results_live_in_torchs_caching_allocator():
    x = torch.randn(1024, 512, device=DEV)
    mxkit.quantize(x, "mxfp4", axis="both")  # warm: kernels loaded, allocator blocks cached
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    row, col = mxkit.quantize(x, "mxfp4", axis="both", scale_layout="cublas_128x4")
    sizes = [t.numel() for t in (*row, *col)]
    grown = torch.cuda.memory_allocated() - before
    assert sum(sizes) <= grown <= sum(-(-n // 512) * 512 for n in sizes)  # torch rounds blocks to 512 bytes
    del row, col
    assert torch.cuda.memory_allocated() == before


def cuda_api_calls(fn, calls=10):
    """Names of the CUDA runtime calls and kernels torch's profiler (CUPTI) sees during calls of fn:
    only those within a call's own time range, each call marked with record_function (the
    profiler itself synchronizes the device when it stops, outside every call)."""
    from torch.profiler import ProfilerActivity, profile, record_function
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            with record_function("mxkit_call"):
                fn()
    torch.cuda.synchronize()  # outside the profile: the calls themselves must not synchronize
    events = prof.events()
    cpu = torch.autograd.DeviceType.CPU
    spans = [(e.time_range.start, e.time_range.end) for e in events if e.name == "mxkit_call" and e.device_type == cpu]
    assert len(spans) == calls, len(spans)
    inside = lambda e: any(a <= e.time_range.start and e.time_range.end <= b for a, b in spans)
    # Kernels run on the device later than their launch: they are counted by name alone.
    return [e.name for e in events if e.name != "mxkit_call" and (inside(e) or e.device_type != cpu)]


@pytest.mark.parametrize("pool", [False, True])
def test_no_cuda_malloc_or_free_per_call(pool):
    x = torch.randn(512, 512, device=DEV)
    arg = DLPackOnly(x) if pool else x
    names = cuda_api_calls(lambda: mxkit.quantize(arg, "mxfp8_e4m3", axis="both"))
    assert names.count("cudaLaunchKernel") >= 10, sorted(set(names))  # the profiler sees mxkit's runtime calls
    for call in ("cudaMalloc", "cudaFree", "cudaDeviceSynchronize", "cudaStreamSynchronize"):
        assert call not in names, (call, sorted(set(names)))


@pytest.mark.parametrize("path", ["torch", "pool", "out", "gemm"])
def test_a_call_on_a_busy_side_stream_returns_before_the_stream_is_done(path):
    x = torch.randn(2048, 1024, device=DEV)
    a, b = mxkit.quantize(x, "mxfp8_e4m3"), mxkit.quantize(x[:512], "mxfp8_e4m3")
    out = tuple(torch.empty_like(t) for t in mxkit.quantize(x, "mxfp4"))
    calls = {"torch": lambda: mxkit.quantize(x, "mxfp4"), "pool": lambda: mxkit.quantize(DLPackOnly(x), "mxfp4"),
             "out": lambda: mxkit.quantize(x, "mxfp4", out=out), "gemm": lambda: mxkit.gemm(*a, *b, "mxfp8_e4m3")}
    calls[path]()  # warm: nothing below waits for a first-call setup
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(2_000_000_000)  # about a second of GPU time
        result = calls[path]()
        still_busy = not side.query()  # had the call waited for the stream (or the device), it would be idle
    assert still_busy, f"{path}: the call synchronized the side stream"
    side.synchronize()
    assert result is not None
