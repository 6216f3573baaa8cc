#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The device training backend on a GPU machine in one call (device tool, kind nvidia-h200, carry
# [".deps"]): builds the named targets with -j16 (default: the backend test, the layer and
# training benchmarks and the GPU training program), runs the backend test (and under
# compute-sanitizer memcheck unless MXKIT_MEMCHECK=0), then each benchmark with --record. Logs
# and bench/RESULTS.md land in $OUT.
#   MXKIT_TARGETS   targets to build (space-separated)
#   MXKIT_TESTS     test programs to run (default catch2_test_device_backend catch2_test_device_training)
#   MXKIT_BENCHES   benchmark command lines to run, separated by ";" (unset: bench_layer; bench_train; empty: none)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
final=${OUT:-build-gpu-out}
mkdir -p "$final"
build=${MXKIT_GPU_BUILD:-build-gpu-train}
targets=${MXKIT_TARGETS:-catch2_test_device_backend catch2_test_device_training bench_layer bench_train 06_train_gpu}
tests=${MXKIT_TESTS:-catch2_test_device_backend catch2_test_device_training}
benches=${MXKIT_BENCHES-bench_layer --record; bench_train --record}
# The device's copy of the tree may carry a stale .git: pass the commit measured as MXKIT_COMMIT
# (bench_common.hpp prefers it), e.g. MXKIT_COMMIT=$(git rev-parse --short HEAD) from this side.
[ -n "${MXKIT_COMMIT:-}" ] || echo "note: MXKIT_COMMIT not set; RESULTS.md rows take the commit git reports here"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
start=$SECONDS
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DMXKIT_GPU=CUDA -DCMAKE_CUDA_ARCHITECTURES=90 \
  "-DCMAKE_PREFIX_PATH=$PWD/.deps/catch2/usr" -DMXKIT_BUILD_TESTS=ON -DMXKIT_BUILD_HOST_TESTS=OFF \
  -DMXKIT_BUILD_EXAMPLES=ON -DMXKIT_BUILD_BENCH=ON >"$final/configure.log" 2>&1 || { tail -30 "$final/configure.log"; exit 1; }
# shellcheck disable=SC2086
cmake --build "$build" -j 16 --target $targets >"$final/build.log" 2>&1 || { grep -E "error" "$final/build.log" | head -40; exit 1; }
echo "build: $((SECONDS - start)) s"
status=0
for name in $tests; do
  f=$(find "$build" -name "$name" -type f -perm -u+x | head -1)
  [ -n "$f" ] || { echo "$name: not built"; status=1; continue; }
  t0=$SECONDS
  timeout 400 "$f" -s -r compact >"$final/$name.log" 2>&1
  rc=$?
  [ $rc -ne 0 ] && status=1
  echo "$name rc=$rc $((SECONDS - t0)) s: $(grep -hE 'All tests passed|test cases' "$final/$name.log" | tail -1)"
  [ $rc -ne 0 ] && grep -B2 -A12 "FAILED\|failed" "$final/$name.log" | head -120
  if [ "${MXKIT_MEMCHECK:-1}" != 0 ]; then
    t0=$SECONDS
    timeout 500 compute-sanitizer --tool memcheck --error-exitcode 99 "$f" "~[api-error]" >"$final/$name.memcheck.log" 2>&1
    mrc=$?
    [ $mrc -ne 0 ] && { status=1; grep -m5 -A6 "Invalid\|ERROR\|FAILED" "$final/$name.memcheck.log"; }
    echo "$name memcheck rc=$mrc $((SECONDS - t0)) s"
  fi
done
IFS=';' read -ra cmds <<<"$benches"
for cmd in "${cmds[@]}"; do
  read -ra words <<<"$cmd"
  [ ${#words[@]} -gt 0 ] || continue
  f=$(find "$build" -name "${words[0]}" -type f -perm -u+x | head -1)
  [ -n "$f" ] || { echo "${words[0]}: not built"; status=1; continue; }
  t0=$SECONDS
  timeout 600 "$f" "${words[@]:1}" >"$final/${words[0]}.log" 2>&1
  rc=$?
  [ $rc -ne 0 ] && status=1
  echo "== ${words[*]} rc=$rc $((SECONDS - t0)) s"
  grep -v "^peer: \(torch_version\|device_name\)" "$final/${words[0]}.log" | tail -40
done
cp bench/RESULTS.md "$final/RESULTS.md"
echo "status=$status"
exit $status
