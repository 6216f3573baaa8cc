#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""ctest train.readme_to_target: the README's three commands (make a dataset, train to a target,
read the result), run as written in a scratch folder.

    check_readme_to_target.py TRAIN_PROGRAM

The block between <!-- train_to_target:begin --> and <!-- train_to_target:end --> in README.md is
read, and its three command lines run with /bin/sh after four substitutions, each asserted to be
there: the tokenizer (a sentencepiece model trained here on data/stories.txt), the text
(data/stories.txt), the program's path (TRAIN_PROGRAM), and a tiny model appended to the training
command (the default model would take minutes on a CPU). Checks: the dataset is written, the
run ends at the target (exit 0) or says it did not reach it (exit 3), the CSV holds its
evaluations, and the third command prints the last one.
Exit 77 (skipped) when numpy or sentencepiece is missing, unless CI=true, where they are required.
"""
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
TINY = " --layers 1 --d-model 64 --heads 2 --kv-heads 1 --ffn 128 --seq 32 --batch 4 --steps 80 --lr 3e-3"


sys.path.insert(0, HERE)
from python_check import skip_or_fail  # noqa: E402

try:
    import numpy  # noqa: F401
    import sentencepiece as spm
except ImportError as e:
    skip_or_fail("check_readme_to_target", str(e), "python3-numpy python3-sentencepiece")


def main():
    program = os.path.abspath(sys.argv[1])
    with open(os.path.join(ROOT, "README.md")) as f:
        m = re.search(r"<!-- train_to_target:begin -->\n```sh\n(.*?)```\n<!-- train_to_target:end -->", f.read(), re.S)
    if not m:
        print("README.md: no ```sh block between the train_to_target markers")
        return 1
    lines = [line for line in m.group(1).splitlines() if line.strip()]
    if len(lines) != 3:
        print("README.md's train_to_target block: %d commands, expected 3 (make a dataset, train, read)" % len(lines))
        return 1
    failures = []
    with tempfile.TemporaryDirectory() as d:
        stories = os.path.join(ROOT, "data", "stories.txt")
        spm.SentencePieceTrainer.train(input=stories, model_prefix=os.path.join(d, "sp"), vocab_size=400, model_type="bpe",
                                       minloglevel=2)
        subs = [(0, "tokenizer.model", os.path.join(d, "sp.model")), (0, "my_text.txt", stories),
                (0, "tools/make_dataset.py", os.path.join(ROOT, "tools", "make_dataset.py")),
                (1, "build/demo/examples/05_train", program)]
        for i, old, new in subs:
            if old not in lines[i]:
                print("README.md's command %d no longer names %s: update this check with it" % (i + 1, old))
                return 1
            lines[i] = lines[i].replace(old, new)
        lines[1] = lines[1].split("  #")[0] + TINY
        lines[0] = lines[0].replace("python3 ", sys.executable + " ", 1)
        lines[2] = lines[2].replace("python3 ", sys.executable + " ", 1)
        results = []
        for cmd in lines:
            r = subprocess.run(cmd, shell=True, cwd=d, capture_output=True, text=True)
            results.append(r)
            print("$ %s\nexit %d\n%s" % (cmd, r.returncode, (r.stdout + r.stderr)[-1500:]))
        if results[0].returncode != 0 or not os.path.exists(os.path.join(d, "corpus.bin")):
            failures.append("make_dataset.py did not write corpus.idx/.bin")
        if results[1].returncode not in (0, 3):
            failures.append("the training command: exit %d (0: target reached, 3: not reached)" % results[1].returncode)
        said = "target reached" in results[1].stdout or "did not reach" in results[1].stdout or "not reached" in results[1].stdout
        if not said:
            failures.append("the training command does not say whether it reached the target")
        if results[2].returncode != 0 or "'eval_loss'" not in results[2].stdout:
            failures.append("the third command did not print the last evaluation")
    for f in failures:
        print("FAILED: " + f)
    if not failures:
        print("check_readme_to_target: the README's three commands ran as written")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
