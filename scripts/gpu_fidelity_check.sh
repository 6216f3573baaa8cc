#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Issue 31 on a GPU machine (device tool, kind nvidia-h100-x1 or nvidia-h200, carry [".deps"]):
# builds the GPU training program (scripts/gpu_train_check.sh), checks the PyTorch twin against
# it per step on a tiny model (tools/twin/check_twin.py, head dim 64 for the GPU attention), then
# the paired gap comparison at the issue's scale (tools/twin/issue31_gpu.sh). Logs land in $OUT.
#   SEEDS   seeds of the comparison (default "0": about 10 minutes; "0 1 2": about 30, estimated)
#   STEPS   steps of the comparison (default 1200, the issue's)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
out=${OUT:-build-gpu-out}
mkdir -p "$out"
MXKIT_TARGETS="catch2_test_device_backend 06_train_gpu" MXKIT_TESTS=catch2_test_device_backend MXKIT_BENCHES="" MXKIT_MEMCHECK=0 OUT=$out scripts/gpu_train_check.sh || exit 1
prog=${MXKIT_GPU_BUILD:-build-gpu-train}/examples/06_train_gpu
MXKIT_DATA_DIR=$PWD/data python3 tools/twin/check_twin.py "$prog" --d-model 128 --device cuda \
  --recipes bf16 fp8 mxfp8 mxfp4 mxfp4-no-hadamard 2>&1 | tee "$out/check_twin.log" | grep -E "^==|agreement|disagreement"
SEEDS=${SEEDS:-0} tools/twin/issue31_gpu.sh "$prog" "$out/issue31" 2>&1 | tee "$out/issue31.log"
