# SPDX-License-Identifier: Apache-2.0
"""The mxkit module on the host (no GPU): its bytes against an independent NumPy implementation
of torchao's FLOOR rule, FP4 cast and to_blocked layout written here, and against the C++
library's own results (cpp_reference, built beside the module); planted errors, layout
diagnosis, buffer size checks, DLPack in and out, element formats."""
import os
import subprocess
import sys

import numpy as np
import pytest

import mxkit

RNG = np.random.default_rng(20261127)


def matrix(rows, cols, scale=1.0):
    x = (RNG.standard_normal((rows, cols)) * scale).astype(np.float32)
    return x


# ---- an independent NumPy implementation of torchao's to_mx (FLOOR) and to_blocked ----------
FP4_VALUES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=np.float64)


def numpy_fp4_codes(v):
    """E2M1 codes of float values, round to nearest even, saturating at 6 (torchao's cast)."""
    a = np.minimum(np.abs(v.astype(np.float64)), 6.0).reshape(-1)
    dist = np.abs(a[:, None] - FP4_VALUES[None, :])
    best = dist.min(axis=1, keepdims=True)
    ties = dist == best
    even = ties & (np.arange(8)[None, :] % 2 == 0)
    idx = np.where(even.any(axis=1), even.argmax(axis=1), ties.argmax(axis=1))
    sign = np.signbit(v.reshape(-1)).astype(np.uint8) << 3
    return (idx.astype(np.uint8) | sign).reshape(v.shape)


def numpy_floor_scales(x, emax_elem):
    """torchao FLOOR: the biased exponent field of the block amax, minus emax_elem; 0 for a zero block."""
    rows, cols = x.shape
    blocks = np.abs(x.reshape(rows, cols // 32, 32)).max(axis=2)
    exp_field = (blocks.view(np.int32) >> 23) & 0xFF
    biased = np.clip(exp_field.astype(np.int64) - emax_elem, 0, 254)
    biased[blocks == 0] = 0
    return biased.astype(np.uint8)


def numpy_to_mx_fp4(x):
    rows, cols = x.shape
    scales = numpy_floor_scales(x, 2)
    exp = scales.astype(np.int64) - 127
    v = x.reshape(rows, cols // 32, 32).astype(np.float64) / np.exp2(exp)[:, :, None]
    codes = numpy_fp4_codes(v).reshape(rows, cols)
    packed = codes[:, 0::2] | (codes[:, 1::2] << 4)  # torchao pack_uint4: low nibble first
    return packed.astype(np.uint8), scales


def numpy_to_blocked(s):
    """torchao's to_blocked: pad to [128k, 4k], cut into 128x4 tiles, each as (32, 16)."""
    rows, cols = s.shape
    nr, nc = -(-rows // 128), -(-cols // 4)
    padded = np.zeros((nr * 128, nc * 4), dtype=s.dtype)
    padded[:rows, :cols] = s
    blocks = padded.reshape(nr, 128, nc, 4).transpose(0, 2, 1, 3)
    return blocks.reshape(-1, 4, 32, 4).transpose(0, 2, 1, 3).reshape(-1, 32, 16).reshape(-1)


def test_torchao_floor_fp4_matches_independent_numpy():
    x = matrix(256, 192, 3.0)
    x[5, 32:64] = 0.0  # a zero block: torchao writes scale 0x00
    x[7, 0] = 1000.0   # a large outlier
    want_codes, want_scales = numpy_to_mx_fp4(x)
    codes, scales = mxkit.quantize(x, "mxfp4", preset="torchao_floor")
    np.testing.assert_array_equal(codes, want_codes)
    np.testing.assert_array_equal(scales, want_scales)
    codes_b, scales_b = mxkit.quantize(x, "mxfp4", preset="torchao_floor", scale_layout="cublas_128x4")
    np.testing.assert_array_equal(codes_b, want_codes)
    np.testing.assert_array_equal(scales_b, numpy_to_blocked(want_scales))
    # The NumPy copy validates as torchao's, in both scale layouts.
    assert mxkit.validate(x, want_codes, want_scales, fmt="mxfp4", preset="torchao_floor").ok
    r = mxkit.validate(x, want_codes, numpy_to_blocked(want_scales), fmt="e2m1", preset="torchao_floor",
                       scale_layout="cublas_128x4")
    assert r.ok, str(r)
    assert r.elements_checked == 256 * 192 and r.scales_checked == 256 * 6


def test_to_blocked_of_mxkit_row_major_scales():
    # mxkit's own quantizer: its row-major scales through NumPy's to_blocked equal its 128x4 copy.
    x = matrix(300, 100)  # ragged: 300 rows (3 tiles), 4 blocks per row (the last padded)
    _, rm = mxkit.quantize(x, "mxfp8_e4m3")
    _, blocked = mxkit.quantize(x, "mxfp8_e4m3", scale_layout="cublas_128x4")
    assert rm.shape == (300, 4)
    np.testing.assert_array_equal(blocked, numpy_to_blocked(rm))


def test_floor_scales_and_e4m3_values():
    x = matrix(64, 128, 10.0)
    codes, scales = mxkit.quantize(x, "mxfp8_e4m3", preset="torchao_floor")
    np.testing.assert_array_equal(scales, numpy_floor_scales(x, 8))
    # Each element decodes to within half an E4M3 step of x / scale (or saturates at 448).
    s = np.exp2(scales.astype(np.int64) - 127).repeat(32, axis=1)
    v = x / s
    got = mxkit.decode(codes, "e4m3")
    step = np.exp2(np.floor(np.log2(np.maximum(np.abs(v), 2.0 ** -6))) - 3)
    assert np.all((np.abs(got - v) <= step / 2) | (np.abs(got) == 448.0))


# ---- the bindings against the C++ library's own results --------------------------------
def cpp_reference(*args):
    exe = os.environ.get("MXKIT_CPP_REFERENCE")
    if not exe:
        pytest.skip("MXKIT_CPP_REFERENCE is not set (ctest sets it)")
    return subprocess.run([exe, *map(str, args)], check=True, capture_output=True, text=True).stdout


@pytest.mark.parametrize("fmt,axis,layout", [("mxfp4", "rowwise", "row_major"), ("mxfp4", "columnwise", "cublas_128x4"),
                                             ("mxfp8_e5m2", "rowwise", "aiter_shuffle"),
                                             ("mxfp6_e2m3", "columnwise", "row_major")])
def test_bindings_equal_cpp(tmp_path, fmt, axis, layout):
    x = matrix(96, 80, 2.0)  # ragged in both axes: padding stored
    src = tmp_path / "x.f32"
    x.tofile(src)
    cpp_reference("quantize", src, 96, 80, fmt, axis, layout, tmp_path / "c", tmp_path / "s")
    codes, scales = mxkit.quantize(x, fmt, axis=axis, scale_layout=layout)
    np.testing.assert_array_equal(codes.reshape(-1), np.fromfile(tmp_path / "c", dtype=np.uint8))
    np.testing.assert_array_equal(scales.reshape(-1), np.fromfile(tmp_path / "s", dtype=np.uint8))
    # A planted error: the summary lines agree.
    bad = codes.copy()
    bad.reshape(-1)[7] ^= 0x02
    bad.tofile(tmp_path / "bad")
    scales.tofile(tmp_path / "s2")
    want = cpp_reference("validate", src, 96, 80, fmt, axis, layout, "low_first", tmp_path / "bad", tmp_path / "s2").strip()
    got = mxkit.validate(x, bad, scales, fmt=fmt, axis=axis, scale_layout=layout, diagnose=False)
    assert got.summary() == want
    assert not got.ok


# ---- planted errors ----------------------------------------------------------------------
def test_planted_element_and_scale_errors_are_located():
    x = matrix(64, 96)
    codes, scales = mxkit.quantize(x, "mxfp8_e4m3")
    codes = codes.copy()
    scales = scales.copy()
    codes[10, 40] ^= 0x01          # row 10, col 40: block 1, index 8
    scales[33, 2] ^= 0x01          # row 33, block 2
    r = mxkit.validate(x, codes, scales, fmt="mxfp8_e4m3", diagnose=False)
    assert not r.ok
    assert (r.element_mismatches, r.scale_mismatches, r.padding_mismatches) == (1, 1, 0)
    m = r.mismatches
    assert list(m["kind"]) == ["element", "scale"]
    assert (m["row"][0], m["column"][0], m["block"][0], m["index"][0]) == (10, 40, 1, 8)
    assert m["actual"][0] == codes[10, 40] and m["expected"][0] == codes[10, 40] ^ 0x01
    # Decoded values: the code's element value times the block's scale.
    s = 2.0 ** (int(scales[10, 1]) - 127)
    assert m["expected_value"][0] == pytest.approx(mxkit.decode(np.array([m["expected"][0]], np.uint8), "e4m3")[0] * s)
    assert m["actual_value"][0] == pytest.approx(mxkit.decode(np.array([m["actual"][0]], np.uint8), "e4m3")[0] * s)
    assert (m["row"][1], m["column"][1], m["block"][1]) == (33, 64, 2)
    assert m["expected_value"][1] == 2.0 ** (int(m["expected"][1]) - 127)
    assert "FAIL" in r.summary() and "1 scale, 1 element" in r.summary()
    assert "element (row 10, col 40" in str(r)


def test_swapped_nibble_fp4_copy_is_diagnosed():
    x = matrix(128, 256)
    codes, scales = mxkit.quantize(x, "mxfp4", preset="torchao_floor", scale_layout="cublas_128x4")
    swapped = ((codes & 0x0F) << 4) | (codes >> 4)
    r = mxkit.validate(x, swapped, scales, fmt="mxfp4", preset="torchao_floor", scale_layout="cublas_128x4")
    assert not r.ok and r.element_mismatches > 1000
    assert r.diagnosed and r.passing_change == "high_first nibbles"
    assert "diagnosis: passes with high_first nibbles" in str(r)
    # Scales given in the 128x4 layout but described as row-major: named too.
    r2 = mxkit.validate(x, codes, scales, fmt="mxfp4", preset="torchao_floor", scale_layout="row_major")
    assert r2.passing_change == "cublas_128x4 scales"
    # And with the right description, it passes.
    assert mxkit.validate(x, swapped, scales, fmt="mxfp4", preset="torchao_floor", scale_layout="cublas_128x4",
                          nibbles="high_first").ok


def test_wrong_byte_is_not_explained_away():
    x = matrix(32, 64)
    codes, scales = mxkit.quantize(x, "mxfp4")
    codes = codes.copy()
    codes[3, 3] ^= 0x11
    r = mxkit.validate(x, codes, scales, fmt="mxfp4")
    assert r.diagnosed and r.passing_change == "" and "no single or paired change" in r.diagnosis


# ---- sizes -------------------------------------------------------------------------------
def test_short_buffers_raise_value_error_naming_both_sizes():
    x = matrix(128, 64)
    codes, scales = mxkit.quantize(x, "mxfp4", scale_layout="cublas_128x4")
    assert codes.nbytes == 128 * 32 and scales.nbytes == 512
    with pytest.raises(ValueError, match=r"scales holds 511 bytes, but .* needs 512"):
        mxkit.validate(x, codes, scales[:511], fmt="mxfp4", scale_layout="cublas_128x4")
    with pytest.raises(ValueError, match=r"codes holds 4095 bytes, but .* needs 4096"):
        mxkit.validate(x, codes.reshape(-1)[:4095], scales, fmt="mxfp4", scale_layout="cublas_128x4")
    with pytest.raises(ValueError, match=r"dequantize: scales holds 256 bytes, but .* needs 512"):
        mxkit.dequantize(codes, scales[:256], "mxfp4", x.shape, scale_layout="cublas_128x4")
    b_codes, b_scales = mxkit.quantize(matrix(32, 64), "mxfp4")
    d = np.zeros((128, 32), np.float32)
    with pytest.raises(ValueError, match=r"validate_gemm: b_scales holds 63 bytes, but .* needs 64"):
        mxkit.validate_gemm(codes, scales, b_codes, b_scales.reshape(-1)[:63], d, fmt="mxfp4", a_scale_layout="cublas_128x4")
    with pytest.raises(ValueError, match=r"codes holds 4096 bytes, but a rowwise mxfp4 256x64 copy .* needs 8192"):
        mxkit.validate(matrix(256, 64), codes, scales, fmt="mxfp4", scale_layout="cublas_128x4")


def test_bad_names_and_inputs_raise_value_error():
    x = matrix(32, 64)
    with pytest.raises(ValueError, match="format 'fp7'"):
        mxkit.quantize(x, "fp7")
    with pytest.raises(ValueError, match="rule 'nearest' is not one of floor, even, round_up, ceil"):
        mxkit.quantize(x, "mxfp4", rule="nearest")
    with pytest.raises(ValueError, match="unknown preset|is not one of"):
        mxkit.validate(x, *mxkit.quantize(x, "mxfp4"), fmt="mxfp4", preset="torchao")
    with pytest.raises(ValueError, match="columns must be contiguous"):
        mxkit.quantize(matrix(32, 128)[:, ::2], "mxfp4")
    with pytest.raises(ValueError, match="float32, bfloat16 or float16"):
        mxkit.quantize(x.astype(np.float64), "mxfp4")


# ---- zero copy in, DLPack out -----------------------------------------------------------
def test_strided_rows_and_float16_are_read_in_place():
    big = matrix(64, 128)
    view = big[:, :64]  # row stride 128: read in place with a leading dimension
    a = mxkit.quantize(view, "mxfp8_e4m3")
    b = mxkit.quantize(np.ascontiguousarray(view), "mxfp8_e4m3")
    np.testing.assert_array_equal(a.codes, b.codes)
    h = big.astype(np.float16)
    c = mxkit.quantize(h, "mxfp4")
    assert mxkit.validate(h, c.codes, c.scales, fmt="mxfp4").ok


class DLPackOnly:
    """An array that offers only DLPack (as torch and CuPy do)."""

    def __init__(self, arr, max_version=None):
        self.arr, self.max_version = arr, max_version

    def __dlpack__(self, stream=None):
        t = mxkit._mxkit.import_tensor(self.arr)
        return t.__dlpack__(max_version=self.max_version)

    def __dlpack_device__(self):
        return (1, 0)


@pytest.mark.parametrize("max_version", [None, (1, 0)])
def test_dlpack_in_and_out_share_memory(max_version):
    x = matrix(32, 64)
    t = mxkit._mxkit.import_tensor(DLPackOnly(x, max_version))
    assert t.shape == (32, 64) and t.dtype == "float32" and t.device == "cpu"
    assert t.data_ptr == x.__array_interface__["data"][0]
    y = np.from_dlpack(t)  # our capsule, NumPy's consumer
    assert np.shares_memory(y, x)
    z = np.asarray(t)  # the buffer protocol
    assert np.shares_memory(z, x)
    codes, scales = mxkit.quantize(DLPackOnly(x, max_version), "mxfp4")
    np.testing.assert_array_equal(codes, mxkit.quantize(x, "mxfp4").codes)
    assert isinstance(codes, mxkit.Tensor) or isinstance(codes, np.ndarray)


def test_results_keep_their_memory():
    codes, scales = mxkit.quantize(matrix(64, 64), "mxfp8_e5m2")
    base = codes.base
    base = base.obj if isinstance(base, memoryview) else base  # numpy.asarray over the buffer protocol
    del scales
    assert isinstance(base, mxkit.Tensor) and base.nbytes == codes.nbytes
    np.testing.assert_array_equal(np.asarray(base), codes)


# ---- element formats ---------------------------------------------------------------------
def test_encode_decode_round_trip_and_known_codes():
    vals = np.array([0.0, -0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -6.0, 7.0, 0.25, 0.75], np.float32)
    codes = mxkit.encode(vals, "e2m1")
    np.testing.assert_array_equal(codes, [0, 8, 1, 2, 3, 4, 5, 6, 7, 15, 7, 0, 2])  # 0.25, 0.75: ties to even
    np.testing.assert_array_equal(mxkit.decode(codes, "fp4")[:10], vals[:10])
    e4 = mxkit.encode(np.array([448.0, 464.0, 470.0, 1e6, -1e-10], np.float32), "e4m3", saturate=False)
    np.testing.assert_array_equal(e4, [0x7E, 0x7E, 0x7F, 0x7F, 0x80])  # 464 ties to 448; NaN above, as torch
    assert list(mxkit.encode(np.array([1e6], np.float32), "e4m3")) == [0x7E]  # saturating: 448
    e5 = mxkit.encode(np.array([1e6], np.float32), "e5m2", saturate=False)
    assert e5[0] == 0x7C  # Inf
    packed = mxkit.pack_fp4(np.array([[1, 2, 3, 4]], np.uint8))
    np.testing.assert_array_equal(packed, [[0x21, 0x43]])
    np.testing.assert_array_equal(mxkit.unpack_fp4(packed), [[1, 2, 3, 4]])
    np.testing.assert_array_equal(mxkit.pack_fp4([[1, 2]], "high_first"), [[0x12]])


def test_encode_agrees_with_torch_casts():
    torch = pytest.importorskip("torch")
    x = torch.randn(4096) * 100
    for name, fmt in (("float8_e4m3fn", "e4m3"), ("float8_e5m2", "e5m2")):
        if not hasattr(torch, name):
            continue
        want = x.to(getattr(torch, name)).view(torch.uint8).numpy()
        np.testing.assert_array_equal(mxkit.encode(x.numpy(), fmt, saturate=False), want)


# ---- dequantize, presets, GEMM -----------------------------------------------------------
def test_dequantize_inverts_within_the_format():
    x = matrix(64, 96)
    c = mxkit.quantize(x, "mxfp8_e4m3", axis="columnwise", scale_layout="aiter_shuffle")
    y = mxkit.dequantize(c.codes, c.scales, "mxfp8_e4m3", x.shape, axis="columnwise", scale_layout="aiter_shuffle")
    assert y.shape == x.shape and np.max(np.abs(y - x)) < np.max(np.abs(x)) / 8  # FLOOR clips up to 1/8 of a block amax
    both = mxkit.quantize(x, "mxfp4", axis="both", hadamard=True)
    assert both[0].description.axis == "rowwise" and both[1].description.axis == "columnwise"
    assert both[1].codes.shape == (96, 32)  # transposed: [cols, padded rows / 2]


@pytest.mark.parametrize("preset,fmt,axis,layout", [("te_mxfp8", None, "columnwise", None),
                                                    ("te_mxfp8", "e5m2", "rowwise", "cublas_128x4"),
                                                    ("rocm_te_mxfp4", None, "columnwise", "aiter_shuffle"),
                                                    ("torchao_rceil", "mxfp6_e3m2", "rowwise", None)])
def test_presets_round_trip(preset, fmt, axis, layout):
    x = matrix(128, 64, 5.0)
    c = mxkit.quantize(x, fmt or mxkit._PRESET_FORMAT[preset], axis=axis, preset=preset, scale_layout=layout or "row_major")
    r = mxkit.validate(x, c.codes, c.scales, fmt=fmt, axis=axis, preset=preset, scale_layout=layout)
    assert r.ok, str(r)
    bad = c.codes.copy()
    bad.reshape(-1)[100] ^= 0x04
    assert mxkit.validate(x, bad, c.scales, fmt=fmt, axis=axis, preset=preset, scale_layout=layout).element_mismatches == 1


def test_validate_gemm_passes_a_true_product_and_catches_an_error():
    a = matrix(48, 128)
    b = matrix(40, 128)
    ca, cb = mxkit.quantize(a, "mxfp8_e4m3"), mxkit.quantize(b, "mxfp4")
    da = mxkit.dequantize(*ca, "mxfp8_e4m3", a.shape).astype(np.float64)
    db = mxkit.dequantize(*cb, "mxfp4", b.shape).astype(np.float64)
    d = (da @ db.T).astype(np.float32)
    r = mxkit.validate_gemm(*ca, *cb, d, fmt="mxfp8_e4m3", b_fmt="mxfp4")
    assert r.ok, str(r)
    assert r.elements_checked == 48 * 40
    d[7, 9] += 0.5 + abs(d[7, 9])
    r = mxkit.validate_gemm(*ca, *cb, d, fmt="mxfp8_e4m3", b_fmt="mxfp4")
    assert not r.ok and r.over_bound == 1
    assert (r.worst["row"][0], r.worst["column"][0]) == (7, 9)


def test_gemm_without_gpu_says_so():
    if mxkit.has_gpu():
        pytest.skip("built with a GPU backend")
    c = mxkit.quantize(matrix(32, 32), "mxfp4")
    with pytest.raises(RuntimeError, match="MXKIT_GPU=CUDA"):
        mxkit.gemm(*c, *c, "mxfp4")


def test_import_mxkit_imports_no_torch():
    """torch is imported when its tensors are passed in, and the torch.library ops only by
    `import mxkit.torch_ops`: `import mxkit` works without torch."""
    code = "import sys, mxkit; print([m for m in ('torch', 'mxkit.torch_ops') if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_torch_cpu_tensors_cross_by_dlpack():
    torch = pytest.importorskip("torch")
    x = torch.randn(64, 128).to(torch.bfloat16)
    t = mxkit._mxkit.import_tensor(x)
    assert t.dtype == "bfloat16" and t.data_ptr == x.data_ptr()  # read in place
    row, col = mxkit.quantize(x, "mxfp8_e4m3", axis="both")
    assert isinstance(row.codes, torch.Tensor) and tuple(col.codes.shape) == (128, 64)
    # The same bytes as the float32 values of those bf16 numbers, quantized from NumPy.
    ref = mxkit.quantize(x.float().numpy(), "mxfp8_e4m3")
    np.testing.assert_array_equal(row.codes.numpy(), ref.codes)
    assert mxkit.validate(x, row.codes, row.scales, fmt="e4m3").ok
    back = torch.from_dlpack(mxkit._mxkit.import_tensor(x))  # our capsule, torch's consumer
    assert back.data_ptr() == x.data_ptr() and back.dtype == torch.bfloat16
