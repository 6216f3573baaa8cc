# SPDX-License-Identifier: Apache-2.0
"""mxkit.torch.Linear: an nn.Linear (without bias by default) whose forward, dgrad and wgrad GEMMs run
in MXFP8, MXFP4 (+ the 16-point Hadamard rotation), NVFP4 (NVIDIA's recipe) or FP8 delayed scaling
through mxkit's quantizers and GEMMs, exactly as mxkit's C++ linear layer (nn/linear.hpp) computes
them.

    import torch, mxkit.torch
    model = torch.nn.Sequential(mxkit.torch.Linear(4096, 14336, recipe="mxfp4", device="cuda"),
                                torch.nn.GELU(),
                                mxkit.torch.Linear(14336, 4096, recipe="mxfp4", device="cuda"))
    opt = torch.optim.AdamW(model.parameters())        # any optimizer: the weights are torch's
    loss = model(x).float().square().mean(); loss.backward(); opt.step()
    model = torch.compile(model)                       # the steps are torch.library ops

The weight is an ordinary bf16 nn.Parameter (any dtype torch has: bf16 by default, as the master
weights of bf16 training), so optimizers, FSDP2 (fully_shard), state_dict / checkpoints and
weight decay treat it as they treat nn.Linear's. The FP8 recipe keeps its delayed-scaling table
as buffers (fp8_scale [3], fp8_amax_history [3, H], fp8_max [3]: rows X, W, dY), saved with the
module's state_dict. Its scales move at the start of every training forward (see
mxkit/linear.py: the same sequence as the C++ layer's update after each step when each step has
one forward; with gradient accumulation they move once per micro-batch).

Each training step is two custom ops, mxkit::linear_forward and mxkit::linear_backward (and
mxkit::fp8_update_scales for FP8), with fake implementations, so torch.compile(fullgraph=True)
traces a model that uses the layer; their bodies are mxkit.linear.forward / backward (the math,
shared with the host tests, which hold it to the C++ layer without torch).

Inputs: [..., in_features] bf16 or float32, on CUDA (the device quantizers and GEMMs, on the
current stream, memory from torch's caching allocator) or on the CPU (the host reference: exact,
slow). The output has the input's dtype; mxkit's GEMMs write float32 or bf16, so float16 inputs are
refused. MX recipes need in_features, out_features and (training) the number of tokens to be
multiples of 32, NVFP4 of 16. Stochastic rounding draws the C++ layer's Philox streams (layer_id,
the step: mxkit.linear.philox_streams). Needs torch >= 2.4 (torch.library.custom_op).
"""
import math
from typing import Tuple

import torch
from torch import Tensor, nn

import mxkit
from mxkit import linear as _linear

if not (hasattr(torch, "library") and hasattr(torch.library, "custom_op") and hasattr(torch.library, "register_fake")):
    raise ImportError(f"mxkit.torch needs torch >= 2.4 (torch.library.custom_op and register_fake); "
                      f"this is torch {torch.__version__}")

__all__ = ["Linear", "RECIPES"]

RECIPES = _linear.RECIPES
_EMPTY = (0,)


def _recipe(name):
    return _linear.recipe(name)


def _state(scale, amax_history, fp8_max=None):
    """The FP8 table, or None: the ops take an empty tensor where a recipe has none."""
    return None if scale is None or scale.numel() == 0 else {"scale": scale, "amax_history": amax_history, "fp8_max": fp8_max}


def _table_or_empty(t, like):
    """An FP8 table tensor, or an empty float32 tensor on like's device. The ops' mutable
    arguments are plain Tensors: an Optional one left at its default None is dropped from the
    call by the dispatcher, and torch 2.11's in-place bookkeeping then indexes past the arguments."""
    return t if t is not None else like.new_empty(_EMPTY, dtype=torch.float32)


def _dtype_name(t):
    return "bfloat16" if t.dtype == torch.bfloat16 else "float32"


def _parts(copy, like):
    """(codes, scales, tensor scale) of a saved copy: an MXCopy's (no tensor scale), an
    NVFP4Copy's (its tensor scale as a 1-element float32 tensor on like's device), or FP8's
    (codes, scale); empty tensors where there is none (each its own: an op's outputs never alias)."""
    def empty(dtype):
        return like.new_empty(_EMPTY, dtype=dtype)

    if copy is None:
        return empty(torch.uint8), empty(torch.uint8), empty(torch.float32)
    if isinstance(copy, mxkit.NVFP4Copy):
        t = copy.tensor_scale
        if not isinstance(t, Tensor):  # a host copy's tensor scale is a Python float
            t = torch.tensor([t], dtype=torch.float32, device=like.device)
        return copy.codes, copy.scales, t.reshape(1)
    return copy[0], copy[1], empty(torch.float32)


@torch.library.custom_op("mxkit::linear_forward", mutates_args=("amax_history",))
def linear_forward(x: Tensor, w: Tensor, recipe: str, training: bool, wgrad: bool, scale: Tensor, amax_history: Tensor,
                   layer_id: int, philox_step: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Y = X . W^T under `recipe` (mxkit.linear.forward): (y, X's wgrad copy (codes, scales,
    tensor scale), W's dgrad copy (codes, scales, tensor scale), dY's Philox stream); an FP8 copy's
    scales are the one float32 scale it was made with, and only NVFP4 copies have a tensor scale
    (else empty). x [M, K], w [N, K]; amax_history (FP8, training) gains the amaxes of X and W;
    scale and amax_history are empty tensors for a block-scaled recipe. layer_id and philox_step
    (a CPU int64 tensor: the step) give the Philox streams of stochastic rounding
    (philox_streams); backward's dY stream comes back as a CPU int64 scalar, so that backward
    reads the step of this forward, not the layer's counter, which has moved on by then (under
    torch.compile backward could otherwise read the counter after its increment)."""
    r = _recipe(recipe)
    streams = _linear.philox_streams(layer_id, int(philox_step), 0, training)
    y, saved = _linear.forward(r, x, w, _state(scale, amax_history), training=training, wgrad=wgrad, streams=streams)
    return (y, *_parts(saved["x"], x), *_parts(saved["w"], x), torch.tensor(streams["dy"], dtype=torch.int64))


def _copy_shapes(r, op, rows, cols, axis):
    """The stored shapes of operand op's copy of a [rows, cols] tensor (codes, scales, tensor
    scale), as quantize makes them."""
    if r.kind == "fp8":
        return ((rows, cols) if axis == "rowwise" else (cols, rows)), (1,), _EMPTY
    d = op.describe(rows, cols, axis)
    return tuple(d.data_shape), tuple(d.scale_shape), (1,) if op.nvfp4 else _EMPTY


def _scale_dtype(r):
    return torch.float32 if r.kind == "fp8" else torch.uint8


@linear_forward.register_fake
def _linear_forward_fake(x, w, recipe, training, wgrad, scale, amax_history, layer_id, philox_step):
    r = _recipe(recipe)
    m, k = x.shape
    n = w.shape[0]
    y = x.new_empty((m, n), dtype=x.dtype)
    if wgrad:
        xcs, xss, xts = _copy_shapes(r, r.x_copies[1], m, k, "columnwise")
    else:
        xcs, xss, xts = _EMPTY, _EMPTY, _EMPTY
    wcs, wss, wts = _copy_shapes(r, r.w_copies[1], n, k, "columnwise")
    return (y, x.new_empty(xcs, dtype=torch.uint8), x.new_empty(xss, dtype=_scale_dtype(r) if wgrad else torch.uint8),
            x.new_empty(xts, dtype=torch.float32), x.new_empty(wcs, dtype=torch.uint8),
            x.new_empty(wss, dtype=_scale_dtype(r)), x.new_empty(wts, dtype=torch.float32),
            philox_step.new_empty((), dtype=torch.int64))


def _saved_copy(r, op, codes, scales, tensor_scale, rows, cols):
    """The copy backward reads, from the op's tensors: the MXCopy or NVFP4Copy that quantize made
    of the columnwise copy of a [rows, cols] tensor for operand `op`, or FP8's (transposed codes,
    scale)."""
    if r.kind == "fp8":
        return codes, scales
    d = op.describe(rows, cols, "columnwise")
    if op.nvfp4:  # the host GEMM takes the tensor scale as a float; a device one stays on the device (unread)
        return mxkit.NVFP4Copy(codes, scales, tensor_scale if tensor_scale.is_cuda else float(tensor_scale), d)
    return mxkit.MXCopy(codes, scales, d)


@torch.library.custom_op("mxkit::linear_backward", mutates_args=("amax_history",))
def linear_backward(dy: Tensor, x_codes: Tensor, x_scales: Tensor, x_tensor_scale: Tensor, w_codes: Tensor, w_scales: Tensor,
                    w_tensor_scale: Tensor, w: Tensor, recipe: str, m: int, need_dx: bool, need_dw: bool, scale: Tensor,
                    amax_history: Tensor, dy_stream: Tensor) -> Tuple[Tensor, Tensor]:
    """dX and dW (mxkit.linear.backward) from dY [M, N] and forward's saved copies; dX in dY's
    dtype, dW in w's. A gradient not asked for is an empty tensor. amax_history (FP8) gains dY's
    amax. dy_stream: forward's last output, the Philox stream dY draws from."""
    r = _recipe(recipe)
    n, k = w.shape
    saved = {"x": _saved_copy(r, r.x_copies[1], x_codes, x_scales, x_tensor_scale, m, k) if need_dw else None,
             "w": _saved_copy(r, r.w_copies[1], w_codes, w_scales, w_tensor_scale, n, k), "shape": (m, k, n),
             "dy_stream": int(dy_stream)}
    dx, dw = _linear.backward(r, dy, saved, _state(scale, amax_history), dx=need_dx, dw=need_dw,
                              dx_dtype=_dtype_name(dy), dw_dtype=_dtype_name(w))
    dx = dx.to(dy.dtype) if need_dx else dy.new_empty(_EMPTY)
    dw = dw.to(w.dtype) if need_dw else w.new_empty(_EMPTY)
    return dx, dw


@linear_backward.register_fake
def _linear_backward_fake(dy, x_codes, x_scales, x_tensor_scale, w_codes, w_scales, w_tensor_scale, w, recipe, m, need_dx,
                          need_dw, scale, amax_history, dy_stream):
    n, k = w.shape
    return (dy.new_empty((m, k) if need_dx else _EMPTY), w.new_empty((n, k) if need_dw else _EMPTY))


@torch.library.custom_op("mxkit::fp8_update_scales", mutates_args=("amax_history", "scale"))
def fp8_update_scales(amax_history: Tensor, scale: Tensor, fp8_max: Tensor, recipe: str, history_length: int,
                      algorithm: str, margin: int) -> None:
    """The delayed-scaling update of a layer's table (mxkit.linear.update_scales)."""
    _linear.update_scales(_linear.recipe(recipe, history_length, algorithm, margin),
                          {"amax_history": amax_history, "scale": scale, "fp8_max": fp8_max})


@fp8_update_scales.register_fake
def _fp8_update_scales_fake(amax_history, scale, fp8_max, recipe, history_length, algorithm, margin):
    return None


class _LinearFunction(torch.autograd.Function):
    """The autograd of one Linear call: forward and backward are the two ops above. The FP8 table
    travels on ctx (module buffers that backward updates in place: saving them with
    save_for_backward would make a second forward's update an error)."""

    @staticmethod
    def forward(ctx, x, w, recipe, training, scale, amax_history, layer_id, philox_step):
        wgrad = bool(training and ctx.needs_input_grad[1])
        scale, amax_history = _table_or_empty(scale, x), _table_or_empty(amax_history, x)
        y, xc, xs, xt, wc, ws, wt, dy_stream = torch.ops.mxkit.linear_forward(x, w, recipe, training, wgrad, scale,
                                                                              amax_history, layer_id, philox_step)
        ctx.save_for_backward(xc, xs, xt, wc, ws, wt, w, dy_stream)
        ctx.recipe, ctx.m, ctx.scale, ctx.amax_history = recipe, x.shape[0], scale, amax_history
        return y

    @staticmethod
    def backward(ctx, dy):
        xc, xs, xt, wc, ws, wt, w, dy_stream = ctx.saved_tensors
        need_dx, need_dw = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        dx, dw = torch.ops.mxkit.linear_backward(dy.contiguous(), xc, xs, xt, wc, ws, wt, w, ctx.recipe, ctx.m, need_dx,
                                                 need_dw, ctx.scale, ctx.amax_history, dy_stream)
        return (dx if need_dx else None), (dw if need_dw else None), None, None, None, None, None, None


class Linear(nn.Module):
    """y = x . W^T (+ bias) with the GEMMs of forward and backward quantized as `recipe` says
    (mxkit.torch.RECIPES: "mxfp8", "mxfp4" (+ the 16-point Hadamard rotation on every GEMM),
    "mxfp4_wgrad_hadamard", "mxfp4_no_hadamard", "mxfp4_rht_sr", "fp8_delayed", "nvfp4"; see
    mxkit.linear.Recipe). in_features, out_features: as nn.Linear's. bias: a bias added by torch
    after the GEMM (default False: the C++ layer has none). dtype: the weight's (default bfloat16).
    history_length, amax_algorithm, margin: FP8 delayed scaling (default 1024, "max", 0).

    layer_id: the first key of the layer's Philox streams (the C++ layer's id), which stochastic
    rounding ("nvfp4", "mxfp4_rht_sr": the gradients) draws from; give the layers of a model
    distinct ids so that they draw apart. Each training forward is one step of the C++ layer
    (philox_step, which counts them, is saved in the state_dict so that a resumed run draws what
    the uninterrupted one drew); with gradient accumulation each micro-batch draws as a step."""

    def __init__(self, in_features, out_features, bias=False, recipe="mxfp8", device=None, dtype=torch.bfloat16,
                 history_length=None, amax_algorithm=None, margin=None, layer_id=0):
        super().__init__()
        f = "mxkit.torch.Linear"
        self.in_features = mxkit._integer(f, "in_features", in_features, 1)
        self.out_features = mxkit._integer(f, "out_features", out_features, 1)
        if not isinstance(recipe, str) or recipe not in RECIPES:
            raise ValueError(f"{f}: recipe {recipe!r} is not one of {', '.join(RECIPES)}")
        if dtype not in (torch.bfloat16, torch.float32):
            raise ValueError(f"{f}: dtype must be torch.bfloat16 or torch.float32 (mxkit's GEMMs write those), got {dtype}")
        r = _linear.recipe(recipe, history_length, amax_algorithm, margin)
        r.check_shapes(0, self.in_features, self.out_features, False)
        self.recipe = recipe
        self._recipe = r  # made here: forward reads it without calling the module (torch.compile traces forward)
        self.layer_id = mxkit._integer(f, "layer_id", layer_id, 0, 2 ** 32 - 1)
        # The training forwards so far: a CPU tensor, not a buffer, so that .to(device) leaves it
        # where the ops read it without waiting for a device (and torch.compile sees it change
        # without recompiling); the state_dict carries it as extra state.
        self._philox_step = torch.zeros((), dtype=torch.int64)
        self._scaling = (r.history_length, r.algorithm, r.margin)
        self.weight = nn.Parameter(torch.empty((self.out_features, self.in_features), device=device, dtype=dtype))
        self.bias = nn.Parameter(torch.empty(self.out_features, device=device, dtype=dtype)) if bias else None
        if r.kind == "fp8":
            s = _linear.new_scaling_state(r)
            self.register_buffer("fp8_scale", torch.from_numpy(s["scale"]).to(device))
            self.register_buffer("fp8_amax_history", torch.from_numpy(s["amax_history"]).to(device))
            self.register_buffer("fp8_max", torch.from_numpy(s["fp8_max"]).to(device))
        else:
            self.fp8_scale = self.fp8_amax_history = self.fp8_max = None
        self.reset_parameters()

    def reset_parameters(self):
        # nn.Linear's initialization (kaiming_uniform_ with a = sqrt(5), a uniform bias).
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_features)
            nn.init.uniform_(self.bias, -bound, bound)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, " \
               f"recipe={self.recipe!r}, layer_id={self.layer_id}"

    @property
    def philox_step(self):
        """The step the next training forward draws its Philox streams in (training forwards so far)."""
        return int(self._philox_step)

    @philox_step.setter
    def philox_step(self, step):
        self._philox_step.fill_(mxkit._integer("mxkit.torch.Linear", "philox_step", step, 0, 2 ** 63 - 1))

    def get_extra_state(self):
        return {"philox_step": self.philox_step}

    def set_extra_state(self, state):
        if not isinstance(state, dict) or "philox_step" not in state:
            raise ValueError(f"mxkit.torch.Linear: extra state must be {{'philox_step': int}}, got {state!r}"[:300])
        self.philox_step = state["philox_step"]

    def update_scales(self):
        """The FP8 table's delayed-scaling update (run at the start of every training forward)."""
        if self.fp8_scale is not None:
            torch.ops.mxkit.fp8_update_scales(self.fp8_amax_history, self.fp8_scale, self.fp8_max, self.recipe,
                                              *self._scaling)

    def forward(self, x):
        f = "mxkit.torch.Linear"
        if not isinstance(x, Tensor):
            raise TypeError(f"{f}: x must be a torch.Tensor, got {type(x).__name__}")
        if x.dim() < 1 or x.shape[-1] != self.in_features:
            raise ValueError(f"{f}: x must be [..., {self.in_features}], got {tuple(x.shape)}")
        if x.dtype not in (torch.bfloat16, torch.float32):
            raise ValueError(f"{f}: x must be bfloat16 or float32, got {x.dtype}")
        if x.device != self.weight.device:
            raise ValueError(f"{f}: x is on {x.device}, the weight on {self.weight.device}")
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features).contiguous()
        w = self.weight
        if w.dtype != x.dtype:  # one dtype through the step (the GEMMs read either)
            w = w.to(x.dtype)
        training = self.training and torch.is_grad_enabled()
        if training:
            self._recipe.check_shapes(x2.shape[0], self.in_features, self.out_features, w.requires_grad)
            self.update_scales()
        y = _LinearFunction.apply(x2, w, self.recipe, training, self.fp8_scale, self.fp8_amax_history, self.layer_id,
                                  self._philox_step)
        if training:
            self._philox_step.add_(1)
        if self.bias is not None:
            y = y + self.bias.to(y.dtype)
        return y.reshape(*lead, self.out_features)
