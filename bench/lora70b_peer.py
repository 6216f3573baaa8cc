# SPDX-License-Identifier: Apache-2.0
"""Peer of bench/gpu/bench_lora70b.cu: the same Llama 2 70B LoRA step in PyTorch.

bf16 frozen base (embedding, 80 layers, head), LoRA rank 16 / alpha 32 on the fused QKV and the
output projections (fp32 adapters, written here: A Kaiming-uniform, B zero), activation
checkpointing per layer, torch.compile per layer, FSDP2 (fully_shard) per layer and on the root
over every rank of torchrun (torchtitan's order: checkpointing, compile, then fully_shard),
mixed precision bf16 parameters / fp32 reductions, AdamW on the adapters. Each rank trains on its
own batch x seq tokens (data parallel, as FSDP is). Frozen weights get no gradient: FSDP2
reduce-scatters the adapters' gradients only.

    NCCL_NVLS_ENABLE=0 python3 -m torch.distributed.run --standalone --nproc_per_node N bench/lora70b_peer.py [--layers 80] ...

Prints, on rank 0, "key value" lines that bench_lora70b reads: tokens_per_s_per_gpu, step_ms,
mfu_percent (with --model-flops, the step's model FLOPs as bench_lora70b counts them, against
--peak-tflops), peak_memory_gib (torch.cuda.max_memory_allocated on rank 0), gpus, warmup_s, and
oom 1 if it ran out of memory (a bf16 70B base needs 128 GiB: it cannot fit one GPU). Progress
goes to "# ..." lines (not read as values). Time-bounded: --steps timed steps after one warm-up
(compilation) step, stopped early, on every rank at once, past --budget seconds or 20 s before
$MXKIT_DEADLINE_EPOCH (the calling script's deadline, seconds since the epoch) where it is set.
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
    p.add_argument("--model-flops", type=float, default=0.0, help="model FLOPs of one step per GPU (bench_lora70b's count)")
    p.add_argument("--no-compile", action="store_true")
    return p.parse_args()


def say(rank, text):
    if rank == 0:
        print(f"# {text}", flush=True)


class LoRALinear(nn.Module):
    """y = x W^T + (alpha / r) (x A^T) B^T, W frozen."""

    def __init__(self, d_in, d_out, rank=0, alpha=1.0):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(d_out, d_in, dtype=torch.bfloat16), requires_grad=False)
        self.rank = rank
        if rank:
            self.lora_a = nn.Parameter(torch.empty(rank, d_in, dtype=torch.float32))
            self.lora_b = nn.Parameter(torch.empty(d_out, rank, dtype=torch.float32))
            self.scale = alpha / rank

    def forward(self, x):
        y = F.linear(x, self.weight)
        if self.rank:
            y = y + self.scale * F.linear(F.linear(x, self.lora_a), self.lora_b)
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
        self.qkv = LoRALinear(a.d_model, (a.heads + 2 * a.kv_heads) * self.d, a.rank, a.alpha)
        self.out = LoRALinear(a.heads * self.d, a.d_model, a.rank, a.alpha)
        self.gate_up = LoRALinear(a.d_model, 2 * a.ffn)
        self.down = LoRALinear(a.ffn, a.d_model)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).split([self.h * self.d, self.kv * self.d, self.kv * self.d], dim=-1)
        q = rope(q.view(B, T, self.h, self.d).transpose(1, 2), cos, sin)
        k = rope(k.view(B, T, self.kv, self.d).transpose(1, 2), cos, sin)
        v = v.view(B, T, self.kv, self.d).transpose(1, 2)
        rep = self.h // self.kv
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, self.h * self.d)
        x = x + self.out(a)
        g, u = self.gate_up(self.norm2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(g) * u)


class Model(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.embedding = nn.Parameter(torch.empty(a.vocab, a.d_model, dtype=torch.bfloat16), requires_grad=False)
        self.layers = nn.ModuleList(Block(a) for _ in range(a.layers))
        self.norm = RMSNorm(a.d_model)
        self.head = LoRALinear(a.d_model, a.vocab)

    def forward(self, tokens, targets, cos, sin):
        x = F.embedding(tokens, self.embedding)
        for layer in self.layers:
            x = layer(x, cos, sin)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))


def main():
    a = parse()
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # no NVLink multicast (the machines' rule)
    local = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", local)
    t_start = time.time()
    say(rank, f"torch {torch.__version__}, {world} GPUs ({torch.cuda.get_device_name(dev)})")
    try:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    except ImportError:
        from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    if hasattr(torch, "_dynamo") and hasattr(torch._dynamo.config, "inline_inbuilt_nn_modules"):
        torch._dynamo.config.inline_inbuilt_nn_modules = True  # the 80 blocks share one compiled graph
    torch.manual_seed(1)
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
    out = {"gpus": world}
    try:
        model.to_empty(device=dev)
    except torch.cuda.OutOfMemoryError:
        out["oom"] = 1
        report(rank, out)
        return
    with torch.no_grad():  # random base (each rank its own shard), adapters as LoRA starts them
        for name, p in model.named_parameters():
            if name.endswith("lora_b"):
                p.zero_()
            elif name.endswith("lora_a"):
                p.uniform_(-1 / math.sqrt(p.shape[1]), 1 / math.sqrt(p.shape[1]))
            elif "norm" in name:
                p.fill_(1.0)
            else:
                p.normal_(0.0, 0.02)
    trainable = [p for p in model.parameters() if p.requires_grad]
    say(rank, f"model on the GPUs in {time.time() - t_start:.1f} s: {sum(p.numel() for p in model.parameters()) / 1e9:.2f} B "
        f"parameters, {sum(p.numel() for p in trainable) / 1e6:.1f} M trainable, "
        f"{torch.cuda.memory_allocated() / 2**30:.1f} GiB per GPU")
    d = a.d_model // a.heads
    inv = 1.0 / (10000.0 ** (torch.arange(0, d, 2, device=dev, dtype=torch.float32) / d))
    ang = torch.outer(torch.arange(a.seq, device=dev, dtype=torch.float32), inv)
    cos, sin = ang.cos().to(torch.bfloat16), ang.sin().to(torch.bfloat16)
    opt = torch.optim.AdamW(trainable, lr=1e-4, foreach=True)
    g = torch.Generator(device=dev).manual_seed(100 + rank)
    tokens = torch.randint(0, a.vocab, (a.batch, a.seq + 1), device=dev, generator=g)

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
            dist.broadcast(stop, 0)
            if stop.item() > 0:
                break
        times.sort()
        ms = 1e3 * times[len(times) // 2]
        out.update(step_ms=ms, tokens_per_s_per_gpu=a.batch * a.seq / ms * 1e3, loss=float(loss), timed_steps=len(times))
        if a.model_flops > 0:
            out["mfu_percent"] = 100.0 * a.model_flops / (ms * 1e-3) / (a.peak_tflops * 1e12)
    except torch.cuda.OutOfMemoryError:
        out["oom"] = 1
    report(rank, out)


def report(rank, out):
    out["peak_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
    if rank == 0:
        for k, v in out.items():
            print(f"{k} {v}")
        sys.stdout.flush()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
