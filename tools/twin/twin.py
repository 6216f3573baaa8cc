#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""PyTorch twin of mxkit's training program (mxkit/train_program/program.hpp).

Written from the specifications, not from mxkit's code (no bindings, no shared kernels):
  model      Llama-style decoder: embedding, pre-norm layers (RMSNorm, fused QKV, RoPE on the
             halves of each head as transformers' rotate_half, causal grouped-query attention,
             output projection, RMSNorm, fused gate/up, SwiGLU, down projection), final RMSNorm,
             LM head, mean next-token cross-entropy. fp32 activations (run mxkit with
             --activations f32).
  optimizer  AdamW as Loshchilov and Hutter with mxkit's published settings (nn/adamw.hpp's
             header comment): betas 0.9/0.95, eps 1e-8, decoupled weight decay 0.1 except on norm
             gains, global-norm clipping to 1.0, warmup (s + 1)/warmup then cosine to lr/10.
  numerics   per GEMM of every block linear (fprop Y = X W^T, dgrad dX = dY W, wgrad dW = dY^T X)
             each operand emulated along the GEMM's reduction axis:
               bf16   round to bfloat16 (nearest even), fp32 product
               mx     OCP MX v1.0: blocks of 32, shared E8M0 scale 2^e, elements E2M1 (MXFP4) or
                      E4M3 (MXFP8) rounded to nearest even (or stochastically) and saturated; the
                      scale rules: floor (OCP: floor(log2 amax) - emax), even (amax first rounded
                      half up to the element's mantissa width: AMD's MXFP4 recipe), round_up
                      (smallest 2^e with amax / 2^e <= max: NVIDIA's RCEIL)
               hadamard  a 16-point orthonormal Sylvester-Hadamard rotation of each 16-group
                      along the reduction axis of both operands (random signs: a fixed +-1
                      diagonal first), which cancels in the product
               fp8    per-tensor delayed scaling (TransformerEngine's HYBRID: E4M3 X and W, E5M2
                      dY; scale = fp8_max / max(amax history), history 1024, updated after each step)
             The LM head multiplies bf16 operands in every recipe but native.
Batches: replayed from the training program's --dump-batches file; weights: --init-from the
safetensors the training program reads with --init-from (or writes with --export).

Usage:
  twin.py init   --out init.safetensors --layers 2 --d-model 64 ... [--seed S]
  twin.py train  --init-from init.safetensors --batches b.bin --recipe bf16 --steps N --lr X
                 --warmup W [--csv twin.csv] [--mxkit-csv mxkit.csv]
  twin.py compare --mxkit a.csv b.csv c.csv --twin x.csv y.csv z.csv [--baseline-mxkit ...
                 --baseline-twin ...] [--last 50]
"""
import argparse
import csv
import json
import math
import struct
import sys

import torch

# ---- safetensors, with json + struct only ----------------------------------------------------------


def load_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {})
    data = raw[8 + n:]
    out = {}
    for name, e in header.items():
        b, end = e["data_offsets"]
        chunk = data[b:end]
        if e["dtype"] == "F32":
            t = torch.tensor(struct.unpack("<%df" % (len(chunk) // 4), chunk), dtype=torch.float32)
        elif e["dtype"] == "BF16":
            u16 = struct.unpack("<%dH" % (len(chunk) // 2), chunk)
            t = torch.tensor([u << 16 for u in u16], dtype=torch.int64).to(torch.int32).view(torch.float32)
        else:
            raise ValueError("%s: tensor %s has dtype %s (F32 or BF16 expected)" % (path, name, e["dtype"]))
        out[name] = t.reshape(e["shape"])
    return out, meta


def save_safetensors(path, tensors, meta):
    header, blobs, at = {"__metadata__": meta}, [], 0
    for name, t in tensors.items():
        b = struct.pack("<%df" % t.numel(), *t.detach().float().reshape(-1).tolist())
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [at, at + len(b)]}
        blobs.append(b)
        at += len(b)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def load_batches(path):
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:8] not in (b"MXBATCH1", b"MXBATCH2"):  # bytes (text), int32 tokens (token datasets)
        raise ValueError("%s: not a --dump-batches file" % path)
    steps, batch, window = struct.unpack("<3Q", raw[8:32])
    t = torch.frombuffer(bytearray(raw[32:]), dtype=torch.uint8 if raw[:8] == b"MXBATCH1" else torch.int32)
    if t.numel() != steps * batch * window:
        raise ValueError("%s: %d token bytes, the header promises %d" % (path, t.numel(), steps * batch * window))
    return t.reshape(steps, batch, window).long()


# ---- number formats (OCP MX v1.0, IEEE-style minifloats) ------------------------------------------

# name: (mantissa bits, emin of normals, max finite, emax)
FORMATS = {
    "e2m1": (1, 0, 6.0, 2),
    "e4m3": (3, -6, 448.0, 8),
    "e5m2": (2, -14, 57344.0, 15),
}


def round_minifloat(x, fmt, stochastic=False, generator=None):
    """x rounded to the format's grid (subnormals included), nearest even or stochastic, saturated."""
    man, emin, vmax, _ = FORMATS[fmt]
    a = x.abs()
    e = torch.floor(torch.log2(a.clamp_min(1e-45))).clamp_min(emin)
    step = torch.pow(2.0, e - man)
    y = a / step
    if stochastic:
        y = torch.floor(y + torch.rand(y.shape, generator=generator, device=y.device))
    else:
        y = torch.round(y)  # half to even
    return torch.sign(x) * (y * step).clamp_max(vmax)


def to_bf16(x):
    return x.to(torch.bfloat16).to(torch.float32)


_H16 = None


def hadamard16(device):
    global _H16
    if _H16 is None or _H16.device != device:
        h = torch.ones(1, 1)
        while h.shape[0] < 16:
            h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
        _H16 = (h / 4.0).to(device)
    return _H16


def mx_quantize(x, fmt, rule, stochastic=False, generator=None):
    """x (..., K), K a multiple of 32: quantize-dequantize in blocks of 32 along the last axis."""
    shape = x.shape
    b = x.reshape(-1, 32)
    amax = b.abs().amax(dim=1, keepdim=True)
    man, _, vmax, emax = FORMATS[fmt]
    safe = amax.clamp_min(1e-45)
    e_floor = torch.floor(torch.log2(safe))
    if rule == "floor":
        e = e_floor - emax
    elif rule == "even":
        # amax rounded half up to `man` mantissa bits: the binade steps up when the significand
        # reaches 2 - 2^-(man + 1)
        sig = safe / torch.pow(2.0, e_floor)
        e = e_floor + (sig >= 2.0 - 2.0 ** -(man + 1)).float() - emax
    elif rule == "round_up":
        e = torch.ceil(torch.log2(safe / vmax))
    else:
        raise ValueError("unknown scale rule " + rule)
    e = torch.where(amax > 0, e, torch.zeros_like(e)).clamp(-127, 127)
    scale = torch.pow(2.0, e)
    q = round_minifloat(b / scale, fmt, stochastic, generator) * scale
    return q.reshape(shape)


# ---- recipes --------------------------------------------------------------------------------------


def operand(kind, fmt=None, rule=None, stochastic=False):
    return {"kind": kind, "fmt": fmt, "rule": rule, "sr": stochastic}


def gemm(a, b, hadamard=False, signs=False):
    return {"a": a, "b": b, "hadamard": hadamard, "signs": signs}


def make_recipe(name):
    bf = operand("bf16")
    if name == "native":
        n = operand("native")
        return {g: gemm(n, n) for g in ("fprop", "dgrad", "wgrad")}, "native"
    if name == "bf16":
        return {g: gemm(bf, bf) for g in ("fprop", "dgrad", "wgrad")}, "bf16"
    if name == "mxfp8":
        o = operand("mx", "e4m3", "round_up")
        return {g: gemm(o, o) for g in ("fprop", "dgrad", "wgrad")}, "bf16"
    if name == "fp8":
        x, w, dy = operand("fp8", "e4m3"), operand("fp8", "e4m3"), operand("fp8", "e5m2")
        return {"fprop": gemm(x, w), "dgrad": gemm(dy, w), "wgrad": gemm(dy, x)}, "bf16"
    fp4 = {
        "mxfp4": ("all", False, False, True),
        "mxfp4-no-hadamard": ("none", False, False, True),
        "mxfp4-wgrad": ("wgrad", False, False, True),
        "mxfp4-nvidia": ("wgrad", True, True, True),
        "mxfp4-fprop-dgrad": ("none", False, False, False),  # wgrad in bf16
    }
    if name not in fp4:
        raise ValueError("unknown recipe " + name)
    placement, signs, sr, wgrad_mx = fp4[name]
    fwd, grad = operand("mx", "e2m1", "even"), operand("mx", "e2m1", "even", sr)
    r = {
        "fprop": gemm(fwd, fwd, placement == "all"),
        "dgrad": gemm(grad, fwd, placement == "all"),
        "wgrad": gemm(grad, fwd, placement != "none", signs) if wgrad_mx else gemm(bf, bf),
    }
    return r, "bf16"


class fp8_state:
    """Delayed scaling of one tensor: the scale of step s comes from the amax of steps < s."""

    def __init__(self, fmt, history=1024):
        self.fmt, self.history, self.amaxes, self.scale, self.pending = fmt, history, [], 1.0, 0.0

    def quantize(self, x):
        self.pending = max(self.pending, float(x.abs().max()))
        return round_minifloat(x * self.scale, self.fmt) / self.scale

    def end_step(self):
        self.amaxes = ([self.pending] + self.amaxes)[: self.history]
        self.pending = 0.0
        m = max(self.amaxes)
        if m > 0 and math.isfinite(m):
            self.scale = FORMATS[self.fmt][2] / m


class emulated_linear:
    """One linear's three GEMMs under a recipe (fp8 state per tensor X, W, dY)."""

    def __init__(self, recipe, generator):
        self.r, self.gen = recipe, generator
        self.fp8 = {k: fp8_state(f) for k, f in (("x", "e4m3"), ("w", "e4m3"), ("dy", "e5m2"))}
        self.signs = {g: (torch.randint(0, 2, (16,), generator=generator, device=generator.device).float() * 2 - 1)
                      for g in ("fprop", "dgrad", "wgrad")}

    def _operand(self, t, spec, g, tensor_name):
        """t (rows, K): the operand along its last axis (the GEMM's reduction axis)."""
        kind = spec["kind"]
        if kind == "native":
            return t
        if kind == "bf16":
            return to_bf16(t)
        if kind == "fp8":
            return self.fp8[tensor_name].quantize(t)
        if self.r[g]["hadamard"]:
            k = t.shape[-1]
            v = t.reshape(-1, k // 16, 16)
            if self.r[g]["signs"]:
                v = v * self.signs[g]
            t = (v @ hadamard16(t.device)).reshape(t.shape)
        return mx_quantize(t, spec["fmt"], spec["rule"], spec["sr"], self.gen)

    def apply(self, x, w):
        lin = self

        class fn(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, w):
                ctx.save_for_backward(x, w)
                r = lin.r["fprop"]
                return lin._operand(x, r["a"], "fprop", "x") @ lin._operand(w, r["b"], "fprop", "w").t()

            @staticmethod
            def backward(ctx, dy):
                x, w = ctx.saved_tensors
                d, u = lin.r["dgrad"], lin.r["wgrad"]
                dx = lin._operand(dy, d["a"], "dgrad", "dy") @ lin._operand(w.t().contiguous(), d["b"], "dgrad", "w").t()
                dw = lin._operand(dy.t().contiguous(), u["a"], "wgrad", "dy") @ lin._operand(x.t().contiguous(), u["b"], "wgrad", "x").t()
                return dx, dw

        return fn.apply(x, w)

    def end_step(self):
        for s in self.fp8.values():
            s.end_step()


# ---- the model ------------------------------------------------------------------------------------


def hf_names(n_layers):
    names = ["model.embed_tokens.weight"]
    for i in range(n_layers):
        p = "model.layers.%d." % i
        names += [p + s for s in ("input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                  "self_attn.v_proj.weight", "self_attn.o_proj.weight", "post_attention_layernorm.weight",
                                  "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight")]
    return names + ["model.norm.weight", "lm_head.weight"]


class twin_model:
    def __init__(self, weights, cfg, recipe, head_kind, generator):
        self.cfg = cfg
        L = cfg["n_layers"]
        self.p = {}
        self.p["embed"] = weights["model.embed_tokens.weight"]
        for i in range(L):
            pre = "model.layers.%d." % i
            a = pre + "self_attn."
            m = pre + "mlp."
            self.p["n1.%d" % i] = weights[pre + "input_layernorm.weight"]
            self.p["qkv.%d" % i] = torch.cat([weights[a + "q_proj.weight"], weights[a + "k_proj.weight"], weights[a + "v_proj.weight"]])
            self.p["o.%d" % i] = weights[a + "o_proj.weight"]
            self.p["n2.%d" % i] = weights[pre + "post_attention_layernorm.weight"]
            self.p["gu.%d" % i] = torch.cat([weights[m + "gate_proj.weight"], weights[m + "up_proj.weight"]])
            self.p["down.%d" % i] = weights[m + "down_proj.weight"]
        self.p["norm"] = weights["model.norm.weight"]
        self.p["head"] = weights["lm_head.weight"]
        for t in self.p.values():
            t.requires_grad_(True)
        self.lin = {k: emulated_linear(recipe, generator) for k in self.p if k.split(".")[0] in ("qkv", "o", "gu", "down")}
        self.head = emulated_linear({g: gemm(operand(head_kind), operand(head_kind)) for g in ("fprop", "dgrad", "wgrad")}, generator)
        D = cfg["d_model"] // cfg["n_heads"]
        T = cfg["seq"]
        inv = torch.tensor([cfg["rope_theta"] ** (-2.0 * i / D) for i in range(D // 2)], dtype=torch.float64)
        ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
        dev = self.p["embed"].device
        self.cos, self.sin = ang.cos().float().to(dev), ang.sin().float().to(dev)

    def decays(self, name):
        return not name.startswith(("n1.", "n2.", "norm"))

    def rmsnorm(self, x, g):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.cfg["norm_eps"]) * g

    def rope(self, x):  # (B, T, heads, D), rotate_half convention
        h = x.shape[-1] // 2
        x1, x2 = x[..., :h], x[..., h:]
        c, s = self.cos[None, :, None, :], self.sin[None, :, None, :]
        return torch.cat([x1 * c - x2 * s, x1 * s + x2 * c], -1)

    def loss(self, window):  # (B, T + 1) tokens
        c = self.cfg
        B, T = window.shape[0], window.shape[1] - 1
        H, Hkv, C = c["n_heads"], c["n_kv_heads"], c["d_model"]
        D = C // H
        x = self.p["embed"][window[:, :-1].reshape(-1)]
        for i in range(c["n_layers"]):
            qkv = self.lin["qkv.%d" % i].apply(self.rmsnorm(x, self.p["n1.%d" % i]), self.p["qkv.%d" % i]).reshape(B, T, H + 2 * Hkv, D)
            q, k, v = self.rope(qkv[:, :, :H]), self.rope(qkv[:, :, H:H + Hkv]), qkv[:, :, H + Hkv:]
            k = k.repeat_interleave(H // Hkv, dim=2)
            v = v.repeat_interleave(H // Hkv, dim=2)
            s = torch.einsum("bthd,buhd->bhtu", q, k) / math.sqrt(D)
            s = s.masked_fill(torch.ones(T, T, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
            att = torch.einsum("bhtu,buhd->bthd", s.softmax(-1), v).reshape(B * T, H * D)
            x = x + self.lin["o.%d" % i].apply(att, self.p["o.%d" % i])
            gu = self.lin["gu.%d" % i].apply(self.rmsnorm(x, self.p["n2.%d" % i]), self.p["gu.%d" % i])
            g, u = gu[:, : c["d_ff"]], gu[:, c["d_ff"]:]
            x = x + self.lin["down.%d" % i].apply(torch.nn.functional.silu(g) * u, self.p["down.%d" % i])
        logits = self.head.apply(self.rmsnorm(x, self.p["norm"]), self.p["head"])
        return torch.nn.functional.cross_entropy(logits, window[:, 1:].reshape(-1))

    def end_step(self):
        for l in list(self.lin.values()) + [self.head]:
            l.end_step()


class adamw:
    def __init__(self, model, lr_max, warmup, steps, wd=0.1, b1=0.9, b2=0.95, eps=1e-8, clip=1.0, schedule="warmup-cosine",
                 decay_norms=False):
        self.m, self.lr_max, self.warmup, self.steps = model, lr_max, warmup, steps
        self.schedule, self.decay_norms = schedule, decay_norms
        self.wd, self.b1, self.b2, self.eps, self.clip, self.t = wd, b1, b2, eps, clip, 0
        self.state = {k: (torch.zeros_like(p), torch.zeros_like(p)) for k, p in model.p.items()}

    def lr(self, s):
        if self.schedule == "warmup-times-cosine":  # a variant: min(1, (s+1)/W) x cosine from step 0 to 0
            return self.lr_max * min(1.0, (s + 1) / self.warmup) * 0.5 * (1 + math.cos(math.pi * s / self.steps))
        lo = self.lr_max / 10
        if s < self.warmup:
            return self.lr_max * (s + 1) / self.warmup
        if s >= self.steps:
            return lo
        return lo + (self.lr_max - lo) * 0.5 * (1 + math.cos(math.pi * (s - self.warmup) / (self.steps - self.warmup)))

    @torch.no_grad()
    def step(self, s):
        norm = math.sqrt(sum(float(p.grad.double().pow(2).sum()) for p in self.m.p.values()))
        if not math.isfinite(norm):
            return norm
        scale = self.clip / norm if self.clip > 0 and norm > self.clip else 1.0
        self.t += 1
        bc1, bc2, lr = 1 - self.b1 ** self.t, 1 - self.b2 ** self.t, self.lr(s)
        for k, p in self.m.p.items():
            g = p.grad.double() * scale
            m, v = self.state[k]
            mi = self.b1 * m.double() + (1 - self.b1) * g
            vi = self.b2 * v.double() + (1 - self.b2) * g * g
            m.copy_(mi)
            v.copy_(vi)
            wd = self.wd if self.decay_norms or self.m.decays(k) else 0.0
            p.copy_(p.double() - lr * ((mi / bc1) / ((vi / bc2).sqrt() + self.eps) + wd * p.double()))
            p.grad = None
        return norm


# ---- commands -------------------------------------------------------------------------------------


def config_of(meta, a):
    def get(key, default, cast):
        v = getattr(a, key.replace("-", "_"), None)
        return cast(meta.get("mxkit." + key.replace("-", "_"), v if v is not None else default))

    return {
        "n_layers": get("n_layers", 2, int), "d_model": get("d_model", 64, int), "n_heads": get("n_heads", 2, int),
        "n_kv_heads": get("n_kv_heads", 1, int), "d_ff": get("d_ff", 128, int), "vocab": get("vocab", 256, int),
        "rope_theta": get("rope_theta", 10000.0, float), "norm_eps": get("norm_eps", 1e-5, float),
    }


def cmd_init(a):
    """mxkit's initialization scheme (not its random stream): N(0, 0.02), the out and down
    projections 0.02 / sqrt(2 L), norm gains 1."""
    g = torch.Generator().manual_seed(a.seed)
    c = config_of({}, a)
    C, F, L, V, D = c["d_model"], c["d_ff"], c["n_layers"], c["vocab"], c["d_model"] // c["n_heads"]
    std, res = a.init_std, a.init_std / math.sqrt(2 * L)
    n = lambda *s, sd=std: torch.randn(*s, generator=g) * sd
    t = {"model.embed_tokens.weight": n(V, C)}
    for i in range(L):
        p = "model.layers.%d." % i
        t[p + "input_layernorm.weight"] = torch.ones(C)
        t[p + "self_attn.q_proj.weight"] = n(c["n_heads"] * D, C)
        t[p + "self_attn.k_proj.weight"] = n(c["n_kv_heads"] * D, C)
        t[p + "self_attn.v_proj.weight"] = n(c["n_kv_heads"] * D, C)
        t[p + "self_attn.o_proj.weight"] = n(C, c["n_heads"] * D, sd=res)
        t[p + "post_attention_layernorm.weight"] = torch.ones(C)
        t[p + "mlp.gate_proj.weight"] = n(F, C)
        t[p + "mlp.up_proj.weight"] = n(F, C)
        t[p + "mlp.down_proj.weight"] = n(C, F, sd=res)
    t["model.norm.weight"] = torch.ones(C)
    t["lm_head.weight"] = n(V, C)
    meta = {"format": "pt"}
    meta.update({"mxkit." + k: str(v) for k, v in c.items() if k not in ("rope_theta", "norm_eps")})
    save_safetensors(a.out, t, meta)


def read_loss_csv(path):
    out = {}
    with open(path) as f:
        for row in csv.DictReader(f):
            if row.get("loss"):
                out[int(row["step"])] = float(row["loss"])
    return out


def cmd_train(a):
    torch.manual_seed(a.seed)
    dev = torch.device(a.device)
    gen = torch.Generator(device=dev)
    gen.manual_seed(a.seed)
    weights, meta = load_safetensors(a.init_from)
    weights = {k: v.to(dev) for k, v in weights.items()}
    c = config_of(meta, a)
    batches = load_batches(a.batches).to(dev)
    steps = a.steps or batches.shape[0]
    if batches.shape[0] < steps:
        sys.exit("twin: %s holds %d steps, %d asked" % (a.batches, batches.shape[0], steps))
    c["seq"] = batches.shape[2] - 1
    recipe, head_kind = make_recipe(a.recipe)
    m = twin_model(weights, c, recipe, head_kind, gen)
    opt = adamw(m, a.lr, a.warmup if a.warmup is not None else min(100, steps // 10), steps, schedule=a.schedule,
                decay_norms=a.decay_norms)
    theirs = read_loss_csv(a.mxkit_csv) if a.mxkit_csv else {}
    rows = []
    print("step,twin_loss,mxkit_loss,difference")
    for s in range(steps):
        loss = m.loss(batches[s])
        loss.backward()
        opt.step(s)
        m.end_step()
        v = float(loss)
        other = theirs.get(s + 1)
        rows.append((s + 1, v, other))
        print("%d,%.6f,%s,%s" % (s + 1, v, "" if other is None else "%.6f" % other, "" if other is None else "%+.6f" % (v - other)))
        sys.stdout.flush()
    if a.csv:
        with open(a.csv, "w") as f:
            f.write("step,loss\n" + "".join("%d,%.6f\n" % (s, v) for s, v, _ in rows))
    if theirs and a.tolerance is not None:
        first = [(s, v, o) for s, v, o in rows if o is not None][: a.first]
        worst = max(abs(v - o) / o for _, v, o in first)
        print("agreement over the first %d steps: largest relative difference %.2e (tolerance %.2e): %s"
              % (len(first), worst, a.tolerance, "PASS" if worst <= a.tolerance else "FAIL"))
        if worst > a.tolerance:
            sys.exit(1)


def tail_mean(path, last):
    losses = read_loss_csv(path)
    steps = sorted(losses)[-last:]
    return sum(losses[s] for s in steps) / len(steps)


def mean_se(xs):
    n = len(xs)
    m = sum(xs) / n
    var = sum((x - m) ** 2 for x in xs) / (n - 1) if n > 1 else float("nan")
    return m, math.sqrt(var / n)


def cmd_compare(a):
    """The statistical test: per seed, the mean training loss over the last N steps (minus the
    same seed's baseline, when baselines are given: the gap). mxkit and the twin agree when
    |mean_mxkit - mean_twin| <= k * sqrt(se_mxkit^2 + se_twin^2), se the seed-to-seed standard
    error of each mean (Welch's statistic; k = 3 by default)."""

    def values(runs, bases):
        v = [tail_mean(r, a.last) for r in runs]
        if bases:
            v = [x - tail_mean(b, a.last) for x, b in zip(v, bases)]
        return v

    mx = values(a.mxkit, a.baseline_mxkit)
    tw = values(a.twin, a.baseline_twin)
    (m1, s1), (m2, s2) = mean_se(mx), mean_se(tw)
    z = abs(m1 - m2) / math.sqrt(s1 * s1 + s2 * s2) if s1 > 0 or s2 > 0 else float("inf")
    what = "gap to the baseline" if a.baseline_mxkit else "loss"
    print("mxkit %s, last %d steps, per seed: %s; mean %.4f +- %.4f" % (what, a.last, " ".join("%+.4f" % x for x in mx), m1, s1))
    print("twin  %s, last %d steps, per seed: %s; mean %.4f +- %.4f" % (what, a.last, " ".join("%+.4f" % x for x in tw), m2, s2))
    print("difference %.4f = %.2f standard errors: %s (agreement within %g)" % (m1 - m2, z, "AGREE" if z <= a.k else "DISAGREE", a.k))
    return 0 if z <= a.k else 1


def main(argv=None):
    ap = argparse.ArgumentParser(description="PyTorch twin of mxkit's training program")
    sub = ap.add_subparsers(dest="cmd", required=True)
    shape = argparse.ArgumentParser(add_help=False)
    for k in ("n-layers", "d-model", "n-heads", "n-kv-heads", "d-ff", "vocab"):
        shape.add_argument("--" + k, type=int)
    p = sub.add_parser("init", parents=[shape], help="write initial weights (mxkit's scheme) as safetensors")
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--init-std", type=float, default=0.02)
    p = sub.add_parser("train", parents=[shape], help="train from safetensors weights on dumped batches")
    p.add_argument("--init-from", required=True)
    p.add_argument("--batches", required=True)
    p.add_argument("--recipe", default="bf16")
    p.add_argument("--steps", type=int, default=0)
    p.add_argument("--lr", type=float, default=6e-4)
    p.add_argument("--warmup", type=int)
    p.add_argument("--seed", type=int, default=0, help="random signs and stochastic rounding")
    p.add_argument("--device", default="cpu", help="cpu, cuda, ...")
    p.add_argument("--schedule", default="warmup-cosine", choices=["warmup-cosine", "warmup-times-cosine"],
                   help="mxkit's (default), or a variant to measure what a schedule difference does")
    p.add_argument("--decay-norms", action="store_true", help="weight decay on norm gains too (mxkit: not)")
    p.add_argument("--csv")
    p.add_argument("--mxkit-csv", help="the training program's --csv (run with --log-every 1)")
    p.add_argument("--first", type=int, default=5, help="steps of the agreement check")
    p.add_argument("--tolerance", type=float, help="largest relative loss difference over --first steps")
    p = sub.add_parser("compare", help="the agreement test over seeds")
    p.add_argument("--mxkit", nargs="+", required=True)
    p.add_argument("--twin", nargs="+", required=True)
    p.add_argument("--baseline-mxkit", nargs="*")
    p.add_argument("--baseline-twin", nargs="*")
    p.add_argument("--last", type=int, default=50)
    p.add_argument("--k", type=float, default=3.0)
    a = ap.parse_args(argv)
    return {"init": cmd_init, "train": cmd_train, "compare": cmd_compare}[a.cmd](a) or 0


if __name__ == "__main__":
    sys.exit(main())
