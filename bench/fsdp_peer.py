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


class Block(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        d, hd = a.d_model, a.d_model // a.heads
        self.heads, self.kv_heads, self.hd = a.heads, a.kv_heads, hd
        self.attn_norm, self.ffn_norm = RMSNorm(d), RMSNorm(d)
        self.wqkv = torch.nn.Linear(d, (a.heads + 2 * a.kv_heads) * hd, bias=False)  # one GEMM for Q, K and V
        self.wo = torch.nn.Linear(a.heads * hd, d, bias=False)
        self.w13 = torch.nn.Linear(d, 2 * a.ffn, bias=False)  # one GEMM for gate and up
        self.w2 = torch.nn.Linear(a.ffn, d, bias=False)

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
    a = p.parse_args()
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
        print(f"settings torch {torch.__version__}, FSDP2 on {world} rank(s) (fp32 masters, bf16 compute, fp32 reduce), "
              f"torch.compile per layer: {not a.no_compile}, recompute: {a.recompute}, fused QKV and gate/up, "
              f"SDPA enable_gqa: {GQA}, AdamW fused=True, data: {a.data or 'random tokens'}", flush=True)
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
