#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Issue 35's GPU checks in one call (device tool, kind nvidia-h200 or nvidia-h100-x1, carry
# [".deps"]): the README's device-side code in a kernel (catch2_test_readme_device, also under
# compute-sanitizer memcheck), the GPU training program on its default data found from the
# executable (run from an empty folder, MXKIT_DATA_DIR unset, then installed with
# --component mxkit_examples and run from there), and the compile time of one kernel calling
# gpu::quantize under the README's nvcc line against -arch=sm_90a. Logs land in $OUT.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
final=${OUT:-build-gpu-out}
mkdir -p "$final"
build=${MXKIT_GPU_BUILD:-build-gpu-newcomer}
unset MXKIT_DATA_DIR
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
start=$SECONDS
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DMXKIT_GPU=CUDA -DCMAKE_CUDA_ARCHITECTURES=90 \
  "-DCMAKE_PREFIX_PATH=$PWD/.deps/catch2/usr" -DMXKIT_BUILD_TESTS=ON -DMXKIT_BUILD_HOST_TESTS=OFF \
  -DMXKIT_BUILD_EXAMPLES=ON >"$final/configure.log" 2>&1 || { tail -30 "$final/configure.log"; exit 1; }
cmake --build "$build" -j 16 --target catch2_test_readme_device 06_train_gpu >"$final/build.log" 2>&1 ||
  { grep -E "error" "$final/build.log" | head -40; exit 1; }
echo "build: $((SECONDS - start)) s"
status=0
t="$build/tests/gpu/catch2_test_readme_device"
"$t" >"$final/readme_device.log" 2>&1; rc=$?
[ $rc -ne 0 ] && status=1
compute-sanitizer --tool memcheck --error-exitcode 99 "$t" >"$final/readme_device.memcheck.log" 2>&1; mrc=$?
[ $mrc -ne 0 ] && status=1
echo "catch2_test_readme_device: rc=$rc memcheck rc=$mrc; $(grep -hE 'All tests passed|test cases' "$final/readme_device.log" | tail -1)"

# The training program's default data, from the build tree and from an install (4 tiny steps).
tiny=(--layers 1 --d-model 128 --heads 2 --kv-heads 1 --ffn 256 --seq 64 --batch 2 --steps 4 --eval-every 4 --eval-batches 1)
empty=$(mktemp -d)
exe=$(find "$build" -name 06_train_gpu -type f -perm -u+x | head -1)
(cd "$empty" && "$OLDPWD/$exe" "${tiny[@]}") >"$final/train_build_tree.log" 2>&1; rc=$?
[ $rc -ne 0 ] && status=1
echo "06_train_gpu from the build tree: rc=$rc; $(grep -h '^data:' "$final/train_build_tree.log")"
cmake --install "$build" --component mxkit_examples --prefix "$empty/prefix" >"$final/install.log" 2>&1 || status=1
(cd "$empty" && ./prefix/bin/06_train_gpu "${tiny[@]}") >"$final/train_installed.log" 2>&1; rc=$?
[ $rc -ne 0 ] && status=1
echo "06_train_gpu installed: rc=$rc; $(grep -h '^data:' "$final/train_installed.log")"

# nvcc: the README's line against -arch=sm_90a, one kernel calling gpu::quantize (a compile each).
src=$(mktemp -d)/quantize_call.cu
printf '#include <mxkit/gpu/quantize.hpp>\nmxkit::gpu::device_mx_pair call(mxkit::matrix_view<const float> in) {\n  return mxkit::gpu::quantize_both(in, mxkit::mx_type::mxfp4);\n}\n' >"$src"
for flags in "-arch=sm_90a" "--generate-code=arch=compute_90a,code=[sm_90a]"; do
  t0=$(date +%s%N)
  nvcc -std=c++20 "$flags" -I include -c "$src" -o /dev/null >>"$final/nvcc.log" 2>&1 || echo "nvcc $flags failed (see nvcc.log)"
  echo "nvcc $flags: $(( ($(date +%s%N) - t0) / 1000000 )) ms"
done
echo "status=$status"
exit $status
