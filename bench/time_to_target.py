#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Time to a held-out loss, every recipe and a PyTorch peer, on one GPU (issue 43, section 5).

    time_to_target.py corpus --out DIR [--vocab 16384] [--root PATH ...] [--train-bytes N]
    time_to_target.py run --program 06_train_gpu --data DIR --logs DIR [--seeds 0 1 2]
                          [--recipes bf16 fp8 mxfp8 mxfp4 mxfp4-fp8 peer] [--target L]
                          [--steps N] [--device NAME] [--results DIR|FILE]

corpus  The text on this machine, as a token dataset: every UTF-8 file of source code and
        documentation (extensions below) under the roots (default: Python's standard library
        and site-packages, /usr/include, the CUDA toolkit's headers), each file one document,
        identical files kept once (by content hash). One document in a hundred (by its hash) is
        held out. A byte-level BPE tokenizer of --vocab words is trained here on the training
        documents (Hugging Face tokenizers, or sentencepiece where that is missing), then
        tools/make_dataset.py's writer makes DIR/train and DIR/eval, Megatron indexed datasets.
        DIR/corpus.json says what text and how much.
run     The training program on DIR/train with DIR/eval held out, one model (--layers ...; 06_train_gpu's
        flags), --steps steps of --batch x --seq tokens, so that the data is read once (the run
        refuses more steps than the data holds), evaluated every --eval-every steps.
        - The target: the held-out loss bf16 reaches at 90 % of its steps (its first seed's run,
          stopped there), unless --target gives it.
        - Each recipe, then, trains to the target (--target-loss): its time to train as MLPerf
          counts it (the program's CSV clock) and the tokens it read; mxfp4-fp8 is MXFP4 with
          the Hadamard switched to FP8 at 80 % of the steps.
        - peer: bench/target_peer.py, PyTorch bf16 + torch.compile, on the same batches (the bf16
          run's --dump-batches) to the same target.
        Rows: bench/results/time_to_target.jsonl (or --results), one per run: seconds to the
        target against the peer's of the same seed, tokens to the target against bf16's; a run
        that ends without reaching it gives its last held-out loss instead.
"""
import argparse
import csv
import hashlib
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
import render_results  # noqa: E402  (the rows' format and writer)

EXTENSIONS = (".py", ".pyi", ".pyx", ".h", ".hpp", ".hh", ".cuh", ".c", ".cc", ".cpp", ".cu", ".inl", ".md", ".rst", ".txt")
EOD = "<|endoftext|>"


def fail(msg):
    print("time_to_target.py: error: " + msg, file=sys.stderr)
    sys.exit(2)


# ---- corpus -------------------------------------------------------------------------------------

def default_roots():
    import site
    import sysconfig
    roots = [sysconfig.get_paths()["stdlib"]]
    roots += site.getsitepackages() if hasattr(site, "getsitepackages") else []
    roots += ["/usr/include", "/usr/local/cuda/include"]
    return roots


def collect(roots, min_bytes=256, max_bytes=2 << 20):
    """(path, text) of every distinct UTF-8 file with one of EXTENSIONS under roots, sorted by path."""
    seen, docs, skipped = set(), [], {"binary": 0, "duplicate": 0, "size": 0}
    visited = set()
    for root in roots:
        real = os.path.realpath(root)
        if not os.path.isdir(real) or any(real == v or real.startswith(v + os.sep) for v in visited):
            continue  # missing, or inside a root already walked (site-packages under the stdlib, ...)
        visited.add(real)
        for d, dirs, files in os.walk(real):
            dirs.sort()
            for name in sorted(files):
                if not name.endswith(EXTENSIONS):
                    continue
                path = os.path.join(d, name)
                try:
                    if os.path.islink(path) or not min_bytes <= os.path.getsize(path) <= max_bytes:
                        skipped["size"] += 1
                        continue
                    with open(path, "rb") as f:
                        raw = f.read()
                    text = raw.decode("utf-8")
                except (OSError, UnicodeDecodeError):
                    skipped["binary"] += 1
                    continue
                digest = hashlib.blake2b(raw, digest_size=16).digest()
                if digest in seen:
                    skipped["duplicate"] += 1
                    continue
                seen.add(digest)
                docs.append((path, text, digest))
    return docs, skipped, sorted(visited)


def train_tokenizer(texts, vocab, out_dir):
    """A byte-level BPE of `vocab` words with EOD as its one special token; returns its file."""
    try:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    except ImportError:
        Tokenizer = None
    if Tokenizer is not None:
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=[EOD], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                      show_progress=False)
        tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
        path = os.path.join(out_dir, "tokenizer.json")
        tok.save(path)
        return path, "Hugging Face tokenizers byte-level BPE"
    try:
        import sentencepiece as spm
    except ImportError:
        fail("neither the tokenizers nor the sentencepiece package is installed")
    lines = (line for t in texts for line in t.split("\n") if line.strip())
    prefix = os.path.join(out_dir, "tokenizer")
    spm.SentencePieceTrainer.train(sentence_iterator=lines, model_prefix=prefix, vocab_size=vocab, model_type="bpe",
                                   byte_fallback=True, input_sentence_size=2000000, shuffle_input_sentence=True,
                                   max_sentence_length=1 << 14, num_threads=os.cpu_count() or 1, minloglevel=2)
    return prefix + ".model", "sentencepiece BPE with byte fallback"


def cmd_corpus(a):
    import numpy as np
    import make_dataset
    os.makedirs(a.out, exist_ok=True)
    t0 = time.time()
    docs, skipped, roots = collect(a.root or default_roots())
    if len(docs) < 2:
        fail("fewer than two documents of text under " + ", ".join(a.root or default_roots()))
    def held_out(d):  # one document in a hundred, by its content hash: the same split on any machine
        return int.from_bytes(d[2][:4], "little") % 100 == 0
    held = [d for d in docs if held_out(d)]
    train = [d for d in docs if not held_out(d)]
    if not held:
        held, train = train[-1:], train[:-1]
    print(f"corpus: {len(docs)} files, {sum(len(d[1]) for d in docs) / 1e6:.1f} M characters "
          f"({len(train)} train, {len(held)} held out; skipped {skipped}) in {time.time() - t0:.0f} s", flush=True)
    # The tokenizer learns from the training documents only, at most --train-bytes of them.
    sample, size = [], 0
    for d in sorted(train, key=lambda d: d[2]):
        if size >= a.train_bytes:
            break
        sample.append(d[1])
        size += len(d[1])
    tok_path, tok_kind = train_tokenizer(sample, a.vocab, a.out)
    tok = make_dataset.Tokenizer(tok_path)
    eod = tok.token_id(EOD) if tok.hf is not None else tok.eos
    print(f"tokenizer: {tok_kind}, {tok.vocab_size} words, end of document {eod}, trained on {size / 1e6:.1f} M characters "
          f"({time.time() - t0:.0f} s)", flush=True)
    info = {"roots": roots, "extensions": list(EXTENSIONS), "files": len(docs), "skipped": skipped,
            "characters": sum(len(d[1]) for d in docs), "tokenizer": tok_kind, "tokenizer_file": os.path.basename(tok_path),
            "vocab": tok.vocab_size, "end_of_document": eod}
    for name, part in (("train", train), ("eval", held)):
        ids = tok.encode_many([d[1] for d in part])
        docs_ids = [np.append(np.asarray(x, dtype=np.int64), eod) for x in ids]
        print(make_dataset.write_megatron(os.path.join(a.out, name), docs_ids, tok.vocab_size), flush=True)
        info[name + "_documents"] = len(part)
        info[name + "_tokens"] = int(sum(len(x) for x in docs_ids))
        info[name + "_characters"] = sum(len(d[1]) for d in part)
    info["seconds"] = round(time.time() - t0, 1)
    with open(os.path.join(a.out, "corpus.json.tmp"), "w") as f:
        json.dump(info, f, indent=1)
    os.replace(os.path.join(a.out, "corpus.json.tmp"), os.path.join(a.out, "corpus.json"))
    print(f"corpus: {info['train_tokens'] / 1e6:.2f} M training tokens, {info['eval_tokens'] / 1e6:.3f} M held out, "
          f"{info['characters'] / max(1, info['train_tokens'] + info['eval_tokens']):.2f} characters a token; "
          f"{a.out}/corpus.json ({info['seconds']:.0f} s)", flush=True)
    return 0


# ---- runs ---------------------------------------------------------------------------------------

def read_csv(path):
    try:
        with open(path, newline="") as f:
            return list(csv.DictReader(f))
    except OSError:
        return []


def first_at_or_below(rows, target):
    """(time_s, tokens, step) of the first evaluation at or below target, or None."""
    for r in rows:
        ev = r.get("eval_loss") or ""
        if ev and float(ev) <= target:
            return float(r["time_s"]), int(float(r["tokens"])), int(r["step"])
    return None


def last_eval(rows):
    evs = [float(r["eval_loss"]) for r in rows if r.get("eval_loss")]
    return evs[-1] if evs else float("nan")


def run_logged(cmd, log, limit):
    t0 = time.time()
    with open(log, "w") as f:
        f.write("# " + " ".join(cmd) + "\n")
        f.flush()
        try:
            rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=limit).returncode
        except subprocess.TimeoutExpired:
            rc = 124
    print(f"  {os.path.basename(log)}: exit {rc} in {time.time() - t0:.0f} s", flush=True)
    return rc


def cmd_run(a):
    with open(os.path.join(a.data, "corpus.json")) as f:
        corpus = json.load(f)
    vocab = corpus["vocab"]
    os.makedirs(a.logs, exist_ok=True)
    per_step = a.batch * a.seq
    if a.steps * per_step + 1 > corpus["train_tokens"]:
        fail(f"--steps {a.steps} x {a.batch} x {a.seq} tokens is more than the {corpus['train_tokens']} training tokens: "
             "the data would be read twice")
    at90, at80 = a.steps * 9 // 10, a.steps * 8 // 10
    if at90 % a.eval_every:
        fail(f"--eval-every {a.eval_every} must divide 90 % of --steps ({at90}): the target is the loss evaluated there")
    model = ["--layers", str(a.layers), "--d-model", str(a.d_model), "--heads", str(a.heads), "--kv-heads", str(a.kv_heads),
             "--ffn", str(a.ffn)]
    common = model + ["--seq", str(a.seq), "--batch", str(a.batch), "--vocab", str(vocab), "--steps", str(a.steps),
                      "--lr", str(a.lr), "--warmup", str(a.warmup), "--eval-every", str(a.eval_every),
                      "--eval-batches", str(a.eval_batches), "--log-every", str(a.eval_every),
                      "--data", os.path.join(a.data, "train"), "--eval-data", os.path.join(a.data, "eval")]
    n_params = a.layers * (a.d_model * (a.heads + 2 * a.kv_heads) * (a.d_model // a.heads) + a.d_model * a.d_model
                           + 3 * a.d_model * a.ffn + 2 * a.d_model) + a.d_model + 2 * vocab * a.d_model
    shape = (f"{a.layers} layers, d_model {a.d_model}, {n_params / 1e6:.0f} M parameters, vocab {vocab}, "
             f"B{a.batch} T{a.seq}, {a.steps} steps ({a.steps * per_step / 1e6:.1f} M tokens read once)")
    print(f"model: {shape}; data: {corpus['train_tokens'] / 1e6:.1f} M training tokens of {corpus['files']} files "
          f"({corpus['tokenizer']})", flush=True)
    device = a.device
    rows = []
    peer_name = "torch.compile bf16 (bench/target_peer.py)"
    target = a.target
    results = {}  # (recipe, seed) -> (time, tokens, step) or ("missed", last eval)

    def program(recipe, seed, extra, name):
        csv_path = os.path.join(a.logs, name + ".csv")
        cmd = [a.program] + common + ["--recipe", recipe, "--seed", str(seed), "--csv", csv_path, "--overwrite"] + extra
        rc = run_logged(cmd, os.path.join(a.logs, name + ".log"), a.limit)
        return rc, read_csv(csv_path)

    for seed in a.seeds:
        dump = os.path.join(a.logs, f"batches-seed{seed}.bin")
        for recipe in a.recipes:
            name = f"{recipe}-seed{seed}"
            if recipe == "peer":
                try:
                    import torch  # noqa: F401
                except ImportError:
                    print(f"  {name}: skipped, PyTorch is not installed", flush=True)
                    continue
                if target is None:
                    fail("the peer needs the target: run bf16 first or give --target")
                if not os.path.exists(dump):  # the batches of this seed, from a one-step run of the program
                    program("bf16", seed, ["--stop-after", str(a.eval_every), "--dump-batches", dump, "--eval-every", "0"],
                            f"dump-seed{seed}")
                cmd = [sys.executable, os.path.join(HERE, "target_peer.py"), "--batches", dump,
                       "--eval", os.path.join(a.data, "eval"), "--vocab", str(vocab), "--steps", str(a.steps), "--lr", str(a.lr),
                       "--warmup", str(a.warmup), "--eval-every", str(a.eval_every), "--eval-batches", str(a.eval_batches),
                       "--target-loss", repr(target), "--seed", str(seed), "--csv", os.path.join(a.logs, name + ".csv")] + \
                    [x for pair in zip(model[::2], model[1::2]) for x in pair]
                rc = run_logged(cmd, os.path.join(a.logs, name + ".log"), a.limit)
                got = read_csv(os.path.join(a.logs, name + ".csv"))
            elif recipe == "bf16" and target is None:
                rc, got = program("bf16", seed, ["--stop-after", str(at90), "--dump-batches", dump], name)
                evs = [r for r in got if r.get("eval_loss") and int(r["step"]) == at90]
                if rc != 0 or not evs:
                    fail(f"the bf16 run that sets the target failed (exit {rc}): {a.logs}/{name}.log")
                target = float(evs[0]["eval_loss"])
                print(f"target: held-out loss {target:.4f}, bf16 seed {seed} at step {at90} of {a.steps}", flush=True)
            else:
                extra = ["--target-loss", repr(target)]
                if recipe == "bf16":
                    extra += ["--dump-batches", dump]
                if recipe == "mxfp4-fp8":
                    extra += ["--switch-to", "fp8", "--switch-at", str(at80)]
                if target is None:
                    fail(f"{recipe}: no target yet: put bf16 first or give --target")
                rc, got = program("mxfp4" if recipe == "mxfp4-fp8" else recipe, seed, extra, name)
            hit = first_at_or_below(got, target)
            if not hit and not got:
                print(f"  {name}: FAILED (exit {rc}), no evaluation: no row (its log says why)", flush=True)
                continue
            results[(recipe, seed)] = hit if hit else ("missed", last_eval(got), rc)
            print(f"  {name}: " + (f"target at step {hit[2]}, {hit[0]:.1f} s, {hit[1] / 1e6:.1f} M tokens" if hit else
                                   f"target not reached (last held-out loss {last_eval(got):.4f}, exit {rc})"), flush=True)

    label = {"mxfp4": "mxfp4+Hadamard", "mxfp4-fp8": "mxfp4+Hadamard -> fp8 at 80 %", "peer": "PyTorch bf16 torch.compile"}
    peer_settings = f"bench/target_peer.py, same batches (the bf16 run's --dump-batches) and held-out data; {shape}"
    for (recipe, seed), r in results.items():
        case = f"time to held-out loss {target:.4f}, {label.get(recipe, recipe)}, seed {seed}, {shape}"
        if r[0] == "missed":
            rows.append(render_results.new_row("time_to_target", case.replace("time to", "not reached:") + ": last held-out loss",
                                               r[1], "nats", recipe=recipe.split("-")[0] if recipe != "peer" else "bf16",
                                               shape=f"B{a.batch} T{a.seq}", device=device))
            continue
        peer = results.get(("peer", seed))
        peer_time = peer[0] if peer and peer[0] != "missed" and recipe != "peer" else None
        rows.append(render_results.new_row("time_to_target", case + ": time to train", r[0], "s",
                                           peer=peer_name if peer_time else None, peer_value=peer_time,
                                           peer_settings=peer_settings if peer_time else None,
                                           recipe=recipe.split("-")[0] if recipe != "peer" else "bf16",
                                           shape=f"B{a.batch} T{a.seq}", device=device))
        base = results.get(("bf16", seed))
        base_tokens = base[1] if base and base[0] != "missed" and recipe != "bf16" else None
        rows.append(render_results.new_row("time_to_target", case + ": tokens to the target", r[1], "tokens",
                                           peer="mxkit bf16, same seed" if base_tokens else None, peer_value=base_tokens,
                                           peer_settings="the same program and data, --recipe bf16" if base_tokens else None,
                                           recipe=recipe.split("-")[0] if recipe != "peer" else "bf16",
                                           shape=f"B{a.batch} T{a.seq}", device=device))
    if not rows:
        print("no rows")
        return 1
    if a.results.endswith(".jsonl"):
        with open(a.results, "a", encoding="utf-8") as f:
            f.write("".join(render_results.make_line(r) + "\n" for r in rows))
    else:
        render_results.append_rows(rows, a.results)
    print(f"{len(rows)} rows -> {a.results}")
    missed = [k for k, r in results.items() if r[0] == "missed"]
    return 3 if missed else 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("corpus")
    c.add_argument("--out", required=True)
    c.add_argument("--vocab", type=int, default=16384)
    c.add_argument("--root", action="append", help="a folder of text (repeatable; default: see above)")
    c.add_argument("--train-bytes", type=int, default=96 << 20, help="characters the tokenizer learns from")
    r = sub.add_parser("run")
    r.add_argument("--program", required=True)
    r.add_argument("--data", required=True)
    r.add_argument("--logs", required=True)
    r.add_argument("--seeds", type=int, nargs="+", default=[0])
    r.add_argument("--recipes", nargs="+", default=["bf16", "fp8", "mxfp8", "mxfp4", "mxfp4-fp8", "peer"],
                   choices=["bf16", "fp8", "mxfp8", "mxfp4", "mxfp4-fp8", "peer"])
    r.add_argument("--target", type=float, help="the held-out loss (default: bf16's at 90 %% of its steps)")
    r.add_argument("--layers", type=int, default=6)
    r.add_argument("--d-model", type=int, default=768)
    r.add_argument("--heads", type=int, default=12)
    r.add_argument("--kv-heads", type=int, default=4)
    r.add_argument("--ffn", type=int, default=2048)
    r.add_argument("--seq", type=int, default=1024)
    r.add_argument("--batch", type=int, default=32)
    r.add_argument("--steps", type=int, default=1600)
    r.add_argument("--lr", type=float, default=6e-4)
    r.add_argument("--warmup", type=int, default=100)
    r.add_argument("--eval-every", type=int, default=40)
    r.add_argument("--eval-batches", type=int, default=8)
    r.add_argument("--limit", type=int, default=600, help="seconds a run may take")
    r.add_argument("--device", default="unknown")
    r.add_argument("--results", default=os.path.join(HERE, "results"))
    a = ap.parse_args(argv)
    if a.cmd == "corpus":
        if not 256 < a.vocab <= 65500:
            fail(f"--vocab {a.vocab}: from 257 to 65500 (uint16 tokens)")
        return cmd_corpus(a)
    for k in ("steps", "batch", "seq", "eval_every", "eval_batches", "layers"):
        if getattr(a, k) < 1:
            fail(f"--{k.replace('_', '-')} must be at least 1")
    return cmd_run(a)


if __name__ == "__main__":
    sys.exit(main())
