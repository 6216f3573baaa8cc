#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Every GPU test on a GPU machine in one call (device tool, kind nvidia-h200, carry [".deps"]):
# configures the CUDA build (Catch2 from .deps), builds every tests/gpu program and the embedding
# example with -j16, runs each, then runs each again under compute-sanitizer memcheck. A short
# table is printed last; the logs land in $OUT/gpu_test_logs.tar.gz (the device returns 8 files).
#   MXKIT_MEMCHECK_SKIP="regex"  test names run without memcheck (none by default)
#   MXKIT_TEST_GPUS="0 1"        GPUs to spread the programs over, one worker each, programs
#                                dealt round-robin (default "0": one after another on GPU 0)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
final=${OUT:-build-gpu-out}
out=$(mktemp -d)
build=${MXKIT_GPU_BUILD:-build-gpu-all}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
start=$SECONDS
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DMXKIT_GPU=CUDA -DCMAKE_CUDA_ARCHITECTURES=90 \
  "-DCMAKE_PREFIX_PATH=$PWD/.deps/catch2/usr" -DMXKIT_BUILD_TESTS=ON -DMXKIT_BUILD_HOST_TESTS=OFF \
  -DMXKIT_BUILD_EXAMPLES=OFF -DMXKIT_BUILD_BENCH=OFF >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
cmake --build "$build" -j 16 >"$out/build.log" 2>&1 || { grep -E "error" "$out/build.log" | head -30; exit 1; }
echo "build: $((SECONDS - start)) s"
status=0
programs=()
for f in "$build"/tests/gpu/catch2_test_* "$build"/tests/gpu/02_embed_device_quantize; do
  [ -x "$f" ] && programs+=("$f")
done
# One program: its run, then its run under memcheck; a row in $out/rows.<gpu>, a failure in
# $out/failed.<gpu>.
run_one() {  # program gpu
  local f=$1 gpu=$2 name rc mrc t0=$SECONDS
  name=$(basename "$f")
  CUDA_VISIBLE_DEVICES=$gpu timeout 300 "$f" >"$out/$name.log" 2>&1
  rc=$?
  # 77: the program skipped itself (the NCCL tests need two GPUs and see one here; they run in
  # scripts/gpu_multi_check.sh).
  [ $rc -ne 0 ] && [ $rc -ne 77 ] && { echo "$name" >>"$out/failed.$gpu"; tail -30 "$out/$name.log"; }
  mrc=-
  if [ $rc -eq 77 ]; then
    mrc=skipped
  elif [ -z "${MXKIT_MEMCHECK_SKIP:-}" ] || ! [[ $name =~ ${MXKIT_MEMCHECK_SKIP} ]]; then
    # ~[api-error]: the test cases that make a runtime call fail on purpose (memcheck reports those).
    CUDA_VISIBLE_DEVICES=$gpu timeout 400 compute-sanitizer --tool memcheck --error-exitcode 99 "$f" "~[api-error]" \
      >"$out/$name.memcheck.log" 2>&1
    mrc=$?
    [ "$mrc" -ne 0 ] && { echo "$name (memcheck)" >>"$out/failed.$gpu"; grep -m5 -A6 "Invalid\|ERROR\|FAILED" "$out/$name.memcheck.log"; }
  fi
  printf '%-36s gpu %s rc=%-3s memcheck rc=%-3s %4ss  %s\n' "$name" "$gpu" "$rc" "$mrc" $((SECONDS - t0)) \
    "$(grep -hE 'All tests passed|test cases' "$out/$name.log" | tail -1)" >>"$out/rows.$gpu"
}
read -r -a gpus <<<"${MXKIT_TEST_GPUS:-0}"
for w in "${!gpus[@]}"; do
  (for ((i = w; i < ${#programs[@]}; i += ${#gpus[@]})); do run_one "${programs[$i]}" "${gpus[$w]}"; done) &
done
wait
cat "$out"/rows.* 2>/dev/null | sort
[ ${#programs[@]} -gt 0 ] || { echo "no GPU test programs were built"; status=1; }
if cat "$out"/failed.* >/dev/null 2>&1; then status=1; echo "failed:"; cat "$out"/failed.*; fi
echo "status=$status"
mkdir -p "$final" && tar -czf "$final/gpu_test_logs.tar.gz" -C "$out" .
exit $status
