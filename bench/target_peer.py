# SPDX-License-Identifier: Apache-2.0
# The PyTorch peer of the time-to-target runs (bench/time_to_target.py): the training program's
# Llama trained by PyTorch on the same batches, in the same order, to the same held-out loss.
#   batches   the training program's --dump-batches file (MXBATCH2: int32 tokens; "MXBATCH2", u64
#             steps, rows, seq + 1, then steps x rows x (seq + 1) tokens), so both read exactly
#             the same windows of the same Megatron dataset
#   held out  --eval PREFIX, a Megatron indexed dataset, evaluated as the program evaluates it:
#             its documents concatenated in file order, window i = tokens [i seq, i seq + seq + 1),
#             the first --eval-batches batches of --batch windows; the loss is the mean of the
#             batches' mean cross-entropy (nats)
#   model     bench/layer_peer.py's Layer (fused QKV and gate/up, RoPE, SDPA with enable_gqa,
#             SwiGLU), fp32 master weights under bf16 autocast, its own LM head; N(0, 0.02)
#             weights with the two projections into the residual stream scaled by 1/sqrt(2 L), as
#             the program initializes them
#   training  AdamW fused=True (betas, eps, weight decay 0.1 on matrices only, as the program),
#             clip 1.0, linear warmup then cosine to lr/10 over --steps (mxkit/train/schedule.hpp's
#             rule), torch.compile of the model
# The clock is MLPerf's, as the program's --target-loss counts it: from the first training step
# (after the model, data and compilation: torch.compile traces its graphs on random tokens first,
# with no optimizer step, as MLPerf allows work that does not see the data before run start) to the
# end of the first evaluation at or below --target-loss. Output: "key value" lines, and --csv.
# Without a GPU it runs on the CPU, uncompiled (a check of the script, not a measurement).
import argparse
import math
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from make_dataset import read_megatron_tokens  # noqa: E402  (the writer's own reader)
from layer_peer import Llama, out  # noqa: E402  (the model every training peer uses)


def read_dump(path):
    with open(path, "rb") as f:
        head = f.read(32)
    if len(head) < 32 or head[:8] != b"MXBATCH2":
        raise SystemExit(f"--batches {path}: not a token batch dump (MXBATCH2) of the training program")
    steps, rows, width = struct.unpack("<QQQ", head[8:])
    data = np.memmap(path, dtype=np.int32, mode="r", offset=32)
    if data.size != steps * rows * width:
        raise SystemExit(f"--batches {path}: {data.size} tokens, the header says {steps} x {rows} x {width}")
    return data.reshape(steps, rows, width)


def main():
    p = argparse.ArgumentParser(description="PyTorch peer trained to a held-out loss target")
    p.add_argument("--batches", required=True, help="the training program's --dump-batches file (MXBATCH2)")
    p.add_argument("--eval", required=True, help="held-out Megatron dataset prefix")
    p.add_argument("--vocab", type=int, required=True)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--d-model", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--ffn", type=int, default=2048)
    p.add_argument("--rope-theta", type=float, default=10000.0)
    p.add_argument("--steps", type=int, help="the schedule's length (default: the dump's steps)")
    p.add_argument("--lr", type=float, default=6e-4)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--adam-eps", type=float, default=1e-8)
    p.add_argument("--eval-every", type=int, default=40)
    p.add_argument("--eval-batches", type=int, default=8)
    p.add_argument("--target-loss", type=float, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--csv", help="step,loss,eval_loss,time_s,tokens a row per evaluation")
    a = p.parse_args()
    dump = read_dump(a.batches)
    total_steps, a.batch, a.seq = dump.shape[0], dump.shape[1], dump.shape[2] - 1
    a.steps = a.steps or total_steps
    if a.steps > total_steps:
        raise SystemExit(f"--steps {a.steps}: the dump holds {total_steps} steps")
    if int(dump.max()) >= a.vocab:  # once, on the host, before the clock
        raise SystemExit(f"--batches {a.batches}: token {int(dump.max())} is outside --vocab {a.vocab}")
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    compile_ok = dev.type == "cuda" and hasattr(torch, "compile")
    held = read_megatron_tokens(a.eval)
    n_eval = min(a.eval_batches, (held.size - 1) // a.seq // a.batch)
    if n_eval < 1:
        raise SystemExit(f"--eval {a.eval}: {held.size} tokens, fewer than one batch of {a.batch} x {a.seq + 1}")
    windows = np.stack([np.asarray(held[i * a.seq:i * a.seq + a.seq + 1], dtype=np.int64) for i in range(n_eval * a.batch)])
    eval_batches = torch.from_numpy(windows).to(dev).view(n_eval, a.batch, a.seq + 1)

    gen = torch.Generator().manual_seed(a.seed)
    model = Llama(a, a.vocab, a.rope_theta, dev, gen, residual_scale=True)
    fwd = torch.compile(model) if compile_ok else model
    decay = [q for q in model.parameters() if q.dim() >= 2]
    keep = [q for q in model.parameters() if q.dim() < 2]
    extra = {"fused": True} if dev.type == "cuda" else {}
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": keep, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=a.adam_eps, **extra)

    def lr_at(step):  # mxkit/train/schedule.hpp: warmup_cosine(lr, lr / 10, warmup, steps)
        if step < a.warmup:
            return a.lr * (step + 1) / a.warmup
        if step >= a.steps:
            return a.lr / 10
        q = (step - a.warmup) / (a.steps - a.warmup)
        return a.lr / 10 + (a.lr - a.lr / 10) * 0.5 * (1.0 + math.cos(math.pi * q))

    def loss_of(tok):
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16):
            logits = fwd(tok[:, :-1])
        return F.cross_entropy(logits.float().reshape(-1, a.vocab), tok[:, 1:].reshape(-1))

    def evaluate():
        with torch.no_grad():
            return torch.stack([loss_of(b) for b in eval_batches]).mean().item()

    # Compilation before the clock, on random tokens: the training graph (forward and backward, no
    # optimizer step, gradients dropped) and the evaluation graph.
    if compile_ok:
        junk = torch.randint(0, a.vocab, (a.batch, a.seq + 1), device=dev, generator=torch.Generator(device=dev).manual_seed(7))
        for _ in range(2):
            loss_of(junk).backward()
            opt.zero_grad(set_to_none=True)
        evaluate()
        torch.cuda.synchronize()
    out("settings", f"torch {torch.__version__}, {'torch.compile' if compile_ok else 'eager'}, bf16 autocast, fp32 masters, "
                    f"fused QKV and gate/up, SDPA enable_gqa, AdamW fused=True")
    rows = []
    pinned = dev.type == "cuda"
    t0 = time.perf_counter()
    reached = None
    loss = torch.zeros((), device=dev)
    for step in range(a.steps):
        tok = torch.from_numpy(np.asarray(dump[step], dtype=np.int64))
        tok = tok.pin_memory().to(dev, non_blocking=True) if pinned else tok
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        loss = loss_of(tok)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if (step + 1) % a.eval_every == 0 or step + 1 == a.steps:
            ev = evaluate()  # .item() synchronizes: the time below includes the step and the evaluation
            t = time.perf_counter() - t0
            rows.append((step + 1, loss.item(), ev, t, (step + 1) * a.batch * a.seq))
            print(f"step {step + 1}: loss {rows[-1][1]:.4f}, held-out {ev:.4f}, {t:.1f} s", flush=True)
            if ev <= a.target_loss:
                reached = rows[-1]
                break
    if a.csv:
        with open(a.csv + ".tmp", "w") as f:
            f.write("step,loss,eval_loss,time_s,tokens\n")
            f.writelines(f"{s},{lo:.6f},{ev:.6f},{t:.3f},{n}\n" for s, lo, ev, t, n in rows)
        os.replace(a.csv + ".tmp", a.csv)
    if reached:
        out("time_to_target_s", f"{reached[3]:.3f}")
        out("tokens_to_target", reached[4])
        out("steps_to_target", reached[0])
        return 0
    out("target_not_reached", f"{rows[-1][2]:.4f}" if rows else "nan")
    return 3


if __name__ == "__main__":
    sys.exit(main())
