#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Every GPU test on a GPU machine in one call (device tool, kind nvidia-h200, carry [".deps"]):
# configures the CUDA build (Catch2 from .deps), builds every tests/gpu program and the embedding
# example with -j16, runs each, then runs each again under compute-sanitizer memcheck. A short
# table is printed last; the logs land in $OUT/gpu_test_logs.tar.gz (the device returns 8 files).
#   MXKIT_MEMCHECK_SKIP="regex"  test names run without memcheck (none by default)
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
rows=()
for f in "$build"/tests/gpu/catch2_test_* "$build"/tests/gpu/02_embed_device_quantize; do
  [ -x "$f" ] || continue
  name=$(basename "$f")
  t0=$SECONDS
  timeout 300 "$f" >"$out/$name.log" 2>&1
  rc=$?
  [ $rc -ne 0 ] && { status=1; tail -30 "$out/$name.log"; }
  mrc=-
  if [ -z "${MXKIT_MEMCHECK_SKIP:-}" ] || ! [[ $name =~ ${MXKIT_MEMCHECK_SKIP} ]]; then
    # ~[api-error]: the test cases that make a runtime call fail on purpose (memcheck reports those).
    timeout 400 compute-sanitizer --tool memcheck --error-exitcode 99 "$f" "~[api-error]" >"$out/$name.memcheck.log" 2>&1
    mrc=$?
    [ "$mrc" -ne 0 ] && { status=1; grep -m5 -A6 "Invalid\|ERROR\|FAILED" "$out/$name.memcheck.log"; }
  fi
  rows+=("$(printf '%-36s rc=%-3s memcheck rc=%-3s %4ss  %s' "$name" "$rc" "$mrc" $((SECONDS - t0)) \
    "$(grep -hE 'All tests passed|test cases' "$out/$name.log" | tail -1)")")
done
printf '%s\n' "${rows[@]}"
echo "status=$status"
mkdir -p "$final" && tar -czf "$final/gpu_test_logs.tar.gz" -C "$out" .
exit $status
