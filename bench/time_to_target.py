#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Time to a held-out loss, every recipe and a PyTorch peer, on one GPU (issue 43, section 5).

    time_to_target.py corpus --out DIR [--vocab 16384] [--root PATH ...] [--train-bytes N]
    time_to_target.py run --program 06_train_gpu --data DIR --logs DIR [--seeds 0 1 2]
                          [--recipes bf16 fp8 mxfp8 mxfp4 mxfp4-fp8 nvfp4 peer] [--target L]
                          [--targets-from DIR (an earlier run's CSVs, checked by a short bf16 run)]
                          [--steps N] [--device NAME] [--results DIR|FILE]
    time_to_target.py rows --data DIR --logs DIR [the flags of its run]

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
        - The target, per seed: the held-out loss bf16 reaches at 90 % of its steps (its run of
          that seed, stopped there), unless --target gives one for all. The recipes of a seed
          share its initial weights and its order of the data, so each is compared with the
          bf16 run it differs from in numerics only.
        - Each recipe, then, trains to the target (--target-loss): its time to train as MLPerf
          counts it (the program's CSV clock) and the tokens it read; mxfp4-fp8 is MXFP4 with
          the Hadamard switched to FP8 at 80 % of the steps.
        - peer: bench/target_peer.py, PyTorch bf16 + torch.compile, on the same batches (the bf16
          run's --dump-batches) to the same target.
        Rows: bench/results/time_to_target.jsonl (or --results), one per run: seconds to the
        target against the peer's of the same seed, tokens to the target against bf16's; a run
        that ends without reaching it gives its last held-out loss instead. Then a table: per
        recipe, the seeds that reached the target, mean and standard deviation of time and tokens.
rows    The rows and the table again from the CSVs in --logs (a run whose rows were lost).
"""
import argparse
import csv
import hashlib
import json
import os
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
    """(path, text, content hash) of every distinct UTF-8 file with one of EXTENSIONS under roots,
    sorted by path; what was skipped (not UTF-8 or unreadable, a duplicate, a link or a size outside
    [min_bytes, max_bytes]); the roots walked."""
    seen, docs, skipped = set(), [], {"binary": 0, "duplicate": 0, "size or link": 0}
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
                        skipped["size or link"] += 1
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
            # An unbounded run (limit inf, healing_study.py without --budget) has no timeout.
            rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=max(1, limit) if limit != float("inf") else None).returncode
        except subprocess.TimeoutExpired:
            rc = 124
    print(f"  {os.path.basename(log)}: exit {rc} in {time.time() - t0:.0f} s", flush=True)
    return rc


def describe(a, corpus):
    """The shape label of the rows and the model flags of both programs."""
    vocab = corpus["vocab"]
    n_params = a.layers * (a.d_model * (a.heads + 2 * a.kv_heads) * (a.d_model // a.heads) + a.d_model * a.d_model
                           + 3 * a.d_model * a.ffn + 2 * a.d_model) + a.d_model + 2 * vocab * a.d_model
    return (f"{a.layers} layers, d_model {a.d_model}, {n_params / 1e6:.0f} M parameters, vocab {vocab}, "
            f"B{a.batch} T{a.seq}, {a.steps} steps ({a.steps * a.batch * a.seq / 1e6:.1f} M tokens read once)")


LABEL = {"mxfp4": "mxfp4+Hadamard", "mxfp4-fp8": "mxfp4+Hadamard -> fp8 at 80 %", "nvfp4": "nvfp4 (arXiv 2509.25149's recipe)",
         "peer": "PyTorch bf16 torch.compile"}
PEER = "torch.compile bf16 (bench/target_peer.py)"


def seed_target(logs, seed, step):
    """bf16's held-out loss at `step` in its CSV (the seed's target), or None."""
    at = [r for r in read_csv(os.path.join(logs, f"bf16-seed{seed}.csv")) if r.get("eval_loss") and int(r["step"]) == step]
    return float(at[0]["eval_loss"]) if at else None


def rows_from_logs(a, corpus, targets):
    """The rows of the runs whose CSVs are in a.logs: per seed, every recipe's time and tokens to
    the seed's target (the first evaluation at or below it), or its last held-out loss."""
    shape = describe(a, corpus)
    peer_settings = f"bench/target_peer.py, same batches (the bf16 run's --dump-batches) and held-out data; {shape}"
    rows, results = [], {}
    for seed in a.seeds:
        if targets.get(seed) is None:
            print(f"seed {seed}: no target (no bf16 evaluation at 90 % of the steps): no rows", flush=True)
            continue
        for recipe in a.recipes:
            got = read_csv(os.path.join(a.logs, f"{recipe}-seed{seed}.csv"))
            if not any(r.get("eval_loss") for r in got):
                print(f"  {recipe}-seed{seed}: no evaluation in its CSV: no row", flush=True)
                continue
            hit = first_at_or_below(got, targets[seed])
            results[(recipe, seed)] = hit if hit else ("missed", last_eval(got))
    for (recipe, seed), r in results.items():
        case = f"time to held-out loss {targets[seed]:.4f} (bf16 at 90 %), {LABEL.get(recipe, recipe)}, seed {seed}, {shape}"
        kind = dict(recipe=recipe.split("-")[0] if recipe != "peer" else "bf16", shape=f"B{a.batch} T{a.seq}", device=a.device)
        if r[0] == "missed":
            rows.append(render_results.new_row("time_to_target", case.replace("time to", "not reached:") + ": last held-out loss",
                                               r[1], "nats", **kind))
            continue
        peer = results.get(("peer", seed))
        peer_time = peer[0] if peer and peer[0] != "missed" and recipe != "peer" else None
        rows.append(render_results.new_row("time_to_target", case + ": time to train", r[0], "s", peer=PEER if peer_time else None,
                                           peer_value=peer_time, peer_settings=peer_settings if peer_time else None, **kind))
        base = results.get(("bf16", seed))
        base_tokens = base[1] if base and base[0] != "missed" and recipe != "bf16" else None
        rows.append(render_results.new_row("time_to_target", case + ": tokens to the target", r[1], "tokens",
                                           peer="mxkit bf16, same seed" if base_tokens else None, peer_value=base_tokens,
                                           peer_settings="the same program and data, --recipe bf16" if base_tokens else None, **kind))
    return rows, results


def write_rows(rows, results_path):
    if results_path.endswith(".jsonl"):
        with open(results_path, "a", encoding="utf-8") as f:
            f.write("".join(render_results.make_line(r) + "\n" for r in rows))
    else:
        render_results.append_rows(rows, results_path)
    print(f"{len(rows)} rows -> {results_path}", flush=True)


def summary_table(a, results, targets):
    """Mean and spread (sample standard deviation) over the seeds that reached the target."""
    import statistics
    print(f"\n{'recipe':<34} {'reached':>8} {'time to train s':>18} {'tokens M':>14}")
    for recipe in a.recipes:
        hits = [results[(recipe, s)] for s in a.seeds if (recipe, s) in results and results[(recipe, s)][0] != "missed"]
        runs = sum(1 for s in a.seeds if (recipe, s) in results)

        def ms(xs):
            return f"{statistics.mean(xs):.1f} +- {statistics.stdev(xs):.1f}" if len(xs) > 1 else (f"{xs[0]:.1f}" if xs else "-")
        print(f"{LABEL.get(recipe, recipe):<34} {len(hits):>3} of {runs:<2} {ms([h[0] for h in hits]):>18} "
              f"{ms([h[1] / 1e6 for h in hits]):>14}")
    print("targets: " + ", ".join(f"seed {s} {t:.4f}" for s, t in targets.items() if t is not None))


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
    if a.target is None and a.targets_from is None and a.recipes[0] != "bf16":
        fail("bf16 must come first: its held-out loss at 90 % of the steps is each seed's target (or give --target or --targets-from)")
    model = ["--layers", str(a.layers), "--d-model", str(a.d_model), "--heads", str(a.heads), "--kv-heads", str(a.kv_heads),
             "--ffn", str(a.ffn)]
    common = model + ["--seq", str(a.seq), "--batch", str(a.batch), "--vocab", str(vocab), "--steps", str(a.steps),
                      "--lr", str(a.lr), "--warmup", str(a.warmup), "--eval-every", str(a.eval_every),
                      "--eval-batches", str(a.eval_batches), "--log-every", str(a.eval_every),
                      "--data", os.path.join(a.data, "train"), "--eval-data", os.path.join(a.data, "eval")]
    print(f"model: {describe(a, corpus)}; data: {corpus['train_tokens'] / 1e6:.1f} M training tokens of {corpus['files']} "
          f"files ({corpus['tokenizer']})", flush=True)
    targets = {}

    def program(recipe, seed, extra, name):
        csv_path = os.path.join(a.logs, name + ".csv")
        cmd = [a.program] + common + ["--recipe", recipe, "--seed", str(seed), "--csv", csv_path, "--overwrite"] + extra
        return run_logged(cmd, os.path.join(a.logs, name + ".log"), a.limit)

    if a.targets_from is not None:
        # Targets from an earlier run's bf16 CSVs hold only for the same tokens, initial weights
        # and numerics: a short bf16 run of each seed must log, step for step, what that run logged.
        check = 2 * a.eval_every
        for seed in a.seeds:
            old = read_csv(os.path.join(a.targets_from, f"bf16-seed{seed}.csv"))
            targets[seed] = seed_target(a.targets_from, seed, at90)
            if targets[seed] is None:
                fail(f"--targets-from {a.targets_from}: no bf16-seed{seed}.csv with a held-out loss at step {at90}")
            name = f"bf16-check-seed{seed}"
            program("bf16", seed, ["--stop-after", str(check)], name)
            new = read_csv(os.path.join(a.logs, name + ".csv"))
            key = lambda rows: [(r["step"], r["loss"], r.get("eval_loss", "")) for r in rows if int(r["step"]) <= check]
            if not key(new) or key(new) != key(old):
                fail(f"--targets-from {a.targets_from}: seed {seed}'s first {check} bf16 steps differ from that run's "
                     f"({key(new)[:2]} against {key(old)[:2]}): other data or numerics, so its targets do not apply")
            print(f"  seed {seed}: target {targets[seed]:.4f} from {a.targets_from} (its first {check} bf16 steps repeat here)",
                  flush=True)
    for seed in a.seeds:
        dump = os.path.join(a.logs, f"batches-seed{seed}.bin")
        targets.setdefault(seed, a.target)
        for recipe in a.recipes:
            name = f"{recipe}-seed{seed}"
            target = targets[seed]
            if recipe == "bf16" and target is None:  # (never with --targets-from)
                # The seed's target: bf16's held-out loss at 90 % of its steps; the run stops there.
                rc = program("bf16", seed, ["--stop-after", str(at90), "--dump-batches", dump], name)
                targets[seed] = seed_target(a.logs, seed, at90)
                if rc != 0 or targets[seed] is None:
                    print(f"  seed {seed}: the bf16 run that sets the target failed (exit {rc}): {a.logs}/{name}.log", flush=True)
                    break
                print(f"  seed {seed}: target {targets[seed]:.4f}, bf16's held-out loss at step {at90} of {a.steps}", flush=True)
                continue
            if recipe == "peer":
                try:
                    import torch  # noqa: F401
                except ImportError:
                    print(f"  {name}: skipped, PyTorch is not installed", flush=True)
                    continue
                if not os.path.exists(dump):  # the batches of this seed, from a short run of the program
                    program("bf16", seed, ["--stop-after", str(a.eval_every), "--dump-batches", dump, "--eval-every", "0"],
                            f"dump-seed{seed}")
                cmd = [sys.executable, os.path.join(HERE, "target_peer.py"), "--batches", dump,
                       "--eval", os.path.join(a.data, "eval"), "--vocab", str(vocab), "--steps", str(a.steps), "--lr", str(a.lr),
                       "--warmup", str(a.warmup), "--eval-every", str(a.eval_every), "--eval-batches", str(a.eval_batches),
                       "--target-loss", repr(target), "--seed", str(seed), "--csv", os.path.join(a.logs, name + ".csv")] + model
                run_logged(cmd, os.path.join(a.logs, name + ".log"), a.limit)
                continue
            extra = ["--target-loss", repr(target)]
            if recipe == "bf16":
                extra += ["--dump-batches", dump]
            if recipe == "mxfp4-fp8":
                extra += ["--switch-to", "fp8", "--switch-at", str(at80)]
            program("mxfp4" if recipe == "mxfp4-fp8" else recipe, seed, extra, name)
    return record(a, corpus, targets)


def record(a, corpus, targets):
    """Rows and table from the CSVs in a.logs; exit 1 without rows, 3 when a run missed its target."""
    rows, results = rows_from_logs(a, corpus, targets)
    summary_table(a, results, targets)
    if not rows:
        print("no rows")
        return 1
    write_rows(rows, a.results)
    return 3 if any(r[0] == "missed" for r in results.values()) else 0


def cmd_rows(a):
    """Rows again from the CSVs of earlier runs (a device call whose rows did not come back)."""
    with open(os.path.join(a.data, "corpus.json")) as f:
        corpus = json.load(f)
    at90 = a.steps * 9 // 10
    targets = {s: (a.target if a.target is not None else seed_target(a.targets_from or a.logs, s, at90)) for s in a.seeds}
    return 1 if record(a, corpus, targets) == 1 else 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("corpus")
    c.add_argument("--out", required=True)
    c.add_argument("--vocab", type=int, default=16384)
    c.add_argument("--root", action="append", help="a folder of text (repeatable; default: see above)")
    c.add_argument("--train-bytes", type=int, default=96 << 20, help="characters the tokenizer learns from")
    run_p = sub.add_parser("run")
    rows_p = sub.add_parser("rows", help="the rows again from a run's CSVs (--logs), with the run's flags")
    for r in (run_p, rows_p):
        r.add_argument("--program", required=r is run_p)
        r.add_argument("--data", required=True)
        r.add_argument("--logs", required=True)
        r.add_argument("--seeds", type=int, nargs="+", default=[0])
        r.add_argument("--recipes", nargs="+", default=["bf16", "fp8", "mxfp8", "mxfp4", "mxfp4-fp8", "peer"],
                       choices=["bf16", "fp8", "mxfp8", "mxfp4", "mxfp4-fp8", "nvfp4", "peer"])
        r.add_argument("--target", type=float, help="the held-out loss for every seed (default: each seed's bf16 at 90 %% of its steps)")
        r.add_argument("--targets-from", help="a folder of an earlier run's CSVs: each seed's target from its bf16 CSV there, "
                       "once a short bf16 run here has logged the same losses (the same data and numerics)")
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
    return cmd_run(a) if a.cmd == "run" else cmd_rows(a)


if __name__ == "__main__":
    sys.exit(main())
