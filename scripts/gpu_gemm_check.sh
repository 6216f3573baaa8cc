#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The GEMM check on the GPU machine (device tool, kind nvidia-h200, carry [".deps"]):
#   bash scripts/gpu_gemm_check.sh [full|quick|tests|bench|profile]      (default: full)
# Builds the CUDA GEMM test and benchmark for sm_90a (-j16), runs the GPU GEMM tests (which must
# exercise the sm90 path: MXKIT_EXPECT_GEMM_PATH), then the benchmark (validates sampled rows of
# every case against the host reference with a poisoned output, then times mxkit beside cuBLAS
# bf16 and cuBLASLt fp8), and leaves logs, the SASS summary and the RESULTS.md rows in $OUT
# (append $OUT/gemm_rows.md, less its header, to bench/RESULTS.md).
#   quick    tests + the 8192^3 fprop only
#   profile  the 8192^3 MXFP8 fprop once under ncu (stall reasons), no tests
# A whole run takes about 2.5 minutes of device time (build ~45 s, tests ~5 s, benchmark ~60 s).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
mode=${1:-full}
OUT=${OUT:-$PWD/build-h4/out}
mkdir -p "$OUT"
build=build-h4/cuda
export MXKIT_COMMIT=${MXKIT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
status=0

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit,temperature.gpu --format=csv 2>&1 | tee "$OUT/device.txt"

start=$SECONDS
if [ -n "${MXKIT_PREBUILT:-}" ]; then  # binaries built elsewhere for sm_90a (as gpu_quantize_check.sh)
  build=$MXKIT_PREBUILT
  echo "prebuilt binaries from $build"
else
  if ! cmake -S . -B $build -G Ninja -DCMAKE_BUILD_TYPE=Release -DMXKIT_GPU=CUDA -DCMAKE_CUDA_ARCHITECTURES=90a \
       -DCMAKE_PREFIX_PATH="$PWD/.deps/catch2/usr" -DMXKIT_BUILD_TESTS=ON -DMXKIT_BUILD_BENCH=ON -DMXKIT_BUILD_HOST_TESTS=OFF -DMXKIT_BUILD_EXAMPLES=OFF >"$OUT/build.log" 2>&1; then
    echo "configure failed"; tail -30 "$OUT/build.log"; exit 1
  fi
  if ! cmake --build $build -j16 --target catch2_test_gemm bench_gemm >>"$OUT/build.log" 2>&1; then
    echo "build failed"; grep -E "error|Error" "$OUT/build.log" | head -40; exit 1
  fi
  echo "build: $((SECONDS - start)) s"
fi
bench=$build/bench/gpu/bench_gemm

# The kernels' machine code: tensor-core MMAs present (QGMMA), no local-memory traffic.
if command -v cuobjdump >/dev/null; then
  cuobjdump --dump-sass "$bench" > "$OUT/sass.txt" 2>/dev/null
  awk '/Function :/ {f=$3} /QGMMA/ {q[f]++} /STL/ {s[f]++} /LDL/ {l[f]++} END {for (k in q) printf "%-100s QGMMA %d STL %d LDL %d\n", k, q[k], s[k], l[k]}' \
    "$OUT/sass.txt" | sort | tee "$OUT/sass_summary.txt"
  gzip -f "$OUT/sass.txt"
fi

if [ "$mode" = profile ]; then
  ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  [ -z "$ncu" ] && { echo "no ncu"; exit 1; }
  # --clock-control none: the card's clocks are left as found (METHOD.md).
  timeout 300 "$ncu" --clock-control none --kernel-name regex:gemm_kernel --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis --metrics regex:smsp__pcsamp_warps_issue_stalled_.* \
    "$bench" --quick --no-check --no-peers --format mxfp8 --repeats 3 >"$OUT/ncu.txt" 2>&1
  grep -E "pcsamp_warps_issue_stalled|Duration|SM Frequency|Issue Slots|L1/TEX Cache|FMA" "$OUT/ncu.txt" | grep -v " 0$" | head -60
  exit 0
fi

if [ "$mode" != bench ]; then
  start=$SECONDS
  MXKIT_EXPECT_GEMM_PATH=sm90 timeout 240 $build/tests/gpu/catch2_test_gemm --durations yes >"$OUT/test_gemm.log" 2>&1
  rc=$?
  tail -25 "$OUT/test_gemm.log"
  echo "catch2_test_gemm: rc=$rc, $((SECONDS - start)) s"
  [ $rc -ne 0 ] && status=1
  if [ "$mode" = full ] && command -v compute-sanitizer >/dev/null; then
    start=$SECONDS
    timeout 300 compute-sanitizer --tool memcheck --error-exitcode 99 $build/tests/gpu/catch2_test_gemm >"$OUT/memcheck_gemm.log" 2>&1
    rc=$?
    echo "memcheck catch2_test_gemm: rc=$rc, $(grep -E 'ERROR SUMMARY|All tests passed|test cases' "$OUT/memcheck_gemm.log" | tr '\n' ' ') $((SECONDS - start)) s"
    [ $rc -ne 0 ] && { status=1; grep -m5 -A6 "Invalid\|ERROR" "$OUT/memcheck_gemm.log"; }
  fi
fi

if [ "$mode" != tests ]; then
  args=(--results "$OUT/gemm_rows.md" --repeats 10)
  [ "$mode" = quick ] && args+=(--quick)
  start=$SECONDS
  timeout 480 "$bench" "${args[@]}" >"$OUT/bench_gemm.log" 2>&1
  rc=$?
  grep -v -E "^  check|^appended|TFLOP/s" "$OUT/bench_gemm.log" | tail -32
  echo "checks ok: $(grep -c '^  check.* ok' "$OUT/bench_gemm.log"), failed: $(grep -c '^  check.*FAILED' "$OUT/bench_gemm.log")"
  grep "FAILED" "$OUT/bench_gemm.log" | head -5
  echo "bench_gemm: rc=$rc, $((SECONDS - start)) s"
  [ $rc -ne 0 ] && status=1
fi
exit $status
