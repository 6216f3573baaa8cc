# SPDX-License-Identifier: Apache-2.0
"""A fuzzing pass over the Python API (issue 45, section 5): random dtypes, shapes (empty and
1-element included), strides, special values and keyword values, from a fixed seed. Each call
starts from a valid one and changes at most one argument; it must either return a correct result
or raise ValueError / TypeError whose message names the changed argument, never another
exception, a crash or pybind11's signature dump. Correct: quantize's bytes equal those of the
same values as a contiguous float32 array and validate as its copy; dequantize(copy) equals the
loose form read with the copy's own description; decode inverts encode; unpack_fp4 inverts
pack_fp4; validate_gemm passes the product of the dequantized operands; nvfp4_amax of strided or
float16 values is that of the same values as a contiguous float32 array."""
import warnings

import numpy as np

import mxkit

SEED = 4545
CALLS = 3000

SHAPES = [(0, 0), (0, 32), (32, 0), (1, 1), (1, 32), (3, 70), (33, 1), (64, 64), (17, 96)]
DTYPES = [np.float32, np.float32, np.float16, np.float64, np.int32, np.uint8, np.bool_, np.complex64]
STRIDES = ["contiguous", "row_gap", "col_step", "transposed", "reversed", "fortran"]
FORMATS = ["mxfp4", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp8_e4m3", "mxfp8_e5m2", "mxint8", "e4m3", "fp4"]
LAYOUTS = ["row_major", "cublas_128x4", "aiter_shuffle"]
# Values tried for a changed argument: valid, out of range, and of the wrong kind.
BAD = {
    "fmt": ["mxfp4", "fp7", "", None, 5, 2.5, ["mxfp4"], b"mxfp4"],
    "axis": ["rowwise", "columnwise", "both", "diag", None, 0, ("rowwise",)],
    "rule": [None, "floor", "even", "round_up", "ceil", "nearest", 1, True],
    "rounding": [None, "nearest_even", "nearest_away", "toward_zero", "stochastic", "up", 0],
    "hadamard": [None, True, False, 1, "yes", np.bool_(True)],
    "scale_layout": LAYOUTS + [None, "blocked", 3],
    "preset": ["mxkit", "torchao_floor", "te_mxfp8", "rocm_te_mxfp4", "torchao", None, 1],
    "random_signs": [False, True, 1, None],
    "seed": [0, 1, 2 ** 64 - 1, 2 ** 64, -1, 1.5, "3", None, np.int64(7), np.uint64(2 ** 63)],
    "nibbles": [None, "low_first", "high_first", "middle", 4],
    "threads": [0, 1, 3, -1, 2 ** 40, 1.0, None],
    "max_reported": [0, 1, 16, -1, 2 ** 70, "16"],
    "diagnose": [True, False, 1, None],
    "shape": [(3, 70), (70, 3), (-3, 70), (3,), (3, 70, 1), "ab", 7, (3.0, 70), None],
    "rounding_enc": ["nearest_even", "toward_zero", "stochastic", "x", None, 3],
    "saturate": [True, False, 0, "no", None],
    "k": [None, 0, 1, 32, 64, 96, -32, 2.0, "64"],
    "alpha": [1.0, 0.5, -2, float("nan"), float("inf"), "1", None],
    "rows": [None, [], [0], [1, 2], [-1], [10 ** 9], "0", 5],
    "accumulation": ["tensor_core", "fp32", "exact", None],
    "relative": [0.0, 1e-3, -1.0, float("nan"), "0"],
    "out": [None, "bad", (1, 2), ()],
    "block": ["1x16", "16x16", "32x32", None, 16, ("1x16",)],
    "philox_stream": [0, 7, 2 ** 32 - 1, 2 ** 32, -1, 1.5, "3", None, np.uint32(5)],
}
SIGNATURE_DUMP = ("incompatible function arguments", "Invoked with")
ANY = "any argument"  # two arguments changed: the error may name either


def special_values(rng, shape):
    x = rng.standard_normal(shape) * rng.choice([1e-3, 1.0, 1e3])
    if x.size:
        flat = x.reshape(-1)
        picks = rng.integers(0, flat.size, size=max(1, flat.size // 10))
        flat[picks] = rng.choice([np.nan, np.inf, -np.inf, 1e-40, -1e-42, 0.0, -0.0, 3e38, 65504.0], size=picks.size)
    return x


def array(rng, shape, dtype, stride):
    """A 2-D array of `shape` (before any transposition), `dtype`, laid out as `stride` says."""
    rows, cols = shape
    if stride == "row_gap":
        base = special_values(rng, (rows, cols + 7)).astype(dtype)
        return base[:, :cols]
    if stride == "col_step":
        return special_values(rng, (rows, 2 * cols)).astype(dtype)[:, ::2]
    if stride == "transposed":
        return special_values(rng, (cols, rows)).astype(dtype).T
    if stride == "reversed":
        return special_values(rng, (rows, cols)).astype(dtype)[::-1]
    if stride == "fortran":
        return np.asfortranarray(special_values(rng, (rows, cols)).astype(dtype))
    return special_values(rng, (rows, cols)).astype(dtype)


def check_error(e, changed, what):
    text = str(e)
    assert not any(s in text for s in SIGNATURE_DUMP), f"{what}: signature dump: {text[:300]}"
    assert changed is not None, f"{what}: a valid call raised {type(e).__name__}: {text[:300]}"
    if changed is not ANY:
        assert changed in text, f"{what}: the message does not name {changed!r}: {text[:300]}"


def run(what, changed, call, verify):
    """One call: a result is verified; an error must be ValueError / TypeError naming `changed`
    (None: nothing was changed, so no error is expected)."""
    try:
        result = call()
    except (ValueError, TypeError) as e:
        check_error(e, changed, what)
        return "error"
    verify(result)
    return "ok"


def choose(rng, name, valid, arg=None):
    """(value, changed): the valid value, or a value from BAD[name] (then `changed` is the
    argument's name, `arg` where the pool's name differs)."""
    if rng.random() < 0.25:
        pool = BAD[name]
        return pool[rng.integers(len(pool))], arg or name
    return valid, None


def bytes_of(copy):
    return np.asarray(copy.codes).tobytes(), np.asarray(copy.scales).tobytes()


def fuzz_quantize(rng):
    shape = SHAPES[rng.integers(len(SHAPES))]
    dtype = DTYPES[rng.integers(len(DTYPES))]
    stride = STRIDES[rng.integers(len(STRIDES))]
    x = array(rng, shape, dtype, stride)
    kw = dict(fmt=FORMATS[rng.integers(len(FORMATS))], axis=["rowwise", "columnwise", "both"][rng.integers(3)],
              scale_layout=LAYOUTS[rng.integers(3)])
    names = ["fmt", "axis", "rule", "rounding", "hadamard", "scale_layout", "seed", "nibbles", "threads", "preset",
             "random_signs", "out", "philox_stream"]
    name = names[rng.integers(len(names))]
    value, changed = choose(rng, name, kw.get(name))
    if changed is not None or name in kw:
        kw[name] = value
    if kw.get("preset") not in (None, "mxkit") and kw.get("axis") == "both":
        kw["axis"] = "rowwise"
    # x itself is the changed argument when it is not a float32 / float16 matrix with unit column step.
    x_ok = dtype in (np.float32, np.float16) and (x.shape[1] <= 1 or x.strides[1] == x.itemsize) and \
        (x.shape[0] <= 1 or x.strides[0] >= x.shape[1] * x.itemsize)
    if not x_ok:
        changed = "x" if changed is None else ANY
    fmt = kw.pop("fmt")

    def verify(result):
        copies = result if isinstance(result, tuple) and not isinstance(result, mxkit.MXCopy) else (result,)
        plain = np.ascontiguousarray(x, dtype=np.float32)
        again = mxkit.quantize(plain, fmt, **{k: v for k, v in kw.items() if k != "out"})
        again = again if isinstance(again, tuple) and not isinstance(again, mxkit.MXCopy) else (again,)
        for c, a in zip(copies, again):
            assert bytes_of(c) == bytes_of(a), f"quantize({shape}, {dtype.__name__}, {stride}, {kw}): strided bytes differ"
            r = mxkit.validate(x, c, max_reported=2)
            assert r.ok, f"quantize{shape} {kw}: {r}"
            y = mxkit.dequantize(c)
            assert y.shape == x.shape and y.dtype == np.float32

    return run(f"quantize({shape}, {dtype.__name__}, {stride}, {fmt!r}, {kw})", changed, lambda: mxkit.quantize(x, fmt, **kw),
               verify)


def fuzz_dequantize(rng):
    shape = SHAPES[rng.integers(len(SHAPES))]
    x = special_values(rng, shape).astype(np.float32)
    fmt = FORMATS[rng.integers(6)]
    layout = LAYOUTS[rng.integers(3)]
    axis = ["rowwise", "columnwise"][rng.integers(2)]
    copy = mxkit.quantize(x, fmt, axis=axis, scale_layout=layout, hadamard=bool(rng.integers(2)))
    want = mxkit.dequantize(copy)
    d = copy.description
    kw = dict(fmt=fmt, shape=shape, axis=axis, scale_layout=layout, hadamard=d.hadamard)
    name = ["fmt", "shape", "axis", "scale_layout", "hadamard", "nibbles", "seed"][rng.integers(7)]
    value, changed = choose(rng, name, kw.get(name))
    if changed is not None or name in kw:
        kw[name] = value
    codes, scales = copy
    # A changed description may still be a valid one whose codes size matches: then the result is
    # the dequantization of that description (as the copy form would give for it).
    same = dict(fmt=fmt, shape=shape, axis=axis, scale_layout=layout, hadamard=d.hadamard, nibbles="low_first")
    loose_valid = changed is None or (name in same and value == same[name]) or name == "seed"  # no random signs here

    def verify(y):
        assert y.shape == tuple(kw["shape"]) and y.dtype == np.float32
        if loose_valid:
            np.testing.assert_array_equal(y, want)

    fmt_kw = kw.pop("fmt")
    shape_kw = kw.pop("shape")
    kw_call = {k: v for k, v in kw.items()}
    kw["shape"] = shape_kw
    return run(f"dequantize({shape}, {fmt}, {kw_call})", changed,
               lambda: mxkit.dequantize(codes, scales, fmt_kw, shape_kw, **kw_call), verify)


def fuzz_validate(rng):
    shape = SHAPES[rng.integers(len(SHAPES))]
    x = special_values(rng, shape).astype(np.float32)
    fmt = FORMATS[rng.integers(6)]
    copy = mxkit.quantize(x, fmt, scale_layout=LAYOUTS[rng.integers(3)])
    names = ["max_reported", "threads", "diagnose"]
    name = names[rng.integers(len(names))]
    value, changed = choose(rng, name, {"max_reported": 16, "threads": 0, "diagnose": True}[name])
    form = rng.integers(3)
    if form == 0:
        call = lambda: mxkit.validate(x, copy, **{name: value})  # noqa: E731
    elif form == 1:
        d = copy.description
        call = lambda: mxkit.validate(x, *copy, fmt=fmt, scale_layout=d.scale_layout, **{name: value})  # noqa: E731
    else:  # float codes: not a copy
        changed = "codes" if changed is None else ANY
        call = lambda: mxkit.validate(x, copy.codes.astype(np.float32), copy.scales, fmt=fmt)  # noqa: E731

    def verify(r):
        assert r.ok, str(r)

    return run(f"validate({shape}, {fmt}, {name}={value!r}, form {form})", changed, call, verify)


def fuzz_codes(rng):
    fmt = FORMATS[rng.integers(6)]
    n = [0, 1, 2, 6, 64][rng.integers(5)]
    width = {"mxfp4": 4, "mxfp6_e2m3": 6, "mxfp6_e3m2": 6}.get(fmt, 8)
    codes = rng.integers(0, 1 << width, size=(2, n), dtype=np.uint8)
    kind = rng.integers(6)
    changed = None
    if kind == 0:  # a float array is not codes
        codes, changed = codes.astype(rng.choice([np.float32, np.float64, np.int16])), "codes"
    elif kind == 1 and n and width < 8:  # a byte above the format's width
        codes = codes.copy()
        codes[1, n - 1] = (1 << width) | codes[1, n - 1]
        changed = "codes"
    elif kind == 2:
        codes = codes[:, ::-1]  # negative strides: read through a contiguous copy
    values = mxkit.decode(np.ascontiguousarray(codes), fmt) if changed is None else None

    def verify_decode(v):
        assert v.shape == codes.shape and v.dtype == np.float32
        rounding, rchanged = choose(rng, "rounding_enc", "nearest_even", "rounding")
        saturate, schanged = (False, None) if rchanged else choose(rng, "saturate", False)
        try:
            back = mxkit.encode(v, fmt, rounding=rounding, saturate=saturate)
        except (ValueError, TypeError) as e:
            check_error(e, rchanged or schanged, f"encode({fmt}, {rounding!r}, {saturate!r})")
            return
        if rchanged is None and schanged is None:
            keep = ~np.isnan(v)  # NaN codes: encode writes its own NaN code
            if fmt == "mxint8":  # the encoder saturates symmetrically (docs/formats.md): -2 (0x80) encodes to 0x81
                keep &= np.ascontiguousarray(codes) != 0x80
            np.testing.assert_array_equal(back[keep], np.ascontiguousarray(codes)[keep])

    outcome = run(f"decode({fmt}, kind {kind})", changed, lambda: mxkit.decode(codes, fmt), verify_decode)
    if values is not None:
        assert outcome == "ok"
    if width == 4:
        nibbles, nchanged = choose(rng, "nibbles", "low_first")
        nibbles = "low_first" if nibbles is None and nchanged is None else nibbles
        pc = codes if n % 2 == 0 else codes[:, :-1]
        chg = ANY if nchanged and changed else nchanged or changed

        def verify_pack(p):
            assert p.shape == (2, pc.shape[1] // 2)
            np.testing.assert_array_equal(mxkit.unpack_fp4(p, nibbles=nibbles), np.ascontiguousarray(pc))

        run(f"pack_fp4(nibbles={nibbles!r}, kind {kind})", chg, lambda: mxkit.pack_fp4(pc, nibbles=nibbles), verify_pack)
    return outcome


def fuzz_gemm(rng):
    p, q = [(1, 1), (5, 3), (0, 4), (16, 8)][rng.integers(4)]
    kk = [32, 64, 96][rng.integers(3)]
    fa, fb = FORMATS[rng.integers(6)], FORMATS[rng.integers(6)]
    a = mxkit.quantize(special_values(rng, (p, kk)).clip(-100, 100).astype(np.float32), fa)
    b = mxkit.quantize(special_values(rng, (q, kk)).clip(-100, 100).astype(np.float32), fb)
    da, db = mxkit.dequantize(a).astype(np.float64), mxkit.dequantize(b).astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        d = (da @ db.T).astype(np.float32)
    name = ["k", "alpha", "rows", "accumulation", "relative", "max_reported", "threads"][rng.integers(7)]
    valid = {"k": None, "alpha": 1.0, "rows": None, "accumulation": "tensor_core", "relative": 0.0, "max_reported": 8,
             "threads": 0}[name]
    value, changed = choose(rng, name, valid)
    kw = {name: value}
    correct = changed is None or value == valid or (name == "k" and value == kk) or name in ("max_reported", "threads") \
        or (name == "rows" and isinstance(value, list) and all(0 <= r < p for r in value)) \
        or (name == "relative" and isinstance(value, float) and value >= 0)

    def verify(r):
        if correct and np.isfinite(d).all():
            assert r.ok, str(r)

    return run(f"validate_gemm({p}x{q}x{kk}, {fa}/{fb}, {kw})", changed,
               lambda: mxkit.validate_gemm(*a, *b, d, fmt=fa, b_fmt=fb, **kw), verify)


def fuzz_nvfp4_amax(rng):
    """nvfp4_amax: a finite float >= 0, the same for the values as a contiguous float32 array."""
    shape = SHAPES[rng.integers(len(SHAPES))]
    dtype = DTYPES[rng.integers(len(DTYPES))]
    stride = STRIDES[rng.integers(len(STRIDES))]
    x = array(rng, shape, dtype, stride)
    kw = dict(axis=["rowwise", "columnwise"][rng.integers(2)], block=["1x16", "16x16"][rng.integers(2)], hadamard=False,
              random_signs=False, seed=0)
    name = ["axis", "block", "hadamard", "random_signs", "seed"][rng.integers(5)]
    value, changed = choose(rng, name, kw[name])
    kw[name] = value
    x_ok = dtype in (np.float32, np.float16) and (x.shape[1] <= 1 or x.strides[1] == x.itemsize) and \
        (x.shape[0] <= 1 or x.strides[0] >= x.shape[1] * x.itemsize)
    if not x_ok:
        changed = "x" if changed is None else ANY

    def verify(a):
        assert isinstance(a, float) and np.isfinite(a) and a >= 0.0, f"nvfp4_amax({shape}, {kw}) = {a!r}"
        assert a == mxkit.nvfp4_amax(np.ascontiguousarray(x, dtype=np.float32), **kw), f"nvfp4_amax({shape}, {stride}, {kw})"

    return run(f"nvfp4_amax({shape}, {dtype.__name__}, {stride}, {kw})", changed, lambda: mxkit.nvfp4_amax(x, **kw), verify)


def test_fuzz_the_python_api():
    rng = np.random.default_rng(SEED)
    fuzzers = [fuzz_quantize, fuzz_quantize, fuzz_dequantize, fuzz_validate, fuzz_codes, fuzz_gemm, fuzz_nvfp4_amax]
    outcomes = {}
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # NumPy's casts of NaN / Inf in the generated inputs
        for _ in range(CALLS):
            f = fuzzers[rng.integers(len(fuzzers))]
            outcome = f(rng)
            outcomes[(f.__name__, outcome)] = outcomes.get((f.__name__, outcome), 0) + 1
    # The pass reached both outcomes of every entry point (else it tests less than it says).
    for name in {f.__name__ for f in fuzzers}:
        assert outcomes.get((name, "ok"), 0) > 5 and outcomes.get((name, "error"), 0) > 5, outcomes
