#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The ablation table of tools/twin/ablation.sh from its run CSVs (<name>.seed<s>.csv, the
training program's step,loss,... rows):
  final gap   per seed, the mean training loss of the last 5 % of the logged rows minus the
              baseline's of the same seed; mean +- standard error over seeds
  tokens      per seed, the first step at which the run's loss (mean of a window of 5 % of the
              rows) reaches the baseline's at 80 % of training, in tokens, and its ratio to the
              baseline's tokens; runs that never reach it count as '>' the whole run
Writes OUT/ablation.md (the table), OUT/ablation_curves.csv (name,seed,step,loss) and, where
matplotlib is installed, OUT/ablation.png (the mean loss curves, and each recipe's gap to the
baseline over training with its standard error).
"""
import argparse
import csv
import glob
import math
import os
import re


def read(path):
    rows = []
    with open(path) as f:
        for r in csv.DictReader(f):
            if r.get("loss"):
                rows.append((int(r["step"]), float(r["loss"])))
    return rows


def smooth(rows, w):
    out, acc = [], []
    for s, l in rows:
        acc.append(l)
        if len(acc) > w:
            acc.pop(0)
        out.append((s, sum(acc) / len(acc)))
    return out


def mean_se(xs):
    n = len(xs)
    if n == 0:
        return float("nan"), float("nan")
    m = sum(xs) / n
    return m, (math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1) / n) if n > 1 else float("nan"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--baseline", default="bf16")
    ap.add_argument("--tokens-per-step", type=int, default=16384)
    ap.add_argument("--names", nargs="*")
    a = ap.parse_args()
    runs = {}
    for p in glob.glob(os.path.join(a.out, "*.seed*.csv")):
        m = re.match(r"(.+)\.seed(\d+)\.csv$", os.path.basename(p))
        rows = read(p)
        if m and rows:
            runs.setdefault(m.group(1), {})[int(m.group(2))] = rows
    if a.baseline not in runs:
        raise SystemExit("ablation_table: no runs of the baseline '%s' in %s" % (a.baseline, a.out))
    names = [n for n in (a.names or sorted(runs)) if n in runs]
    base = runs[a.baseline]
    lines = ["| recipe | seeds | final loss | gap to %s | tokens to %s's loss at 80 %% | ratio |" % (a.baseline, a.baseline),
             "| --- | --- | --- | --- | --- | --- |"]
    for n in names:
        finals, gaps, tokens, ratios, never = [], [], [], [], 0
        for seed, rows in sorted(runs[n].items()):
            w = max(1, len(rows) // 20)
            final = sum(l for _, l in rows[-w:]) / w
            finals.append(final)
            if seed not in base:
                continue
            b = base[seed]
            bw = max(1, len(b) // 20)
            gaps.append(final - sum(l for _, l in b[-bw:]) / bw)
            bs = smooth(b, bw)
            target_step = b[-1][0] * 0.8
            target = min(bs, key=lambda r: abs(r[0] - target_step))
            hit = next((s for s, l in smooth(rows, w) if l <= target[1]), None)
            if hit is None:
                never += 1
                hit = rows[-1][0]
            tokens.append(hit * a.tokens_per_step)
            ratios.append(hit / target[0])
        f, g, t, r = mean_se(finals), mean_se(gaps), mean_se(tokens), mean_se(ratios)
        lines.append("| %s | %d | %.4f +- %.4f | %+.4f +- %.4f | %s%.3g +- %.2g M | %.3f +- %.3f |"
                     % (n, len(finals), f[0], f[1], g[0], g[1], ">" if never else "", t[0] / 1e6, t[1] / 1e6, r[0], r[1]))
    table = "\n".join(lines) + "\n"
    print(table)
    with open(os.path.join(a.out, "ablation.md"), "w") as fh:
        fh.write("<!-- SPDX-License-Identifier: Apache-2.0 -->\n" + table)
    with open(os.path.join(a.out, "ablation_curves.csv"), "w") as fh:
        fh.write("name,seed,step,loss\n")
        for n in names:
            for seed, rows in sorted(runs[n].items()):
                fh.writelines("%s,%d,%d,%.6f\n" % (n, seed, s, l) for s, l in rows)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("ablation_table: matplotlib is not installed; no PNG (ablation_curves.csv has the curves)")
        return
    # Left: the mean curves past the first fifth of training, where they separate (before it they
    # overlap at this scale). Right: each recipe's loss minus the baseline's of the same seed, step
    # by step, mean over seeds (smoothed) with its standard error as a band.
    fig, (curves, gaps) = plt.subplots(1, 2, figsize=(15, 6))
    base_steps = {seed: dict(rows) for seed, rows in base.items()}
    for n in names:
        seeds = list(runs[n].values())
        steps = [s for s, _ in seeds[0]]
        k = min(len(r) for r in seeds)
        w = max(1, k // 20)
        mean = [sum(r[i][1] for r in seeds) / len(seeds) for i in range(k)]
        first = k // 5
        line, = curves.plot([s * a.tokens_per_step / 1e6 for s in steps[first:k]],
                            [l for _, l in smooth(list(zip(steps, mean)), w)][first:], label=n)
        per_seed = [[l - base_steps[seed][s] for s, l in rows[:k] if s in base_steps[seed]]
                    for seed, rows in sorted(runs[n].items()) if seed in base_steps]
        if not per_seed or n == a.baseline:
            continue
        m = min(len(d) for d in per_seed)
        smoothed = [[v for _, v in smooth(list(enumerate(d[:m])), w)] for d in per_seed]
        stats = [mean_se([d[i] for d in smoothed]) for i in range(m)]
        x = [s * a.tokens_per_step / 1e6 for s in steps[:m]]
        gaps.plot(x, [g for g, _ in stats], color=line.get_color(), label=n)
        if len(smoothed) > 1:
            gaps.fill_between(x, [g - e for g, e in stats], [g + e for g, e in stats], color=line.get_color(), alpha=0.15)
    curves.set_xlabel("tokens (M)")
    curves.set_ylabel("training loss (mean over seeds, smoothed)")
    curves.legend(fontsize=8)
    curves.grid(alpha=0.3)
    gaps.axhline(0.0, color="black", linewidth=0.8)
    gaps.set_xlabel("tokens (M)")
    gaps.set_ylabel("loss minus %s's, same seed (mean +- SE over seeds, smoothed)" % a.baseline)
    gaps.set_ylim(-0.02, None)
    gaps.legend(fontsize=8)
    gaps.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(a.out, "ablation.png"), dpi=110)
    print("ablation_table: wrote " + os.path.join(a.out, "ablation.png"))


if __name__ == "__main__":
    main()
