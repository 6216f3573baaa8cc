# SPDX-License-Identifier: Apache-2.0
"""The math of mxkit.torch.Linear, free of torch: one training step of a linear layer
Y[M,N] = X[M,K] . W[N,K]^T under one of mxkit's recipes, on NumPy host arrays (mxkit's host
reference: the quantizer, ref::gemm) or on torch tensors (CUDA: mxkit's device quantizer and
GEMMs on the current stream; CPU: the host reference).

    recipe = mxkit.linear.Recipe("mxfp4")           # nn/recipe.hpp's preset, read from the module
    streams = mxkit.linear.philox_streams(layer_id=0, step=0)   # what stochastic rounding draws
    y, saved = mxkit.linear.forward(recipe, x, w, streams=streams)   # saved: what backward reads
    dx, dw = mxkit.linear.backward(recipe, dy, saved)

The recipes are the C++ presets themselves (_mxkit.recipe_spec reads nn/recipe.hpp), and every
step is the C++ linear's (include/mxkit/nn/linear.hpp), with the operands of its three GEMMs
(nn/recipe.hpp's table; blocks always along each GEMM's reduction axis):
    fprop  Y  = X . W^T     X rowwise (blocks along K),  W rowwise (along K)
    dgrad  dX = dY . W      dY rowwise (along N),        W columnwise (along N, stored [K, N])
    wgrad  dW = dY^T . X    dY columnwise (along M, stored [N, M]), X columnwise (along M, [K, M])
Each copy is quantized with its GEMM's spec: its operand's format, scale rule and rounding, and
the GEMM's Hadamard rotation (the 16-point rotation of both operands along the reduction axis,
which cancels in the product: H.H^T = I; random signs with the GEMM's Philox key). A tensor's two
copies come from one quantizer call when their specs agree (the fused kernel; the same bytes as
two calls). FP8 delayed scaling (Micikevicius et al. 2022; TransformerEngine's DelayedScaling;
nn/delayed_scaling.hpp): X and W in E4M3, dY in E5M2, each a row of a 3-row scaling table
(amax history [3, H], scale [3]); a training cast multiplies by the row's scale, saturates,
rounds to nearest even and max-combines its amax into history[row, 0]; the codes' transpose is
written by the same cast (per-tensor scaling makes it exact); the GEMM divides by both scales.
update_scales is the table's delayed-scaling update (amax over the window, scale = fp8_max /
2^margin / amax, the window rolled). The C++ layer runs it after each optimizer step;
mxkit.torch.Linear runs it at the start of each training forward, the same sequence of scales
when each step has one forward (an update of an all-zero history changes nothing).

NVFP4 (recipe "nvfp4") runs the same three GEMMs on NVFP4 copies (E2M1, an E4M3 scale per 16
elements, the fp32 tensor scale of each copy's amax; the weight in 16 x 16 blocks), multiplied
by mxkit.gemm on the device and by the host oracle on the host. Stochastic rounding (the
gradients of "nvfp4" and "mxfp4_rht_sr") draws the C++ layer's Philox streams
(philox_streams: per layer id, tensor, step and forward call), so the Python layer's bytes are
the C++ layer's for the same layer id and step.

MXFP8 on a CUDA device, for bfloat16 and float16 tensors (takes_values): the rowwise copies a
GEMM multiplies at once (X and W in forward, dY in backward) are written as their elements' bf16
values, code times block scale (exact: include/mxkit/block/bf16_values.hpp), the operands Hopper's
GEMM multiplies on its bf16 tensor cores, so those products skip the pass that would expand codes
to bf16. A block beyond +-48 binades raises the quantizer's flag, and the GEMM then runs its
block-scaled fallback on the codes the values give back; either way the products are the codes'
bits. The columnwise copies forward keeps for backward stay codes (a byte an element).

What the Python layer does not do: bf16 GEMMs inside a recipe (the NVFP4 recipe's selective bf16
layers are whole layers: a model keeps those in torch.nn.Linear), LoRA adapters, and the C++
layer's cache of weight copies across steps (the weight is quantized at every forward, as
TransformerEngine casts it outside gradient accumulation; the FP8 weight amax is then recorded
at every training forward, where the C++ layer records it only when the weight changed: the two
agree whenever the weight changes every step).
"""
import functools

import mxkit
from . import _mxkit

__all__ = ["RECIPES", "Recipe", "forward", "backward", "philox_streams", "nvfp4_bf16_layers", "update_scales",
           "new_scaling_state", "cpp_steps", "takes_values"]

RECIPES = tuple(_mxkit.recipe_names)


_NVFP4_BLOCKS = {"nvfp4": "1x16", "nvfp4_2d": "16x16"}  # recipe.hpp's NVFP4 formats: quantize's block shapes


class _Operand:
    """One operand of one GEMM as the quantizer is called for it."""

    def __init__(self, spec, gemm):
        self.kind = spec["kind"]
        self.fp8 = spec["fp8"]
        self.format = spec["format"]
        self.nvfp4 = spec["format"] in _NVFP4_BLOCKS
        self.rounding = spec["rounding"]
        # The keywords of mxkit.quantize for this copy: the operand's element format, scale rule
        # (MX; NVFP4's scales have their own rule) and rounding; the GEMM's rotation and Philox
        # key. The Philox stream is the tensor's in its step (forward's streams).
        common = dict(rounding=spec["rounding"], hadamard=gemm["hadamard"], random_signs=gemm["random_signs"], seed=gemm["seed"])
        self.quantize_args = dict(fmt="nvfp4", block=_NVFP4_BLOCKS[spec["format"]], **common) if self.nvfp4 else \
            dict(fmt=spec["format"], rule=spec["rule"], **common)
        # What decides the copy's bytes, beyond the tensor and its stream: the seed through random
        # signs and stochastic rounding.
        keyed = gemm["random_signs"] or spec["rounding"] == "stochastic"
        self.key = (spec["format"], spec["rule"], spec["rounding"], gemm["hadamard"], gemm["random_signs"],
                    gemm["seed"] if keyed else None)


    def describe(self, rows, cols, axis):
        """The description of this operand's copy of a [rows, cols] tensor along `axis`, as
        mxkit.quantize makes it (its stored shapes; what rebuilds a copy from its arrays)."""
        q = self.quantize_args
        if self.nvfp4:
            return mxkit._nvfp4_describe("mxkit.linear", rows, cols, axis, "mxkit", q["block"], None, q["rounding"],
                                         q["hadamard"], q["random_signs"], q["seed"])
        return mxkit._describe("mxkit.linear", rows, cols, q["fmt"], axis, "mxkit", None, q["rule"], q["rounding"],
                               q["hadamard"], q["random_signs"], q["seed"])


class _Gemm:
    def __init__(self, spec):
        self.a, self.b = _Operand(spec["a"], spec), _Operand(spec["b"], spec)
        self.hadamard = spec["hadamard"]


class Recipe:
    """A training recipe of mxkit's C++ layer by name (mxkit.linear.RECIPES: mxfp8, mxfp4 (the 16-point
    Hadamard rotation on every GEMM), mxfp4_wgrad_hadamard (on the wgrad GEMM only),
    mxfp4_no_hadamard, mxfp4_rht_sr (NVIDIA's placement on MX blocks: the random-sign rotation on
    the wgrad GEMM, stochastic rounding of the gradients), fp8_delayed, nvfp4 (NVIDIA's NVFP4
    recipe, arXiv 2509.25149, on one layer: NVFP4 operands, 16 x 16 weight blocks, the random
    Hadamard rotation on wgrad's inputs, stochastic rounding of dY; nn/recipe.hpp)).
    history_length, algorithm ("max" or "most_recent") and margin set FP8 delayed scaling
    (default: the C++ defaults, 1024, max, 0)."""

    def __init__(self, name, history_length=None, algorithm=None, margin=None):
        if not isinstance(name, str):
            raise TypeError(f"Recipe: name must be a string, got {name!r}")
        if name not in RECIPES:
            raise ValueError(f"Recipe: recipe {name!r} is not one of {', '.join(RECIPES)}")
        spec = _mxkit.recipe_spec(name)
        self.name, self.title = name, spec["title"]
        self.fprop, self.dgrad, self.wgrad = _Gemm(spec["fprop"]), _Gemm(spec["dgrad"]), _Gemm(spec["wgrad"])
        kinds = {o.kind for g in (self.fprop, self.dgrad, self.wgrad) for o in (g.a, g.b)}
        if len(kinds) != 1 or kinds.pop() not in ("mx", "fp8"):  # recipe.hpp allows bf16 GEMMs in a recipe
            raise ValueError(f"Recipe: {name!r} mixes operand kinds; the Python layer runs all-MX or all-FP8 recipes")
        self.kind = self.fprop.a.kind
        # NVFP4 or MX: recipe.hpp refuses a recipe that mixes them in one GEMM, and the Python layer
        # runs one family throughout.
        families = {o.nvfp4 for g in (self.fprop, self.dgrad, self.wgrad) for o in (g.a, g.b)}
        if len(families) != 1:
            raise ValueError(f"Recipe: {name!r} mixes NVFP4 and MX GEMMs; the Python layer runs one family")
        self.nvfp4 = families.pop()
        self.block = 16 if self.nvfp4 else 32
        s = spec["scaling"]
        self.history_length = mxkit._integer("Recipe", "history_length",
                                             s["history_length"] if history_length is None else history_length, 1, 1 << 20)
        self.algorithm = s["algorithm"] if algorithm is None else algorithm
        if self.algorithm not in ("max", "most_recent"):
            raise ValueError(f"Recipe: algorithm {self.algorithm!r} is not 'max' or 'most_recent'")
        self.margin = mxkit._integer("Recipe", "margin", s["margin"] if margin is None else margin, 0, 64)
        # The scaling table's rows (nn::linear::scaling_types): X, W, dY, each with the FP8 type of
        # the GEMMs that read it.
        self.fp8_rows = (self.fprop.a.fp8, self.fprop.b.fp8, self.dgrad.a.fp8)
        self.fp8_max = tuple(spec["fp8_max"][t] for t in self.fp8_rows)
        # The copies of each tensor: rowwise and columnwise operands (the table at the top).
        self.x_copies = (self.fprop.a, self.wgrad.b)
        self.w_copies = (self.fprop.b, self.dgrad.b)
        self.dy_copies = (self.dgrad.a, self.wgrad.a)
        # MXFP8 without the rotation: on a CUDA device its rowwise copies may be written as bf16
        # values (_Values), which Hopper's GEMM multiplies without expanding codes first.
        self.values_route = self.kind == "mx" and not any(g.hadamard for g in (self.fprop, self.dgrad, self.wgrad)) and all(
            o.format in ("mxfp8_e4m3", "mxfp8_e5m2") for g in (self.fprop, self.dgrad, self.wgrad) for o in (g.a, g.b))

    def __repr__(self):
        return f"mxkit.linear.Recipe({self.name!r}: {self.title})"

    def check_shapes(self, m, k, n, wgrad):
        """The C++ layer's refusals (nn::linear::check_dims, input_requests): a block-scaled GEMM
        reduces over whole blocks (MX: 32; NVFP4: 16)."""
        if self.kind != "mx":
            return
        family = "an NVFP4" if self.nvfp4 else "an MX"
        for what, size, need in (("in_features K", k, True), ("out_features N", n, True), ("tokens M", m, wgrad)):
            if need and size % self.block:
                raise ValueError(f"mxkit.linear ({self.name}): {what}={size} must be a multiple of {self.block} "
                                 f"({family} GEMM reduces over it in {self.block}-blocks)")


@functools.lru_cache(maxsize=None)
def recipe(name, history_length=None, algorithm=None, margin=None):
    """Recipe(name, ...), made once."""
    return Recipe(name, history_length, algorithm, margin)


# ---- arrays in the caller's framework -------------------------------------------------------

def _torch_of(x):
    if mxkit._framework(x) == "torch":
        import torch
        return torch
    return None


def _empty(like, shape, dtype):
    """Uninitialized [shape] of dtype ("uint8", "float32", "bfloat16") in like's framework and
    device (NumPy: float32 stands for bfloat16; the values are rounded to bf16 where asked)."""
    torch = _torch_of(like)
    if torch is not None:
        return torch.empty(shape, dtype=getattr(torch, dtype), device=like.device)
    import numpy as np
    return np.empty(shape, dtype=np.float32 if dtype == "bfloat16" else dtype)


def _dtype_name(x):
    """"bfloat16" for a torch bf16 tensor, else "float32" (the GEMMs write float32 or bf16)."""
    return "bfloat16" if str(getattr(x, "dtype", "")) == "torch.bfloat16" else "float32"


def _stream(x):
    return mxkit._caller_stream(x, None) if mxkit._is_device(x) else 1


def _arg(x, stream=None):
    """x read in place (device tensors: ordered on `stream`, the caller's current one)."""
    return mxkit._import(x, stream if stream is not None and mxkit._is_device(x) else None)


# ---- the Philox streams ------------------------------------------------------------------------

_U64 = 2 ** 64 - 1


def philox_streams(layer_id=0, step=0, call=0, training=True):
    """The Philox streams of one forward of mxkit's C++ linear (nn/linear.hpp) with id `layer_id`:
    {"x": X's, "w": W's, "dy": dY's in the backward of this forward}. X draws per training forward
    (call `call` of step `step`: mix_stream(id, 0, step * 4096 + call)), or from an evaluation
    pass's own stream (mix_stream(id, 3, step)) so that evaluation shifts no training draw; W
    once per step (mix_stream(id, 1, step)); dY from X's (mix_stream(x, 2)), so that a
    recomputed forward's backward draws what the first one would have. Stochastic rounding thus
    draws fresh bits every step, and the two copies of a tensor draw apart (the quantizer flips
    the columnwise copy's top stream bit)."""
    f = "mxkit.linear.philox_streams"
    layer_id = mxkit._integer(f, "layer_id", layer_id, 0, 2 ** 32 - 1)
    step = mxkit._integer(f, "step", step, 0, _U64)
    call = mxkit._integer(f, "call", call, 0, _U64)
    x = _mxkit.mix_stream(layer_id, 0, (step * 4096 + call) & _U64) if training else _mxkit.mix_stream(layer_id, 3, step)
    return {"x": x, "w": _mxkit.mix_stream(layer_id, 1, step), "dy": _mxkit.mix_stream(x, 2)}


def nvfp4_bf16_layers(n_layers):
    """(first, last): how many of a model's first and last transformer layers keep their linears
    in bf16 under the NVFP4 recipe (NVIDIA's selective high-precision layers: the first 2 and last
    8 of the 12B model's 62 blocks, scaled to n_layers; nn/recipe.hpp's nvfp4_bf16_first_layers
    and nvfp4_bf16_last_layers). A PyTorch model keeps those as torch.nn.Linear."""
    return tuple(_mxkit.nvfp4_bf16_layers(mxkit._integer("mxkit.linear.nvfp4_bf16_layers", "n_layers", n_layers, 0)))


# ---- the quantized copies -----------------------------------------------------------------------

def _block_copies(x, row, col, stream):
    """The rowwise copy for operand `row` and the columnwise one for `col` (None: not wanted), MX
    or NVFP4, a stochastically rounded one drawing from Philox stream `stream`; one quantizer call
    when both specs agree. A copy rounded to nearest reads no stream: it is described with stream
    0, so that its description is made once (mxkit.quantize caches them) rather than every step."""
    def drawn(op):
        return stream if op.rounding == "stochastic" else 0

    if row is not None and col is not None and row.key == col.key:
        return mxkit.quantize(x, axis="both", philox_stream=drawn(row), **row.quantize_args)
    return (None if row is None else mxkit.quantize(x, axis="rowwise", philox_stream=drawn(row), **row.quantize_args),
            None if col is None else mxkit.quantize(x, axis="columnwise", philox_stream=drawn(col), **col.quantize_args))


class _Values:
    """An MXFP8 rowwise copy held as bf16 values, each element its code times its block scale
    (exact: include/mxkit/block/bf16_values.hpp): values [rows, padded length] bf16, scales [rows,
    blocks] E8M0, and the quantizer's flag (one int32, non-zero when a non-zero block lies beyond
    +-48 binades, where the GEMM runs its block-scaled fallback on the codes the values give back).
    The description is the copy's own."""
    __slots__ = ("values", "scales", "flag", "description")

    def __init__(self, values, scales, flag, description):
        self.values, self.scales, self.flag, self.description = values, scales, flag, description


def takes_values(recipe, *tensors):
    """Whether forward/backward write these tensors' rowwise copies as bf16 values (_Values): an
    MXFP8 recipe without the rotation (recipe.values_route), torch CUDA tensors of bfloat16 or
    float16 (whose rounded elements stay on bf16's grid), and a module built with a GPU backend."""
    if not recipe.values_route or not _mxkit.gpu:
        return False
    for t in tensors:
        if _torch_of(t) is None or t.device.type != "cuda" or str(t.dtype) not in ("torch.bfloat16", "torch.float16"):
            return False
    return True


def _values_copies(x, row, col, stream):
    """_block_copies for takes_values: the rowwise copy for operand `row` as _Values, the
    columnwise one for `col` as codes (None: not wanted); two quantizer calls (the rowwise one
    takes the row-streaming kernel, the columnwise one the tiled kernel)."""
    def drawn(op):
        return stream if op.rounding == "stochastic" else 0

    made = None
    if row is not None:
        rows, cols = mxkit._shape2(x, "mxkit.linear")
        q = row.quantize_args
        d = mxkit._describe("mxkit.linear", rows, cols, q["fmt"], "rowwise", "mxkit", None, q["rule"], q["rounding"], False,
                            q["random_signs"], q["seed"], philox_stream=drawn(row))
        torch = _torch_of(x)
        s = _stream(x)
        # The codes' shape, [rows, padded length] (a byte a code), in bf16 elements.
        values = torch.empty(tuple(d.data_shape), dtype=torch.bfloat16, device=x.device)
        scales = torch.empty(tuple(d.scale_shape), dtype=torch.uint8, device=x.device)
        flag = torch.empty((1,), dtype=torch.int32, device=x.device)
        _mxkit.mxfp8_values_quantize_device(_arg(x, s), d, s, [_arg(t, s) for t in (values, scales, flag)])
        made = _Values(values, scales, flag, d)
    return made, None if col is None else mxkit.quantize(x, axis="columnwise", philox_stream=drawn(col), **col.quantize_args)


def _fp8_cast(x, fmt, state, row, rowwise, columnwise, record):
    """The delayed-scaling cast of x with the scale of table row `row`: (codes, their scale) and
    (transposed codes, their scale); the amax into history[row, 0] when `record`."""
    scale, history = state["scale"], state["amax_history"]
    rows, cols = mxkit._shape2(x, "mxkit.linear")
    s = _stream(x)
    codes = _empty(x, (rows, cols), "uint8") if rowwise else None
    trans = _empty(x, (cols, rows), "uint8") if columnwise else None
    cs = _empty(x, (1,), "float32") if rowwise else None
    ts = _empty(x, (1,), "float32") if columnwise else None
    _mxkit.fp8_cast(_arg(x, s), fmt, _arg(scale[row:row + 1], s), _arg(history[row, 0:1], s) if record else None,
                    *[None if t is None else _arg(t, s) for t in (codes, trans, cs, ts)], stream=s)
    return (codes, cs), (trans, ts)


# ---- the GEMMs -------------------------------------------------------------------------------------

def _lines(d):
    """A copy's stored lines: a rowwise copy's rows, a columnwise copy's columns."""
    return d.rows if d.axis == "rowwise" else d.cols


def _nvfp4_gemm(a, b, out_dtype, like):
    """D[P,Q] = A . B^T from two NVFP4 copies, each with its tensor scale: mxkit.gemm on the
    device, the host oracle (ref::gemm, as the C++ host backend runs it) on the host."""
    if mxkit._is_device(a.codes):
        return mxkit.gemm(a, b, out_dtype=out_dtype)
    d = _empty(like, (_lines(a.description), _lines(b.description)), "float32")
    _mxkit.nvfp4_gemm_host(_arg(a.codes), _arg(a.scales), a.description, float(a.tensor_scale), _arg(b.codes),
                           _arg(b.scales), b.description, float(b.tensor_scale), _arg(d), out_dtype == "bfloat16")
    return d.to(_torch_of(d).bfloat16) if out_dtype == "bfloat16" and _torch_of(d) is not None else d


def _sides_gemm(a, b, out_dtype, like):
    """D[P,Q] = A . B^T on the device where a side is a _Values copy (the other one too, or an MX
    copy of codes): each described as [lines, length] rowwise, as the GEMM reads it."""
    torch = _torch_of(like)
    s = _stream(like)

    def side(c):
        if isinstance(c, _Values):
            data, scales, flag = c.values, c.scales, c.flag
            lines, length = data.shape
        else:
            data, scales, flag = c.codes, c.scales, None
            lines, length = _lines(c.description), scales.shape[1] * 32
        d = mxkit._describe("mxkit.linear", lines, length, c.description.format, "rowwise", "mxkit", None, None, None, False,
                            False, 0)
        return _arg(data, s), _arg(scales, s), d, None if flag is None else _arg(flag, s)

    (ad, asc, adesc, af), (bd, bsc, bdesc, bf) = side(a), side(b)
    d = torch.empty((adesc.rows, bdesc.rows), dtype=getattr(torch, out_dtype), device=like.device)
    _mxkit.gemm_sides_device(ad, asc, adesc, af, bd, bsc, bdesc, bf, 1.0, s, _arg(d, s))
    return d


def _mx_gemm(a, b, out_dtype, like):
    """D[P,Q] = A . B^T from two MX (or NVFP4) copies whose stored lines run along the reduction
    axis (any copy in mxkit's storage: a columnwise copy's lines are its columns)."""
    if isinstance(a, _Values) or isinstance(b, _Values):
        return _sides_gemm(a, b, out_dtype, like)
    if isinstance(a, mxkit.NVFP4Copy):
        return _nvfp4_gemm(a, b, out_dtype, like)
    hadamard = a.description.hadamard
    if mxkit._is_device(a.codes):
        return mxkit.gemm(a.codes, a.scales, b.codes, b.scales, a.description.format, b.description.format,
                          out_dtype=out_dtype, hadamard=hadamard)
    f = "mxkit.linear"
    ta, tb = _arg(a.codes), _arg(b.codes)
    da = mxkit._operand(f, "a", ta, a.description.format, None, "mxkit", "row_major", None, None, None, hadamard)
    db = mxkit._operand(f, "b", tb, b.description.format, None, "mxkit", "row_major", None, None, None, hadamard)
    d = _empty(like, (da.rows, db.rows), "float32")
    _mxkit.gemm_host(ta, _arg(a.scales), da, tb, _arg(b.scales), db, _arg(d), out_dtype == "bfloat16")
    return d.to(_torch_of(d).bfloat16) if out_dtype == "bfloat16" and _torch_of(d) is not None else d


def _fp8_gemm(a, a_fmt, b, b_fmt, out_dtype, like):
    (ac, as_), (bc, bs) = a, b
    host = not mxkit._is_device(ac)
    s = _stream(ac)
    d = _empty(like, (ac.shape[0], bc.shape[0]), "float32" if host else out_dtype)
    _mxkit.fp8_gemm(_arg(ac, s), a_fmt, _arg(as_, s), _arg(bc, s), b_fmt, _arg(bs, s), _arg(d, s), out_dtype == "bfloat16",
                    stream=s)
    return d.to(_torch_of(d).bfloat16) if host and out_dtype == "bfloat16" and _torch_of(d) is not None else d


# ---- one step -------------------------------------------------------------------------------------

def new_scaling_state(recipe, like=None):
    """The FP8 scaling table of one layer, as the C++ layer starts it: scale 1, an all-zero amax
    history [3, H], fp8_max per row; NumPy arrays (or torch tensors on like's device)."""
    import numpy as np
    state = {"scale": np.ones(3, np.float32), "amax_history": np.zeros((3, recipe.history_length), np.float32),
             "fp8_max": np.array(recipe.fp8_max, np.float32)}
    torch = _torch_of(like) if like is not None else None
    if torch is not None:
        state = {k: torch.from_numpy(v).to(like.device) for k, v in state.items()}
    return state


def update_scales(recipe, state):
    """The delayed-scaling update of the table (nn/delayed_scaling_rule.hpp, run by the module:
    ref::update_scales on the host, gpu::update_scales on the device)."""
    h = state["amax_history"]
    s = _stream(h)
    _mxkit.update_scales(_arg(h, s), _arg(state["scale"], s), _arg(state["fp8_max"], s), recipe.algorithm, recipe.margin,
                         stream=s)


def forward(recipe, x, w, state=None, training=True, wgrad=True, out_dtype=None, streams=None):
    """Y = X . W^T under `recipe`; x [M, K], w [N, K], 2-D and contiguous. state: the FP8
    scaling table (new_scaling_state; FP8 recipes only). training: record the FP8 amaxes.
    wgrad: keep X's wgrad copy for backward. out_dtype: "float32" or "bfloat16" (default:
    x's). streams: the Philox streams of this forward (philox_streams(layer_id, step, call,
    training); default: those of layer 0's first training step), read by stochastic rounding.
    Returns y and `saved`, what backward reads: X's wgrad copy, W's dgrad copy and dY's stream."""
    m, k = mxkit._shape2(x, "mxkit.linear.forward")
    n, kw = mxkit._shape2(w, "mxkit.linear.forward", "w")
    if kw != k:
        raise ValueError(f"mxkit.linear.forward: x is [{m}, {k}] but w is [{n}, {kw}]; their last axes must match")
    recipe.check_shapes(m, k, n, wgrad)
    out_dtype = out_dtype or _dtype_name(x)
    streams = philox_streams() if streams is None else streams
    if recipe.kind == "mx":
        copies = _values_copies if takes_values(recipe, x, w) else _block_copies
        x_row, x_col = copies(x, recipe.x_copies[0], recipe.x_copies[1] if wgrad else None, streams["x"])
        w_row, w_col = copies(w, *recipe.w_copies, streams["w"])
        return _mx_gemm(x_row, w_row, out_dtype, x), {"x": x_col, "w": w_col, "shape": (m, k, n), "dy_stream": streams["dy"]}
    if state is None:
        raise ValueError(f"mxkit.linear.forward: recipe {recipe.name!r} needs its FP8 scaling state (new_scaling_state)")
    x_row, x_col = _fp8_cast(x, recipe.x_copies[0].fp8, state, 0, True, wgrad, training)
    w_row, w_col = _fp8_cast(w, recipe.w_copies[0].fp8, state, 1, True, True, training)
    y = _fp8_gemm(x_row, recipe.fprop.a.fp8, w_row, recipe.fprop.b.fp8, out_dtype, x)
    return y, {"x": x_col if wgrad else None, "w": w_col, "shape": (m, k, n), "dy_stream": streams["dy"]}


def backward(recipe, dy, saved, state=None, dx=True, dw=True, dx_dtype=None, dw_dtype="float32"):
    """dX = dY . W and dW = dY^T . X from forward's `saved`; dy [M, N] contiguous. dx, dw: which
    to compute (None for the other). dx_dtype: default dy's; dw_dtype: the weight's."""
    m, k, n = saved["shape"]
    if mxkit._shape2(dy, "mxkit.linear.backward", "dy") != (m, n):
        raise ValueError(f"mxkit.linear.backward: dy must be [{m}, {n}] (forward's Y), got {tuple(dy.shape)}")
    if dw and saved["x"] is None:
        raise ValueError("mxkit.linear.backward: dw needs X's wgrad copy; forward ran with wgrad=False")
    dx_dtype = dx_dtype or _dtype_name(dy)
    if recipe.kind == "mx":
        copies = _values_copies if takes_values(recipe, dy) else _block_copies
        dy_row, dy_col = copies(dy, recipe.dy_copies[0] if dx else None, recipe.dy_copies[1] if dw else None,
                                saved.get("dy_stream", philox_streams()["dy"]))
        gw = _mx_gemm(dy_col, saved["x"], dw_dtype, dy) if dw else None
        gx = _mx_gemm(dy_row, saved["w"], dx_dtype, dy) if dx else None
        return gx, gw
    if state is None:
        raise ValueError(f"mxkit.linear.backward: recipe {recipe.name!r} needs its FP8 scaling state")
    dy_row, dy_col = _fp8_cast(dy, recipe.dy_copies[0].fp8, state, 2, dx, dw, True)
    gw = _fp8_gemm(dy_col, recipe.wgrad.a.fp8, saved["x"], recipe.wgrad.b.fp8, dw_dtype, dy) if dw else None
    gx = _fp8_gemm(dy_row, recipe.dgrad.a.fp8, saved["w"], recipe.dgrad.b.fp8, dx_dtype, dy) if dx else None
    return gx, gw


def cpp_steps(name, x, w, dy, device=False, activations="bf16", weight="bf16", history_length=1024, algorithm="max",
              margin=0, layer_id=0):
    """mxkit's C++ linear layer (nn/linear.hpp) for x.shape[0] training steps: each step writes
    w[s] as the weight (a new version, as after an optimizer step), runs forward on x[s] and
    backward with dy[s], then end_step (the FP8 table's update). x [S, M, K], w [S, N, K],
    dy [S, M, N]: float32 NumPy arrays (values the activations' and weight's dtype hold exactly).
    layer_id: the layer's id, the first key of its Philox streams (philox_streams(layer_id, s)
    are step s's).
    device: on a gpu::device_backend (a CUDA build) with its vendor GEMMs on, the choice the
    module's own GEMM calls make, else ref::host_backend. Returns NumPy
    arrays: y [S, M, N], dx [S, M, K], dw [S, N, K] and, for FP8, the table's scale [3] and
    amax_history [3, H] after the last step. The tests' oracle of the Python layer."""
    import numpy as np
    arrays = [np.ascontiguousarray(a, dtype=np.float32) for a in (x, w, dy)]
    return _mxkit.linear_steps(name, *[_arg(a) for a in arrays], device=bool(device), activations=activations,
                               weight=weight, history_length=history_length, algorithm=algorithm, margin=margin,
                               layer_id=layer_id)
