# SPDX-License-Identifier: Apache-2.0
# The PyTorch peer of mxkit's fully sharded training: the Llama 3.1 8B shape (32 layers, d_model
# 4096, 32 heads, 8 KV heads, SwiGLU 14336, vocabulary 128256, RoPE theta 500000) with FSDP2
# (fully_shard per layer and on the root; fp32 sharded parameters, bf16 compute and gather,
# fp32 gradient reduction: MixedPrecisionPolicy), torch.compile per layer (torchtitan's
# placement), activation checkpointing per layer, as a strong PyTorch user sets it up: one fused QKV
# and one fused gate/up projection per layer, grouped-query attention inside scaled_dot_product_attention
# (enable_gqa=True, torch >= 2.5: no copies of K and V), AdamW with fused=True (one kernel for every
# parameter). Tokens: --data, a Megatron indexed dataset by prefix (the file the training program
# reads: consecutive windows of seq + 1 tokens from a seeded offset), or random. One process per GPU:
#   NCCL_NVLS_ENABLE=0 python3 -m torch.distributed.run --standalone --nproc_per_node 4 \
#       bench/fsdp_peer.py --seq 8192 --batch 1 --steps 3 --warmup 2
# It prints its settings ("settings ..."), which the rows record beside its figures.
# Rank 0 prints "key value" lines: tokens_per_s_per_gpu, tflops_per_gpu, mfu_percent (against
# --peak-tflops, the H100 SXM's 989 bf16 dense), peak_gib (torch.cuda.max_memory_allocated),
# step_ms, startup_s (process group up, sharded model initialized: before the first step).
# Model FLOPs as mxkit's training program counts them (06_train_gpu --help):
# 6 N_linear tokens + layers 3.5 x 2 B H T^2 D.
# --layers/--d-model/... shrink the model (a smoke run: --layers 2 --d-model 256 --heads 4
# --kv-heads 2 --ffn 512 --vocab 1024 --seq 256 --no-compile).
#
# --fp8 tensorwise|rowwise: PyTorch's FP8 training path as torchtitan configures it with torchao's
# Float8Linear (torchao is not on the GPU machines, so Float8Linear is written here over
# torch._scaled_mm, with torchao's recipes' choices): every Linear of the transformer blocks (not
# the head) runs its three GEMMs in FP8 with dynamic (current) scaling, each operand scaled by
# fp8_max / amax of the tensor itself (the amax clamped below at 1e-12), computed when it is cast:
#   tensorwise  one scale per tensor; input and weight E4M3, grad_output E5M2 (torchao's
#               Float8LinearConfig defaults); the forward GEMM with fast accumulation, the two
#               backward GEMMs without (its Float8GemmConfig defaults);
#   rowwise     one scale per row of each GEMM operand along the GEMM's K (torchao's AXISWISE
#               granularity), every operand E4M3, grad_output too, scales rounded down to a power
#               of two (torchao's "rowwise" recipe); each backward GEMM re-scales its operands
#               along its own K.
# The weights are gathered by FSDP2 in bf16 (torchao's FP8 all-gather is a tensor subclass of
# torchao's: not written here) and cast to FP8 after the gather. --check compares one Float8
# linear's forward and backward with PyTorch's bf16 linear and exits 1 beyond the stated bound.
import argparse
import os
import re
import sys
import time

import numpy as np

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from make_dataset import read_megatron_tokens  # noqa: E402  (the writer's own reader)

try:
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard  # torch >= 2.6
except ImportError:  # torch 2.4, 2.5
    from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper


GQA = tuple(int(p) for p in re.findall(r"\d+", torch.__version__)[:2]) >= (2, 5)


class RMSNorm(torch.nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


def rope_tables(seq, head_dim, theta, device):
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    ang = torch.outer(torch.arange(seq, device=device, dtype=torch.float32), inv)
    return torch.cos(ang), torch.sin(ang)


def apply_rope(x, cos, sin):  # x: (B, H, T, D), pairs (2i, 2i+1)
    x2 = x.float().unflatten(-1, (-1, 2))
    a, b = x2[..., 0], x2[..., 1]
    out = torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)
    return out.type_as(x)


# ---- FP8 linears (--fp8) -----------------------------------------------------------------------
E4M3, E5M2 = getattr(torch, "float8_e4m3fn", None), getattr(torch, "float8_e5m2", None)
AMAX_FLOOR = 1e-12  # torchao's EPS: an all-zero tensor gets a finite scale


def fp8_cast(x, dtype, dim, power_of_2):
    """x (2-D) to `dtype` with dynamic scaling: one scale for the tensor (dim None) or one per line
    along `dim` (the GEMM's K). Returns (codes, inverse scale in fp32, shaped to broadcast)."""
    xf = x.float()
    amax = xf.abs().amax() if dim is None else xf.abs().amax(dim=dim, keepdim=True)
    scale = torch.finfo(dtype).max / amax.clamp(min=AMAX_FLOOR)
    if power_of_2:  # rowwise: scales a power of two (rounded down: no overflow), as torchao's recipe
        scale = torch.exp2(torch.floor(torch.log2(scale)))
    fmax = torch.finfo(dtype).max
    codes = (xf * scale).clamp(-fmax, fmax).to(dtype).contiguous()  # row-major, as _scaled_mm reads it
    return codes, scale.reciprocal().contiguous()


def fp8_mm(a, b_t, recipe, a_dtype, b_dtype, fast_accum):
    """a (M, K) @ b_t (N, K)^T in FP8 through torch._scaled_mm, bf16 out. _scaled_mm takes its
    first operand row-major and its second column-major: b_t.t() of a row-major b_t is that."""
    rowwise = recipe == "rowwise"
    qa, sa = fp8_cast(a, a_dtype, -1 if rowwise else None, rowwise)  # (M, K), scales (M, 1)
    qb, sb = fp8_cast(b_t, b_dtype, -1 if rowwise else None, rowwise)  # (N, K), scales (N, 1)
    if rowwise:
        sb = sb.t()  # (1, N)
    return torch._scaled_mm(qa, qb.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16, use_fast_accum=fast_accum)


class _Float8MM(torch.autograd.Function):
    """y = x W^T with the three GEMMs in FP8: forward x (M, K) . W (N, K); grad_input
    dy (M, N) . W^T, K = N; grad_weight dy^T (N, M) . x^T, K = M. Each casts its operands along its own K."""

    @staticmethod
    def forward(ctx, x, w, recipe):
        ctx.save_for_backward(x, w)
        ctx.recipe = recipe
        return fp8_mm(x, w, recipe, E4M3, E4M3, fast_accum=True)

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        g = E4M3 if ctx.recipe == "rowwise" else E5M2
        dx = fp8_mm(dy, w.t().contiguous(), ctx.recipe, g, E4M3, fast_accum=False)  # (M, N) . (K, N)^T
        dw = fp8_mm(dy.t().contiguous(), x.t().contiguous(), ctx.recipe, g, E4M3, fast_accum=False)  # (N, M) . (K, M)^T
        return dx, dw.to(w.dtype), None


class Float8Linear(torch.nn.Linear):
    """nn.Linear (no bias) whose GEMMs run in FP8 (_Float8MM); the parameter stays as FSDP2 gives it
    (fp32 shard, bf16 gathered), so swapping it in changes no sharding. Dims: multiples of 16."""

    def __init__(self, d_in, d_out, recipe):
        super().__init__(d_in, d_out, bias=False)
        self.recipe = recipe

    def forward(self, x):
        shape = x.shape
        y = _Float8MM.apply(x.reshape(-1, shape[-1]).to(torch.bfloat16), self.weight.to(torch.bfloat16), self.recipe)
        return y.view(*shape[:-1], y.shape[-1])


def make_linear(d_in, d_out, fp8):
    return Float8Linear(d_in, d_out, fp8) if fp8 else torch.nn.Linear(d_in, d_out, bias=False)


# Relative error (Frobenius norm) of one Float8 linear against the bf16 linear, per output: the
# FP8 casts round each operand to 3 (E4M3) or 2 (E5M2) mantissa bits, 2^-4 and 2^-3 relative at
# most, and averaged over K random products the error of the sum is far below the worst case;
# 0.1 leaves room for E5M2's gradients while failing a wrong scale (a factor of 2 or more) or a
# transposed operand (errors of order 1).
CHECK_BOUND = 0.1


def check_float8_linear(recipe, dev, m=512, k=1024, n=768):
    torch.manual_seed(0)
    x = torch.randn(m, k, device=dev, dtype=torch.bfloat16, requires_grad=True)
    w = (torch.randn(n, k, device=dev) * k ** -0.5).to(torch.bfloat16)
    dy = torch.randn(m, n, device=dev, dtype=torch.bfloat16)
    ref = torch.nn.Linear(k, n, bias=False, device=dev, dtype=torch.bfloat16)
    f8 = Float8Linear(k, n, recipe).to(dev, torch.bfloat16)
    with torch.no_grad():
        ref.weight.copy_(w)
        f8.weight.copy_(w)
    x_ref = x.detach().clone().requires_grad_(True)
    y_ref = ref(x_ref)
    y_ref.backward(dy)
    y = f8(x)
    y.backward(dy)

    def rel(a, b):
        return ((a.float() - b.float()).norm() / b.float().norm().clamp(min=1e-30)).item()

    errors = {"output": rel(y, y_ref), "grad_input": rel(x.grad, x_ref.grad), "grad_weight": rel(f8.weight.grad, ref.weight.grad)}
    ok = all(e <= CHECK_BOUND for e in errors.values())
    print(f"check --fp8 {recipe}: Float8Linear ({m}x{k} . {n}x{k}) against the bf16 linear, relative error (Frobenius): "
          + ", ".join(f"{name} {e:.4f}" for name, e in errors.items())
          + f"; bound {CHECK_BOUND}: {'PASS' if ok else 'FAIL'}", flush=True)
    return ok


class Block(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        d, hd = a.d_model, a.d_model // a.heads
        self.heads, self.kv_heads, self.hd = a.heads, a.kv_heads, hd
        self.attn_norm, self.ffn_norm = RMSNorm(d), RMSNorm(d)
        self.wqkv = make_linear(d, (a.heads + 2 * a.kv_heads) * hd, a.fp8)  # one GEMM for Q, K and V
        self.wo = make_linear(a.heads * hd, d, a.fp8)
        self.w13 = make_linear(d, 2 * a.ffn, a.fp8)  # one GEMM for gate and up
        self.w2 = make_linear(a.ffn, d, a.fp8)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        h = self.attn_norm(x)
        q, k, v = self.wqkv(h).split([self.heads * self.hd, self.kv_heads * self.hd, self.kv_heads * self.hd], dim=-1)
        q = q.view(B, T, self.heads, self.hd).transpose(1, 2)
        k = k.view(B, T, self.kv_heads, self.hd).transpose(1, 2)
        v = v.view(B, T, self.kv_heads, self.hd).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if GQA:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:  # torch < 2.5 has no enable_gqa
            rep = self.heads // self.kv_heads
            o = F.scaled_dot_product_attention(q, k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1), is_causal=True)
        x = x + self.wo(o.transpose(1, 2).reshape(B, T, -1))
        gate, up = self.w13(self.ffn_norm(x)).chunk(2, dim=-1)
        return x + self.w2(F.silu(gate) * up)


class Llama(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        self.embed = torch.nn.Embedding(a.vocab, a.d_model)
        self.layers = torch.nn.ModuleList(Block(a) for _ in range(a.layers))
        self.norm = RMSNorm(a.d_model)
        self.head = torch.nn.Linear(a.d_model, a.vocab, bias=False)

    def forward(self, tokens, cos, sin):
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.head(self.norm(x))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--d-model", type=int, default=4096)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--ffn", type=int, default=14336)
    p.add_argument("--vocab", type=int, default=128256)
    p.add_argument("--seq", type=int, default=8192)
    p.add_argument("--batch", type=int, default=1, help="sequences per GPU and step")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--peak-tflops", type=float, default=989.0)
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--no-recompute", dest="recompute", action="store_false")
    p.add_argument("--data", help="Megatron indexed dataset prefix (default: random tokens)")
    p.add_argument("--fp8", choices=["tensorwise", "rowwise"],
                   help="the transformer blocks' linears in FP8 with dynamic scaling (torchao's recipe of that name)")
    p.add_argument("--check", action="store_true",
                   help="with --fp8: compare one Float8 linear with the bf16 linear on one GPU and exit (1 beyond the bound)")
    a = p.parse_args()
    if a.fp8 and (E4M3 is None or not hasattr(torch, "_scaled_mm")):
        raise SystemExit(f"--fp8: torch {torch.__version__} has no float8 dtypes or torch._scaled_mm (torch >= 2.4 needed)")
    if a.check:
        if not a.fp8:
            raise SystemExit("--check needs --fp8 tensorwise or --fp8 rowwise")
        raise SystemExit(0 if check_float8_linear(a.fp8, torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))) else 1)
    if a.fp8:
        hd = a.d_model // a.heads
        dims = {"--d-model": a.d_model, "--ffn": a.ffn, "(--heads + 2 --kv-heads) x head dim": (a.heads + 2 * a.kv_heads) * hd,
                "--batch x --seq": a.batch * a.seq}
        bad = [f"{k} {v}" for k, v in dims.items() if v % 16]
        if bad:
            raise SystemExit("--fp8: torch._scaled_mm needs multiples of 16: " + ", ".join(bad))
    data = read_megatron_tokens(a.data) if a.data else None
    if data is not None and data.size < a.seq + 1:
        raise SystemExit(f"--data {a.data}: {data.size} tokens, fewer than one window of --seq + 1 = {a.seq + 1}")
    t_start = time.perf_counter()
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", local)

    torch.manual_seed(0)
    with torch.device("meta"):
        model = Llama(a)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    # torchtitan's order: activation checkpointing, then torch.compile, then fully_shard, per layer.
    for i in range(a.layers):
        block = model.layers[i]
        if a.recompute:
            block = checkpoint_wrapper(block)
        if not a.no_compile:
            block = torch.compile(block)
        model.layers[i] = block
        # The last layer stays gathered for the backward that follows at once (torchtitan does the same).
        fully_shard(block, mp_policy=mp, reshard_after_forward=i < a.layers - 1)
    fully_shard(model, mp_policy=mp)
    model.to_empty(device=dev)
    with torch.no_grad():
        for name, prm in model.named_parameters():
            if name.endswith("norm.weight"):
                prm.fill_(1.0)
            else:
                prm.normal_(0.0, 0.02)
    torch.cuda.synchronize()
    startup_s = time.perf_counter() - t_start  # process group, sharded model built and initialized
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=True)  # one kernel for all parameters
    cos, sin = rope_tables(a.seq, a.d_model // a.heads, 500000.0, dev)
    gen = torch.Generator(device=dev).manual_seed(1 + rank)
    offsets = np.random.RandomState(1 + rank)

    def batch():
        if data is None:
            return torch.randint(0, a.vocab, (a.batch, a.seq + 1), device=dev, generator=gen)
        rows = []
        for _ in range(a.batch):
            o = offsets.randint(0, data.size - a.seq)
            rows.append(np.asarray(data[o:o + a.seq + 1], dtype=np.int64))
        host = np.stack(rows)
        if host.max() >= a.vocab:  # checked on the host: no device synchronization
            raise SystemExit(f"--data {a.data}: token {host.max()} is outside --vocab {a.vocab}")
        return torch.from_numpy(host).to(dev)

    def step():
        tokens = batch()
        logits = model(tokens[:, :-1], cos, sin)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    t_compile = time.perf_counter()
    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    warm_s = time.perf_counter() - t_compile
    torch.cuda.reset_peak_memory_stats()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    torch.cuda.synchronize()
    seconds = (time.perf_counter() - t0) / a.steps
    peak = torch.cuda.max_memory_allocated() / 2**30

    hd = a.d_model // a.heads
    n_linear = a.layers * (a.d_model * (2 * a.heads * hd + 2 * a.kv_heads * hd) + 3 * a.d_model * a.ffn) + a.d_model * a.vocab
    tokens = a.batch * a.seq
    flops = 6.0 * n_linear * tokens + a.layers * 3.5 * 2.0 * a.batch * a.heads * a.seq * a.seq * hd
    if rank == 0:
        fp8 = "off"
        if a.fp8 == "tensorwise":
            fp8 = ("tensorwise (block linears via torch._scaled_mm, dynamic per-tensor scales, E4M3 forward, E5M2 grad_output, "
                   "fast accumulation in forward only; bf16 all-gather, head bf16)")
        elif a.fp8 == "rowwise":
            fp8 = ("rowwise (block linears via torch._scaled_mm, dynamic per-row scales along K rounded to powers of 2, E4M3 "
                   "everywhere, fast accumulation in forward only; bf16 all-gather, head bf16)")
        print(f"settings torch {torch.__version__}, FSDP2 on {world} rank(s) (fp32 masters, bf16 compute, fp32 reduce), "
              f"torch.compile per layer: {not a.no_compile}, recompute: {a.recompute}, fused QKV and gate/up, "
              f"SDPA enable_gqa: {GQA}, AdamW fused=True, fp8: {fp8}, data: {a.data or 'random tokens'}", flush=True)
        print(f"# torch {torch.__version__}, {world} GPUs ({torch.cuda.get_device_name(dev)}), loss {loss.item():.3f}, "
              f"warm-up {warm_s:.1f} s, N_linear {n_linear / 1e9:.2f} G", flush=True)
        print(f"tokens_per_s_per_gpu {tokens / seconds:.1f}", flush=True)
        print(f"tflops_per_gpu {flops / seconds / 1e12:.2f}", flush=True)
        print(f"mfu_percent {100.0 * flops / seconds / 1e12 / a.peak_tflops:.2f}", flush=True)
        print(f"peak_gib {peak:.2f}", flush=True)
        print(f"step_ms {1000.0 * seconds:.1f}", flush=True)
        print(f"startup_s {startup_s:.1f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
