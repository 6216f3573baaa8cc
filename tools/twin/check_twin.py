#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""CI check of the PyTorch twin against mxkit's training program, a few seconds on a CPU:
a tiny model (1 layer, d_model 64, 2 heads, 1 KV head, SwiGLU 128, 2 x 32 tokens) from the same
safetensors weights on the same dumped batches, per recipe. Agreement: over the first STEPS steps
every per-step training loss of the twin is within TOLERANCE (relative) of mxkit's. Measured on
the host reference backend: bf16 2.97e-05, mxfp4 (H16) 2.2e-07, mxfp4-no-hadamard 7.6e-04,
mxfp8 6.8e-05, fp8 2.5e-05 over 20 steps (docs/perf/fidelity.md); the tolerance is 2e-3.
Exit 77 (ctest's skip) when torch is missing.

    check_twin.py TRAIN_PROGRAM [--recipes bf16 mxfp4] [--steps 10] [--d-model 64] [--device cpu]
(the GPU program needs head dim 64: --d-model 128)
"""
import argparse
import os
import subprocess
import sys
import tempfile

try:
    import torch  # noqa: F401
except ImportError:
    print("check_twin: torch is not installed; skipped")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import twin  # noqa: E402



def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("train_program")
    ap.add_argument("--recipes", nargs="+", default=["bf16", "mxfp4"])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--tolerance", type=float, default=2e-3)
    ap.add_argument("--d-model", type=int, default=64, help="2 heads of d_model / 2, SwiGLU 2 d_model")
    ap.add_argument("--device", default="cpu", help="where the twin runs")
    a = ap.parse_args()
    C = a.d_model
    shape = ["--layers", "1", "--d-model", str(C), "--heads", "2", "--kv-heads", "1", "--ffn", str(2 * C), "--seq", "32",
             "--batch", "2"]
    with tempfile.TemporaryDirectory() as d:
        init, batches = os.path.join(d, "init.safetensors"), os.path.join(d, "batches.bin")
        twin.main(["init", "--out", init, "--n-layers", "1", "--d-model", str(C), "--n-heads", "2", "--n-kv-heads", "1",
                   "--d-ff", str(2 * C), "--seed", "5"])
        failed = []
        for r in a.recipes:
            csv = os.path.join(d, r + ".csv")
            cmd = [a.train_program] + shape + ["--steps", str(a.steps), "--warmup", "2", "--lr", "2e-3", "--activations", "f32",
                                               "--recipe", r, "--log-every", "1", "--eval-every", "0", "--init-from", init,
                                               "--dump-batches", batches, "--csv", csv]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            print("== " + r)
            try:
                twin.main(["train", "--device", a.device, "--init-from", init, "--batches", batches, "--recipe", r, "--lr", "2e-3", "--warmup", "2",
                           "--mxkit-csv", csv, "--first", str(a.steps), "--tolerance", str(a.tolerance)])
            except SystemExit as e:
                if e.code:
                    failed.append(r)
    if failed:
        print("check_twin: disagreement in " + " ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
