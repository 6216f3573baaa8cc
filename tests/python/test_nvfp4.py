# SPDX-License-Identifier: Apache-2.0
"""NVFP4 from Python (issue 46, section 2), on the host: the module's bytes against a tiny block
worked by hand, against an independent NumPy reading of the three formulas (mxkit's, TE's,
torchao's: block/nvfp4_scale.hpp and validation/nvfp4_quirks.hpp, re-derived here from the
rules, not from the C++), and against the C++ library's own results (cpp_reference); each
preset accepted on its own quantizer's output and rejected on another's; planted mistakes
located and diagnosed; round trips; the tensor scale travelling with the copy; bad arguments;
docs/python.md's NVFP4 example, run as written, prints what the page shows. Device copies:
the arguments refused before a device tensor is read, and the device GEMM's host oracle
(tests/python/test_device_nvfp4.py runs the device itself)."""
import contextlib
import io
import os
import re
import subprocess

import numpy as np
import pytest

import mxkit

RNG = np.random.default_rng(20261202)
F32 = np.float32


def matrix(rows, cols, scale=1.0, zero_block=False):
    x = (RNG.standard_normal((rows, cols)) * scale).astype(F32)
    if zero_block:
        x[3, 16:32] = 0.0  # one all-zero 1 x 16 block: the presets' zero-block rules differ
    return x


# ---- an independent reading of the rules ---------------------------------------------------
# The finite non-negative values of E2M1 and E4M3 by code; rounding to nearest is a table search
# in float64 (exact for these), ties to the even code (the even significand).
E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
E4M3 = np.array([(m / 8) * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)
                 for e in range(16) for m in range(8)][:0x7F])  # 0x7F is NaN


def nearest(table, v):
    """Codes of |v| (saturating at the table's top), nearest, ties to the even code."""
    a = np.minimum(np.abs(v.astype(np.float64)), table[-1]).reshape(-1)
    dist = np.abs(a[:, None] - table[None, :])
    ties = dist == dist.min(axis=1, keepdims=True)
    even = ties & (np.arange(len(table))[None, :] % 2 == 0)
    return np.where(even.any(axis=1), even.argmax(axis=1), ties.argmax(axis=1)).reshape(v.shape)


def e2m1_codes(v):
    return (nearest(E2M1, v) | (np.signbit(v).astype(np.int64) << 3)).astype(np.uint8)


def numpy_nvfp4(x, formula):
    """One rowwise 1 x 16 copy of x (cols a multiple of 16, finite) under `formula`, every fp32
    operation a NumPy float32 one: (packed codes, scales, stored tensor scale)."""
    rows, cols = x.shape
    blocks = x.reshape(rows, cols // 16, 16)
    amax_b = np.abs(blocks).max(axis=2)
    amax = F32(np.abs(x).max())
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        if formula == "mxkit":  # t = amax / 2688; s = e4m3(amax_b / 6 / t); x / (s t); zero scale: signed zeros
            t = max(amax / F32(2688), F32(2.0 ** -126)) if amax > 0 else F32(1)
            s = nearest(E4M3, (amax_b / F32(6)) / t)
            st = E4M3[s].astype(F32) * t
            v = np.where(st[:, :, None] > 0, blocks / st[:, :, None], blocks * F32(0))
            stored = t
        elif formula == "torchao":  # P = amax / 2688; s = e4m3(clamp(amax_b / 6 / P, 2^-6, 448)); x * (1/P / s)
            p = amax / F32(2688)
            s = nearest(E4M3, np.clip((amax_b / F32(6)) / p, F32(2.0 ** -6), F32(448)))
            v = blocks * ((F32(1) / p) / E4M3[s].astype(F32))[:, :, None]
            stored = p
        else:  # TE: S_enc = 2688 / amax; s = e4m3(amax_b * (S_enc * (1/6))); x * (1 / (s * S_dec)), S_dec = 1 / S_enc
            s_enc = min(F32(2688) / amax, F32(np.finfo(F32).max)) if amax > 0 else F32(1)
            s = nearest(E4M3, amax_b * (s_enc * (F32(1) / F32(6))))
            d = E4M3[s].astype(F32) * (F32(1) / s_enc)
            m = np.where(d > 0, np.minimum(F32(1) / d, F32(np.finfo(F32).max)), F32(np.finfo(F32).max))
            v = blocks * m[:, :, None]
            stored = amax
    codes = e2m1_codes(v.astype(F32)).reshape(rows, cols)
    return (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8), s.astype(np.uint8), float(stored)


# ---- bytes worked by hand ------------------------------------------------------------------
# Every E2M1 value once with each sign: amax 6, so with tensor scale 1 the block scale is
# e4m3(6 / 6 / 1) = 1.0 (0x38: exponent 7 = bias, significand 0) and every element is its own
# code; -0 keeps its sign (0x8). Codes two per byte, element 2i in the low nibble.
HAND = np.array([[0, .5, 1, 1.5, 2, 3, 4, 6, -0.0, -.5, -1, -1.5, -2, -3, -4, -6]], dtype=F32)
HAND_CODES = np.array([[0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE]], dtype=np.uint8)


def test_hand_block_with_given_tensor_scale():
    c = mxkit.quantize(HAND, "nvfp4", tensor_scale=1.0)
    np.testing.assert_array_equal(c.codes, HAND_CODES)
    np.testing.assert_array_equal(c.scales, [[0x38]])
    assert c.tensor_scale == 1.0 and not c.description.tensor_scale_from_amax
    np.testing.assert_array_equal(mxkit.dequantize(c), HAND)
    assert mxkit.validate(HAND, c).ok


def test_hand_block_with_tensor_scale_from_amax():
    # t = fl(6 / 2688); the block scale e4m3(fl(fl(6 / 6) / t)) = e4m3(448.0...) = 0x7e (448, E4M3's top);
    # fl(448 t) is within an ulp of 1, so the codes are the hand ones.
    c = mxkit.quantize(HAND, "nvfp4")
    t = F32(6) / F32(2688)
    assert c.tensor_scale == float(t) and c.description.tensor_scale_from_amax
    np.testing.assert_array_equal(c.scales, [[0x7E]])
    np.testing.assert_array_equal(c.codes, HAND_CODES)
    # TE stores the amax itself; torchao the same t as mxkit.
    assert mxkit.quantize(HAND, "nvfp4", preset="te_nvfp4").tensor_scale == 6.0
    assert mxkit.quantize(HAND, "nvfp4", preset="torchao_nvfp4").tensor_scale == float(t)


@pytest.mark.parametrize("preset,formula", [("mxkit", "mxkit"), ("te_nvfp4", "te"), ("torchao_nvfp4", "torchao")])
def test_presets_equal_numpy_reading_of_their_rules(preset, formula):
    x = matrix(64, 128, 3.0, zero_block=True)
    x[5, :16] *= 1e-4  # a block far below the tensor's amax: small E4M3 scales
    codes, scales, stored = numpy_nvfp4(x, formula)
    c = mxkit.quantize(x, "nvfp4", preset=preset)
    assert c.description.formula == formula
    assert c.tensor_scale == stored
    np.testing.assert_array_equal(c.scales[:64, :8], scales)  # TE allocates [roundup(rows, 128), ...]
    np.testing.assert_array_equal(c.codes, codes)


# ---- the bindings against the C++ library's own results ------------------------------------
def cpp_reference(*args):
    exe = os.environ.get("MXKIT_CPP_REFERENCE")
    if not exe:
        pytest.skip("MXKIT_CPP_REFERENCE is not set (ctest sets it)")
    return subprocess.run([exe, *map(str, args)], check=True, capture_output=True, text=True).stdout


# cpp_reference's preset names -> the module's keywords
CPP_PRESETS = {"mxkit": {}, "te": dict(preset="te_nvfp4"), "te_rht": dict(preset="te_nvfp4", hadamard=True),
               "te_2d": dict(preset="te_nvfp4", block="16x16"), "torchao": dict(preset="torchao_nvfp4")}


@pytest.mark.parametrize("cpp,axis,layout,shape", [
    ("mxkit", "rowwise", "row_major", (50, 72)),        # ragged: padding stored
    ("mxkit", "columnwise", "cublas_128x4", (50, 72)),
    ("te", "rowwise", "row_major", (96, 80)),           # TE's padded scale allocation
    ("te_rht", "columnwise", "cublas_128x4", (128, 96)),
    ("te_2d", "columnwise", "row_major", (64, 48)),
    ("torchao", "rowwise", "cublas_128x4", (128, 96)),
    ("torchao", "columnwise", "row_major", (32, 64)),
])
def test_bindings_equal_cpp(tmp_path, cpp, axis, layout, shape):
    rows, cols = shape
    x = matrix(rows, cols, 2.0)
    src = tmp_path / "x.f32"
    x.tofile(src)
    bits = cpp_reference("nvfp4", src, rows, cols, cpp, axis, layout, tmp_path / "c", tmp_path / "s").strip()
    c = mxkit.quantize(x, "nvfp4", axis=axis, scale_layout=layout, **CPP_PRESETS[cpp])
    np.testing.assert_array_equal(c.codes.reshape(-1), np.fromfile(tmp_path / "c", dtype=np.uint8))
    np.testing.assert_array_equal(c.scales.reshape(-1), np.fromfile(tmp_path / "s", dtype=np.uint8))
    assert F32(c.tensor_scale).view(np.uint32) == int(bits, 16)
    assert mxkit.validate(x, c).ok
    # A planted error: the two summary lines agree.
    bad = c.codes.copy()
    bad.reshape(-1)[5] ^= 0x20
    bad.tofile(tmp_path / "bad")
    c.scales.tofile(tmp_path / "s2")
    want = cpp_reference("nvfp4_validate", src, rows, cols, cpp, axis, layout, tmp_path / "bad", tmp_path / "s2", bits).strip()
    got = mxkit.validate(x, mxkit.NVFP4Copy(bad, c.scales, c.tensor_scale, c.description), diagnose=False)
    assert got.summary() == want
    assert not got.ok and want.startswith("FAIL")


# ---- presets: each accepts its own quantizer's output and refuses the others' ----------------
PRESETS = ("mxkit", "te_nvfp4", "torchao_nvfp4")


@pytest.mark.parametrize("made_by", PRESETS)
def test_each_preset_accepts_its_own_and_refuses_the_others(made_by):
    # 128 rows and 4 blocks a row: TE's padded scale allocation is the compact one, so the same
    # arrays are addressable under every preset; the zero block tells mxkit (scale 0x00) from
    # torchao (0x08, its clamp), and TE stores the amax where the others store amax / 2688.
    x = matrix(128, 64, zero_block=True)
    c = mxkit.quantize(x, "nvfp4", preset=made_by)
    for preset in PRESETS:
        r = mxkit.validate(x, c.codes, c.scales, fmt="nvfp4", preset=preset, tensor_scale=c.tensor_scale)
        assert isinstance(r, mxkit.NVFP4Report)
        assert r.ok == (preset == made_by), (made_by, preset, r.summary())
    assert mxkit.validate(x, c).ok  # the copy's own description
    if made_by != "mxkit":  # a peer's NVFP4 preset implies the format ("mxkit" alone means an MX copy)
        assert mxkit.validate(x, c.codes, c.scales, preset=made_by, tensor_scale=c.tensor_scale).ok


def test_te_rht_columnwise_and_2d_blocks():
    x = matrix(64, 32)
    row, col = mxkit.quantize(x, "nvfp4", axis="both", preset="te_nvfp4", hadamard=True)
    assert not row.description.hadamard and col.description.hadamard  # TE rotates the columnwise copy only
    assert col.description.hadamard_signs == 0xD7E8
    assert mxkit.validate(x, row).ok and mxkit.validate(x, col).ok
    # The same columnwise bytes are not those of an unrotated copy.
    assert not mxkit.validate(x, col.codes, col.scales, preset="te_nvfp4", axis="columnwise",
                              tensor_scale=col.tensor_scale, diagnose=False).ok
    w = mxkit.quantize(x, "nvfp4", preset="te_nvfp4", block="16x16")
    assert w.description.block == "16x16"
    for t in range(4):  # the 16 lines of a tile hold the tile's scale
        assert (w.scales[16 * t:16 * t + 16] == w.scales[16 * t]).all()
    assert mxkit.validate(x, w).ok


# ---- planted mistakes ----------------------------------------------------------------------
def test_swapped_nibbles_are_diagnosed():
    x = matrix(128, 96, zero_block=True)
    c = mxkit.quantize(x, "nvfp4", preset="torchao_nvfp4", scale_layout="cublas_128x4")
    swapped = ((c.codes >> 4) | (c.codes << 4)).astype(np.uint8)
    r = mxkit.validate(x, swapped, c.scales, preset="torchao_nvfp4", scale_layout="cublas_128x4", tensor_scale=c.tensor_scale)
    assert not r.ok and r.element_mismatches > 0 and r.scale_mismatches == 0
    assert r.diagnosed and r.passing_change == "high_first nibbles"
    assert "diagnosis: passes with high_first nibbles" in str(r)


def test_unswizzled_scales_and_missing_tensor_scale_are_diagnosed():
    x = matrix(128, 64)
    c = mxkit.quantize(x, "nvfp4", scale_layout="cublas_128x4")
    r = mxkit.validate(x, c.codes, c.scales, fmt="nvfp4", scale_layout="row_major", tensor_scale=c.tensor_scale)
    assert not r.ok and r.passing_change == "cublas_128x4 scales"
    # A kernel that quantized as if the tensor scale were 1 (stored as given, 1).
    one = mxkit.quantize(x, "nvfp4", tensor_scale=1.0)
    r = mxkit.validate(x, one.codes, one.scales, fmt="nvfp4", tensor_scale=c.tensor_scale)
    assert not r.ok and r.passing_change.startswith("tensor scale not applied")


def test_planted_element_scale_and_tensor_scale_are_located():
    x = matrix(32, 64)
    c = mxkit.quantize(x, "nvfp4")
    codes, scales = c.codes.copy(), c.scales.copy()
    codes[10, 21] ^= 0x10   # row 10, col 43 (high nibble of byte 21): block 2, index 11
    scales[20, 1] ^= 0x01   # row 20, block 1
    r = mxkit.validate(x, codes, scales, fmt="nvfp4", tensor_scale=c.tensor_scale, diagnose=False)
    assert (r.tensor_scale_mismatches, r.scale_mismatches, r.element_mismatches) == (0, 1, 1)
    m = r.mismatches
    assert list(m["kind"]) == ["element", "scale"]
    assert (m["row"][0], m["column"][0], m["block"][0], m["index"][0]) == (10, 43, 2, 11)
    assert m["expected"][0] ^ m["actual"][0] == 0x1
    assert (m["row"][1], m["column"][1], m["block"][1]) == (20, 16, 1)
    # A stored tensor scale one ulp off: the tensor scale, and the blocks scaled from it, differ.
    off = float(np.nextafter(F32(c.tensor_scale), F32(1)))
    r = mxkit.validate(x, c.codes, c.scales, fmt="nvfp4", tensor_scale=off, diagnose=False)
    assert r.tensor_scale_mismatches == 1 and r.tensor_scale_checked
    assert r.expected_tensor_scale == c.tensor_scale and r.actual_tensor_scale == off
    assert r.mismatches["kind"][0] == "tensor scale"
    # The same scale given (calibrated) is taken as it is: only the blocks scaled from it can differ.
    r = mxkit.validate(x, c.codes, c.scales, fmt="nvfp4", tensor_scale=off, tensor_scale_from_amax=False, diagnose=False)
    assert not r.tensor_scale_checked and r.tensor_scale_mismatches == 0


# ---- round trips ---------------------------------------------------------------------------
@pytest.mark.parametrize("kw", [{}, dict(hadamard=True), dict(hadamard=True, random_signs=True, seed=7),
                                dict(block="16x16"), dict(rounding="stochastic", seed=3), dict(axis="columnwise")])
def test_round_trip(kw):
    x = matrix(48, 80)
    c = mxkit.quantize(x, "nvfp4", **kw)
    y = mxkit.dequantize(c)
    assert y.shape == x.shape and y.dtype == np.float32
    # Each value within one E2M1 step (at most 2 x its block's scale) of its input: the scale is
    # ~amax / 6 of the block (or tile, or rotated block) it lies in, below amax / 3 of the tensor.
    assert np.abs(y - x).max() <= np.abs(x).max() / 3 * 1.1
    assert np.abs(y - x).mean() < 0.15 * np.abs(x).mean()
    assert mxkit.validate(x, c).ok
    assert c.description.hadamard == kw.get("hadamard", False) and c.description.block == kw.get("block", "1x16")
    if kw.get("hadamard"):  # the rotation is applied, not only recorded
        assert not np.array_equal(c.codes, mxkit.quantize(x, "nvfp4").codes)
    # The same arguments give the same bytes; a stochastic copy changes with the seed.
    again = mxkit.quantize(x, "nvfp4", **kw)
    np.testing.assert_array_equal(again.codes, c.codes)
    if kw.get("rounding") == "stochastic":
        other = mxkit.quantize(x, "nvfp4", **{**kw, "seed": 4})
        assert not np.array_equal(other.codes, c.codes)


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4", "mxfp8_e5m2"])
def test_stochastic_rounding_draws_from_its_philox_stream(fmt):
    """philox_stream picks the Philox stream of stochastic rounding: another stream draws other
    bits, stream 0 is the default, the columnwise copy of one call draws apart from the rowwise
    one, a copy rounded to nearest reads no stream, and validate reproduces a copy only from its
    own stream."""
    x = matrix(64, 96)
    kw = dict(rounding="stochastic", seed=11)
    a = mxkit.quantize(x, fmt, philox_stream=5, **kw)
    assert a.description.philox_stream == 5
    assert not np.array_equal(a.codes, mxkit.quantize(x, fmt, philox_stream=6, **kw).codes)
    np.testing.assert_array_equal(a.codes, mxkit.quantize(x, fmt, philox_stream=5, **kw).codes)
    np.testing.assert_array_equal(mxkit.quantize(x, fmt, **kw).codes, mxkit.quantize(x, fmt, philox_stream=0, **kw).codes)
    np.testing.assert_array_equal(mxkit.quantize(x, fmt, philox_stream=9).codes, mxkit.quantize(x, fmt).codes)
    # The two copies of one tensor: the columnwise copy of x draws differently from the rowwise
    # copy of x^T (the same blocks), the stream's top bit flipped.
    col = mxkit.quantize(x, fmt, axis="columnwise", philox_stream=5, **kw)
    row_t = mxkit.quantize(np.ascontiguousarray(x.T), fmt, philox_stream=5, **kw)
    assert not np.array_equal(col.codes, row_t.codes)
    np.testing.assert_array_equal(col.codes, mxkit.quantize(np.ascontiguousarray(x.T), fmt, philox_stream=5 ^ 0x80000000,
                                                            **kw).codes)
    assert mxkit.validate(x, a).ok
    extra = {"tensor_scale": a.tensor_scale} if fmt == "nvfp4" else {}
    assert mxkit.validate(x, a.codes, a.scales, fmt=fmt, philox_stream=5, **kw, **extra).ok
    assert not mxkit.validate(x, a.codes, a.scales, fmt=fmt, philox_stream=6, diagnose=False, **kw, **extra).ok
    with pytest.raises(ValueError, match="philox_stream"):
        mxkit.quantize(x, fmt, philox_stream=2 ** 32, **kw)
    with pytest.raises(TypeError, match="leave out philox_stream"):
        mxkit.validate(x, a, philox_stream=5)


def test_dequantize_needs_the_tensor_scale():
    x = matrix(16, 32, 100.0)
    c = mxkit.quantize(x, "nvfp4")
    codes, scales, t = c
    with pytest.raises(TypeError, match="tensor_scale"):
        mxkit.dequantize(codes, scales, "nvfp4", shape=(16, 32))
    np.testing.assert_array_equal(mxkit.dequantize(codes, scales, "nvfp4", shape=(16, 32), tensor_scale=t), mxkit.dequantize(c))
    # TE's copy stores the amax, and is decoded under the S_dec it implies: the same values, closely.
    te = mxkit.quantize(x, "nvfp4", preset="te_nvfp4")
    y = mxkit.dequantize(te.codes, te.scales, preset="te_nvfp4", shape=(16, 32), tensor_scale=te.tensor_scale)
    np.testing.assert_allclose(y, mxkit.dequantize(te), rtol=0, atol=0)
    np.testing.assert_allclose(y, mxkit.dequantize(c), rtol=1e-6)
    with pytest.raises(TypeError, match="carries its description"):
        mxkit.dequantize(c, tensor_scale=1.0)
    with pytest.raises(TypeError, match="carries its description"):
        mxkit.validate(x, c, preset="te_nvfp4")


def test_torch_cpu_input():
    torch = pytest.importorskip("torch")
    x = matrix(32, 64)
    t = torch.from_numpy(x).to(torch.bfloat16)
    c = mxkit.quantize(t, "nvfp4", preset="te_nvfp4")
    assert isinstance(c.codes, torch.Tensor) and isinstance(c.scales, torch.Tensor)
    ref = mxkit.quantize(t.float().numpy(), "nvfp4", preset="te_nvfp4")  # the same values as float32
    np.testing.assert_array_equal(c.codes.numpy(), ref.codes)
    assert c.tensor_scale == ref.tensor_scale
    assert mxkit.validate(t, c).ok
    y = mxkit.dequantize(c)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float32


class FakeCudaTensor:
    """A DLPack producer on a CUDA device (there is no GPU here): what is refused must be refused
    before it is read."""
    shape = (16, 16)

    def __dlpack_device__(self):
        return (2, 0)  # kDLCUDA

    def __dlpack__(self, **kwargs):
        raise AssertionError("mxkit read a device tensor it should have refused")


def test_device_tensor_checks_before_reading():
    # The device quantizer writes mxkit's copies: the peers' presets are refused by name.
    for preset in ("te_nvfp4", "torchao_nvfp4"):
        with pytest.raises(ValueError, match=f"preset '{preset}'.*device"):
            mxkit.quantize(FakeCudaTensor(), "nvfp4", preset=preset)
    with pytest.raises(ValueError, match="out"):
        mxkit.quantize(FakeCudaTensor(), "nvfp4", out=(np.zeros(1), np.zeros(1)))
    if not mxkit.has_gpu():  # a host-only module says so before it reads x
        with pytest.raises(RuntimeError, match="without a GPU backend"):
            mxkit.quantize(FakeCudaTensor(), "nvfp4")


def fake_device_copy(rows=16, cols=16):
    return mxkit.NVFP4Copy(FakeCudaTensor(), FakeCudaTensor(), FakeCudaTensor(), mxkit.quantize(matrix(rows, cols), "nvfp4").description)


def test_gemm_arguments_are_checked_before_reading():
    host = mxkit.quantize(matrix(16, 16), "nvfp4")
    dev = fake_device_copy()
    assert "on " in repr(dev)  # its device tensor scale is not read to be shown
    with pytest.raises(ValueError, match="a is a host NVFP4 copy and b is a device one"):
        mxkit.gemm(host, dev)
    with pytest.raises(ValueError, match="a is a device NVFP4 copy and b is a host one"):
        mxkit.gemm(dev, host)
    with pytest.raises(ValueError, match="a is a host NVFP4 copy and b is a host one"):
        mxkit.gemm(host, host)
    with pytest.raises(TypeError, match="b must be an NVFP4Copy"):
        mxkit.gemm(dev, (dev.codes, dev.scales))
    with pytest.raises(TypeError, match="fmt"):
        mxkit.gemm(dev, dev, fmt="nvfp4")
    with pytest.raises(TypeError, match="hadamard"):
        mxkit.gemm(dev, dev, hadamard=True)
    with pytest.raises(ValueError, match="b.tensor_scale"):  # a device copy's tensor scale lives on the device
        mxkit.gemm(dev, mxkit.NVFP4Copy(dev.codes, dev.scales, 1.0, dev.description))
    te = mxkit.NVFP4Copy(FakeCudaTensor(), FakeCudaTensor(), FakeCudaTensor(),
                         mxkit.quantize(matrix(16, 16), "nvfp4", preset="te_nvfp4").description)
    with pytest.raises(ValueError, match="preset 'te_nvfp4'"):
        mxkit.gemm(dev, te)
    with pytest.raises(ValueError, match="out_dtype"):
        mxkit.gemm(dev, dev, out_dtype="float16")
    with pytest.raises(TypeError, match="a_scales, b_codes, b_scales and fmt"):
        mxkit.gemm(host.codes, host.scales)  # MX keeps its loose form, all of it


def test_a_tensor_scale_given_as_one_float32_value():
    """A device copy's tensor scale (one float32 in a tensor) is read as a float by dequantize and
    validate; the host path is the same code: a 1-element float32 array."""
    x = matrix(32, 48)
    c = mxkit.quantize(x, "nvfp4")
    one = np.array([c.tensor_scale], dtype=F32)
    np.testing.assert_array_equal(mxkit.dequantize(c.codes, c.scales, "nvfp4", shape=(32, 48), tensor_scale=one),
                                  mxkit.dequantize(c))
    assert mxkit.validate(x, c.codes, c.scales, fmt="nvfp4", tensor_scale=one).ok
    for bad in (np.array([1.0, 2.0], dtype=F32), np.array([c.tensor_scale], dtype=np.float64)):
        with pytest.raises(ValueError, match="tensor_scale must be one float32"):
            mxkit.dequantize(c.codes, c.scales, "nvfp4", shape=(32, 48), tensor_scale=bad)


# ---- the device GEMM's oracle --------------------------------------------------------------
def grid_matrix(rows, cols, rng):
    """Values whose NVFP4 copy is exact and whose GEMM sums are exact in fp32: E2M1 values with a
    6 in every 1 x 16 block and 16 x 16 tile; times a power of two c given as the tensor scale,
    every block scale is 1 and every code the value itself."""
    x = rng.choice(np.concatenate([E2M1, -E2M1]), size=(rows, cols)).astype(F32)
    x[:, ::16] = 6.0
    return x


def gemm_host(a, b, bf16=False):
    out = np.empty((a.codes.shape[0], b.codes.shape[0]), dtype=F32)
    t = mxkit._mxkit.import_tensor
    mxkit._mxkit.nvfp4_gemm_host(t(a.codes), t(a.scales), a.description, a.tensor_scale, t(b.codes), t(b.scales),
                                 b.description, b.tensor_scale, t(out), bf16)
    return out


@pytest.mark.parametrize("a_kw,b_kw", [({}, {}), (dict(block="16x16"), dict(scale_layout="cublas_128x4")),
                                       (dict(axis="columnwise"), dict(axis="columnwise", block="16x16"))])
def test_gemm_oracle_on_exact_copies(a_kw, b_kw):
    rng = np.random.default_rng(46)
    x, w = grid_matrix(48, 64, rng) * F32(0.25), grid_matrix(40, 64, rng) * F32(8)
    if a_kw.get("axis") == "columnwise":
        x, w = np.ascontiguousarray(x.T), np.ascontiguousarray(w.T)  # columnwise copies of [K, P] and [K, Q]
    a, b = mxkit.quantize(x, "nvfp4", tensor_scale=0.25, **a_kw), mxkit.quantize(w, "nvfp4", tensor_scale=8.0, **b_kw)
    np.testing.assert_array_equal(mxkit.dequantize(a), x)  # the copies are exact
    xa = x if a_kw.get("axis") != "columnwise" else x.T
    wb = w if b_kw.get("axis") != "columnwise" else w.T
    want = (xa.astype(np.float64) @ wb.astype(np.float64).T).astype(F32)  # exact sums
    np.testing.assert_array_equal(gemm_host(a, b), want)
    np.testing.assert_array_equal(gemm_host(a, b, bf16=True), bf16_values(want))


def bf16_values(x):
    """float32 values rounded to bfloat16 (nearest, ties to even), as float32."""
    bits = x.astype(F32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(F32)


def test_gemm_oracle_refuses_a_peers_copy_and_a_ragged_k():
    x = matrix(32, 48)
    te = mxkit.quantize(x, "nvfp4", preset="te_nvfp4")
    with pytest.raises(ValueError, match="preset 'te_nvfp4'"):
        gemm_host(te, te)
    ragged = mxkit.quantize(matrix(32, 40), "nvfp4")
    with pytest.raises(ValueError, match="K=40"):
        gemm_host(ragged, ragged)


# ---- bad arguments -------------------------------------------------------------------------
@pytest.mark.parametrize("kw,name", [
    (dict(block="2x16"), "block"),
    (dict(axis="diagonal"), "axis"),
    (dict(preset="te_mxfp8"), "preset"),
    (dict(tensor_scale=0.0), "tensor_scale"),
    (dict(tensor_scale=-1.0), "tensor_scale"),
    (dict(tensor_scale=float("nan")), "tensor_scale"),
    (dict(tensor_scale=1e-40), "tensor_scale"),  # a float32 subnormal
    (dict(preset="te_nvfp4", tensor_scale=-2.0), "tensor_scale"),
    (dict(preset="te_nvfp4", rounding="stochastic"), "rounding"),
    (dict(preset="torchao_nvfp4", hadamard=True), "hadamard"),
    (dict(preset="torchao_nvfp4", block="16x16"), "block"),
    (dict(preset="te_nvfp4", scale_layout="aiter_shuffle"), "scale_layout"),
    (dict(random_signs=True), "random_signs"),
    (dict(rounding="upward"), "rounding"),
    (dict(rule="floor"), "rule"),
    (dict(nibbles="high_first"), "nibbles"),
])
def test_bad_arguments_name_themselves(kw, name):
    with pytest.raises(ValueError, match=name):
        mxkit.quantize(matrix(16, 32), "nvfp4", **kw)


def test_bad_arguments_elsewhere():
    x = matrix(32, 32)
    c = mxkit.quantize(x, "nvfp4")
    with pytest.raises(ValueError, match="block"):
        mxkit.quantize(x, "mxfp4", block="16x16")
    with pytest.raises(ValueError, match="tensor_scale"):
        mxkit.quantize(x, "mxfp4", tensor_scale=1.0)
    with pytest.raises(ValueError, match="preset 'te_nvfp4'"):
        mxkit.quantize(x, "mxfp4", preset="te_nvfp4")
    with pytest.raises(ValueError, match="codes"):  # a copy of another shape
        mxkit.validate(x, c.codes[:16], c.scales, fmt="nvfp4", tensor_scale=c.tensor_scale)
    with pytest.raises(ValueError, match="codes"):
        mxkit.dequantize(c.codes.reshape(16, 32), c.scales, "nvfp4", shape=(32, 32), tensor_scale=c.tensor_scale)
    with pytest.raises(ValueError, match="tensor_scale"):
        mxkit.validate(x, c.codes, c.scales, fmt="nvfp4", tensor_scale=float("inf"))
    with pytest.raises(TypeError, match="tensor_scale"):
        mxkit.validate(x, c.codes, c.scales, fmt="nvfp4")
    with pytest.raises(TypeError, match="NVFP4Copy"):
        mxkit.decode(c, "e2m1")


# ---- the documentation's example -----------------------------------------------------------
def test_docs_example_prints_what_the_page_shows():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "python.md")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    code = re.search(r"<!-- python_nvfp4:begin -->\n```python\n(.*?)```\n<!-- python_nvfp4:end -->", text, re.S)
    shown = re.search(r"<!-- python_nvfp4_output:begin -->\n```\n(.*?)```\n<!-- python_nvfp4_output:end -->", text, re.S)
    assert code and shown, "docs/python.md has no marked NVFP4 example and output"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code.group(1), "docs/python.md (NVFP4)", "exec"), {})
    assert out.getvalue() == shown.group(1)


# ---- parts of a tensor with the whole tensor's amax (a sharded weight) -----------------------
@pytest.mark.parametrize("kw", [dict(), dict(block="16x16"), dict(hadamard=True, random_signs=True, seed=7),
                                dict(axis="columnwise"), dict(axis="columnwise", block="16x16", hadamard=True)])
def test_parts_quantized_with_the_whole_amax_are_the_whole_copy(kw):
    """The parts' amaxes (nvfp4_amax: finite values only, rotated with the copy) reach the whole
    tensor's, its tensor scale is nvfp4_tensor_scale of it, and the parts quantized with that scale
    are the whole copy's rows, byte for byte (parts of whole 16-row blocks)."""
    x = matrix(96, 64, scale=3.0)
    x[5, 7], x[40, 2] = np.inf, np.nan
    whole = mxkit.quantize(x, "nvfp4", **kw)
    parts = [np.ascontiguousarray(x[a:b]) for a, b in ((0, 32), (32, 48), (48, 96))]
    amaxes = [mxkit.nvfp4_amax(p, **kw) for p in parts]
    assert all(isinstance(a, float) and np.isfinite(a) for a in amaxes)
    assert max(amaxes) == mxkit.nvfp4_amax(x, **kw)
    t = mxkit.nvfp4_tensor_scale(max(amaxes))
    assert t == whole.tensor_scale
    copies = [mxkit.quantize(p, "nvfp4", tensor_scale=t, **kw) for p in parts]
    axis = 0 if kw.get("axis", "rowwise") == "rowwise" else 1
    np.testing.assert_array_equal(np.concatenate([c.codes for c in copies], axis=axis), whole.codes)
    np.testing.assert_array_equal(np.concatenate([c.scales for c in copies], axis=axis), whole.scales)
    # Each part with its own amax instead: another copy (the test can fail).
    own = [mxkit.quantize(p, "nvfp4", **kw) for p in parts]
    assert not np.array_equal(np.concatenate([c.scales for c in own], axis=axis), whole.scales)


def test_nvfp4_amax_and_tensor_scale_edges_and_bad_arguments():
    assert mxkit.nvfp4_amax(np.zeros((0, 16), F32)) == 0.0
    assert mxkit.nvfp4_amax(np.full((2, 16), np.nan, F32)) == 0.0  # no finite value
    assert mxkit.nvfp4_amax(np.array([[-3.5] + [0.0] * 15], F32)) == 3.5
    assert mxkit.nvfp4_tensor_scale(0.0) == 1.0
    assert mxkit.nvfp4_tensor_scale(2688.0) == 1.0
    assert mxkit.nvfp4_tensor_scale(1e-37) == 2.0 ** -126
    assert mxkit.nvfp4_tensor_scale(6.0) == float(F32(6.0) / F32(2688.0))
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="nvfp4_tensor_scale: amax"):
            mxkit.nvfp4_tensor_scale(bad)
    with pytest.raises(TypeError, match="nvfp4_tensor_scale: amax must be a real number"):
        mxkit.nvfp4_tensor_scale("1")
    x = matrix(16, 32)
    with pytest.raises(ValueError, match="nvfp4_amax: block"):
        mxkit.nvfp4_amax(x, block="32x32")
    with pytest.raises(ValueError, match="nvfp4_amax: axis 'both' is not 'rowwise' or 'columnwise'"):
        mxkit.nvfp4_amax(x, axis="both")
    with pytest.raises(ValueError, match="nvfp4_amax: x must be 2-D"):
        mxkit.nvfp4_amax(np.zeros(16, F32))
