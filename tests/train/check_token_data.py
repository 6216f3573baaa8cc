#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""ctest train.token_data: the token datasets end to end, against a plain NumPy reading.

    check_token_data.py TRAIN_PROGRAM MAKE_DATASET_PY

1. Writes a small text, trains a sentencepiece model on it here (nothing downloaded), and runs
   tools/make_dataset.py to write both formats (Megatron .idx/.bin, packed .npy with loss mask).
2. Reads the files with NumPy alone (the layouts of docs/training.md) and checks them against the
   tokenizer: each document's tokens and its end-of-document token; the packed rows and mask.
3. Runs the training program (a tiny model, a few steps) on each format with --dump-batches and
   compares every sample it trained on with the documented sample rule, implemented here in NumPy
   with numpy.random.RandomState (Megatron's and NeMo's generator):
     Megatron  the held-out tenth of the documents aside, E = the fewest epochs holding
               steps x batch x seq + 1 tokens; per epoch the units (sequences) in
               RandomState(seed + 1).shuffle order, concatenated into one stream S; sample k is
               S[k seq : k seq + seq + 1]; then, per epoch, the samples starting in it shuffled by
               the same generator. Within an epoch each token is in exactly one sample.
     packed    the held-out tenth of the rows aside, ceil(samples / rows) epochs, each
               RandomState(seed + 1).shuffle of the rows (NeMo's packed samples mapping).
   A run stopped and resumed from its checkpoint ends with the whole run's losses.
4. Refusals before the first step (exit 2, the reason named): a damaged index, a .bin without its
   index, a --vocab below the data's largest token, packed rows that do not match --seq.
Exit 77 (skipped) when numpy or sentencepiece is missing, unless CI=true, where they are required.
"""
import os
import struct
import subprocess
import sys
import tempfile


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from python_check import check, failures, skip_or_fail  # noqa: E402

try:
    import numpy as np
    import sentencepiece as spm
except ImportError as e:
    skip_or_fail("check_token_data", str(e), "python3-numpy python3-sentencepiece")

SEQ, BATCH, STEPS, SEED = 31, 3, 40, 1234
TINY = ["--layers", "1", "--d-model", "32", "--heads", "2", "--kv-heads", "1", "--ffn", "64", "--seq", str(SEQ), "--batch", str(BATCH),
        "--warmup", "1", "--log-every", "10", "--eval-every", "20", "--eval-batches", "2", "--seed", str(SEED)]


def text():
    """About 60 short documents, some Q/A, deterministic."""
    names = ["Mira", "Ivo", "Tomas", "Ada", "Nia", "Pavel"]
    things = ["apples", "coins", "stones", "cups", "pears", "shells"]
    places = ["market", "mill", "river", "hill", "library", "well"]
    docs = []
    for i in range(60):
        n, t, p = names[i % 6], things[(i * 5) % 6], places[(i * 7) % 6]
        a, b = i % 9 + 1, (i * 4) % 7 + 1
        if i % 3 == 0:
            docs.append("Q: %s has %d %s and finds %d at the %s. How many %s?\nA: %s has %d %s." % (n, a, t, b, p, t, n, a + b, t))
        else:
            docs.append(" ".join(["In the morning, %s walked to the %s and found %d %s." % (n, p, a, t)] * (1 + i % 4)))
    return "\n\n".join(docs) + "\n", docs


def run(cmd, **kw):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, **kw)


# ---- plain NumPy readings of the two formats --------------------------------------------------

def read_megatron(prefix):
    idx = np.fromfile(prefix + ".idx", dtype=np.uint8).tobytes()
    assert idx[:9] == b"MMIDIDX\x00\x00", "magic"
    version, code, S, D = struct.unpack("<QBQQ", idx[9:34])
    assert version == 1
    dtype = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 8: np.uint16}[code]
    lengths = np.frombuffer(idx, dtype=np.int32, count=S, offset=34)
    pointers = np.frombuffer(idx, dtype=np.int64, count=S, offset=34 + 4 * S)
    docs = np.frombuffer(idx, dtype=np.int64, count=D, offset=34 + 12 * S)
    data = np.fromfile(prefix + ".bin", dtype=dtype)
    item = np.dtype(dtype).itemsize
    seqs = [data[p // item:p // item + n].astype(np.int64) for p, n in zip(pointers, lengths)]
    return seqs, docs


def megatron_samples(units, samples, seq, seed):
    """The documented rule over the units (token arrays): the samples in the order they are read."""
    T = sum(len(u) for u in units)
    need = samples * seq + 1
    E = -(-need // T)
    rs = np.random.RandomState(seed)
    order = []
    for _ in range(E):
        d = np.arange(len(units))
        rs.shuffle(d)
        order.extend(d.tolist())
    S = np.concatenate([units[u] for u in order])
    n = (E * T - 1) // seq
    stream = [S[k * seq:k * seq + seq + 1] for k in range(n)]
    # Epoch 0's tokens: each in exactly one sample's first seq tokens (positions of S < T).
    covered = np.zeros(T, dtype=np.int64)
    for k in range(n):
        for p in range(k * seq, min(k * seq + seq, T)):
            covered[p] += 1
    check(bool(np.all(covered[:min(T, n * seq)] == 1)), "megatron rule: a token of epoch 0 in more or fewer than one sample")
    shuffle = np.arange(n)
    for e in range(E):
        lo, hi = -(-e * T // seq), min(-(-(e + 1) * T // seq), n)
        if lo < hi:
            block = shuffle[lo:hi].copy()
            rs.shuffle(block)
            shuffle[lo:hi] = block
    return [stream[i] for i in shuffle], E


def read_dump(path):
    raw = open(path, "rb").read()
    magic = raw[:8]
    steps, batch, window = struct.unpack("<3Q", raw[8:32])
    dtype = np.uint8 if magic == b"MXBATCH1" else np.int32
    check(magic == b"MXBATCH2", "--dump-batches of a token dataset writes MXBATCH2, got %r" % magic)
    return np.frombuffer(raw[32:], dtype=dtype).reshape(steps * batch, window).astype(np.int64)


def held_out(n):
    return 0 if n < 2 else max(1, n // 10)


def main():
    program, make_dataset = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as d:
        corpus, docs = text()
        with open(os.path.join(d, "corpus.txt"), "w") as f:
            f.write(corpus)
        spm.SentencePieceTrainer.Train(input=os.path.join(d, "corpus.txt"), model_prefix=os.path.join(d, "sp"), vocab_size=120,
                                       model_type="bpe", minloglevel=2, num_threads=1)
        sp = spm.SentencePieceProcessor()
        sp.Load(os.path.join(d, "sp.model"))
        eos = sp.eos_id()
        prefix = os.path.join(d, "data")
        r = run([sys.executable, make_dataset, "--tokenizer", os.path.join(d, "sp.model"), "--output", prefix, "--seq", str(SEQ),
                 "--answer-after", "A:", os.path.join(d, "corpus.txt")])
        print(r.stdout)
        if r.returncode != 0:
            print("make_dataset.py failed")
            sys.exit(1)

        # 2. The files against the tokenizer.
        seqs, doc_index = read_megatron(prefix)
        expect = [sp.EncodeAsIds(t) + [eos] for t in docs]
        check(len(seqs) == len(expect) and all(list(s) == e for s, e in zip(seqs, expect)),
              "the Megatron files hold each document's tokens and the end-of-document token")
        check(list(doc_index) == list(range(len(docs) + 1)), "document indices 0 .. n")
        rows = np.load(prefix + ".npy")
        mask = np.load(prefix + ".loss_mask.npy")
        check(rows.dtype == np.int32 and rows.shape[1] == SEQ + 1 and mask.shape == rows.shape and mask.dtype == np.bool_,
              "packed shapes and dtypes")
        # The documented packing: documents whole, in order, first fit into rows of SEQ + 1 tokens,
        # padded with the end-of-document token; a Q/A document's prompt (through "A:") masked out.
        want_rows, want_mask, cur, cur_m = [], [], [], []
        for t in docs:
            if "A:" in t:
                i = t.index("A:") + 2
                p, a = sp.EncodeAsIds(t[:i]), sp.EncodeAsIds(t[i:])
                ids, m = p + a + [eos], [0] * len(p) + [1] * (len(a) + 1)
            else:
                ids = sp.EncodeAsIds(t) + [eos]
                m = [1] * len(ids)
            ids, m = ids[:SEQ + 1], m[:SEQ + 1]
            if len(cur) + len(ids) > SEQ + 1:
                want_rows.append(cur + [eos] * (SEQ + 1 - len(cur)))
                want_mask.append(cur_m + [0] * (SEQ + 1 - len(cur_m)))
                cur, cur_m = [], []
            cur, cur_m = cur + ids, cur_m + m
        want_rows.append(cur + [eos] * (SEQ + 1 - len(cur)))
        want_mask.append(cur_m + [0] * (SEQ + 1 - len(cur_m)))
        check(np.array_equal(rows, np.array(want_rows)) and np.array_equal(mask, np.array(want_mask, dtype=bool)),
              "the packed rows and loss mask follow the documented packing")

        # 3. The samples the program trained on.
        n_docs = len(seqs)
        train_units = seqs[:n_docs - held_out(n_docs)]
        dump = os.path.join(d, "batches.bin")
        r = run([program] + TINY + ["--steps", str(STEPS), "--data", prefix + ".idx", "--dump-batches", dump])
        print(r.stdout[-2000:])
        check(r.returncode == 0, "05_train on the Megatron dataset exits 0")
        if r.returncode == 0:
            got = read_dump(dump)
            want, E = megatron_samples(train_units, STEPS * BATCH, SEQ, SEED + 1)
            print("megatron: %d samples read over %d epochs of %d tokens" % (len(got), E, sum(len(u) for u in train_units)))
            check(E >= 2, "the run spans several epochs (it checks the per-epoch orders)")
            check(all(np.array_equal(g, w) for g, w in zip(got, want)) and len(got) == STEPS * BATCH,
                  "the program's Megatron samples are the NumPy reading's")
            check("vocab %d" % (max(max(s) for s in seqs) + 1) in r.stdout, "the default --vocab is the largest token + 1")
        n_rows = rows.shape[0]
        train_rows = n_rows - held_out(n_rows)
        r = run([program] + TINY + ["--steps", str(STEPS), "--data", prefix + ".npy", "--dump-batches", dump])
        print(r.stdout[-2000:])
        check(r.returncode == 0, "05_train on the packed dataset exits 0")
        check("loss mask applies" in r.stdout, "the packed run says the loss mask applies")
        if r.returncode == 0:
            got = read_dump(dump)
            samples = STEPS * BATCH
            epochs = -(-samples // train_rows)
            rs = np.random.RandomState(SEED + 1)
            mapping = np.arange(train_rows)[None, :].repeat(epochs, axis=0)
            for x in mapping:
                rs.shuffle(x)
            mapping = mapping.reshape(-1)[:samples]
            check(np.array_equal(got, rows[mapping].astype(np.int64)), "the program's packed samples are NeMo's mapping's rows")

        # A run stopped and resumed reads the same samples: the same final loss as one whole run.
        ckpt = os.path.join(d, "run.ckpt")
        whole = run([program] + TINY + ["--steps", "20", "--data", prefix])
        part = run([program] + TINY + ["--steps", "20", "--stop-after", "10", "--data", prefix, "--checkpoint", ckpt])
        rest = run([program] + TINY + ["--steps", "20", "--data", prefix, "--resume", ckpt, "--checkpoint", ckpt])
        final = [line for line in whole.stdout.splitlines() if line.startswith("trained steps")]
        resumed = [line for line in rest.stdout.splitlines() if line.startswith("trained steps")]
        check(whole.returncode == 0 and part.returncode == 0 and rest.returncode == 0 and final and resumed and
              final[0].split(": ", 1)[1] == resumed[0].split(": ", 1)[1], "a resumed run ends as the whole run: %s vs %s" % (final, resumed))

        # 4. Refusals before the first step.
        def refused(args, pattern, what):
            r = run([program] + TINY + ["--steps", "2"] + args)
            ok = r.returncode == 2 and pattern in r.stdout and "step      1/" not in r.stdout
            check(ok, "%s: exit 2 naming '%s' (got %d: %s)" % (what, pattern, r.returncode, r.stdout.strip()[-300:]))

        refused(["--data", prefix, "--vocab", "50"], "--vocab 50: the data holds token", "a --vocab below the data's tokens")
        refused(["--data", prefix + ".npy", "--seq", "15"], "its rows are 32 tokens, one sample each, so --seq must be 31", "packed rows and --seq")
        idx = open(prefix + ".idx", "rb").read()
        bad = os.path.join(d, "bad")
        for name, body, pattern in [("magic", b"NOTMAGIC\x00" + idx[9:], "bad magic"), ("truncated", idx[:-5], "truncated"),
                                    ("version", idx[:9] + struct.pack("<Q", 7) + idx[17:], "bad version 7"),
                                    ("dtype", idx[:17] + b"\x07" + idx[18:], "dtype code 7 is float32")]:
            open(bad + ".idx", "wb").write(body)
            open(bad + ".bin", "wb").write(open(prefix + ".bin", "rb").read())
            refused(["--data", bad], pattern, "a damaged index (%s)" % name)
        os.remove(bad + ".idx")
        refused(["--data", bad + ".bin"], "there is no index", "a .bin without its index")
    if failures:
        print("%d check(s) failed" % len(failures))
        sys.exit(1)
    print("token data: every check passed")


if __name__ == "__main__":
    main()
