#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The training program's refusals (examples/train_program_test.cmake, ctest example.05_train.* on
# the host) run against the GPU program, 06_train_gpu, on a machine with a GPU: outputs that are
# inputs or each other, existing files that are not the program's, outputs that cannot be saved,
# another run's checkpoint, a diverged run (--lr 1e30) and the messages for sizes too large. The
# /dev/zero case is left out (the GPU runtime needs more address space than its 1 GiB limit).
# Usage: scripts/gpu_train_program_check.sh [build dir]   (default build/train; CUDA, or
#        MXKIT_GPU=HIP in the environment)
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/train}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release "-DMXKIT_GPU=${MXKIT_GPU:-CUDA}" -DMXKIT_BUILD_EXAMPLES=ON || exit 1
cmake --build "$build" -j "$(nproc)" --target 06_train_gpu || exit 1
program=$(find "$build" -name 06_train_gpu -type f -perm -u+x | head -n 1)
[ -n "$program" ] || { echo "no 06_train_gpu under $build" >&2; exit 1; }
failed=0
for case in aliases foreign unwritable resume_config diverged messages; do
  if MXKIT_DATA_DIR=$PWD/data cmake "-DPROGRAM=$PWD/$program" "-DWORK=$PWD/$build/train_program_test/$case" "-DCASE=$case" \
       "-DDATA=$PWD/data/stories.txt" -DMEMORY_LIMIT=OFF \
       "-DV1_CHECKPOINT=$PWD/tests/fuzz/corpus/fuzz_checkpoint_load/weights.ckpt" -P examples/train_program_test.cmake; then
    echo "train program on the GPU, $case: passed"
  else
    echo "train program on the GPU, $case: FAILED"
    failed=1
  fi
done
exit $failed
