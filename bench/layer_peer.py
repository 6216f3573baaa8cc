# SPDX-License-Identifier: Apache-2.0
# Peer of the mxkit transformer-layer benchmark: one Llama-style pre-norm layer, forward + backward,
#   x -> RMSNorm -> fused QKV linear -> RoPE (halves layout) -> causal GQA attention (torch's
#   scaled_dot_product_attention) -> output projection -> +x -> RMSNorm -> fused gate/up linear ->
#   silu(g)*u -> down projection -> +residual
# on the Llama 3.1 8B shape (d_model 4096, 32 query / 8 KV heads of 128, SwiGLU 14336, B 1, T 8192).
# Modes: eager (bf16), compiled (torch.compile of the same module), fp8 (compiled; every linear
# through torch._scaled_mm with per-tensor current scaling, E4M3 X and W, E5M2 dY), sdpa (attention
# alone). Each figure is the median of --reps steps timed with CUDA events after --warmup steps
# (the warm-ups also absorb torch.compile's compilation). Output: one "key value" line each.
# Model FLOPs of one layer step (forward + backward), used for every *_tflops:
#   6 * N_linear * tokens + 3.5 * 2 * B * H * T^2 * D
#   N_linear = C*(H*D + 2*Hkv*D) + H*D*C + C*2F + F*C   (weights of the four linears)
#   causal attention forward 2 B H T^2 D (half of 4 B H T^2 D), backward 2.5x the forward
#   (FlashAttention-2 paper's accounting). sdpa: fwd 2 B H T^2 D, fwd+bwd 3.5x that.
# Usage: python3 bench/layer_peer.py [--batch B --seq T --d-model C --heads H --kv-heads Hkv
#        --head-dim D --ffn F] [--modes eager,compiled,fp8,sdpa] [--smoke]
# --smoke: tiny shape on the CPU, 2 timed steps, no torch.compile (checks the script, not speed).
import argparse
import importlib
import re
import sys
import time
import traceback

import torch
import torch.nn.functional as F

TORCH = tuple(int(p) for p in re.findall(r"\d+", torch.__version__)[:2])
HAS_SDPA = hasattr(F, "scaled_dot_product_attention")  # torch >= 2.0
HAS_GQA = TORCH >= (2, 5)  # enable_gqa arrived in torch 2.5


def out(key, value):
    print(f"{key} {value}", flush=True)  # flush: a popen reader sees every line at once


def median_ms(fn, reps, warm, dev):
    for _ in range(warm):
        fn()
    times = []
    for _ in range(reps):
        if dev.type == "cuda":  # events time the GPU stream, not the host's launch loop
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(), fn(), b.record(), b.synchronize()
            times.append(a.elapsed_time(b))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return sorted(times)[len(times) // 2]


def rms_norm(x, w, eps):
    # Llama reference (meta-llama/llama model.py): normalize in fp32, cast back, then scale.
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


def rope_tables(T, D, theta, dev):
    # Frequencies theta^(-2i/D), i < D/2 (RoFormer, Su et al. 2021), one angle per position.
    inv = theta ** (-torch.arange(0, D, 2, dtype=torch.float32, device=dev) / D)
    ang = torch.outer(torch.arange(T, dtype=torch.float32, device=dev), inv)
    return ang.cos(), ang.sin()  # [T, D/2] each


def rope(x, cos, sin):
    # "Halves" layout (Hugging Face Llama's rotate_half): element i pairs with i + D/2. x: [B,T,h,D].
    x1, x2 = x.float().chunk(2, dim=-1)
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1).to(x.dtype)


def attention(q, k, v):
    # q [B,H,T,D], k/v [B,Hkv,T,D]; causal, grouped-query (each KV head serves H/Hkv query heads).
    if HAS_SDPA and HAS_GQA:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    if HAS_SDPA:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    # torch < 2.0 (CPU smoke only): the same math written out.
    T = q.shape[2]
    s = (q.float() @ k.float().transpose(-1, -2)) / q.shape[-1] ** 0.5
    s = s.masked_fill(torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return (s.softmax(-1) @ v.float()).to(q.dtype)


class Layer(torch.nn.Module):
    """One pre-norm Llama layer; `linear(x, w)` computes x w^T (F.linear, or the FP8 path)."""

    def __init__(self, C, H, Hkv, D, Fw, T, theta, eps, dtype, dev, gen):
        super().__init__()
        self.H, self.Hkv, self.D, self.eps, self.linear = H, Hkv, D, eps, F.linear

        def w(n, k):  # std 0.02, as in common Llama-style initializations
            return torch.nn.Parameter(0.02 * torch.randn(n, k, generator=gen).to(dev, dtype))

        self.norm1 = torch.nn.Parameter(torch.ones(C, device=dev, dtype=dtype))
        self.norm2 = torch.nn.Parameter(torch.ones(C, device=dev, dtype=dtype))
        self.wqkv = w((H + 2 * Hkv) * D, C)
        self.wo = w(C, H * D)
        self.w13 = w(2 * Fw, C)  # gate rows first, then up rows
        self.w2 = w(C, Fw)
        cos, sin = rope_tables(T, D, theta, dev)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, x):
        B, T, _ = x.shape
        H, Hkv, D = self.H, self.Hkv, self.D
        qkv = self.linear(rms_norm(x, self.norm1, self.eps), self.wqkv)
        q, k, v = qkv.split([H * D, Hkv * D, Hkv * D], dim=-1)
        q = rope(q.view(B, T, H, D), self.cos[:T], self.sin[:T]).transpose(1, 2)
        k = rope(k.view(B, T, Hkv, D), self.cos[:T], self.sin[:T]).transpose(1, 2)
        v = v.view(B, T, Hkv, D).transpose(1, 2)
        a = attention(q, k, v).transpose(1, 2).reshape(B, T, H * D)
        x = x + self.linear(a, self.wo)
        g, u = self.linear(rms_norm(x, self.norm2, self.eps), self.w13).chunk(2, dim=-1)
        return x + self.linear(F.silu(g) * u, self.w2)  # SwiGLU (Shazeer 2020)


class Llama(torch.nn.Module):
    """Embedding -> Layers -> RMSNorm -> LM head (its own matrix), fp32 weights: the model of the
    training peers (train_peer.py, target_peer.py). residual_scale: the two projections into the
    residual stream scaled by 1/sqrt(2 L), as the training program initializes them."""

    def __init__(self, a, vocab, theta, dev, gen, residual_scale=False):
        super().__init__()
        C, D = a.d_model, a.d_model // a.heads
        self.eps = 1e-5
        self.embed = torch.nn.Parameter(0.02 * torch.randn(vocab, C, generator=gen).to(dev))
        self.layers = torch.nn.ModuleList(
            Layer(C, a.heads, a.kv_heads, D, a.ffn, a.seq, theta, self.eps, torch.float32, dev, gen) for _ in range(a.layers))
        if residual_scale:
            with torch.no_grad():
                for layer in self.layers:
                    layer.wo.mul_((2.0 * a.layers) ** -0.5)
                    layer.w2.mul_((2.0 * a.layers) ** -0.5)
        self.norm = torch.nn.Parameter(torch.ones(C, device=dev))
        self.head = torch.nn.Parameter(0.02 * torch.randn(vocab, C, generator=gen).to(dev))

    def forward(self, tokens):
        # Under autocast the linears run in bf16 and the residual stream stays fp32 (x + bf16).
        x = F.embedding(tokens, self.embed)
        for layer in self.layers:
            x = layer(x)
        return F.linear(rms_norm(x, self.norm, self.eps), self.head)


# ---- FP8 linear: per-tensor current scaling (the FP8 formats paper, Micikevicius et al. 2022) ----
E4M3_MAX, E5M2_MAX = 448.0, 57344.0


def quantize(t, dtype, fmax):
    # Current scaling: this tensor's own amax maps onto the format's largest finite value. The
    # clamp guards the rounding of t*scale just above fmax (E4M3 has no infinity to saturate to).
    amax = t.detach().abs().amax().float().clamp(min=1e-12)
    scale = fmax / amax
    return (t.float() * scale).clamp(-fmax, fmax).to(dtype), scale.reciprocal()


def scaled_mm(a, b, sa, sb, fast):
    # a row-major [M,K], b column-major [K,N] (cuBLASLt's FP8 "TN" rule); sa, sb dequantize.
    r = torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=fast)
    return r[0] if isinstance(r, tuple) else r  # torch < 2.5 also returned the amax


class Fp8Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        x2 = x.reshape(-1, x.shape[-1])
        xq, xs = quantize(x2, torch.float8_e4m3fn, E4M3_MAX)
        wq, ws = quantize(w, torch.float8_e4m3fn, E4M3_MAX)
        # Y = X W^T: W [N,K] row-major, so W^T is the column-major [K,N] operand as it stands.
        # Fast (split) accumulation in the forward only, as the FP8 recipes of torchao and TE do.
        y = scaled_mm(xq, wq.t(), xs, ws, True)
        ctx.save_for_backward(xq, xs, wq, ws)
        ctx.xshape = x.shape
        return y.view(*x.shape[:-1], w.shape[0])

    @staticmethod
    def backward(ctx, dy):
        xq, xs, wq, ws = ctx.saved_tensors
        gq, gs = quantize(dy.reshape(-1, dy.shape[-1]), torch.float8_e5m2, E5M2_MAX)
        # With one scale per tensor the transpose of an FP8 copy is the FP8 copy of the transpose,
        # so the backward reuses the forward's bytes (an MX copy could not: its block axis turns).
        dx = scaled_mm(gq, wq.t().contiguous().t(), gs, ws, False)  # dX = dY W    [M,K]
        dw = scaled_mm(gq.t().contiguous(), xq.t().contiguous().t(), gs, xs, False)  # dW = dY^T X
        return dx.view(ctx.xshape), dw


def setup(p, full, tiny):
    """Shared CLI of the peers: one int flag per key of `full` (its default; `tiny` under --smoke).
    Prints the version lines and returns the arguments with .dev and .compile_ok."""
    for k in full:
        p.add_argument("--" + k.replace("_", "-"), type=int)
    p.add_argument("--smoke", action="store_true")
    a = p.parse_args()
    for k, v in (tiny if a.smoke else full).items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    a.dev = torch.device("cpu" if a.smoke else "cuda")
    a.compile_ok = hasattr(torch, "compile") and not a.smoke
    if a.compile_ok:
        importlib.import_module("torch._dynamo")  # for reset() between modes
    out("torch_version", torch.__version__)
    out("device_name", (torch.cuda.get_device_name() if a.dev.type == "cuda" else "cpu").replace(" ", "_"))
    if not a.compile_ok:
        out("compile_skipped", 1)  # a compiled mode then times the eager module
    return a


def time_sdpa(a, B, T, H, Hkv, D, gen):
    def rand(h):
        return torch.randn(B, h, T, D, generator=gen).to(a.dev, torch.bfloat16)

    q, k, v, do = rand(H).requires_grad_(), rand(Hkv).requires_grad_(), rand(Hkv).requires_grad_(), rand(H)

    def fwd():
        with torch.no_grad():
            attention(q, k, v)

    def fwdbwd():
        q.grad = k.grad = v.grad = None
        attention(q, k, v).backward(do)

    flops = 2.0 * B * H * T * T * D
    f, fb = median_ms(fwd, a.reps, a.warmup, a.dev), median_ms(fwdbwd, a.reps, a.warmup, a.dev)
    for key, ms, fl in (("fwd", f, flops), ("fwdbwd", fb, 3.5 * flops)):
        out(f"sdpa_{key}_ms", f"{ms:.4f}")
        out(f"sdpa_{key}_tflops", f"{fl / ms / 1e9:.2f}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--theta", type=float, default=500000.0)
    p.add_argument("--eps", type=float, default=1e-5)
    p.add_argument("--modes", default="eager,compiled,fp8,sdpa")
    a = setup(p, dict(batch=1, seq=8192, d_model=4096, heads=32, kv_heads=8, head_dim=128, ffn=14336,
                      reps=20, warmup=5),
              dict(batch=2, seq=32, d_model=64, heads=4, kv_heads=2, head_dim=16, ffn=128, reps=2, warmup=1))
    B, T, C, H, Hkv, D, Fw = a.batch, a.seq, a.d_model, a.heads, a.kv_heads, a.head_dim, a.ffn
    dev, dtype = a.dev, torch.bfloat16
    gen = torch.Generator().manual_seed(1)  # CPU generator: the same numbers on any device
    layer = Layer(C, H, Hkv, D, Fw, T, a.theta, a.eps, dtype, dev, gen)
    x = torch.randn(B, T, C, generator=gen).to(dev, dtype).requires_grad_()
    dy = torch.randn(B, T, C, generator=gen).to(dev, dtype)
    n_linear = C * (H * D + 2 * Hkv * D) + H * D * C + C * 2 * Fw + Fw * C
    layer_flops = 6.0 * n_linear * B * T + 3.5 * 2.0 * B * H * T * T * D
    out("n_linear_params", n_linear)
    out("layer_model_flops", f"{layer_flops:.6e}")

    def run_layer(mode, fwd):
        def step():
            x.grad = None  # each step writes fresh gradients, as the first micro-batch of a step does
            layer.zero_grad(set_to_none=True)
            fwd(x).backward(dy)

        ms = median_ms(step, a.reps, a.warmup, dev)
        peak = 0.0
        if dev.type == "cuda":  # one more step: peak of weights, input, activations and grads
            x.grad = None
            layer.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            step()
            torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated() / 2**30
        out(f"{mode}_ms", f"{ms:.4f}")
        out(f"{mode}_tokens_per_s", f"{B * T / ms * 1e3:.1f}")
        out(f"{mode}_tflops", f"{layer_flops / ms / 1e9:.2f}")
        out(f"{mode}_peak_gib", f"{peak:.3f}")

    fp8_ok = dev.type == "cuda" and hasattr(torch, "_scaled_mm")
    fp8_ok = fp8_ok and torch.cuda.get_device_capability() >= (8, 9)  # FP8 tensor cores: sm_89 on
    failed = False
    for mode in a.modes.split(","):
        try:
            layer.linear = F.linear
            if a.compile_ok:
                torch._dynamo.reset()  # a fresh compilation per mode
            compiled = torch.compile(layer) if a.compile_ok else layer
            if mode == "eager":
                run_layer(mode, layer)
            elif mode == "compiled":
                run_layer(mode, compiled)
            elif mode == "fp8" and not fp8_ok:
                out("fp8_skipped", 1)
            elif mode == "fp8":
                with torch.no_grad():  # sanity: the FP8 layer's update (out - x) against bf16's
                    ref = (layer(x) - x).float()
                    layer.linear = Fp8Linear.apply
                    err = ((layer(x) - x).float() - ref).norm() / ref.norm()
                out("fp8_update_rel_err", f"{err.item():.4f}")
                del ref, err  # the peak below counts only the step's own memory
                run_layer(mode, compiled)
            elif mode == "sdpa":
                time_sdpa(a, B, T, H, Hkv, D, gen)
            else:
                raise ValueError(f"unknown mode {mode}")
        except Exception:  # report the failure, keep the other modes' figures
            traceback.print_exc()
            out(f"{mode}_failed", 1)
            failed = True
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
