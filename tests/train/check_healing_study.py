#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""ctest train.healing_study: bench/healing_study.py, its pure parts and end to end on the host program.

    check_healing_study.py TRAIN_PROGRAM      (the test_* functions also run under pytest, alone)

1. The pure parts: the document split is deterministic (any input order) and disjoint, Python
   fine-tunes and the rest pretrains; the summary's means, sample standard deviations and paired
   gaps to bf16, and its verdicts (a loss, a recovery, neither); the SVG is well-formed XML with a
   polyline per curve through every point and the labels escaped.
2. The study with 05_train at a tiny size: a corpus over folders of the repository (Python and
   the rest), the data, the bf16 base, 2 seeds x 4 schedules of LoRA fine-tuning; each run's CSV
   ends at the last step, the rows are valid for bench/render_results.py with bf16 of the same seed
   as their peer, the plot has the four schedules; --dry-run prints the commands; a --budget too
   small skips the runs and says so (exit 3); a bad --switch-at is refused (exit 2).
Exit 77 (skipped) when numpy or sentencepiece is missing for part 2, unless CI=true.
"""
import csv
import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
DRIVER = os.path.join(ROOT, "bench", "healing_study.py")
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "bench"))
import healing_study as hs  # noqa: E402
import render_results  # noqa: E402

SVG = "{http://www.w3.org/2000/svg}"


def doc(path, text):
    return (path, text, hashlib.blake2b(text.encode(), digest_size=16).digest())


def test_split_is_deterministic_and_disjoint():
    docs = [doc(f"/x/f{i}.py", f"def f{i}(): return {i}\n") for i in range(200)]
    docs += [doc(f"/x/h{i}.h", f"int h{i}(void);\n") for i in range(50)] + [doc("/x/README.md", "# notes\n")]
    pre, train, held = hs.split_documents(docs)
    shuffled = list(docs)
    random.Random(7).shuffle(shuffled)
    assert (pre, train, held) == hs.split_documents(shuffled)
    assert len(pre) == 51 and all(not d[0].endswith(".py") for d in pre)
    assert all(d[0].endswith(".py") for d in train + held)
    assert len(train) + len(held) == 200 and 0 < len(held) < 40  # about one in twenty
    keys = [d[2] for d in pre + train + held]
    assert len(set(keys)) == len(keys) == len(docs)
    assert hs.take(train, 0) == [] and hs.take(train, 1) == train[:1] and hs.take(train, 10 ** 9) == train


def test_summary():
    assert hs.mean_sd([]) != hs.mean_sd([])  # nan
    assert hs.mean_sd([2.0]) == (2.0, 0.0)
    m, sd = hs.mean_sd([1.0, 2.0, 3.0])
    assert m == 2.0 and abs(sd - 1.0) < 1e-12
    finals = {}
    for seed, base in ((0, 2.00), (1, 2.10), (2, 2.20)):
        finals[("bf16", seed)] = base
        finals[("fp8", seed)] = base + 0.001 * (seed - 1)  # no loss
        finals[("mxfp4", seed)] = base + 0.10 + 0.01 * seed
        finals[("mxfp4-fp8", seed)] = base + 0.02 + 0.01 * seed
    s = hs.summarize(finals)
    assert s["bf16"]["seeds"] == [0, 1, 2]
    assert abs(s["bf16"]["loss"][0] - 2.10) < 1e-12 and abs(s["bf16"]["loss"][1] - 0.10) < 1e-12
    assert abs(s["mxfp4"]["gap"][0] - 0.11) < 1e-12 and abs(s["mxfp4"]["gap"][1] - 0.01) < 1e-12
    assert s["mxfp4"]["loses"] and s["mxfp4-fp8"]["recovers"]
    assert any("73 % of mxfp4's gap" in v for v in s["verdict"]), s["verdict"]  # 0.08 of 0.11
    lines = hs.table(s)
    assert lines[1].split()[0] == "bf16" and "+0.1100 +- 0.0100" in lines[3]
    # No loss to recover: mxfp4 within the seeds' spread, the switch no better.
    for seed, sign in ((0, 1), (1, -1), (2, 0)):
        finals[("mxfp4", seed)] = finals[("bf16", seed)] + 0.01 * sign
        finals[("mxfp4-fp8", seed)] = finals[("bf16", seed)] - 0.01 * sign
    s = hs.summarize(finals)
    assert not s["mxfp4"]["loses"] and not s["mxfp4-fp8"]["recovers"]
    assert "no loss to recover" in s["verdict"][0]
    # A missing run: its seed leaves the mean and the pairs.
    del finals[("mxfp4-fp8", 2)]
    assert hs.summarize(finals)["mxfp4-fp8"]["seeds"] == [0, 1]
    assert hs.mean_curve([[(5, 1.0), (10, 2.0)], [(5, 3.0)]]) == [(5, 2.0)]


def test_gap_curve():
    bf16 = {0: [(0, 5.0), (25, 4.0), (50, 3.5)], 1: [(0, 5.0), (25, 4.2), (50, 3.7)]}
    mx = {0: [(0, 5.0), (25, 4.1), (50, 3.6)], 1: [(0, 5.0), (25, 4.4), (50, 3.8)], 2: [(0, 5.0), (25, 9.0)]}
    # Paired by seed (seed 2 has no bf16 run: left out), at the steps every pair has.
    got = hs.gap_curve(mx, bf16)
    assert [s for s, _ in got] == [0, 25, 50]
    assert all(abs(g - w) < 1e-12 for (_, g), w in zip(got, [0.0, 0.15, 0.1]))
    assert hs.gap_curve({}, bf16) == [] and hs.gap_curve(mx, {}) == []


def test_svg():
    curves = {"bf16 <3 seeds> & co": ([(0, 3.0), (25, 2.5), (50, 2.2)], "#222222"),
              "mxfp4": ([(0, 3.0), (25, 2.7), (50, 2.4)], "#d62728"),
              "one point": ([(10, 2.6)], "#2ca02c")}
    root = ET.fromstring(hs.svg_plot(curves, "title & <more>", marks=[(30, "mxfp4 -> fp8")]))
    assert root.tag == SVG + "svg"
    lines = root.findall(SVG + "polyline")
    assert len(lines) == 3
    for line, (label, (points, colour)) in zip(lines, curves.items()):
        assert line.get("stroke") == colour and line.find(SVG + "title").text == label
        xy = [tuple(map(float, p.split(","))) for p in line.get("points").split()]
        assert len(xy) == len(points)
        assert all(70 <= x <= 720 - 190 and 40 <= y <= 440 - 50 for x, y in xy)
    # A higher loss is drawn higher on the page (a smaller y); the steps run left to right.
    xy = [tuple(map(float, p.split(","))) for p in lines[0].get("points").split()]
    assert xy[0][1] < xy[-1][1] and xy[0][0] < xy[-1][0]
    texts = [t.text for t in root.iter(SVG + "text")]
    assert "title & <more>" in texts and "mxfp4 -> fp8" in texts and "bf16 <3 seeds> & co" in texts
    assert ET.fromstring(hs.svg_plot({}, "empty")).tag == SVG + "svg"


def run(args):
    r = subprocess.run([sys.executable, DRIVER] + args, capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def end_to_end(program, check):
    corpus_script = os.path.join(ROOT, "bench", "time_to_target.py")
    roots = [os.path.join(ROOT, p) for p in ("docs", os.path.join("include", "mxkit", "train"), "bench", "tools")]
    root_flags = [x for r in roots for x in ("--root", r)]
    with tempfile.TemporaryDirectory() as d:
        corpus, out, rows_file = os.path.join(d, "corpus"), os.path.join(d, "study"), os.path.join(d, "rows.jsonl")
        r = subprocess.run([sys.executable, corpus_script, "corpus", "--out", corpus, "--vocab", "600"] + root_flags,
                           capture_output=True, text=True)
        check(r.returncode == 0, "corpus: exit %d\n%s" % (r.returncode, r.stdout + r.stderr))
        if r.returncode:
            return
        tiny = ["--binary", program, "--corpus", corpus, "--out", out, "--layers", "1", "--d-model", "32", "--heads", "2",
                "--kv-heads", "1", "--ffn", "64", "--seq", "16", "--batch", "2", "--pretrain-steps", "40", "--pretrain-warmup", "4",
                "--pretrain-lr", "3e-3", "--steps", "20", "--warmup", "2", "--lr", "3e-3", "--eval-every", "5", "--log-every", "5",
                "--eval-batches", "2", "--lora-rank", "4", "--seeds", "0", "1", "--device", "host", "--results", rows_file] + root_flags
        rc, text = run(tiny + ["--dry-run"])
        commands = [line for line in text.splitlines() if line.startswith(program) or line.startswith("base: " + program)]
        check(rc == 0 and len(commands) == 9 and sum("--lora 4" in c for c in commands) == 8 and
              sum("--switch-to fp8 --switch-at 12" in c for c in commands) == 2 and not os.path.exists(out),
              "--dry-run: the base and 8 LoRA commands, nothing run: exit %d\n%s" % (rc, text))
        rc, text = run(tiny)
        check(rc == 0, "the study: exit %d\n%s" % (rc, text))
        with open(os.path.join(out, "data", "data.json")) as f:
            info = json.load(f)
        check(all(info[p]["tokens"] > 0 for p in ("pretrain", "finetune_train", "finetune_eval")), "three datasets: %s" % info)
        check("--lora 4 --lora-alpha 32" in open(os.path.join(out, "runs", "mxfp4-fp8-seed1.log")).read(), "the LoRA flags in the log")
        for s in hs.SCHEDULES:
            for seed in (0, 1):
                with open(os.path.join(out, "runs", "%s-seed%d.csv" % (s, seed)), newline="") as f:
                    rows = list(csv.DictReader(f))
                evals = [r["step"] for r in rows if r["eval_loss"]]
                check(evals == ["5", "10", "15", "20"], "%s seed %d evaluated at 5, 10, 15, 20: %s" % (s, seed, evals))
        with open(rows_file) as f:
            rows = [render_results.validate(json.loads(line), "healing") for line in f]
        check(len(rows) == 8 + 4, "a row per run and one per schedule: %d" % len(rows))
        mx = [r for r in rows if "mxfp4+Hadamard -> fp8 at step 12 of 20, seed 1," in r["case"]]
        bf = [r for r in rows if r["case"].startswith("held-out loss after LoRA fine-tuning, bf16, seed 1,")]
        check(len(mx) == 1 and len(bf) == 1 and mx[0]["peer_value"] == bf[0]["value"] and mx[0]["recipe"] == "mxfp4",
              "the switched run's row against bf16 of its seed: %s %s" % (mx, bf))
        root = ET.parse(os.path.join(out, "healing.svg")).getroot()
        titles = [p.find(SVG + "title").text for p in root.iter(SVG + "polyline")]
        check(len(titles) == 4 and all("(2 seeds)" in t for t in titles), "the plot's four curves: %s" % titles)
        root = ET.parse(os.path.join(out, "healing_gap.svg")).getroot()
        titles = [p.find(SVG + "title").text for p in root.iter(SVG + "polyline")]
        check(len(titles) == 3 and not any("bf16" in t for t in titles), "the gap plot: a curve a schedule but bf16: %s" % titles)
        rc, text = run(tiny + ["--budget", "0", "--results", os.path.join(d, "more.jsonl")])
        check(rc == 3 and text.count("skipped, ") == 8 and "data: " in text and "base: " in text,
              "a budget too small: the data and base kept, every run skipped (exit 3): exit %d\n%s" % (rc, text))
        rc, text = run(tiny + ["--switch-at", "20"])
        check(rc == 2 and "--switch-at 20" in text, "--switch-at at the end: exit %d\n%s" % (rc, text))


def main():
    sys.path.insert(0, HERE)
    from python_check import check, failures, skip_or_fail
    for t in (test_split_is_deterministic_and_disjoint, test_summary, test_gap_curve, test_svg):
        try:
            t()
        except AssertionError as e:
            check(False, "%s: %s" % (t.__name__, e))
    try:
        import numpy  # noqa: F401
        import sentencepiece  # noqa: F401
    except ImportError as e:
        if failures:
            print("%d check(s) failed" % len(failures))
            return 1
        skip_or_fail("check_healing_study", str(e), "python3-numpy python3-sentencepiece")
    end_to_end(sys.argv[1], check)
    if failures:
        print("%d check(s) failed" % len(failures))
        return 1
    print("check_healing_study: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
