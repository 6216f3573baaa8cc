#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Does healing heal? LoRA fine-tuning of one bf16 base in four schedules, on one GPU (issue 48, section 2).

    healing_study.py --binary 06_train_gpu --corpus DIR --out DIR [--seeds 0 1 2] [--steps 500]
                     [--switch-at 300] [--budget SECONDS] [--dry-run] [--device NAME] [--results DIR|FILE]

1. Data (DIR/data, once: kept while its settings are the same). Two bodies of text from the files
   bench/time_to_target.py's corpus part read (--corpus DIR: its corpus.json names the folders; its
   tokenizer is reused as it is): the pretraining body is every file that is not Python (C, C++ and
   CUDA sources and headers, Markdown, reStructuredText, plain text); the fine-tuning body is the
   Python files (.py, .pyi, .pyx), one document in twenty of them (by content hash, the same on any
   machine) held out. Documents are taken in content-hash order up to what the runs read, then
   written as Megatron indexed datasets by tools/make_dataset.py's writer.
2. The base: the model (--layers ..., default 6 x 768, 12 heads / 4 KV, SwiGLU 2048, vocabulary of
   the corpus: 63 M parameters at 16384) pretrained in bf16 for --pretrain-steps on the pretraining
   body, --export'ed to DIR/base (once: kept while its settings are the same). Its final evaluation
   is on the fine-tuning held-out data: the curves' step 0.
3. The fine-tunes: per seed, four schedules of --steps each, `--lora 16` (alpha 32, QKV and output
   projection: the MLPerf Llama 2 70B LoRA recipe) from the base on the fine-tuning body, evaluated
   on its held-out part every --eval-every steps:
     bf16       bf16 throughout
     fp8        FP8 delayed scaling (HYBRID) throughout
     mxfp4      MXFP4 with the Hadamard rotation on every GEMM (the program's recipe mxfp4) throughout
     mxfp4-fp8  mxfp4, switched to fp8 at --switch-at (default 60 % of the steps, as the MLPerf
                recipe switches at 340 of 550 steps)
   The seed fixes the adapters' initialization and the order of the data (the program's --seed:
   adapters seed + 2, data seed + 1), so the runs of a seed differ in numerics only. AdamW at
   --lr 1e-3 (warmup 50, cosine to lr / 10) with weight decay 1e-4: a rate for adapters over a
   short run, chosen here, not taken from the MLPerf recipe (which runs at another size).
4. Results: a table (final held-out loss mean +- sd over the seeds, the gap to bf16 of the same seed,
   mean +- sd, and whether the switch recovers what MXFP4 loses), rows in bench/results/healing.jsonl
   (or --results), the runs' CSVs and logs in DIR/runs, DIR/healing.svg: the held-out loss against
   the step, the mean over the seeds, one line a schedule, and DIR/healing_gap.svg: each schedule's
   held-out loss minus bf16's of the same seed, the mean over the seeds.

The switch "recovers" when the paired per-seed improvement over mxfp4 (mxfp4's gap minus the
switched run's) exceeds twice its standard error; MXFP4 "loses" when its gap to bf16 does. --budget
skips the runs that would not finish in the time left (estimated from the runs before them) and
says which; the exit status is then 3 (0: every run; 1: a failure).
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
import render_results  # noqa: E402  (the rows' format and writer)
from time_to_target import read_csv, run_logged, write_rows  # noqa: E402  (a run's CSV, a logged run, the rows written)

PYTHON = (".py", ".pyi", ".pyx")
HELD_OUT_EVERY = 20
SCHEDULES = ("bf16", "fp8", "mxfp4", "mxfp4-fp8")
LABEL = {"bf16": "bf16", "fp8": "fp8 delayed scaling", "mxfp4": "mxfp4+Hadamard", "mxfp4-fp8": "mxfp4+Hadamard -> fp8"}
COLOR = {"bf16": "#222222", "fp8": "#1f77b4", "mxfp4": "#d62728", "mxfp4-fp8": "#2ca02c"}


def fail(msg):
    print("healing_study.py: error: " + msg, file=sys.stderr)
    sys.exit(2)


# ---- the two bodies of text ---------------------------------------------------------------------

def is_python(path):
    return path.endswith(PYTHON)


def split_documents(docs, held_out_every=HELD_OUT_EVERY):
    """(pretraining, fine-tuning train, fine-tuning held out) of docs, (path, text, content hash)
    triples: Python files fine-tune, the rest pretrain; a Python file is held out when its hash's
    bytes 4..7 (little-endian) are a multiple of held_out_every (time_to_target's corpus uses bytes
    0..3 for its own split). Each part in content-hash order, so the result does not depend on the
    order of docs."""
    ordered = sorted(docs, key=lambda d: d[2])
    pre = [d for d in ordered if not is_python(d[0])]
    py = [d for d in ordered if is_python(d[0])]
    held = [d for d in py if int.from_bytes(d[2][4:8], "little") % held_out_every == 0]
    train = [d for d in py if int.from_bytes(d[2][4:8], "little") % held_out_every != 0]
    if not held and len(train) > 1:
        held, train = train[-1:], train[:-1]
    return pre, train, held


def take(docs, characters):
    """The first documents of docs whose characters reach `characters` (all of them if fewer)."""
    out, n = [], 0
    for d in docs:
        if n >= characters:
            break
        out.append(d)
        n += len(d[1])
    return out


def make_data(a, corpus, out):
    """DIR/data: pretrain, finetune_train, finetune_eval (Megatron indexed) and data.json."""
    import numpy as np
    import make_dataset
    import time_to_target
    t0 = time.time()
    roots = a.root or corpus["roots"]
    docs, skipped, roots = time_to_target.collect(roots)
    pre, train, held = split_documents(docs)
    if not pre or not train or not held:
        fail(f"the files under {', '.join(roots)} do not make both bodies: {len(pre)} non-Python files to pretrain on, "
             f"{len(train)} Python files to fine-tune on and {len(held)} held out")
    # Characters a token, as the corpus measured it; a tenth more text than the runs read.
    per_token = corpus["characters"] / max(1, corpus["train_tokens"] + corpus["eval_tokens"])
    need = {"pretrain": a.pretrain_steps * a.batch * (a.seq + 1), "finetune_train": a.steps * a.batch * (a.seq + 1),
            "finetune_eval": 2 * a.eval_batches * a.batch * (a.seq + 1)}
    parts = {"pretrain": take(pre, need["pretrain"] * per_token * 1.1), "finetune_train": take(train, need["finetune_train"] * per_token * 1.1),
             "finetune_eval": take(held, need["finetune_eval"] * per_token * 1.1)}
    tok_path = os.path.join(a.corpus, corpus["tokenizer_file"])
    tok = make_dataset.Tokenizer(tok_path)
    eod = corpus["end_of_document"]
    info = {"settings": data_settings(a, corpus), "roots": roots, "skipped": skipped, "tokenizer": tok_path,
            "pretrain_body": "every file but Python: C, C++ and CUDA sources and headers, Markdown, reStructuredText, text",
            "finetune_body": f"Python files ({', '.join(PYTHON)}), one in {HELD_OUT_EVERY} held out by content hash",
            "available": {"pretrain": len(pre), "finetune_train": len(train), "finetune_eval": len(held)}}
    for name, part in parts.items():
        ids = tok.encode_many([d[1] for d in part])
        docs_ids = [np.append(np.asarray(x, dtype=np.int64), eod) for x in ids]
        print(make_dataset.write_megatron(os.path.join(out, name), docs_ids, corpus["vocab"]), flush=True)
        tokens = int(sum(len(x) for x in docs_ids))
        info[name] = {"documents": len(part), "characters": sum(len(d[1]) for d in part), "tokens": tokens,
                      "epochs": round(need[name] / max(1, tokens), 2) if name != "finetune_eval" else None}
    info["seconds"] = round(time.time() - t0, 1)
    with open(os.path.join(out, "data.json.tmp"), "w") as f:
        json.dump(info, f, indent=1)
    os.replace(os.path.join(out, "data.json.tmp"), os.path.join(out, "data.json"))
    return info


def data_settings(a, corpus):
    return {"corpus_files": corpus["files"], "tokenizer": corpus["tokenizer_file"], "vocab": corpus["vocab"], "roots": a.root,
            "pretrain_steps": a.pretrain_steps, "steps": a.steps, "batch": a.batch, "seq": a.seq, "eval_batches": a.eval_batches}


def describe_data(info):
    out = []
    for name, what in (("pretrain", info["pretrain_body"]), ("finetune_train", info["finetune_body"]), ("finetune_eval", "held out")):
        p = info[name]
        epochs = f", read {p['epochs']:.2f} times" if p.get("epochs") else ""
        out.append(f"{name}: {p['documents']} of {info['available'][name]} documents, {p['tokens'] / 1e6:.2f} M tokens{epochs} ({what})")
    return out


# ---- the runs -----------------------------------------------------------------------------------

def eval_curve(rows):
    """[(step, held-out loss)] of a run's CSV rows."""
    return [(int(r["step"]), float(r["eval_loss"])) for r in rows if r.get("eval_loss")]


def model_flags(a):
    return ["--layers", str(a.layers), "--d-model", str(a.d_model), "--heads", str(a.heads), "--kv-heads", str(a.kv_heads),
            "--ffn", str(a.ffn), "--seq", str(a.seq), "--batch", str(a.batch)]


def parameters(a, vocab):
    hd = a.d_model // a.heads
    per_layer = a.d_model * (a.heads + 2 * a.kv_heads) * hd + a.d_model * a.d_model + 3 * a.d_model * a.ffn + 2 * a.d_model
    return a.layers * per_layer + a.d_model + 2 * vocab * a.d_model


def pretrain_command(a, vocab, data, base):
    return ([a.binary] + model_flags(a) +
            ["--vocab", str(vocab), "--recipe", "bf16", "--steps", str(a.pretrain_steps), "--lr", str(a.pretrain_lr),
             "--warmup", str(a.pretrain_warmup), "--seed", "1234", "--data", os.path.join(data, "pretrain"),
             "--eval-data", os.path.join(data, "finetune_eval"), "--eval-every", str(a.pretrain_steps),
             "--eval-batches", str(a.eval_batches), "--log-every", str(a.log_every), "--export", base,
             "--csv", os.path.join(a.out, "runs", "base.csv"), "--overwrite"])


def lora_command(a, vocab, data, base, schedule, seed):
    name = f"{schedule}-seed{seed}"
    cmd = ([a.binary] + model_flags(a) +
           ["--vocab", str(vocab), "--recipe", "mxfp4" if schedule == "mxfp4-fp8" else schedule, "--steps", str(a.steps),
            "--lr", str(a.lr), "--warmup", str(a.warmup), "--weight-decay", str(a.weight_decay), "--seed", str(seed),
            "--lora", str(a.lora_rank), "--lora-alpha", str(a.lora_alpha), "--init-from", base,
            "--data", os.path.join(data, "finetune_train"), "--eval-data", os.path.join(data, "finetune_eval"),
            "--eval-every", str(a.eval_every), "--eval-batches", str(a.eval_batches), "--log-every", str(a.log_every),
            "--csv", os.path.join(a.out, "runs", name + ".csv"), "--overwrite"])
    if schedule == "mxfp4-fp8":
        cmd += ["--switch-to", "fp8", "--switch-at", str(a.switch_at)]
    return name, cmd


# ---- statistics, table and rows ------------------------------------------------------------------

def mean_sd(xs):
    """(mean, sample standard deviation; 0 for one value) of xs, or (nan, nan) for none."""
    xs = list(xs)
    if not xs:
        return float("nan"), float("nan")
    return statistics.mean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def beyond_noise(xs):
    """Whether the mean of paired differences xs exceeds twice its standard error (needs 2 or more)."""
    if len(xs) < 2:
        return False
    m, sd = mean_sd(xs)
    return m > 2 * sd / math.sqrt(len(xs))


def summarize(finals, schedules=SCHEDULES):
    """finals {(schedule, seed): final held-out loss} -> {schedule: {...}}: runs, loss mean and sd,
    the gap to bf16 of the same seed (mean, sd, per seed); and 'verdict': what mxfp4 loses and
    whether mxfp4-fp8 recovers it."""
    out = {}
    for s in schedules:
        seeds = sorted(seed for (sch, seed) in finals if sch == s)
        loss = [finals[(s, seed)] for seed in seeds]
        gaps = {seed: finals[(s, seed)] - finals[("bf16", seed)] for seed in seeds if ("bf16", seed) in finals}
        out[s] = {"seeds": seeds, "loss": mean_sd(loss), "gap": mean_sd(gaps.values()), "gaps": gaps}
    verdict = []
    m4, sw = out.get("mxfp4"), out.get("mxfp4-fp8")
    if m4 and m4["gaps"]:
        gm, gsd = m4["gap"]
        loses = beyond_noise(list(m4["gaps"].values()))
        verdict.append(f"mxfp4: {gm:+.4f} +- {gsd:.4f} nats to bf16, " +
                       ("a loss beyond twice its standard error" if loses else "within the seeds' spread: no loss to recover"))
        if sw and sw["gaps"]:
            both = sorted(set(m4["gaps"]) & set(sw["gaps"]))
            better = [m4["gaps"][k] - sw["gaps"][k] for k in both]
            if both:
                bm, bsd = mean_sd(better)
                frac = f" ({100 * bm / gm:.0f} % of mxfp4's gap)" if loses and gm > 0 else ""
                recovers = beyond_noise(better)
                verdict.append(f"the switch to fp8: {bm:+.4f} +- {bsd:.4f} nats better than mxfp4, seed by seed{frac}: " +
                               ("it recovers, beyond twice the standard error" if recovers else "no recovery beyond the seeds' spread"))
                out["mxfp4-fp8"]["recovers"] = recovers
        out["mxfp4"]["loses"] = loses
    out["verdict"] = verdict
    return out


def table(summary, schedules=SCHEDULES):
    lines = [f"{'schedule':<26} {'runs':>4} {'held-out loss':>20} {'gap to bf16':>22}"]
    for s in schedules:
        r = summary.get(s)
        if not r or not r["seeds"]:
            lines.append(f"{LABEL[s]:<26} {0:>4} {'-':>20} {'-':>22}")
            continue
        (lm, lsd), (gm, gsd) = r["loss"], r["gap"]
        gap = "-" if s == "bf16" or not r["gaps"] else f"{gm:+.4f} +- {gsd:.4f}"
        lines.append(f"{LABEL[s]:<26} {len(r['seeds']):>4} {f'{lm:.4f} +- {lsd:.4f}':>20} {gap:>22}")
    return lines + summary["verdict"]


def rows_of(finals, summary, a, shape, device):
    """One row per run (its final held-out loss against bf16's of the same seed) and one per
    schedule (the mean over the seeds against bf16's mean)."""
    rows = []
    kind = dict(shape=f"B{a.batch} T{a.seq}", device=device)
    settings = f"the same program, base, data and seed, the bf16 schedule; {shape}"
    for (s, seed), loss in sorted(finals.items()):
        base = finals.get(("bf16", seed)) if s != "bf16" else None
        rows.append(render_results.new_row(
            "healing", f"held-out loss after LoRA fine-tuning, {LABEL[s]}{switch_text(s, a)}, seed {seed}, {shape}", loss, "nats",
            peer="mxkit bf16 LoRA, same seed" if base else None, peer_value=base, peer_settings=settings if base else None,
            recipe=s.split("-")[0], **kind))
    bf = summary.get("bf16", {}).get("loss", (None,))[0]
    for s in SCHEDULES:
        r = summary.get(s)
        if not r or not r["seeds"]:
            continue
        (lm, lsd), (gm, gsd) = r["loss"], r["gap"]
        spread = f"sd {lsd:.4f}" + (f", gap to bf16 {gm:+.4f} sd {gsd:.4f}" if s != "bf16" and r["gaps"] else "")
        peer = bf if s != "bf16" and bf is not None and math.isfinite(bf) else None
        rows.append(render_results.new_row(
            "healing", f"held-out loss after LoRA fine-tuning, {LABEL[s]}{switch_text(s, a)}, mean of seeds "
                       f"{' '.join(map(str, r['seeds']))} ({spread}), {shape}", lm, "nats",
            peer="mxkit bf16 LoRA, mean of its seeds" if peer else None, peer_value=peer, peer_settings=settings if peer else None,
            recipe=s.split("-")[0], **kind))
    return rows


def switch_text(s, a):
    return f" at step {a.switch_at} of {a.steps}" if s == "mxfp4-fp8" else ""


# ---- the plot -----------------------------------------------------------------------------------

def mean_curve(curves):
    """The mean over runs of [(step, loss)] curves, at the steps every run has."""
    if not curves:
        return []
    steps = set(s for s, _ in curves[0])
    for c in curves[1:]:
        steps &= set(s for s, _ in c)
    by = [dict(c) for c in curves]
    return [(s, statistics.mean(d[s] for d in by)) for s in sorted(steps)]


def gap_curve(runs, bf16_runs):
    """The mean over seeds of a schedule's held-out loss minus bf16's of the same seed, at the
    steps both have: runs and bf16_runs map seed -> [(step, loss)]. Paired by seed, since a seed
    fixes the adapters and the data order, so the gap is the numerics' alone."""
    gaps = []
    for seed, c in runs.items():
        if seed not in bf16_runs:
            continue
        ref = dict(bf16_runs[seed])
        gaps.append([(step, y - ref[step]) for step, y in c if step in ref])
    return mean_curve(gaps)


def svg_plot(curves, title, marks=(), width=720, height=440, ylabel="held-out loss (nats)"):
    """An SVG document (text) of curves {label: ([(x, y)], colour)}: one polyline each, axes with
    ticks, a legend, and a dashed vertical line at each (x, text) of marks. No plotting library:
    the GPU machine may have none."""
    from xml.sax.saxutils import escape
    left, right, top, bottom = 70, 190, 40, 50
    pts = [p for c, _ in curves.values() for p in c]
    if not pts:
        pts = [(0, 0), (1, 1)]
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    y0, y1 = min(p[1] for p in pts), max(p[1] for p in pts)
    if x1 == x0:
        x1 = x0 + 1
    pad = (y1 - y0) * 0.05 or 0.5
    y0, y1 = y0 - pad, y1 + pad
    pw, ph = width - left - right, height - top - bottom

    def X(x):
        return left + (x - x0) / (x1 - x0) * pw

    def Y(y):
        return top + (y1 - y) / (y1 - y0) * ph

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect x="0" y="0" width="{width}" height="{height}" fill="white"/>',
           f'<text x="{width / 2:.1f}" y="22" text-anchor="middle" font-size="14">{escape(title)}</text>',
           f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#888"/>']
    for i in range(6):
        x = x0 + (x1 - x0) * i / 5
        y = y0 + (y1 - y0) * i / 5
        out.append(f'<line x1="{X(x):.1f}" y1="{top + ph}" x2="{X(x):.1f}" y2="{top + ph + 5}" stroke="#888"/>')
        out.append(f'<text x="{X(x):.1f}" y="{top + ph + 18}" text-anchor="middle">{x:.0f}</text>')
        out.append(f'<line x1="{left - 5}" y1="{Y(y):.1f}" x2="{left}" y2="{Y(y):.1f}" stroke="#888"/>')
        out.append(f'<text x="{left - 8}" y="{Y(y) + 4:.1f}" text-anchor="end">{y:.3f}</text>')
    out.append(f'<text x="{left + pw / 2:.1f}" y="{height - 12}" text-anchor="middle">step</text>')
    out.append(f'<text x="16" y="{top + ph / 2:.1f}" text-anchor="middle" transform="rotate(-90 16 {top + ph / 2:.1f})">'
               f'{escape(ylabel)}</text>')
    for x, text in marks:
        if x0 <= x <= x1:
            out.append(f'<line x1="{X(x):.1f}" y1="{top}" x2="{X(x):.1f}" y2="{top + ph}" stroke="#999" stroke-dasharray="4 3"/>')
            out.append(f'<text x="{X(x) + 4:.1f}" y="{top + 14}" fill="#666">{escape(text)}</text>')
    for i, (label, (c, colour)) in enumerate(curves.items()):
        points = " ".join(f"{X(x):.1f},{Y(y):.1f}" for x, y in c)
        out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{points}"><title>{escape(label)}</title></polyline>')
        ly = top + 10 + 18 * i
        out.append(f'<line x1="{left + pw + 12}" y1="{ly}" x2="{left + pw + 36}" y2="{ly}" stroke="{colour}" stroke-width="2"/>')
        out.append(f'<text x="{left + pw + 42}" y="{ly + 4}">{escape(label)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


# ---- the study ----------------------------------------------------------------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--binary", required=True, help="the training program: 06_train_gpu (05_train on the host, at a tiny size)")
    ap.add_argument("--corpus", required=True, help="bench/time_to_target.py corpus's folder (corpus.json, its tokenizer)")
    ap.add_argument("--out", required=True, help="the study's folder: data, base, runs, the plots")
    ap.add_argument("--root", action="append", help="a folder of text to read instead of the corpus's (repeatable)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--schedules", nargs="+", default=list(SCHEDULES), choices=SCHEDULES)
    ap.add_argument("--steps", type=int, default=500, help="fine-tuning steps of every schedule")
    ap.add_argument("--switch-at", type=int, help="mxfp4-fp8's switch (default 60 %% of --steps)")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--weight-decay", type=float, default=1e-4)
    ap.add_argument("--lora-rank", type=int, default=16)
    ap.add_argument("--lora-alpha", type=float, default=32.0)
    ap.add_argument("--pretrain-steps", type=int, default=1000)
    ap.add_argument("--pretrain-lr", type=float, default=6e-4)
    ap.add_argument("--pretrain-warmup", type=int, default=100)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--d-model", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=2048)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--eval-every", type=int, default=25)
    ap.add_argument("--eval-batches", type=int, default=8)
    ap.add_argument("--log-every", type=int, default=25)
    ap.add_argument("--budget", type=float, default=float("inf"), help="seconds for the whole study: runs that would not fit are skipped")
    ap.add_argument("--dry-run", action="store_true", help="print what would run, run nothing")
    ap.add_argument("--device", default="unknown")
    ap.add_argument("--results", default=os.path.join(HERE, "results"), help="a folder of <bench>.jsonl, or one .jsonl file")
    a = ap.parse_args(argv)
    t_start = time.time()
    if a.switch_at is None:
        a.switch_at = a.steps * 6 // 10
    for k in ("steps", "pretrain_steps", "batch", "seq", "eval_every", "eval_batches", "log_every", "layers", "lora_rank"):
        if getattr(a, k) < 1:
            fail(f"--{k.replace('_', '-')} {getattr(a, k)} must be at least 1")
    if not 0 < a.switch_at < a.steps:
        fail(f"--switch-at {a.switch_at} must be inside the run: 1 to --steps - 1 ({a.steps - 1})")
    if a.warmup >= a.steps or a.pretrain_warmup >= a.pretrain_steps:
        fail(f"--warmup {a.warmup} and --pretrain-warmup {a.pretrain_warmup} must be below --steps {a.steps} and --pretrain-steps "
             f"{a.pretrain_steps}")
    if a.steps % a.eval_every or a.steps % a.log_every:
        fail(f"--eval-every {a.eval_every} and --log-every {a.log_every} must divide --steps {a.steps} (the curves end at the last step)")
    if "bf16" not in a.schedules:
        fail("the schedules need bf16: the gaps are to it")
    corpus_json = os.path.join(a.corpus, "corpus.json")
    if not os.path.exists(corpus_json):
        fail(f"--corpus {a.corpus}: no corpus.json (make it with bench/time_to_target.py corpus --out {a.corpus})")
    with open(corpus_json) as f:
        corpus = json.load(f)
    vocab = corpus["vocab"]
    data, base = os.path.join(a.out, "data"), os.path.join(a.out, "base")
    shape = (f"{a.layers} layers, d_model {a.d_model}, {parameters(a, vocab) / 1e6:.0f} M parameters, vocab {vocab}, "
             f"B{a.batch} T{a.seq}, LoRA rank {a.lora_rank} alpha {a.lora_alpha:g} on QKV and output, {a.steps} steps, "
             f"base bf16 {a.pretrain_steps} steps")
    print(f"healing study: {shape}; seeds {' '.join(map(str, a.seeds))}; schedules {' '.join(a.schedules)} "
          f"(mxfp4-fp8 switches at step {a.switch_at})", flush=True)
    lora_runs = [(seed, s) for seed in a.seeds for s in a.schedules]
    if a.dry_run:
        print(f"data: {data} (pretraining body: every file but Python; fine-tuning body: the Python files, one in "
              f"{HELD_OUT_EVERY} held out), tokenizer {os.path.join(a.corpus, corpus['tokenizer_file'])}")
        print("base: " + " ".join(pretrain_command(a, vocab, data, base)))
        for seed, s in lora_runs:
            print(" ".join(lora_command(a, vocab, data, base, s, seed)[1]))
        return 0
    os.makedirs(os.path.join(a.out, "runs"), exist_ok=True)

    def left():
        return a.budget - (time.time() - t_start)

    # 1. the data
    os.makedirs(data, exist_ok=True)
    info = None
    if os.path.exists(os.path.join(data, "data.json")):
        with open(os.path.join(data, "data.json")) as f:
            info = json.load(f)
        if info.get("settings") != data_settings(a, corpus):
            info = None
    if info is None:
        info = make_data(a, corpus, data)
    else:
        print(f"data: {data}/data.json is there, with these settings", flush=True)
    for line in describe_data(info):
        print("  " + line, flush=True)

    # 2. the base
    base_marker = os.path.join(base + ".json")
    settings = {"command": pretrain_command(a, vocab, data, base)[1:], "data": info["settings"]}
    have_base = False
    if os.path.exists(base_marker):
        with open(base_marker) as f:
            have_base = json.load(f) == settings and os.path.exists(base)
    if have_base:
        print(f"base: {base} is there, with these settings", flush=True)
    else:
        print(f"base: bf16, {a.pretrain_steps} steps on the pretraining body", flush=True)
        rc = run_logged(pretrain_command(a, vocab, data, base), os.path.join(a.out, "runs", "base.log"), left())
        if rc != 0:
            print(f"the base failed (exit {rc}): {a.out}/runs/base.log", flush=True)
            return 1
        with open(base_marker, "w") as f:
            json.dump(settings, f)
    base_eval = eval_curve(read_csv(os.path.join(a.out, "runs", "base.csv")))
    base_loss = base_eval[-1][1] if base_eval else None
    if base_loss is not None:
        print(f"base: held-out loss {base_loss:.4f} on the fine-tuning held-out data before fine-tuning", flush=True)

    # 3. the fine-tunes
    finals, skipped, failed, took = {}, [], [], []
    for seed, s in lora_runs:
        name, cmd = lora_command(a, vocab, data, base, s, seed)
        estimate = max(took) if took else 0
        if left() <= estimate * 1.1 or left() <= 0:
            skipped.append(name)
            took_text = f" (a run took up to {estimate:.0f} s)" if took else ""
            print(f"  {name}: skipped, {max(0, left()):.0f} s of --budget left{took_text}", flush=True)
            continue
        t0 = time.time()
        rc = run_logged(cmd, os.path.join(a.out, "runs", name + ".log"), left())
        took.append(time.time() - t0)
        curve = eval_curve(read_csv(os.path.join(a.out, "runs", name + ".csv")))
        if rc != 0 or not curve or curve[-1][0] != a.steps:
            failed.append(name)
            print(f"  {name}: failed (exit {rc}): {a.out}/runs/{name}.log", flush=True)
            continue
        finals[(s, seed)] = curve[-1][1]

    # 4. table, rows, plot
    summary = summarize(finals, a.schedules)
    print()
    for line in table(summary, a.schedules):
        print(line)
    curves = {}
    for s in a.schedules:
        runs = [eval_curve(read_csv(os.path.join(a.out, "runs", f"{s}-seed{seed}.csv"))) for seed in a.seeds if (s, seed) in finals]
        c = mean_curve(runs)
        if c:
            curves[f"{LABEL[s]} ({len(runs)} seed{'s' if len(runs) != 1 else ''})"] = (([(0, base_loss)] if base_loss is not None else []) + c,
                                                                                     COLOR[s])
    svg = os.path.join(a.out, "healing.svg")
    with open(svg, "w") as f:
        f.write(svg_plot(curves, f"LoRA fine-tuning held-out loss, mean over seeds ({a.layers} layers, d_model {a.d_model})",
                         marks=[(a.switch_at, "mxfp4 -> fp8")] if "mxfp4-fp8" in a.schedules else []))
    # The gaps are a few hundredths of a nat on curves that fall by a whole one: their own plot.
    by_seed = {s: {seed: eval_curve(read_csv(os.path.join(a.out, "runs", f"{s}-seed{seed}.csv")))
                   for seed in a.seeds if (s, seed) in finals} for s in a.schedules}
    gaps = {}
    for s in a.schedules:
        if s != "bf16" and "bf16" in by_seed:
            c = gap_curve(by_seed[s], by_seed["bf16"])
            if c:
                gaps[LABEL[s]] = (c, COLOR[s])
    gap_svg = os.path.join(a.out, "healing_gap.svg")
    with open(gap_svg, "w") as f:
        f.write(svg_plot(gaps, "held-out loss minus bf16's, same seed, mean over seeds",
                         marks=[(a.switch_at, "mxfp4 -> fp8")] if "mxfp4-fp8" in a.schedules else [],
                         ylabel="gap to bf16 (nats)"))
    print(f"plots: {svg}, {gap_svg}")
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump({"shape": shape, "data": {k: info[k] for k in ("pretrain_body", "finetune_body")}, "base_loss": base_loss,
                   "finals": {f"{s}-seed{seed}": v for (s, seed), v in finals.items()}, "verdict": summary["verdict"],
                   "skipped": skipped, "failed": failed}, f, indent=1)
    if skipped:
        print(f"skipped for --budget: {' '.join(skipped)}")
    rows = rows_of(finals, summary, a, shape, a.device)
    if rows:
        write_rows(rows, a.results)
    if failed:
        return 1
    return 3 if skipped else (0 if rows else 1)


if __name__ == "__main__":
    sys.exit(main())
