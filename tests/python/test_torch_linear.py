# SPDX-License-Identifier: Apache-2.0
"""mxkit.torch.Linear (issue 45, section 4) with torch: for every recipe, a few training steps of
the layer (torch's autograd, the weight a bf16 nn.Parameter) give Y, dX and dW equal bit for bit
to mxkit's C++ linear layer on the same inputs: on the CPU (the host reference) against
ref::host_backend, on CUDA against gpu::device_backend; the FP8 tables end the same. The layer's
ops pass torch.library.opcheck; torch.compile(fullgraph=True) gives the eager bits; a two-layer
model trains (its loss falls) with any torch optimizer; its state_dict carries the FP8 table.
Skipped without torch >= 2.4 (the ops are torch.library.custom_op); the CUDA cases without a GPU
or a module built with MXKIT_GPU=CUDA. scripts/gpu.sh python runs it on an H200."""
import numpy as np
import pytest

import mxkit
from mxkit import linear

torch = pytest.importorskip("torch", reason="mxkit.torch needs torch (>= 2.4)")
if not all(hasattr(torch.library, name) for name in ("custom_op", "register_fake", "opcheck")):
    pytest.skip(f"mxkit.torch needs torch >= 2.4 (torch.library.custom_op), this is {torch.__version__}",
                allow_module_level=True)

import mxkit.torch as mxtorch  # noqa: E402
from test_linear_host import bf16_values  # noqa: E402  (the same inputs as the host test)

CUDA = torch.cuda.is_available() and mxkit.has_gpu()
needs_cuda = pytest.mark.skipif(not CUDA, reason="no CUDA device, or mxkit built without MXKIT_GPU=CUDA")
DEVICES = ["cpu", pytest.param("cuda", marks=needs_cuda)]
# Small on the CPU (the host reference is exact and slow); the GPU's GEMM wants 16-byte rows.
SHAPES = {"cpu": (64, 96, 128), "cuda": (256, 256, 384)}
STEPS = 3


def inputs(device, seed=0):
    m, k, n = SHAPES[device]
    rng = np.random.default_rng(seed)
    x = np.stack([bf16_values(rng, (m, k), 2.0 ** s) for s in range(STEPS)])
    w = np.stack([bf16_values(rng, (n, k), 0.125) for _ in range(STEPS)])
    dy = np.stack([bf16_values(rng, (m, n), 2.0 ** -s) for s in range(STEPS)])
    return x, w, dy


def same_bits(got, want, what):
    got = got.detach().float().cpu().numpy()
    assert got.shape == want.shape, what
    assert np.isfinite(want).all() and np.count_nonzero(want) > want.size // 2, what  # a real product
    bad = np.flatnonzero(got.view(np.uint32) != want.view(np.uint32))
    assert bad.size == 0, f"{what}: {bad.size} of {got.size} differ; first at {bad[0]}: " \
                          f"{got.reshape(-1)[bad[0]]} vs {want.reshape(-1)[bad[0]]}"


def layer_steps(layer, x, w, dy, device):
    """What a training loop does: the weight set (a new version), zero_grad, forward, backward."""
    ys, dxs, dws = [], [], []
    for s in range(x.shape[0]):
        with torch.no_grad():
            layer.weight.copy_(torch.from_numpy(w[s]))
        layer.weight.grad = None
        xs = torch.from_numpy(x[s]).to(device=device, dtype=torch.bfloat16).requires_grad_()
        y = layer(xs)
        y.backward(torch.from_numpy(dy[s]).to(device=device, dtype=torch.bfloat16))
        ys.append(y)
        dxs.append(xs.grad)
        dws.append(layer.weight.grad)
    return ys, dxs, dws


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("recipe", mxtorch.RECIPES)
def test_layer_equals_the_cpp_linear_bit_for_bit(recipe, device):
    x, w, dy = inputs(device)
    layer = mxtorch.Linear(x.shape[2], w.shape[1], recipe=recipe, device=device, history_length=4)
    assert isinstance(layer.weight, torch.nn.Parameter) and layer.weight.dtype == torch.bfloat16
    ys, dxs, dws = layer_steps(layer, x, w, dy, device)
    ref = linear.cpp_steps(recipe, x, w, dy, device=device == "cuda", history_length=4)
    for s in range(STEPS):
        assert ys[s].dtype == dxs[s].dtype == dws[s].dtype == torch.bfloat16
        same_bits(ys[s], ref["y"][s], f"{recipe} step {s} y")
        same_bits(dxs[s], ref["dx"][s], f"{recipe} step {s} dx")
        same_bits(dws[s], ref["dw"][s], f"{recipe} step {s} dw")
    if recipe == "fp8_delayed":
        layer.update_scales()  # the C++ layer's end_step after the last step
        np.testing.assert_array_equal(layer.fp8_scale.cpu().numpy(), ref["scale"])
        np.testing.assert_array_equal(layer.fp8_amax_history.cpu().numpy(), ref["amax_history"])
        assert (ref["scale"] != 1.0).all()  # the scales moved within the steps compared


@pytest.mark.parametrize("device", DEVICES)
def test_a_different_recipe_is_caught(device):
    """The comparison above can fail: the layer under mxfp4 against the C++ layer without the rotation."""
    x, w, dy = inputs(device, seed=3)
    ys, _, _ = layer_steps(mxtorch.Linear(x.shape[2], w.shape[1], recipe="mxfp4", device=device), x[:1], w[:1], dy[:1],
                           device)
    ref = linear.cpp_steps("mxfp4_no_hadamard", x[:1], w[:1], dy[:1], device=device == "cuda")
    with pytest.raises(AssertionError, match="differ"):
        same_bits(ys[0], ref["y"][0], "y")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("recipe", ["mxfp4", "mxfp8", "fp8_delayed", "nvfp4"])
def test_ops_pass_opcheck(recipe, device):
    m, k, n = SHAPES[device]
    g = torch.Generator().manual_seed(0)
    x = torch.randn(m, k, generator=g).to(device=device, dtype=torch.bfloat16)
    w = (torch.randn(n, k, generator=g) * 0.1).to(device=device, dtype=torch.bfloat16)
    dy = torch.randn(m, n, generator=g).to(device=device, dtype=torch.bfloat16)
    r = linear.recipe(recipe)
    none = lambda: x.new_empty((0,), dtype=torch.float32)  # an MX recipe's (empty) FP8 table, a tensor each
    state = linear.new_scaling_state(r, x) if r.kind == "fp8" else {"scale": none(), "amax_history": none(), "fp8_max": none()}
    step = torch.tensor(2, dtype=torch.int64)  # the layer's Philox step: a CPU tensor on either device
    fwd = (x, w, recipe, True, True, state["scale"], state["amax_history"], 7, step)
    torch.library.opcheck(torch.ops.mxkit.linear_forward.default, fwd)
    y, xc, xs, xt, wc, ws, wt, dy_stream = torch.ops.mxkit.linear_forward(*fwd)
    assert xt.shape == wt.shape == ((1,) if recipe == "nvfp4" else (0,))
    assert int(dy_stream) == linear.philox_streams(7, 2)["dy"] and dy_stream.device.type == "cpu"
    torch.library.opcheck(torch.ops.mxkit.linear_backward.default,
                          (dy, xc, xs, xt, wc, ws, wt, w, recipe, m, True, True, state["scale"], state["amax_history"],
                           dy_stream))
    if r.kind == "fp8":
        torch.library.opcheck(torch.ops.mxkit.fp8_update_scales.default,
                              (state["amax_history"], state["scale"], state["fp8_max"], recipe, r.history_length,
                               r.algorithm, r.margin))


@needs_cuda
def test_mxfp8_values_fall_back_exactly_and_pair_with_codes():
    """MXFP8 on a CUDA device writes its rowwise copies as bf16 values (mxkit.linear._Values) and
    keeps its columnwise copies as codes: with a weight block at 2^60 (beyond the bf16 product's
    exact range) the quantizer raises its flag, the GEMMs run their block-scaled fallback, and the
    layer still gives the C++ layer's bits; a bf16 dY (values beside the kept codes) gives the bits
    a float32 dY (codes only) gives."""
    x, w, dy = inputs("cuda", seed=5)
    w = w.copy()
    w[:, 3, 32:64] *= 2.0 ** 60
    layer = mxtorch.Linear(x.shape[2], w.shape[1], recipe="mxfp8", device="cuda")
    ys, dxs, dws = layer_steps(layer, x[:1], w[:1], dy[:1], "cuda")
    ref = linear.cpp_steps("mxfp8", x[:1], w[:1], dy[:1], device=True)
    same_bits(ys[0], ref["y"][0], "y")
    same_bits(dxs[0], ref["dx"][0], "dx")
    same_bits(dws[0], ref["dw"][0], "dw")

    r = linear.recipe("mxfp8")
    xt, wt = (torch.from_numpy(a[0]).to("cuda", torch.bfloat16) for a in (x, w))
    assert linear.takes_values(r, xt, wt) and not linear.takes_values(r, xt.float())
    assert not linear.takes_values(linear.recipe("mxfp4"), xt)
    w_row, w_col = linear._values_copies(wt, *r.w_copies, 0)
    x_row, _ = linear._values_copies(xt, r.x_copies[0], None, 0)
    assert isinstance(w_row, linear._Values) and isinstance(w_col, mxkit.MXCopy)
    assert int(w_row.flag) == 1 and int(x_row.flag) == 0
    y, saved = linear.forward(r, xt, wt)
    assert isinstance(saved["x"], mxkit.MXCopy) and isinstance(saved["w"], mxkit.MXCopy)
    same_bits(y, ref["y"][0], "y of linear.forward")
    dy16 = torch.from_numpy(dy[0]).to("cuda", torch.bfloat16)
    dx16, dw16 = linear.backward(r, dy16, saved, dx_dtype="float32")
    dx32, dw32 = linear.backward(r, dy16.float(), saved, dx_dtype="float32")
    for got, want, what in ((dx32, dx16, "dx"), (dw32, dw16, "dw")):
        same_bits(got, want.detach().float().cpu().numpy(), what + " with a float32 dY")


@needs_cuda
@pytest.mark.parametrize("recipe", mxtorch.RECIPES)
def test_compiled_model_equals_eager(recipe):
    """torch.compile(fullgraph=True) traces the layers' ops (no graph break) and gives the eager
    gradients bit for bit. No other op between the layers: what differs would be inductor's."""
    m, k, n = SHAPES["cuda"]

    def make():
        torch.manual_seed(1)
        return torch.nn.Sequential(mxtorch.Linear(k, n, recipe=recipe, device="cuda"),
                                   mxtorch.Linear(n, k, recipe=recipe, device="cuda"))

    def loss(model, x, t):
        return (model(x).float() * t).sum()
    eager, compiled = make(), make()
    compiled_loss = torch.compile(loss, fullgraph=True)
    g = torch.Generator(device="cuda").manual_seed(2)
    for i in range(2):  # FP8: the second step runs on updated scales
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g)
        t = torch.randn(m, k, device="cuda", generator=g)
        for model, fn in ((eager, loss), (compiled, compiled_loss)):
            for p in model.parameters():
                p.grad = None
            fn(model, x, t).backward()
        for a, b in zip(eager.parameters(), compiled.parameters()):
            assert a.grad is not None and torch.equal(a.grad, b.grad), f"{recipe} step {i}"
    if recipe == "fp8_delayed":
        assert torch.equal(eager[0].fp8_scale, compiled[0].fp8_scale)
        assert torch.equal(eager[1].fp8_amax_history, compiled[1].fp8_amax_history)


@needs_cuda
@pytest.mark.parametrize("recipe", mxtorch.RECIPES)
def test_two_layer_model_trains(recipe):
    """A student of two mxkit Linear layers learns a fixed random teacher (bf16 nn.Linear layers)
    with torch's AdamW: the loss of the last steps is well below the first's."""
    torch.manual_seed(0)
    d, h, batch = 256, 512, 512
    teacher = torch.nn.Sequential(torch.nn.Linear(d, h, bias=False), torch.nn.GELU(),
                                  torch.nn.Linear(h, d, bias=False)).to("cuda", torch.bfloat16)
    student = torch.nn.Sequential(mxtorch.Linear(d, h, recipe=recipe, device="cuda"), torch.nn.GELU(),
                                  mxtorch.Linear(h, d, recipe=recipe, device="cuda"))
    opt = torch.optim.AdamW(student.parameters(), lr=2e-3, weight_decay=0.0)
    losses = []
    for _ in range(150):
        x = torch.randn(batch, d, device="cuda", dtype=torch.bfloat16)
        with torch.no_grad():
            target = teacher(x).float()
        loss = (student(x).float() - target).square().mean() / target.square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    first, last = np.mean(losses[:5]), np.mean(losses[-10:])
    assert np.isfinite(losses).all(), losses
    assert last < 0.5 * first, f"{recipe}: relative loss {first:.4f} -> {last:.4f}"


@pytest.mark.parametrize("device", DEVICES)
def test_state_dict_carries_the_fp8_table(device):
    m, k, n = SHAPES[device]
    a = mxtorch.Linear(k, n, recipe="fp8_delayed", device=device, history_length=8)
    x = torch.randn(m, k, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a(x).float().sum().backward()
    a.update_scales()
    sd = a.state_dict()
    assert set(sd) == {"weight", "fp8_scale", "fp8_amax_history", "fp8_max", "_extra_state"}
    assert sd["_extra_state"] == {"philox_step": 3}  # three training forwards
    b = mxtorch.Linear(k, n, recipe="fp8_delayed", device=device, history_length=8)
    assert not torch.equal(b.fp8_scale, a.fp8_scale)
    b.load_state_dict(sd)
    a.eval()
    b.eval()
    with torch.no_grad():
        assert torch.equal(a(x), b(x))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("recipe", ["nvfp4", "mxfp4_rht_sr"])
def test_stochastic_rounding_draws_the_layers_streams(recipe, device):
    """The gradients' stochastic rounding draws the C++ layer's Philox streams: a layer with id 5
    equals the C++ layer with id 5 bit for bit, and not the C++ layer with id 0 (dX and dW move,
    Y, rounded to nearest, does not); a layer resumed at step 2 (its state_dict) draws step 2's."""
    x, w, dy = inputs(device, seed=4)
    layer = mxtorch.Linear(x.shape[2], w.shape[1], recipe=recipe, device=device, layer_id=5)
    ys, dxs, dws = layer_steps(layer, x, w, dy, device)
    assert layer.philox_step == STEPS
    mine = linear.cpp_steps(recipe, x, w, dy, device=device == "cuda", layer_id=5)
    other = linear.cpp_steps(recipe, x, w, dy, device=device == "cuda", layer_id=0)
    for s in range(STEPS):
        same_bits(ys[s], mine["y"][s], f"{recipe} step {s} y")
        same_bits(dxs[s], mine["dx"][s], f"{recipe} step {s} dx")
        same_bits(dws[s], mine["dw"][s], f"{recipe} step {s} dw")
        same_bits(ys[s], other["y"][s], f"{recipe} step {s} y (layer 0)")
        with pytest.raises(AssertionError, match="differ"):
            same_bits(dxs[s], other["dx"][s], "dx of layer 0")
    resumed = mxtorch.Linear(x.shape[2], w.shape[1], recipe=recipe, device=device, layer_id=5)
    sd = layer.state_dict()
    sd["_extra_state"] = {"philox_step": 2}
    resumed.load_state_dict(sd)
    _, dxs2, dws2 = layer_steps(resumed, x[2:], w[2:], dy[2:], device)
    same_bits(dxs2[0], mine["dx"][2], f"{recipe} resumed at step 2 dx")
    same_bits(dws2[0], mine["dw"][2], f"{recipe} resumed at step 2 dw")


def test_refusals_name_the_argument():
    with pytest.raises(ValueError, match="recipe 'mxfp5' is not one of"):
        mxtorch.Linear(64, 64, recipe="mxfp5")
    with pytest.raises(ValueError, match="in_features K=48 must be a multiple of 32"):
        mxtorch.Linear(48, 64, recipe="mxfp8")
    with pytest.raises(ValueError, match="in_features K=40 must be a multiple of 16"):
        mxtorch.Linear(40, 64, recipe="nvfp4")
    with pytest.raises(ValueError, match="layer_id"):
        mxtorch.Linear(64, 64, recipe="nvfp4", layer_id=-1)
    with pytest.raises(ValueError, match="extra state"):
        mxtorch.Linear(64, 64, recipe="nvfp4").set_extra_state(3)
    with pytest.raises(ValueError, match="dtype must be torch.bfloat16 or torch.float32"):
        mxtorch.Linear(64, 64, dtype=torch.float16)
    layer = mxtorch.Linear(64, 64, recipe="mxfp8")
    with pytest.raises(ValueError, match=r"x must be \[..., 64\], got \(32, 32\)"):
        layer(torch.zeros(32, 32, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="x must be bfloat16 or float32"):
        layer(torch.zeros(32, 64, dtype=torch.float16))
    with pytest.raises(ValueError, match="tokens M=40 must be a multiple of 32"):
        layer(torch.zeros(40, 64, dtype=torch.bfloat16))
    with torch.no_grad():  # inference reduces over no tokens
        assert layer(torch.zeros(40, 64, dtype=torch.bfloat16)).shape == (40, 64)
