# SPDX-License-Identifier: Apache-2.0
# Peer of the mxkit training program: the same byte-level Llama trained by PyTorch, so that the
# two step times come from one run on one GPU. Model: embedding (vocab 256) -> n_layers pre-norm
# Llama layers (RMSNorm, fused QKV, RoPE, causal GQA attention, SwiGLU; bench/layer_peer.py's
# Layer) -> RMSNorm -> LM head (its own matrix, not tied to the embedding). Defaults: 12 layers,
# d_model 768, 12 heads, 4 KV heads, SwiGLU 2048, seq 1024, batch 16 (about 76 M parameters).
# Training: fp32 master weights, bf16 autocast, cross-entropy on random bytes (a fixed generator),
# gradient-norm clip 1.0, AdamW (lr 3e-4, betas 0.9/0.95, weight decay 0.1 on matrices only,
# fused=True on CUDA: one multi-tensor kernel, per the torch.optim.AdamW docs).
# Modes: eager, compiled (torch.compile of the model; the optimizer stays the fused kernel).
# --steps steps (default 30) are each timed with CUDA events after --warmup steps (default 10);
# step_ms is their median. Output: one "key value" line each.
# Model FLOPs of one step: 6 * N * tokens + n_layers * 3.5 * 2 * B * H * T^2 * D, where N counts
# every parameter but the embedding table (a lookup, no multiply) and tokens = B * T; the attention
# term is the causal forward 2 B H T^2 D plus a backward of 2.5x (bench/layer_peer.py's convention).
# Usage: python3 bench/train_peer.py [--layers L --d-model C --heads H --kv-heads Hkv --ffn F
#        --seq T --batch B] [--steps N --warmup W] [--modes eager,compiled] [--smoke]
# --smoke: tiny model on the CPU, 2 timed steps, no torch.compile (checks the script, not speed).
import argparse
import gc
import os
import sys
import traceback

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from layer_peer import Llama, median_ms, out, setup  # noqa: E402  (one model for every peer)

VOCAB = 256


def run_mode(mode, a, batches, flops, n_all):
    dev = a.dev
    gen = torch.Generator().manual_seed(1)  # every mode starts from the same weights
    model = Llama(a, VOCAB, 500000.0, dev, gen)
    assert sum(p.numel() for p in model.parameters()) == n_all, "parameter count and FLOP formula disagree"
    fwd = torch.compile(model) if mode == "compiled" and a.compile_ok else model
    # Weight decay on matrices only, not on the RMSNorm gains (the usual Llama-style setting).
    decay = [p for p in model.parameters() if p.dim() >= 2]
    keep = [p for p in model.parameters() if p.dim() < 2]
    extra = {"fused": True} if dev.type == "cuda" else {}
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": keep, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), **extra)
    state = {"i": 0, "loss": None}

    def step():
        tok = batches[state["i"] % len(batches)]
        state["i"] += 1
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16):
            logits = fwd(tok[:, :-1])
        # Loss in fp32 on the bf16 logits (next-byte prediction).
        loss = F.cross_entropy(logits.float().reshape(-1, VOCAB), tok[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        state["loss"] = loss.detach()  # no .item() here: it would sync inside the timing

    for _ in range(a.warmup):  # compilation and optimizer-state allocation happen here
        step()
    if dev.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    ms = median_ms(step, a.steps, 0, dev)
    peak = torch.cuda.max_memory_allocated() / 2**30 if dev.type == "cuda" else 0.0
    out(f"{mode}_step_ms", f"{ms:.3f}")
    out(f"{mode}_tokens_per_s", f"{a.batch * a.seq / ms * 1e3:.1f}")
    out(f"{mode}_tflops", f"{flops / ms / 1e9:.2f}")
    out(f"{mode}_peak_gib", f"{peak:.3f}")
    out(f"{mode}_final_loss", f"{state['loss'].item():.4f}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--modes", default="eager,compiled")
    a = setup(p, dict(layers=12, d_model=768, heads=12, kv_heads=4, ffn=2048, seq=1024, batch=16, steps=30,
                      warmup=10),
              dict(layers=2, d_model=64, heads=4, kv_heads=2, ffn=128, seq=32, batch=2, steps=2, warmup=1))
    dev = a.dev
    B, T, H, D = a.batch, a.seq, a.heads, a.d_model // a.heads
    C, Hkv, Fw = a.d_model, a.kv_heads, a.ffn
    per_layer = C * (H + 2 * Hkv) * D + H * D * C + C * 2 * Fw + Fw * C + 2 * C  # 4 linears, 2 norms
    n_model = a.layers * per_layer + C + VOCAB * C  # final norm and LM head
    n_all = n_model + VOCAB * C  # and the embedding table
    flops = 6.0 * n_model * B * T + a.layers * 3.5 * 2.0 * B * H * T * T * D
    out("params", n_all)
    out("params_nonembed", n_model)
    out("step_model_flops", f"{flops:.6e}")

    # Random bytes from a fixed generator: B x (T + 1) per step, inputs and shifted targets.
    gen = torch.Generator().manual_seed(2)
    batches = torch.randint(0, VOCAB, (a.warmup + a.steps, B, T + 1), generator=gen).to(dev)
    failed = False
    for mode in a.modes.split(","):
        try:
            if mode not in ("eager", "compiled"):
                raise ValueError(f"unknown mode {mode}")
            if a.compile_ok:
                torch._dynamo.reset()  # a fresh compilation per mode
            run_mode(mode, a, batches, flops, n_all)
        except Exception:  # report the failure, keep the other mode's figures
            traceback.print_exc()
            out(f"{mode}_failed", 1)
            failed = True
        gc.collect()  # free this mode's model and optimizer state before the next one's peak
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
