#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""ctest train.time_to_target: bench/time_to_target.py end to end on the host program, tiny.

    check_time_to_target.py TRAIN_PROGRAM

1. `corpus` over two folders of the repository (docs/, include/mxkit/train/): a sentencepiece
   tokenizer trained here, the train and held-out datasets written, corpus.json consistent with
   the files (documents, tokens, and no document in both parts).
2. `run` with bf16, fp8 and mxfp4-fp8 (the PyTorch peer only where PyTorch is installed), seeds
   0 and 1: each seed's target is its bf16 held-out loss at 90 % of the steps, read back from
   its CSV here; each recipe's row gives the time_s and tokens of its CSV's first evaluation at
   or below its seed's target; the rows are valid for bench/render_results.py, and `rows` makes
   the same rows again from the CSVs.
3. `run --targets-from` the first run's logs, with nvfp4 only: each seed's target is read from
   the bf16 CSV there, after a short bf16 run here logs the same first steps; its rows carry
   those targets. With another learning rate the short run differs, and the run is refused
   (exit 2) before any nvfp4 run.
4. Refusals: more steps than the data holds once (exit 2, naming --steps); an evaluation interval
   that misses 90 % of the steps (exit 2).
Exit 77 (skipped) when numpy or sentencepiece is missing, unless CI=true, where they are required.
"""
import csv
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
DRIVER = os.path.join(ROOT, "bench", "time_to_target.py")


sys.path.insert(0, HERE)
from python_check import check, failures, skip_or_fail  # noqa: E402

try:
    import numpy as np  # noqa: F401
    import sentencepiece  # noqa: F401
except ImportError as e:
    skip_or_fail("check_time_to_target", str(e), "python3-numpy python3-sentencepiece")

sys.path.insert(0, os.path.join(ROOT, "bench"))
import render_results  # noqa: E402


def run(args):
    r = subprocess.run([sys.executable, DRIVER] + args, capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def main():
    program = sys.argv[1]
    with tempfile.TemporaryDirectory() as d:
        data, logs, rows_file = os.path.join(d, "data"), os.path.join(d, "logs"), os.path.join(d, "rows.jsonl")
        rc, text = run(["corpus", "--out", data, "--vocab", "600", "--root", os.path.join(ROOT, "docs"),
                        "--root", os.path.join(ROOT, "include", "mxkit", "train")])
        check(rc == 0, "corpus: exit %d\n%s" % (rc, text))
        if rc:
            return 1
        with open(os.path.join(data, "corpus.json")) as f:
            info = json.load(f)
        sizes = {}
        for part in ("train", "eval"):
            n = os.path.getsize(os.path.join(data, part + ".bin")) // 2  # uint16 tokens
            sizes[part] = n
            check(n == info[part + "_tokens"], "%s: %d tokens in the file, corpus.json says %d" % (part, n, info[part + "_tokens"]))
        check(info["train_documents"] + info["eval_documents"] == info["files"], "every document in exactly one part")
        check(info["eval_documents"] >= 1, "a held-out part")

        tiny = ["--layers", "1", "--d-model", "32", "--heads", "2", "--kv-heads", "1", "--ffn", "64", "--seq", "16",
                "--batch", "2", "--warmup", "2", "--lr", "3e-3", "--eval-batches", "2", "--device", "host"]
        flags = ["--data", data, "--logs", logs, "--steps", "20", "--eval-every", "2", "--seeds", "0", "1",
                 "--recipes", "bf16", "fp8", "mxfp4-fp8", "peer"] + tiny
        rc, text = run(["run", "--program", program, "--results", rows_file] + flags)
        check(rc in (0, 3), "run: exit %d\n%s" % (rc, text))
        with open(rows_file) as f:
            rows = [render_results.validate(json.loads(line), "time_to_target") for line in f]
        check(len(rows) >= 6, "rows for the recipes and seeds: %d" % len(rows))
        rc, again = run(["rows", "--results", rows_file.replace("rows.jsonl", "rows_again.jsonl")] + flags)
        with open(rows_file.replace("rows.jsonl", "rows_again.jsonl")) as f:
            rows_again = [json.loads(line) for line in f]
        check(rc == 0 and [(r["case"], r["value"]) for r in rows_again] == [(r["case"], r["value"]) for r in rows],
              "rows from the CSVs are the run's rows: exit %d\n%s" % (rc, again))
        for seed, recipe, name in [(s, r, n) for s in (0, 1) for r, n in (("bf16", "bf16"), ("fp8", "fp8"),
                                                                            ("mxfp4-fp8", "mxfp4+Hadamard -> fp8 at 80 %"))]:
            with open(os.path.join(logs, "bf16-seed%d.csv" % seed), newline="") as f:
                bf16 = list(csv.DictReader(f))
            at90 = [r for r in bf16 if r["step"] == "18" and r["eval_loss"]]
            check(len(at90) == 1 and bf16[-1]["step"] == "18", "bf16 seed %d evaluated at step 18 (90 %% of 20) and stopped there: %s"
                  % (seed, [r["step"] for r in bf16]))
            target = float(at90[0]["eval_loss"]) if at90 else None
            with open(os.path.join(logs, "%s-seed%d.csv" % (recipe, seed)), newline="") as f:
                got = list(csv.DictReader(f))
            hit = next((r for r in got if r["eval_loss"] and target is not None and float(r["eval_loss"]) <= target), None)
            mine = [r for r in rows if (", %s, seed %d," % (name, seed)) in r["case"]]
            if hit:
                t = [r for r in mine if r["case"].endswith(": time to train")]
                n = [r for r in mine if r["case"].endswith(": tokens to the target")]
                check(len(t) == 1 and abs(t[0]["value"] - float(hit["time_s"])) <= 5e-4 * float(hit["time_s"]) + 1e-3,
                      "%s: time to train %s, its CSV %s" % (recipe, t and t[0]["value"], hit["time_s"]))
                check(len(n) == 1 and n[0]["value"] == float(hit["tokens"]), "%s: tokens %s, its CSV %s" % (recipe, n and n[0]["value"], hit["tokens"]))
                check(("%.4f" % target) in (t[0]["case"] if t else ""), "%s: the target %.4f in the case" % (recipe, target))
            else:
                check(len(mine) == 1 and "not reached" in mine[0]["case"], "%s: a 'not reached' row: %s" % (recipe, mine))
        check(sizes["train"] > 20 * 2 * 16, "the tiny run read the data once")

        logs2, rows2 = os.path.join(d, "logs2"), os.path.join(d, "rows2.jsonl")
        flags2 = ["--data", data, "--logs", logs2, "--steps", "20", "--eval-every", "2", "--seeds", "0", "1",
                  "--recipes", "nvfp4", "--targets-from", logs] + tiny
        rc, text = run(["run", "--program", program, "--results", rows2] + flags2)
        check(rc in (0, 3), "run --targets-from: exit %d\n%s" % (rc, text))
        targets = {}
        for seed in (0, 1):
            with open(os.path.join(logs, "bf16-seed%d.csv" % seed), newline="") as f:
                targets[seed] = next(float(r["eval_loss"]) for r in csv.DictReader(f) if r["step"] == "18")
            check(("seed %d: target %.4f from %s" % (seed, targets[seed], logs)) in text, "seed %d's target from the first run" % seed)
            check(os.path.exists(os.path.join(logs2, "nvfp4-seed%d.csv" % seed)), "nvfp4 seed %d ran" % seed)
            check(not os.path.exists(os.path.join(logs2, "bf16-seed%d.csv" % seed)), "no full bf16 run with --targets-from")
        with open(rows2) as f:
            rows_nv = [render_results.validate(json.loads(line), "time_to_target") for line in f]
        check(len(rows_nv) >= 2 and all(", nvfp4 (arXiv 2509.25149's recipe), seed " in r["case"] for r in rows_nv),
              "nvfp4 rows: %s" % [r["case"] for r in rows_nv])
        for seed in (0, 1):
            check(any(("%.4f" % targets[seed]) in r["case"] and (", seed %d," % seed) in r["case"] for r in rows_nv),
                  "seed %d's nvfp4 row names the target %.4f" % (seed, targets[seed]))
        other = [{"3e-3": "2e-3", logs2: os.path.join(d, "logs3")}.get(x, x) for x in flags2]
        rc, text = run(["run", "--program", program, "--results", rows2] + other)
        check(rc == 2 and "do not apply" in text and not os.path.exists(os.path.join(d, "logs3", "nvfp4-seed0.csv")),
              "--targets-from with other numerics is refused: exit %d\n%s" % (rc, text))

        too_many = str(sizes["train"] // (2 * 16) + 1)
        rc, text = run(["run", "--program", program, "--data", data, "--logs", logs, "--steps", too_many, "--eval-every", "1",
                        "--results", rows_file] + tiny)
        check(rc == 2 and "--steps " + too_many in text and "read twice" in text, "more steps than the data: exit %d\n%s" % (rc, text))
        rc, text = run(["run", "--program", program, "--data", data, "--logs", logs, "--steps", "20", "--eval-every", "4",
                        "--results", rows_file] + tiny)
        check(rc == 2 and "--eval-every 4" in text, "an interval missing 90 %%: exit %d\n%s" % (rc, text))
    if failures:
        print("%d check(s) failed" % len(failures))
        return 1
    print("check_time_to_target: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
