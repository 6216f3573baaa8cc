#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One call on a machine of 2 H200 (device tool, kind nvidia-h200-x2, needs_h200, carry [".deps"]):
# the 70B LoRA run and its peer (scripts/gpu_lora70b_check.sh, deadline MXKIT_DEADLINE_S, default
# 470 s), while a second build makes the device backend's tests and the Python module; then, in
# the time left, those tests on the two GPUs side by side (never beside the peer, whose timing
# would suffer): catch2_test_device_backend and catch2_test_device_training on GPU 0, the
# Python tests (scripts/gpu_python_check.sh's pytest) on GPU 1. Logs in $OUT.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
export NCCL_NVLS_ENABLE=0
final=${OUT:-build-gpu-out}
mkdir -p "$final"
start=$SECONDS
extra=build-gpu-extra
(
  cmake -S . -B "$extra" -DCMAKE_BUILD_TYPE=Release -DMXKIT_GPU=CUDA -DCMAKE_CUDA_ARCHITECTURES=90 \
    "-DCMAKE_PREFIX_PATH=$PWD/.deps/catch2/usr" -DMXKIT_BUILD_TESTS=ON -DMXKIT_BUILD_HOST_TESTS=OFF \
    -DMXKIT_BUILD_EXAMPLES=OFF -DMXKIT_BUILD_BENCH=OFF -DMXKIT_BUILD_PYTHON=ON "-DPython3_EXECUTABLE=$(command -v python3)" &&
    nice cmake --build "$extra" -j 12 --target catch2_test_device_backend catch2_test_device_training _mxkit mxkit_python_cpp_reference
) >/tmp/mxkit_extra_build.log 2>&1 &
build_pid=$!
MXKIT_DEADLINE_S=${MXKIT_DEADLINE_S:-470} bash scripts/gpu_lora70b_check.sh
lora=$?
wait "$build_pid"; echo "extra build rc=$? at $((SECONDS - start)) s"; tail -5 /tmp/mxkit_extra_build.log
left=$((575 - (SECONDS - start)))
[ $left -lt 20 ] && left=20
for t in catch2_test_device_backend catch2_test_device_training; do
  f=$(find "$extra" -name "$t" -type f -perm -u+x | head -1)
  [ -n "$f" ] && CUDA_VISIBLE_DEVICES=0 timeout -k 5 "$left" "$f" -r compact >"$final/$t.log" 2>&1
  echo "$t rc=$? $(grep -hE 'All tests passed|test cases' "$final/$t.log" | tail -1)"
done &
tests_pid=$!
(
  export PYTHONPATH="$PWD/$extra/python" MXKIT_CPP_REFERENCE="$PWD/$extra/python/mxkit_python_cpp_reference" CUDA_VISIBLE_DEVICES=1
  timeout -k 5 "$left" python3 -X faulthandler -m pytest -p no:cacheprovider -v -rs tests/python >"$final/pytest.log" 2>&1
  echo "pytest rc=$?"; tail -4 "$final/pytest.log"
)
wait "$tests_pid"
grep -B3 -A12 "FAILED" "$final"/catch2_test_device_*.log | head -40
grep -E "FAILED|Fatal|Segmentation|Error" "$final/pytest.log" | head -20
echo "lora70b rc=$lora; total $((SECONDS - start)) s"
