# SPDX-License-Identifier: Apache-2.0
"""Peers of bench/gpu/bench_lora70b.cu: the same Llama 2 70B LoRA step in PyTorch, two ways.

Both: LoRA rank 16 / alpha 32 on the fused QKV and the output projections (adapters as mxkit's
run has them: fp32 masters computed in bf16, A Kaiming-uniform, B zero), bf16 activations,
embedding, norms and head bf16 and frozen, activation checkpointing per layer, torch.compile per
layer, AdamW (fp32) on the adapters, the mean cross-entropy of next-token prediction over
batch x seq random tokens.

--base bf16 (default; the second reference): a bf16 frozen base, FSDP2 (fully_shard) per layer
and on the root over every rank of torchrun (torchtitan's order: checkpointing, compile, then
fully_shard), mixed precision bf16 parameters / fp32 reductions. Each rank trains on its own
batch x seq tokens (data parallel, as FSDP is). Frozen weights get no gradient: FSDP2
reduce-scatters the adapters' gradients only. A bf16 70B base needs 128 GiB: not one GPU.

    NCCL_NVLS_ENABLE=0 python3 -m torch.distributed.run --standalone --nproc_per_node N bench/lora70b_peer.py [--layers 80] ...

--base fp8-tensorwise | fp8-rowwise (the one-GPU peer, on mxkit's terms: one GPU, a quantized
base): no FSDP, no process group. Every layer linear of the frozen base is stored as
float8_e4m3fn codes with fp32 scales, per tensor or per output row, quantized once from random
bf16 weights built on the GPU one linear at a time (the bf16 base is never whole: ~65 GiB of FP8
codes instead of 128 GiB). Its products go through torch._scaled_mm with current (dynamic)
scaling, the facts of torchao.float8's recipes (written here: torchao is not installed):
  forward  Y = X W^T: X quantized to E4M3 per tensor / per row (amax now), W's stored codes;
           fast accumulation on, as torchao's output GEMM;
  dgrad    dX = dY W: tensorwise, dY in E5M2 per tensor (torchao's default recipe); rowwise, dY
           in E4M3 per row (torchao's ROWWISE: E4M3 for gradients too, every scale floored to a
           power of two). W's row scales lie along this product's reduction, so they are folded
           into dY's columns before dY is quantized; W's codes are transposed per GEMM (the
           column-major operand: a 0.2 GiB copy at most, never held), as mxkit's FP8 phase does
           (linear_memory::lean()); fast accumulation off, as torchao's grad_input GEMM;
  wgrad    none: the base is frozen.
--check: one FP8 base linear's forward and input gradient against the bf16 linear (F.linear on
the bf16 weights it was quantized from) on random data at the 70B shapes, eager and compiled;
prints the relative errors (Frobenius) and exits 1 above the bound (below).

Prints (rank 0) "key value" lines that bench_lora70b and bench/lora70b_rows.py read:
tokens_per_s_per_gpu, step_ms, mfu_percent (the step's model FLOPs as bench_lora70b counts them,
--model-flops or, where not given, the same count here, against --peak-tflops), peak_memory_gib
(torch.cuda.max_memory_allocated), peak_reserved_gib (max_memory_reserved), gpus, warmup_s,
base_gib (the frozen base linears' bytes on the GPU), and oom 1 if it ran out of memory; a
"settings ..." line with every choice. Progress goes to "# ..." lines (not read as values).
Time-bounded: --steps timed steps after one warm-up (compilation) step, stopped early, on every
rank at once, past --budget seconds or 20 s before $MXKIT_DEADLINE_EPOCH (the calling script's
deadline, seconds since the epoch) where it is set.
"""
import argparse
import math
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

BASES = ("bf16", "fp8-tensorwise", "fp8-rowwise")


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=80)
    p.add_argument("--d-model", type=int, default=8192)
    p.add_argument("--heads", type=int, default=64)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--ffn", type=int, default=28672)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--seq", type=int, default=8192)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--alpha", type=float, default=32.0)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--budget", type=float, default=90.0)
    p.add_argument("--peak-tflops", type=float, default=989.4)
    p.add_argument("--model-flops", type=float, default=0.0, help="model FLOPs of one step per GPU (bench_lora70b's count; 0: counted here)")
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--compile-order", choices=("checkpoint-first", "compile-first"), default="checkpoint-first",
                   help="FP8 base: torch.compile over the checkpointed block (torchtitan's order), or checkpointing "
                   "around the compiled block")
    p.add_argument("--memory-probe", action="store_true", help="one forward and backward, the peak after each, then exit")
    p.add_argument("--base", choices=BASES, default="bf16", help="the frozen base: bf16 under FSDP2, or FP8 on one GPU")
    p.add_argument("--check", action="store_true", help="the FP8 base linear against the bf16 linear, then exit")
    return p.parse_args()


def say(rank, text):
    if rank == 0:
        print(f"# {text}", flush=True)


# ---- the FP8 base linear ---------------------------------------------------------------------

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


def quantize(x, dtype, rowwise, pow2):
    """x (rows, cols) -> (codes of `dtype`, fp32 dequantization scales: (rows, 1) or one ()).

    Current scaling: amax now, scale = max finite / amax (floored to a power of two with pow2),
    saturated cast; the scale returned is its reciprocal, as torch._scaled_mm takes it."""
    fmax = torch.finfo(dtype).max
    xf = x.float()
    amax = xf.abs().amax(dim=-1, keepdim=True) if rowwise else xf.abs().amax()
    q = fmax / amax.clamp(min=1e-12)
    if pow2:
        q = torch.exp2(torch.floor(torch.log2(q)))
    return (xf * q).clamp(-fmax, fmax).to(dtype), q.reciprocal()


class FP8BaseMatmul(torch.autograd.Function):
    """y = x W^T with W frozen as E4M3 codes w8 (N, K) and dequantization scales w_scale: one ()
    (tensorwise) or one per output row, stored as (1, N) (rowwise). Returns dX only."""

    @staticmethod
    def forward(ctx, x, w8, w_scale, rowwise):
        lead, K = x.shape[:-1], x.shape[-1]
        xq, xs = quantize(x.reshape(-1, K), E4M3, rowwise, rowwise)
        y = torch._scaled_mm(xq, w8.t(), scale_a=xs, scale_b=w_scale, out_dtype=torch.bfloat16, use_fast_accum=True)
        ctx.save_for_backward(w8, w_scale)
        ctx.rowwise = rowwise
        return y.reshape(*lead, w8.shape[0])

    @staticmethod
    def backward(ctx, dy):
        w8, w_scale = ctx.saved_tensors
        lead, (N, K) = dy.shape[:-1], w8.shape
        dy = dy.reshape(-1, N)
        w_col = w8.t().contiguous().t()  # (N, K) column-major: W's codes transposed for this GEMM only
        if ctx.rowwise:
            # W's per-row scales run along this product's reduction (N): folded into dY's columns.
            dyq, dys = quantize(dy.float() * w_scale, E4M3, True, True)
            ones = torch.ones(1, K, device=dy.device, dtype=torch.float32)
            dx = torch._scaled_mm(dyq, w_col, scale_a=dys, scale_b=ones, out_dtype=torch.bfloat16, use_fast_accum=False)
        else:
            dyq, dys = quantize(dy, E5M2, False, False)
            dx = torch._scaled_mm(dyq, w_col, scale_a=dys, scale_b=w_scale, out_dtype=torch.bfloat16, use_fast_accum=False)
        return dx.reshape(*lead, K), None, None, None


def quantize_weight(w, rowwise):
    """A bf16 weight (N, K) -> its stored E4M3 codes and scales ((1, N) rowwise, () tensorwise)."""
    codes, scale = quantize(w, E4M3, rowwise, rowwise)
    return codes, scale.reshape(1, -1).contiguous() if rowwise else scale


# ---- the model -------------------------------------------------------------------------------


class LoRALinear(nn.Module):
    """y = x W^T + (alpha / r) (x A^T) B^T, W frozen: bf16, or FP8 codes and scales (base fp8-*).
    Adapters: fp32 masters, computed in the activations' precision (bf16)."""

    def __init__(self, d_in, d_out, rank=0, alpha=1.0, base="bf16"):
        super().__init__()
        self.fp8 = base != "bf16"
        self.rowwise = base == "fp8-rowwise"
        if self.fp8:
            self.register_buffer("weight", torch.empty(d_out, d_in, dtype=E4M3))
            self.register_buffer("weight_scale", torch.empty((1, d_out) if self.rowwise else (), dtype=torch.float32))
        else:
            self.weight = nn.Parameter(torch.empty(d_out, d_in, dtype=torch.bfloat16), requires_grad=False)
        self.rank = rank
        if rank:
            self.lora_a = nn.Parameter(torch.empty(rank, d_in, dtype=torch.float32))
            self.lora_b = nn.Parameter(torch.empty(d_out, rank, dtype=torch.float32))
            self.scale = alpha / rank

    def forward(self, x):
        if self.fp8:
            y = FP8BaseMatmul.apply(x, self.weight, self.weight_scale, self.rowwise)
        else:
            y = F.linear(x, self.weight)
        if self.rank:
            y = y + self.scale * F.linear(F.linear(x, self.lora_a.to(x.dtype)), self.lora_b.to(x.dtype))
        return y


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(d, dtype=torch.bfloat16), requires_grad=False)
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


def rope(x, cos, sin):  # x (B, h, T, D), rotating pairs (2i, 2i + 1) as mxkit's rope does
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


class Block(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.h, self.kv, self.d = a.heads, a.kv_heads, a.d_model // a.heads
        self.norm1, self.norm2 = RMSNorm(a.d_model), RMSNorm(a.d_model)
        self.qkv = LoRALinear(a.d_model, (a.heads + 2 * a.kv_heads) * self.d, a.rank, a.alpha, a.base)
        self.out = LoRALinear(a.heads * self.d, a.d_model, a.rank, a.alpha, a.base)
        self.gate_up = LoRALinear(a.d_model, 2 * a.ffn, base=a.base)
        self.down = LoRALinear(a.ffn, a.d_model, base=a.base)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).split([self.h * self.d, self.kv * self.d, self.kv * self.d], dim=-1)
        q = rope(q.view(B, T, self.h, self.d).transpose(1, 2), cos, sin)
        k = rope(k.view(B, T, self.kv, self.d).transpose(1, 2), cos, sin)
        v = v.view(B, T, self.kv, self.d).transpose(1, 2)
        # Grouped-query attention without copying K and V per query head (torch >= 2.5).
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).transpose(1, 2).reshape(B, T, self.h * self.d)
        x = x + self.out(a)
        g, u = self.gate_up(self.norm2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(g) * u)


class Model(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.embedding = nn.Parameter(torch.empty(a.vocab, a.d_model, dtype=torch.bfloat16), requires_grad=False)
        self.layers = nn.ModuleList(Block(a) for _ in range(a.layers))
        self.norm = RMSNorm(a.d_model)
        self.head = LoRALinear(a.d_model, a.vocab)  # bf16 in every mode, as mxkit's head

    def forward(self, tokens, targets, cos, sin):
        x = F.embedding(tokens, self.embedding)
        for layer in self.layers:
            x = layer(x, cos, sin)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))


def init_(module):
    """Random base (bf16: N(0, 0.02); FP8: quantized from it, one linear at a time), norms 1,
    adapters as LoRA starts them (A Kaiming-uniform, B zero)."""
    with torch.no_grad():
        for name, p in module.named_parameters(recurse=False):
            if name == "lora_b":
                p.zero_()
            elif name == "lora_a":
                p.uniform_(-1 / math.sqrt(p.shape[1]), 1 / math.sqrt(p.shape[1]))
            elif isinstance(module, RMSNorm):
                p.fill_(1.0)
            else:
                p.normal_(0.0, 0.02)
        if isinstance(module, LoRALinear) and module.fp8:
            w = torch.empty(module.weight.shape, dtype=torch.bfloat16, device=module.weight.device).normal_(0.0, 0.02)
            codes, scale = quantize_weight(w, module.rowwise)
            module.weight.copy_(codes)
            module.weight_scale.copy_(scale)
            del w, codes, scale


def model_flops(a):
    """bench_lora70b's count of one step's model FLOPs (counts() there): forward and dgrad of the
    base, forward and both gradients of the adapters, the head, causal attention."""
    d = a.d_model // a.heads
    C, HD, QKV, Fd = a.d_model, a.heads * d, (a.heads + 2 * a.kv_heads) * d, a.ffn
    tokens = a.batch * a.seq
    base = a.layers * (C * QKV + HD * C + 3 * C * Fd)
    adapters = a.layers * a.rank * (C + QKV + HD + C)
    return (4.0 * base * tokens + 6.0 * adapters * tokens + 4.0 * a.vocab * C * tokens +
            a.layers * 3.5 * 2.0 * a.batch * a.heads * a.seq * a.seq * d)


# ---- --check ---------------------------------------------------------------------------------

# Relative Frobenius error bounds of the FP8 products against the bf16 linear. Rounding to E4M3
# (3 mantissa bits) costs about 2.5 % RMS per element, E5M2 (2 bits) about 5 %; a product of two
# quantized operands about sqrt(2) x 2.5 = 3.6 % (E4M3 x E4M3) and 5.7 % (E5M2 x E4M3). A wrong
# scale, layout or transpose gives errors of order 1.
CHECK_BOUND = {"forward": 0.06, "dgrad E4M3": 0.06, "dgrad E5M2": 0.09}


def check(a):
    dev = torch.device("cuda", 0)
    torch.manual_seed(2)
    modes = [a.base] if a.base != "bf16" else ["fp8-tensorwise", "fp8-rowwise"]
    M = a.batch * a.seq
    shapes = [(a.d_model, a.d_model), (a.ffn, a.d_model), (a.d_model, a.ffn)]  # (N, K): out; gate/up half; down
    print(f"# check: {M} tokens, weights (N, K) {shapes}, bounds {CHECK_BOUND}, torch {torch.__version__} "
          f"({torch.cuda.get_device_name(dev)})", flush=True)
    worst = 0.0
    failed = []

    def rel(x, ref):
        return float((x.float() - ref.float()).norm() / ref.float().norm())

    for mode in modes:
        rowwise = mode == "fp8-rowwise"
        fns = [("eager", FP8BaseMatmul.apply)]
        if not a.no_compile:
            fns.append(("compiled", torch.compile(lambda x, w, s, r: FP8BaseMatmul.apply(x, w, s, r))))
        for N, K in shapes:
            # Rows of W and of X of unequal magnitude (a factor up to e^4 apart), so that a per-row
            # scale misapplied shows.
            w = (torch.randn(N, K, device=dev) * 0.02 * torch.exp(torch.empty(N, 1, device=dev).uniform_(-2, 2))).to(torch.bfloat16)
            x = (torch.randn(M, K, device=dev) * torch.exp(torch.empty(M, 1, device=dev).uniform_(-2, 2))).to(torch.bfloat16)
            dy = (torch.randn(M, N, device=dev) * 1e-3 * torch.exp(torch.empty(1, N, device=dev).uniform_(-2, 2))).to(torch.bfloat16)
            xr = x.clone().requires_grad_(True)
            y_ref = F.linear(xr, w)
            y_ref.backward(dy)
            w8, ws = quantize_weight(w, rowwise)
            for how, fn in fns:
                xq = x.clone().requires_grad_(True)
                y = fn(xq, w8, ws, rowwise)
                y.backward(dy)
                for what, err in (("forward", rel(y, y_ref)), ("dgrad E4M3" if rowwise else "dgrad E5M2", rel(xq.grad, xr.grad))):
                    bound = CHECK_BOUND[what]
                    ok = err <= bound
                    worst = max(worst, err / bound)
                    print(f"check {mode} {how} W ({N}, {K}) {what}: relative error {err:.4f} (bound {bound}){'' if ok else ' ABOVE'}",
                          flush=True)
                    if not ok:
                        failed.append(f"{mode} {how} ({N}, {K}) {what}")
            del w, x, dy, xr, y_ref, w8, ws
            torch.cuda.empty_cache()
    print(f"check_worst_fraction_of_bound {worst:.3f}")
    print(f"check_failed {len(failed)}")
    if failed:
        print(f"# check FAILED: {', '.join(failed)}", flush=True)
        return 1
    return 0


# ---- the step --------------------------------------------------------------------------------


def settings_line(a, world):
    """One line, "settings key=value ...": every choice of this run (rows' peer_settings)."""
    kv = [f"base={a.base}", f"gpus={world}"]
    if a.base == "bf16":
        kv += ["parallel=FSDP2(fully_shard:per_layer+root)", "mixed_precision=bf16_params,fp32_reduce"]
    else:
        rw = a.base == "fp8-rowwise"
        kv += ["parallel=none", "gemm=torch._scaled_mm",
               "weight=E4M3," + ("per_row_scales,pow2" if rw else "per_tensor_scale") + ",quantized_once",
               "forward_x=E4M3," + ("per_row,pow2" if rw else "per_tensor") + ",current_scaling,fast_accum",
               "dgrad_dy=" + ("E4M3,per_row,pow2,weight_row_scales_folded" if rw else "E5M2,per_tensor") + ",current_scaling",
               "dgrad_weight=codes_transposed_per_gemm", "wgrad=none(frozen)"]
    kv += [f"layers={a.layers}", f"d_model={a.d_model}", f"heads={a.heads}/{a.kv_heads}", f"ffn={a.ffn}", f"vocab={a.vocab}",
           f"seq={a.seq}", f"batch={a.batch}", f"lora_rank={a.rank}", f"lora_alpha={a.alpha:g}", "lora_targets=qkv,out",
           "lora_params=fp32", "lora_compute=bf16", "optimizer=AdamW(fp32,lr=1e-4)", "loss=mean_cross_entropy",
           "activations=bf16", "embedding_head_norms=bf16,frozen", "checkpointing=per_layer",
           f"compile={'off' if a.no_compile else 'per_layer'}", f"compile_order={a.compile_order}",
           "attention=sdpa,enable_gqa", f"torch={torch.__version__}"]
    return "settings " + " ".join(kv)


def build_fp8(a, dev, rank):
    """The model on one GPU, layer by layer: each linear's bf16 weights made, quantized, freed."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    with torch.device("meta"):
        model = Model(a)
    for i, layer in enumerate(model.layers):
        layer.to_empty(device=dev)
        for m in layer.modules():
            init_(m)
        if a.compile_order == "checkpoint-first":
            layer = checkpoint_wrapper(layer)
            if not a.no_compile:
                layer = torch.compile(layer)
        else:  # compile-first: eager checkpointing around the compiled block
            if not a.no_compile:
                layer = torch.compile(layer)
            layer = checkpoint_wrapper(layer)
        model.layers[i] = layer
        if (i + 1) % 20 == 0 or i + 1 == a.layers:
            say(rank, f"built {i + 1}/{a.layers} layers, {torch.cuda.memory_allocated() / 2**30:.1f} GiB")
    for m in (model.norm, model.head):
        m.to_empty(device=dev)
        init_(m)
    model.embedding = nn.Parameter(torch.empty_like(model.embedding, device=dev).normal_(0.0, 0.02), requires_grad=False)
    return model


def build_fsdp(a, dev):
    try:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    except ImportError:
        from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    with torch.device("meta"):
        model = Model(a)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for i, layer in enumerate(model.layers):
        layer = checkpoint_wrapper(layer)
        if not a.no_compile:
            layer = torch.compile(layer)
        # The last layer stays gathered for the backward that follows at once (torchtitan does the same).
        fully_shard(layer, mp_policy=mp, reshard_after_forward=i < a.layers - 1)
        model.layers[i] = layer
    fully_shard(model, mp_policy=mp)
    model.to_empty(device=dev)
    for m in model.modules():  # random base (each rank its own shard)
        init_(m)
    return model


def main():
    a = parse()
    if a.check:
        return check(a)
    distributed = a.base == "bf16"
    local = int(os.environ.get("LOCAL_RANK", 0)) if distributed else 0
    torch.cuda.set_device(local)
    if distributed:
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # no NVLink multicast (the machines' rule)
        dist.init_process_group("nccl")
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    dev = torch.device("cuda", local)
    t_start = time.time()
    say(rank, f"torch {torch.__version__}, {world} GPUs ({torch.cuda.get_device_name(dev)}), base {a.base}")
    if rank == 0:
        print(settings_line(a, world), flush=True)
    if hasattr(torch, "_dynamo") and hasattr(torch._dynamo.config, "inline_inbuilt_nn_modules"):
        torch._dynamo.config.inline_inbuilt_nn_modules = True  # the 80 blocks share one compiled graph
    torch.manual_seed(1)
    out = {"gpus": world}
    try:
        model = build_fsdp(a, dev) if distributed else build_fp8(a, dev, rank)
    except torch.cuda.OutOfMemoryError:
        out["oom"] = 1
        report(rank, out, distributed)
        return 0
    trainable = [p for p in model.parameters() if p.requires_grad]
    if not distributed:
        out["base_gib"] = sum(b.numel() * b.element_size() for n, b in model.named_buffers() if n.endswith("weight")) / 2**30
    say(rank, f"model on the GPUs in {time.time() - t_start:.1f} s: {sum(p.numel() for p in model.parameters()) / 1e9:.2f} B "
        f"parameters{'' if distributed else ' + %.2f GiB of FP8 base' % out['base_gib']}, "
        f"{sum(p.numel() for p in trainable) / 1e6:.1f} M trainable, {torch.cuda.memory_allocated() / 2**30:.1f} GiB per GPU")
    d = a.d_model // a.heads
    inv = 1.0 / (10000.0 ** (torch.arange(0, d, 2, device=dev, dtype=torch.float32) / d))
    ang = torch.outer(torch.arange(a.seq, device=dev, dtype=torch.float32), inv)
    cos, sin = ang.cos().to(torch.bfloat16), ang.sin().to(torch.bfloat16)
    opt = torch.optim.AdamW(trainable, lr=1e-4, foreach=True)
    g = torch.Generator(device=dev).manual_seed(100 + rank)
    tokens = torch.randint(0, a.vocab, (a.batch, a.seq + 1), device=dev, generator=g)
    flops = a.model_flops if a.model_flops > 0 else model_flops(a)

    if a.memory_probe:
        loss = model(tokens[:, :-1], tokens[:, 1:], cos, sin)
        torch.cuda.synchronize()
        print(f"probe after forward: allocated {torch.cuda.memory_allocated() / 2**30:.2f} GiB, peak {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB", flush=True)
        loss.backward()
        torch.cuda.synchronize()
        print(f"probe after backward: allocated {torch.cuda.memory_allocated() / 2**30:.2f} GiB, peak {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB", flush=True)
        return 0

    def step():
        loss = model(tokens[:, :-1], tokens[:, 1:], cos, sin)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    try:
        t0 = time.time()
        try:
            step()  # compile, warm-up
        except torch.cuda.OutOfMemoryError:
            raise
        except Exception as e:  # a compilation failure: say so, and go on eagerly where dynamo cannot compile
            if a.no_compile:
                raise
            say(rank, f"warm-up step failed under torch.compile ({type(e).__name__}: {str(e)[:300]}); again with "
                "torch._dynamo.config.suppress_errors (eager where compilation fails)")
            out["compile_failed"] = 1
            opt.zero_grad(set_to_none=True)
            torch._dynamo.reset()
            torch._dynamo.config.suppress_errors = True
            step()
        torch.cuda.synchronize()
        out["warmup_s"] = time.time() - t0
        say(rank, f"warm-up step (compilation) {out['warmup_s']:.1f} s")
        if distributed:
            dist.barrier()
        times, start = [], time.time()
        # The calling script's deadline (scripts/gpu.sh lora70b): stop stepping ~20 s before
        # it, so the timed steps are reported instead of killed.
        budget = a.budget
        deadline = float(os.environ.get("MXKIT_DEADLINE_EPOCH", "0"))
        if deadline > 0:
            budget = min(budget, deadline - 20.0 - start)
        for i in range(a.steps):
            s = time.time()
            loss = step()
            torch.cuda.synchronize()
            times.append(time.time() - s)
            say(rank, f"step {i + 1}: {1e3 * times[-1]:.1f} ms")
            # Every rank stops at the same step (rank 0's clock decides), or the others would wait
            # in a collective until the time limit.
            stop = torch.tensor([1.0 if time.time() - start > budget else 0.0], device=dev)
            if distributed:
                dist.broadcast(stop, 0)
            if stop.item() > 0:
                break
        times.sort()
        ms = 1e3 * times[len(times) // 2]
        out.update(step_ms=ms, tokens_per_s_per_gpu=a.batch * a.seq / ms * 1e3, loss=float(loss), timed_steps=len(times))
        out["mfu_percent"] = 100.0 * flops / (ms * 1e-3) / (a.peak_tflops * 1e12)
    except torch.cuda.OutOfMemoryError:
        out["oom"] = 1
    report(rank, out, distributed)
    return 0


def report(rank, out, distributed):
    out["peak_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
    out["peak_reserved_gib"] = torch.cuda.max_memory_reserved() / 2**30
    if rank == 0:
        for k, v in out.items():
            print(f"{k} {v}")
        sys.stdout.flush()
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
