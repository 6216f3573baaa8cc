#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""ctest train.hf_sharded: --init-from a Hugging Face sharded checkpoint written by NumPy alone.

    check_hf_sharded.py TRAIN_PROGRAM

The reader (io/hf_sharded.hpp) checked against a writer that is not its own: safetensors is an
8-byte little-endian header size, a JSON header ({"name": {"dtype", "shape", "data_offsets"}},
"__metadata__"), then the data; the index is model.safetensors.index.json
({"metadata": {"total_size"}, "weight_map": {name: shard}}), as transformers writes them.
1. Writes a small Llama (2 layers) in 3 shards: F32 and BF16 shards, a layer's q, k and v split
   across two of them, tensors in each file in another order than mxkit's, metadata {"format": "pt"}.
2. Runs the training program with --init-from (the folder; on 2 fully sharded rank threads, the
   index file) and --lr 1e-30: one step moves no weight (every update is far below half an ulp of
   these weights, none near 0), so --export (one F32 file; on 2 ranks a sharded folder) must hold
   each tensor bit for bit as written (BF16 widened exactly), read back here with NumPy.
3. Damaged copies, each refused before the first step (exit 1) naming the shard and the tensor: a
   shard missing, a tensor missing from the shard the index names, a tensor in two shards, a
   tensor of a shard the index does not list, an extra tensor, a weight_map entry outside the
   folder, a wrong total_size, a wrong shape.
Exit 77 (skipped) when numpy is missing, unless CI=true, where it is required.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from python_check import check, failures, skip_or_fail  # noqa: E402

try:
    import numpy as np
except ImportError as e:
    skip_or_fail("check_hf_sharded", str(e), "python3-numpy")

LAYERS, D, HEADS, KV, FFN, VOCAB = 2, 32, 2, 1, 64, 256
HEAD_DIM = D // HEADS
TINY = ["--layers", str(LAYERS), "--d-model", str(D), "--heads", str(HEADS), "--kv-heads", str(KV), "--ffn", str(FFN),
        "--seq", "16", "--batch", "2", "--steps", "1", "--warmup", "0", "--lr", "1e-30", "--log-every", "1", "--eval-every", "0",
        "--recipe", "bf16"]


def shapes():
    """The Hugging Face Llama tensors of the tiny model, in mxkit's order."""
    out = [("model.embed_tokens.weight", (VOCAB, D))]
    for i in range(LAYERS):
        p = "model.layers.%d." % i
        out += [(p + "input_layernorm.weight", (D,)), (p + "self_attn.q_proj.weight", (HEADS * HEAD_DIM, D)),
                (p + "self_attn.k_proj.weight", (KV * HEAD_DIM, D)), (p + "self_attn.v_proj.weight", (KV * HEAD_DIM, D)),
                (p + "self_attn.o_proj.weight", (D, HEADS * HEAD_DIM)), (p + "post_attention_layernorm.weight", (D,)),
                (p + "mlp.gate_proj.weight", (FFN, D)), (p + "mlp.up_proj.weight", (FFN, D)), (p + "mlp.down_proj.weight", (D, FFN))]
    return out + [("model.norm.weight", (D,)), ("lm_head.weight", (VOCAB, D))]


def values(rng, shape, norm):
    """f32 bits: norm gains near 1, weights of magnitude 0.01..0.05 with random signs (none near 0)."""
    n = int(np.prod(shape))
    if norm:
        x = rng.uniform(0.9, 1.1, n)
    else:
        x = rng.uniform(0.01, 0.05, n) * rng.choice([-1.0, 1.0], n)
    return x.astype("<f4").view("<u4").reshape(shape)


def write_safetensors(path, tensors, metadata=None):
    """tensors: [(name, "F32" | "BF16", uint32 f32 bits)]; BF16 stores the high half of each."""
    header, blobs, offset = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, bits in tensors:
        raw = (bits >> 16).astype("<u2").tobytes() if dtype == "BF16" else bits.astype("<u4").tobytes()
        header[name] = {"dtype": dtype, "shape": list(bits.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_safetensors(path):
    """{name: f32 bits (BF16 widened)} and the metadata."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    out = {}
    for name, e in header.items():
        a, b = e["data_offsets"]
        raw = data[8 + n + a:8 + n + b]
        bits = np.frombuffer(raw, "<u2").astype("<u4") << 16 if e["dtype"] == "BF16" else np.frombuffer(raw, "<u4")
        out[name] = bits.reshape(e["shape"])
    return out, meta


def shard_name(i, n):
    return "model-%05d-of-%05d.safetensors" % (i, n)


def write_checkpoint(folder, shards, weight_map=None, total_size=None, metadata={"format": "pt"}):
    """shards: {file: [(name, dtype, bits)]}; the index from them unless weight_map is given."""
    os.makedirs(folder, exist_ok=True)
    total = 0
    wm = {}
    for file, tensors in shards.items():
        write_safetensors(os.path.join(folder, file), tensors, metadata)
        for name, dtype, bits in tensors:
            total += bits.size * (2 if dtype == "BF16" else 4)
            wm[name] = file
    index = {"metadata": {"total_size": total if total_size is None else total_size}, "weight_map": weight_map or wm}
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        f.write(json.dumps(index, indent=2, sort_keys=True) + "\n")


def run(program, work, *args):
    p = subprocess.run([program] + TINY + ["--data", "data.txt"] + list(args), cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=240)
    return p.returncode, p.stdout


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    program = os.path.abspath(sys.argv[1])
    rng = np.random.default_rng(43)
    expected = {name: values(rng, shape, name.endswith("norm.weight")) for name, shape in shapes()}
    # Shard 1 (F32): the embedding, layer 0, layer 1's q; shard 2 (BF16): the rest of layer 1 and the
    # final norm; shard 3 (F32): the head. Each file lists its tensors in reverse name order.
    n = 3
    where = {}
    for name, _ in shapes():
        where[name] = 3 if name == "lm_head.weight" else 2 if (("layers.1." in name and "q_proj" not in name) or name == "model.norm.weight") else 1
    dtype = {1: "F32", 2: "BF16", 3: "F32"}
    shards = {shard_name(i, n): sorted([(t, dtype[i], expected[t]) for t in where if where[t] == i], reverse=True) for i in (1, 2, 3)}
    for t in expected:  # what mxkit holds of a BF16 tensor: its bits widened
        if dtype[where[t]] == "BF16":
            expected[t] = (expected[t] >> 16) << 16

    with tempfile.TemporaryDirectory() as work:
        with open(os.path.join(work, "data.txt"), "w") as f:
            f.write("Mira walked to the mill and found two red apples. " * 80)
        good = os.path.join(work, "good")
        write_checkpoint(good, shards)

        # 2. One rank, by the folder; the export is one F32 file.
        rc, out = run(program, work, "--init-from", "good", "--export", "one.safetensors")
        check(rc == 0, "--init-from good: exit %d\n%s" % (rc, out))
        check("weights from 'good': %d tensors in 3 files" % len(expected) in out, "the import's line:\n" + out)
        if rc == 0:
            got, meta = read_safetensors(os.path.join(work, "one.safetensors"))
            check(sorted(got) == sorted(expected), "the export's tensors: %s" % sorted(got))
            for t in expected:
                check(t in got and np.array_equal(got[t], expected[t]), "tensor %s is not the checkpoint's, bit for bit" % t)
            check(meta.get("mxkit.n_layers") == str(LAYERS), "the export's metadata: %s" % meta)
        # Two fully sharded rank threads, by the index file; a sharded export of 8 kB shards.
        rc, out = run(program, work, "--ranks", "2", "--shard", "full", "--init-from", "good/model.safetensors.index.json", "--export",
                      "two", "--export-max-shard", "8KB")
        check(rc == 0, "--ranks 2 --shard full: exit %d\n%s" % (rc, out))
        if rc == 0:
            with open(os.path.join(work, "two", "model.safetensors.index.json")) as f:
                index = json.load(f)
            got = {}
            for file in sorted(set(index["weight_map"].values())):
                tensors, _ = read_safetensors(os.path.join(work, "two", file))
                check(len(tensors) == 1 or sum(t.size * 4 for t in tensors.values()) <= 8000, "shard %s holds more than 8 kB" % file)
                for t, bits in tensors.items():
                    check(index["weight_map"].get(t) == file, "the index does not map %s to %s" % (t, file))
                    got[t] = bits
            check(index["metadata"]["total_size"] == sum(b.size * 4 for b in expected.values()), "total_size %s" % index["metadata"])
            for t in expected:
                check(t in got and np.array_equal(got[t], expected[t]), "2 ranks: tensor %s is not the checkpoint's, bit for bit" % t)

        # 3. Damaged copies.
        s1, s2, s3 = shard_name(1, n), shard_name(2, n), shard_name(3, n)
        up0 = "model.layers.0.mlp.up_proj.weight"
        extra = ("model.layers.5.self_attn.q_proj.weight", "F32", expected["model.layers.0.self_attn.q_proj.weight"])
        wm = {t: shard_name(where[t], n) for t in expected}

        def damaged(name, make, *needles):
            folder = os.path.join(work, name)
            make(folder)
            rc, out = run(program, work, "--init-from", name)
            check(rc == 1, "%s: exit %d, expected 1\n%s" % (name, rc, out))
            check("step      1/" not in out, "%s: trained before the refusal" % name)
            for needle in needles:
                check(needle in out, "%s: no '%s' in\n%s" % (name, needle, out))

        def missing_shard(folder):
            write_checkpoint(folder, shards)
            os.remove(os.path.join(folder, s2))
        damaged("missing_shard", missing_shard, "shard '%s'" % s2, "cannot open the file")
        damaged("not_in_its_shard", lambda f: write_checkpoint(f, shards, weight_map=dict(wm, **{up0: s3})),
                "tensor '%s': the index maps it to shard '%s', which has no such tensor (it is in shard '%s')" % (up0, s3, s1))
        two = dict(shards)
        two[s3] = shards[s3] + [("model.norm.weight", "F32", expected["model.norm.weight"])]
        damaged("in_two_shards", lambda f: write_checkpoint(f, two, weight_map=wm),
                "tensor 'model.norm.weight' is in two shards, '%s' and '%s'" % (s2, s3))
        unlisted = dict(shards)
        unlisted[s3] = shards[s3] + [extra]
        damaged("unlisted", lambda f: write_checkpoint(f, unlisted, weight_map=wm),
                "shard '%s' holds tensor '%s', which the index's weight_map does not list" % (s3, extra[0]))
        damaged("extra", lambda f: write_checkpoint(f, unlisted),
                "tensor '%s' (shard '%s') is not a weight of this model (a Llama of %d layers)" % (extra[0], s3, LAYERS))

        def outside(folder):
            write_checkpoint(folder, shards, weight_map=dict(wm, **{"lm_head.weight": "../good/" + s3}))
        damaged("outside", outside, "weight_map maps tensor 'lm_head.weight' to '../good/%s', which has a '..' part" % s3)
        damaged("total_size", lambda f: write_checkpoint(f, shards, total_size=5), "metadata total_size is 5, the tensors the index lists hold")
        k0 = "model.layers.0.self_attn.k_proj.weight"
        bent = dict(shards)
        bent[s1] = [(t, d, b.reshape(b.shape[::-1]) if t == k0 else b) for t, d, b in shards[s1]]
        damaged("shape", lambda f: write_checkpoint(f, bent),
                "tensor '%s' (shard '%s') has shape [%d, %d], the model needs [%d, %d]" % (k0, s1, D, HEAD_DIM, HEAD_DIM, D))

    if failures:
        print("check_hf_sharded: %d failure(s)" % len(failures))
        return 1
    print("check_hf_sharded: a NumPy-written sharded checkpoint imported bit for bit (1 rank, 2 fully sharded ranks); 8 damaged "
          "copies refused")
    return 0


if __name__ == "__main__":
    sys.exit(main())
