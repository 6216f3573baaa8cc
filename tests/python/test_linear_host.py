# SPDX-License-Identifier: Apache-2.0
"""mxkit.linear (the math of mxkit.torch.Linear, issue 45 section 4) against mxkit's C++ linear
layer on the host backend, without torch: for every recipe, several training steps of
mxkit.linear.forward / backward on NumPy arrays (mxkit's host quantizer and reference GEMMs, the
FP8 cast and delayed-scaling update) give Y, dX and dW equal to nn::linear's bit for bit
(_mxkit.linear_steps: ref::host_backend, bf16 activations and weight), and the FP8 scaling table
ends the same. A wrong recipe or a wrong rotation is caught (the check can fail). The same
comparison on the GPU, through torch: test_torch_linear.py."""
import numpy as np
import pytest

import mxkit
from mxkit import _mxkit
from mxkit import linear

M, K, N, STEPS = 64, 96, 128, 3


def bf16_values(rng, shape, scale=1.0):
    """float32 values that bfloat16 holds exactly (8 significant bits), over a few binades."""
    mant = rng.integers(-255, 256, size=shape).astype(np.float32)
    return (mant * np.float32(scale / 64.0) * np.exp2(rng.integers(-4, 2, size=shape))).astype(np.float32)


def inputs(seed=0, steps=STEPS, m=M, k=K, n=N):
    rng = np.random.default_rng(seed)
    # X and dY grow from step to step, so the FP8 scales of later steps differ from 1.
    x = np.stack([bf16_values(rng, (m, k), 2.0 ** s) for s in range(steps)])
    w = np.stack([bf16_values(rng, (n, k), 0.125) for _ in range(steps)])
    dy = np.stack([bf16_values(rng, (m, n), 2.0 ** -s) for s in range(steps)])
    return x, w, dy


def plan_steps(recipe, x, w, dy, layer_id=0):
    """The Python layer's steps as mxkit.torch.Linear runs them: the FP8 update at the start of
    each training forward, then forward and backward in the Philox streams of the layer's step s;
    bf16 outputs (float32 arrays of bf16 values), as the C++ layer's bf16 activations and weight
    give."""
    state = linear.new_scaling_state(recipe) if recipe.kind == "fp8" else None
    ys, dxs, dws = [], [], []
    for s in range(x.shape[0]):
        if state is not None:
            linear.update_scales(recipe, state)
        y, saved = linear.forward(recipe, x[s], w[s], state, out_dtype="bfloat16",
                                  streams=linear.philox_streams(layer_id, s))
        dx, dw = linear.backward(recipe, dy[s], saved, state, dx_dtype="bfloat16", dw_dtype="bfloat16")
        ys.append(y)
        dxs.append(dx)
        dws.append(dw)
    if state is not None:
        linear.update_scales(recipe, state)  # the C++ layer's end_step after the last step
    return np.stack(ys), np.stack(dxs), np.stack(dws), state


@pytest.mark.parametrize("name", linear.RECIPES)
def test_python_steps_equal_the_cpp_linear_bit_for_bit(name):
    x, w, dy = inputs()
    recipe = linear.Recipe(name, history_length=4)
    ref = linear.cpp_steps(name, x, w, dy, history_length=4)
    y, dx, dw, state = plan_steps(recipe, x, w, dy)
    for what, got, want in (("y", y, ref["y"]), ("dx", dx, ref["dx"]), ("dw", dw, ref["dw"])):
        assert got.shape == want.shape, what
        assert np.isfinite(want).all() and np.count_nonzero(want) > want.size // 2, what  # a real product
        mismatch = np.flatnonzero(got.view(np.uint32) != want.view(np.uint32))
        assert mismatch.size == 0, f"{name} {what}: {mismatch.size} of {got.size} differ, first at flat index " \
                                   f"{mismatch[:1]}: {got.reshape(-1)[mismatch[:1]]} vs {want.reshape(-1)[mismatch[:1]]}"
    if recipe.kind == "fp8":
        np.testing.assert_array_equal(state["scale"], ref["scale"])
        np.testing.assert_array_equal(state["amax_history"], ref["amax_history"])
        # The scales moved: the table took part in the steps compared above.
        assert (ref["scale"] != 1.0).all()
    else:
        assert "scale" not in ref


def test_the_check_tells_recipes_apart():
    """The comparison above can fail: the Python steps of one MXFP4 placement of the rotation
    against the C++ layer of another differ, and FP8 without its updates differs from FP8."""
    x, w, dy = inputs(seed=1)
    ref = linear.cpp_steps("mxfp4_no_hadamard", x, w, dy)
    y, dx, dw, _ = plan_steps(linear.Recipe("mxfp4"), x, w, dy)
    assert not np.array_equal(y, ref["y"]) and not np.array_equal(dx, ref["dx"]) and not np.array_equal(dw, ref["dw"])
    ref = linear.cpp_steps("mxfp4_wgrad_hadamard", x, w, dy)
    y, dx, dw, _ = plan_steps(linear.Recipe("mxfp4_no_hadamard"), x, w, dy)
    np.testing.assert_array_equal(y, ref["y"])  # fprop and dgrad are the same GEMMs,
    np.testing.assert_array_equal(dx, ref["dx"])
    assert not np.array_equal(dw, ref["dw"])  # wgrad is not

    recipe = linear.Recipe("fp8_delayed", history_length=4)
    ref = linear.cpp_steps("fp8_delayed", x, w, dy, history_length=4)
    state = linear.new_scaling_state(recipe)
    ys = []
    for s in range(STEPS):  # no update_scales: every step at scale 1
        y, saved = linear.forward(recipe, x[s], w[s], state, out_dtype="bfloat16")
        ys.append(y)
    assert np.array_equal(ys[0], ref["y"][0]) and not np.array_equal(np.stack(ys), ref["y"])


@pytest.mark.parametrize("name", ["nvfp4", "mxfp4_rht_sr"])
def test_stochastic_recipes_draw_the_layers_streams(name):
    """The gradients' stochastic rounding draws the C++ layer's Philox streams: the steps of
    layer 3 equal the C++ layer 3's and differ from layer 0's in dX and dW (Y, rounded to
    nearest, is the same); the streams of one step are not those of the next."""
    x, w, dy = inputs(seed=2)
    recipe = linear.Recipe(name)
    y, dx, dw, _ = plan_steps(recipe, x, w, dy, layer_id=3)
    mine, other = linear.cpp_steps(name, x, w, dy, layer_id=3), linear.cpp_steps(name, x, w, dy, layer_id=0)
    for what, got in (("y", y), ("dx", dx), ("dw", dw)):
        np.testing.assert_array_equal(got, mine[what], err_msg=f"{name} {what}")
    np.testing.assert_array_equal(y, other["y"])
    assert not np.array_equal(dx, other["dx"]) and not np.array_equal(dw, other["dw"])
    # Every step drawn in step 0's streams: the first step agrees, the later ones do not.
    ys, dxs = [], []
    for s in range(STEPS):
        _, saved = linear.forward(recipe, x[s], w[s], out_dtype="bfloat16", streams=linear.philox_streams(3, 0))
        dxs.append(linear.backward(recipe, dy[s], saved, dx_dtype="bfloat16", dw=False)[0])
    np.testing.assert_array_equal(dxs[0], mine["dx"][0])
    assert not np.array_equal(dxs[1], mine["dx"][1])


def test_philox_streams_are_the_cpp_layers():
    s = linear.philox_streams(7, 5, 2)
    assert s["x"] == _mxkit.mix_stream(7, 0, 5 * 4096 + 2) and s["w"] == _mxkit.mix_stream(7, 1, 5)
    assert s["dy"] == _mxkit.mix_stream(s["x"], 2)
    assert linear.philox_streams(7, 5, training=False)["x"] == _mxkit.mix_stream(7, 3, 5)
    assert len({linear.philox_streams(i, j)["x"] for i in range(8) for j in range(8)}) == 64
    assert linear.philox_streams(0, 2 ** 64 - 1, 4095)["x"] == _mxkit.mix_stream(0, 0, 2 ** 64 - 1)  # wraps as uint64
    for bad in (dict(layer_id=-1), dict(layer_id=2 ** 32), dict(step=-1), dict(call=1.5)):
        with pytest.raises((ValueError, TypeError), match=next(iter(bad))):
            linear.philox_streams(**bad)


def test_nvfp4_bf16_layers_scale_the_papers_share():
    """The paper's 12B model: 62 blocks, the first 2 and the last 8 in bf16; a lone layer none; a
    model of two or more layers keeps at least its last one."""
    assert linear.nvfp4_bf16_layers(62) == (2, 8)
    assert linear.nvfp4_bf16_layers(0) == (0, 0) and linear.nvfp4_bf16_layers(1) == (0, 0)
    assert linear.nvfp4_bf16_layers(2) == (0, 1) and linear.nvfp4_bf16_layers(32) == (1, 4)
    for n in range(2, 200):
        first, last = linear.nvfp4_bf16_layers(n)
        assert last >= 1 and abs(first - 2 * n / 62) <= 0.5 and (last == 1 or abs(last - 8 * n / 62) <= 0.5)
    with pytest.raises(ValueError, match="n_layers"):
        linear.nvfp4_bf16_layers(-1)


@pytest.mark.parametrize("name", ["mxfp4", "mxfp8", "nvfp4"])
def test_operand_descriptions_are_quantizes(name):
    """What mxkit.torch.Linear rebuilds a saved copy from (and its ops' fake shapes): each operand's
    description is the one quantize gives its copy."""
    x = inputs(steps=1)[0][0]
    for op in linear.Recipe(name).x_copies:
        for axis in ("rowwise", "columnwise"):
            c = mxkit.quantize(x, axis=axis, **op.quantize_args)
            d = op.describe(*x.shape, axis)
            assert (d.data_shape, d.scale_shape) == (list(c.codes.shape), list(c.scales.shape))
            assert (d.axis, d.hadamard, d.rounding) == (c.description.axis, c.description.hadamard, c.description.rounding)


def test_recipes_are_the_cpp_presets():
    """The Python layer reads the presets from the module (nn/recipe.hpp), one definition."""
    spec = _mxkit.recipe_spec("mxfp4")
    assert spec["fprop"]["hadamard"] and spec["dgrad"]["hadamard"] and spec["wgrad"]["hadamard"]
    assert {spec[g][o]["format"] for g in ("fprop", "dgrad", "wgrad") for o in "ab"} == {"mxfp4"}
    assert not _mxkit.recipe_spec("mxfp4_wgrad_hadamard")["fprop"]["hadamard"]
    assert _mxkit.recipe_spec("mxfp4_wgrad_hadamard")["wgrad"]["hadamard"]
    fp8 = linear.Recipe("fp8_delayed")
    assert fp8.fp8_rows == ("e4m3", "e4m3", "e5m2") and fp8.fp8_max == (448.0, 448.0, 57344.0)
    assert fp8.history_length == 1024 and fp8.algorithm == "max" and fp8.margin == 0
    assert linear.Recipe("mxfp8").fprop.a.quantize_args["rule"] == "round_up"
    nv = linear.Recipe("nvfp4")
    assert nv.nvfp4 and nv.block == 16
    assert nv.w_copies[0].quantize_args["block"] == nv.w_copies[1].quantize_args["block"] == "16x16"
    assert nv.x_copies[0].quantize_args["block"] == "1x16" and not nv.fprop.hadamard and nv.wgrad.hadamard
    assert {o.rounding for o in nv.dy_copies} == {"stochastic"} and nv.x_copies[0].rounding == "nearest_even"


def test_refusals_name_the_argument():
    with pytest.raises(ValueError, match="recipe 'mxfp5' is not one of mxfp8, mxfp4"):
        linear.Recipe("mxfp5")
    with pytest.raises(ValueError, match="algorithm 'mean'"):
        linear.Recipe("fp8_delayed", algorithm="mean")
    with pytest.raises(ValueError, match="margin=65 is out of range"):
        linear.Recipe("fp8_delayed", margin=65)
    r = linear.Recipe("mxfp8")
    x, w, _ = inputs(steps=1, m=40)
    with pytest.raises(ValueError, match="tokens M=40 must be a multiple of 32"):
        linear.forward(r, x[0], w[0])
    with pytest.raises(ValueError, match="tokens M=40 must be a multiple of 16"):
        linear.forward(linear.Recipe("nvfp4"), x[0], w[0])
    linear.forward(r, x[0], w[0], wgrad=False)  # inference: no reduction over the tokens
    with pytest.raises(ValueError, match=r"x is \[64, 96\] but w is \[128, 64\]"):
        linear.forward(r, inputs(steps=1)[0][0], np.zeros((128, 64), np.float32))
    with pytest.raises(ValueError, match="needs its FP8 scaling state"):
        linear.forward(linear.Recipe("fp8_delayed"), x[0][:32], w[0])
    x, w, dy = inputs(steps=1)
    with pytest.raises(ValueError, match="recipe 'nope' is not one of"):
        linear.cpp_steps("nope", x, w, dy)
    with pytest.raises(ValueError, match=r"dy has shape \[1, 64, 64\], expected \[1, 64, 128\]"):
        linear.cpp_steps("mxfp8", x, w, dy[:, :, :64].copy())
    with pytest.raises(ValueError, match="must be a multiple of 32"):  # the C++ layer's own refusal
        linear.cpp_steps("mxfp8", x[:, :40].copy(), w, dy[:, :40].copy())
    with pytest.raises(ValueError, match="activations must be f32 or bf16"):
        linear.cpp_steps("mxfp8", x, w, dy, activations="f64")


def test_fp8_cast_records_amax_and_saturates():
    """The FP8 entry points on the host: code = cast(x * scale) saturating (the package's encode),
    NaN-winning amax max-combined into the history slot, the transpose exact."""
    x = np.array([[1.0, -2.0, 3.0, 1000.0], [0.5, 0.25, -600.0, 0.0]], np.float32)
    scale = np.array([0.5], np.float32)
    hist = np.array([700.0], np.float32)
    codes = np.empty((2, 4), np.uint8)
    trans = np.empty((4, 2), np.uint8)
    ds = np.empty(1, np.float32)
    _mxkit.fp8_cast(mxkit._import(x), "e4m3", mxkit._import(scale), mxkit._import(hist), mxkit._import(codes),
                    mxkit._import(trans), mxkit._import(ds))
    np.testing.assert_array_equal(codes, mxkit.encode(x * scale[0], "e4m3"))  # saturating: 500 -> 448
    np.testing.assert_array_equal(trans, codes.T)
    assert hist[0] == 1000.0 and ds[0] == 0.5
    with pytest.raises(ValueError, match="scale must be finite and positive"):
        _mxkit.fp8_cast(mxkit._import(x), "e4m3", mxkit._import(np.zeros(1, np.float32)), None, mxkit._import(codes))
    with pytest.raises(ValueError, match=r"fp8_cast: transposed has shape \[2, 4\], but this result has shape \[4, 2\]"):
        _mxkit.fp8_cast(mxkit._import(x), "e4m3", mxkit._import(scale), None, None, mxkit._import(codes))


def test_mxkit_linear_imports_no_torch():
    """mxkit.linear is the torch-free half (attribute access loads it; mxkit.torch is what imports torch)."""
    import subprocess
    import sys
    code = "import sys, mxkit; mxkit.linear.Recipe('mxfp8'); print('torch' in sys.modules, 'mxkit.torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"], out.stdout + out.stderr
