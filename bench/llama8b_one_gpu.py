#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The real Llama 3.1 8B on one GPU: N of its 32 layers, vocabulary 128,256, T 8192, recompute,
token data, each recipe against PyTorch FSDP2 (one rank) + torch.compile bf16 in the same call.

    llama8b_one_gpu.py --program 06_train_gpu --logs DIR [--layers 16] [--recipes bf16 fp8 mxfp4]
                       [--steps 6] [--data PREFIX] [--device NAME] [--results DIR|FILE] [--no-peer]
                       [--weight-copies cached|per-gemm ...] [--gemm mxkit|vendor]

Data: --data, a Megatron indexed dataset, or (default) LOGS/tokens: random token ids written in
Megatron's format by tools/make_dataset.py's writer (throughput does not depend on the text). Both
sides read it: the program as its GPT samples, the peer (bench/fsdp_peer.py --data) as windows of
seq + 1 tokens. Each program run: start-up, one warm-up step, --steps timed steps (its summary
line leaves the first window out); its backend's peak memory. The peer: two warm-up steps
(compilation), --steps timed steps, torch.cuda.max_memory_allocated. Rows: bench/results/train.jsonl
(tokens/s, MFU and peak memory against the peer's, with the peer's settings).
"""
import argparse
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
import render_results  # noqa: E402
from multi_gpu_rows import peer_values, summary  # noqa: E402  (06_train_gpu's summary line, the peer's key-value lines)
from time_to_target import run_logged  # noqa: E402  (one way to run a program under a time limit)

VOCAB = 128256


def run_and_read(cmd, log, limit):
    """time_to_target.py's run_logged, then the log's summary lines printed and its text returned."""
    rc = run_logged(cmd, log, limit)
    with open(log, errors="replace") as f:
        text = f.read()
    for line in text.splitlines():
        if re.match(r"^(throughput|settings|tokens_per_s|peak_gib|step_ms|backend memory|.*error)", line, re.I):
            print("  " + line, flush=True)
    return rc, text


def random_tokens(prefix, tokens, seed=0):
    import numpy as np
    import make_dataset
    rng = np.random.default_rng(seed)
    docs = [rng.integers(0, VOCAB, size=8192 * 4, dtype=np.int64) for _ in range(max(1, tokens // (8192 * 4)))]
    print(make_dataset.write_megatron(prefix, docs, VOCAB), flush=True)


def read_log(cmd, log, limit):
    """--rows-only: an earlier call's log in place of a run."""
    try:
        with open(log, errors="replace") as f:
            return 0, f.read()
    except OSError:
        return 1, ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--program", required=True)
    ap.add_argument("--logs", required=True)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--seq", type=int, default=8192)
    ap.add_argument("--recipes", nargs="+", default=["bf16", "fp8", "mxfp4"])
    ap.add_argument("--steps", type=int, default=6, help="timed steps")
    ap.add_argument("--data", help="Megatron dataset prefix (default: random tokens in LOGS/tokens)")
    ap.add_argument("--limit", type=int, default=150, help="seconds a run may take")
    ap.add_argument("--device", default="unknown")
    ap.add_argument("--results", default=os.path.join(HERE, "results"))
    ap.add_argument("--no-peer", dest="peer", action="store_false")
    ap.add_argument("--weight-copies", nargs="+", choices=["cached", "per-gemm"], default=["cached"],
                    help="the program's --weight-copies, each recipe run once per value given")
    ap.add_argument("--gemm", choices=["mxkit", "vendor"], default="mxkit",
                    help="the program's --gemm: bf16 GEMMs on mxkit's kernels or on cuBLASLt (said in each row)")
    ap.add_argument("--rows-only", action="store_true", help="run nothing: the rows from the logs in --logs of an earlier call")
    a = ap.parse_args()
    os.makedirs(a.logs, exist_ok=True)
    data = a.data
    run = read_log if a.rows_only else run_and_read
    if a.rows_only:
        data = data or os.path.join(a.logs, "tokens")
    elif not data:
        data = os.path.join(a.logs, "tokens")
        random_tokens(data, 64 * (a.seq + 1))
    shape = f"Llama 3.1 8B, {a.layers} of 32 layers, vocab {VOCAB}, T{a.seq}, recompute, token data, 1 GPU"
    runs = {}
    for recipe in a.recipes:
        for copies in a.weight_copies:
            cmd = [a.program, "--model", "llama3.1-8b", "--layers", str(a.layers), "--seq", str(a.seq), "--batch", "1",
                   "--steps", "100", "--stop-after", str(a.steps + 1), "--warmup", "1", "--log-every", "1", "--eval-every", "0",
                   "--recompute", "on", "--weight-copies", copies, "--recipe", recipe, "--data", data, "--vocab", str(VOCAB),
                   "--gemm", a.gemm]
            name = (recipe if copies == "cached" else f"{recipe}/{copies}") + ("/vendor-gemm" if a.gemm == "vendor" else "")
            rc, text = run(cmd, os.path.join(a.logs, f"8b_{name.replace('/', '_')}.log"), a.limit)
            s = summary(text)
            if rc == 0 and s:
                runs[name] = s
    peer, settings = {}, None
    if a.peer:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1",
               os.path.join(HERE, "fsdp_peer.py"), "--layers", str(a.layers), "--seq", str(a.seq), "--batch", "1",
               "--steps", str(a.steps), "--warmup", "2", "--vocab", str(VOCAB), "--data", data]
        rc, text = run(cmd, os.path.join(a.logs, "fsdp_peer.log"), a.limit + 120)
        if rc == 0:
            peer = peer_values(text)
            m = re.search(r"^settings (.*)$", text, re.M)
            settings = (m.group(1) if m else "bench/fsdp_peer.py") + f"; --layers {a.layers} --seq {a.seq} --batch 1 --vocab {VOCAB}"
    rows = []
    names = {"mxfp4": "mxfp4+Hadamard"}
    peer_name = "torch FSDP2 (1 rank)+compile bf16"
    for name, s in runs.items():
        recipe, *tags = name.split("/")
        case = f"{shape}, {names.get(recipe, recipe)}" + (", weight copies per GEMM" if "per-gemm" in tags else "") + \
            (", bf16 and FP8 GEMMs on cuBLASLt (--gemm vendor)" if "vendor-gemm" in tags else "")
        for what, value, unit, pv in (("tokens/s", s["tokens"], "tokens/s", peer.get("tokens_per_s_per_gpu")),
                                      ("MFU", s["mfu"], "%", peer.get("mfu_percent")),
                                      ("peak memory", s["peak_mib"] / 1024.0, "GiB", peer.get("peak_gib"))):
            if not value:
                continue
            rows.append(render_results.new_row("train", f"{case}: {what}", value, unit, peer=peer_name if pv else None,
                                               peer_value=pv, peer_settings=settings if pv else None, recipe=recipe,
                                               shape=f"B1 T{a.seq}", device=a.device))
    if not runs and peer:
        rows.append(render_results.new_row("train", f"{shape}, {peer_name}: tokens/s", peer["tokens_per_s_per_gpu"], "tokens/s",
                                           recipe="bf16", shape=f"B1 T{a.seq}", device=a.device))
    print(f"{'case':<28} {'tokens/s':>10} {'peer':>10} {'ratio':>7} {'GiB':>7} {'peer GiB':>9}")
    for name, s in runs.items():
        pt, pg = peer.get("tokens_per_s_per_gpu", 0), peer.get("peak_gib", 0)
        recipe, _, copies = name.partition("/")
        print(f"{names.get(recipe, recipe) + (' per-gemm' if copies else ''):<28} {s['tokens']:>10.0f} {pt:>10.0f} {(s['tokens'] / pt if pt else 0):>6.3f}x "
              f"{s['peak_mib'] / 1024:>7.1f} {pg:>9.1f}")
    if settings:
        print("peer: " + settings)
    if not rows:
        print("no rows: no run finished")
        return 1
    if a.results.endswith(".jsonl"):
        with open(a.results, "a", encoding="utf-8") as f:
            f.write("".join(render_results.make_line(r) + "\n" for r in rows))
    else:
        render_results.append_rows(rows, a.results)
    print(f"{len(rows)} rows -> {a.results}")
    return 0 if len(runs) == len(a.recipes) * len(a.weight_copies) and (peer or not a.peer) else 1


if __name__ == "__main__":
    sys.exit(main())
