#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds gpu_multi_check.sh's programs on this machine (nvcc, sm_90, no GPU needed) into
# build-carry/ (git-ignored, about 40 MB stripped), so a device call carries them
# (carry [".deps", "build-carry"]) instead of spending 150-200 s of device time on the build:
#   MXKIT_GPU_BUILD=build-carry MXKIT_PARTS="tests memcheck" bash scripts/gpu_multi_check.sh
# The NCCL library is loaded at run time (MXKIT_NCCL_LIBRARY, which gpu_multi_check.sh sets to
# PyTorch's wheel there); nccl_abi_check needs the wheel's nccl.h and is built on the device only.
set -euo pipefail
cd "$(dirname "$0")/.."
work=${MXKIT_CARRY_WORK:-build/carry}
targets="catch2_test_nccl_communicator catch2_test_nccl_quantized_gather catch2_test_nccl_sharded_training 06_train_gpu bench_allreduce"
cmake -S . -B "$work" -DCMAKE_BUILD_TYPE=Release -DMXKIT_GPU=CUDA -DCMAKE_CUDA_ARCHITECTURES=90 \
  "-DCMAKE_PREFIX_PATH=$PWD/.deps/catch2/usr" -DMXKIT_BUILD_TESTS=ON -DMXKIT_BUILD_HOST_TESTS=OFF \
  -DMXKIT_BUILD_EXAMPLES=ON -DMXKIT_BUILD_BENCH=ON >/dev/null
# shellcheck disable=SC2086
cmake --build "$work" -j "$(nproc)" --target $targets
rm -rf build-carry
for t in $targets; do
  f=$(cd "$work" && find . -name "$t" -type f -perm -u+x | head -1)
  [ -n "$f" ] || { echo "no $t in $work" >&2; exit 1; }
  mkdir -p "build-carry/$(dirname "$f")"
  strip -o "build-carry/$f" "$work/$f"
done
du -sh build-carry
