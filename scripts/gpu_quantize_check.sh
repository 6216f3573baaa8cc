#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One call on the GPU machine (device tool, kind nvidia-h200) for the quantizer (issue 3):
# configure the CUDA build, build the quantizer's tests, example and benchmark, run the tests,
# run them again under compute-sanitizer memcheck, run the benchmark (rows for bench/RESULTS.md)
# and count the quantize kernel's SASS instructions. Everything lands in $OUT (at most 8 files).
#   run: MXKIT_COMMIT=<short hash> bash scripts/gpu_quantize_check.sh      (carry: [".deps"])
# Optional: MXKIT_NCU_CASE="<bench case name>" profiles that one case with Nsight Compute;
# MXKIT_SKIP_MEMCHECK=1 leaves out the memcheck pass (a quick iteration); MXKIT_PREBUILT=<dir>
# runs binaries built elsewhere for sm_90a (statically linked to cudart, carried in a build*
# folder: tests/gpu/ and bench/gpu/ as in a build tree) instead of building here, which saves
# about five minutes of device time.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-build-gpu-out}
mkdir -p "$out"
log=$out/log.txt
build=build-gpu
jobs=${MXKIT_JOBS:-16}
exec > >(tee -a "$log") 2>&1
step() { printf '\n===== %s (%ss)\n' "$*" "$SECONDS"; }

step "device"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
tests=(catch2_test_quantize catch2_test_quantize_dequantize catch2_test_quantize_fp8)
if [ -n "${MXKIT_PREBUILT:-}" ]; then
  build=$MXKIT_PREBUILT
  echo "prebuilt binaries from $build"
else
  step "configure"
  cmake -S . -B $build -DCMAKE_BUILD_TYPE=Release -DMXKIT_GPU=CUDA -DCMAKE_CUDA_ARCHITECTURES=90a \
    "-DCMAKE_PREFIX_PATH=$PWD/.deps/catch2/usr" -DMXKIT_BUILD_TESTS=ON -DMXKIT_BUILD_HOST_TESTS=OFF \
    -DMXKIT_BUILD_EXAMPLES=OFF -DMXKIT_BUILD_BENCH=ON >"$out/configure.txt" 2>&1 || { tail -30 "$out/configure.txt"; exit 1; }
  step "build"
  cmake --build $build -j "$jobs" --target "${tests[@]}" 02_embed_device_quantize bench_quantize_gpu 2>&1 | grep -E "error|warning|Error"
fi
[ -x $build/bench/gpu/bench_quantize_gpu ] || { echo "build failed"; exit 1; }

step "tests"
test_rc=0
for t in "${tests[@]}" 02_embed_device_quantize; do
  f=$build/tests/gpu/$t
  [ -x "$f" ] || f=$(find $build -name "$t" -type f -perm -u+x | head -1)
  [ -n "$f" ] || { echo "missing $t"; test_rc=1; continue; }
  timeout 300 "$f" >"$out/test.txt" 2>&1
  rc=$?
  echo "$t: rc=$rc; $(grep -E 'test cases|All tests passed' "$out/test.txt" | tr '\n' ' ')"
  [ $rc -eq 0 ] || { test_rc=$rc; tail -40 "$out/test.txt"; }
done
rm -f "$out/test.txt"

step "compute-sanitizer memcheck"
san_rc=0
[ -n "${MXKIT_SKIP_MEMCHECK:-}" ] && { echo "skipped (MXKIT_SKIP_MEMCHECK)"; tests_memcheck=(); } || tests_memcheck=("${tests[@]}")
for t in "${tests_memcheck[@]}"; do
  timeout 300 compute-sanitizer --tool memcheck --error-exitcode 99 $build/tests/gpu/$t "~[api-error]" >"$out/memcheck.txt" 2>&1
  rc=$?
  echo "memcheck $t: rc=$rc; $(grep -E 'ERROR SUMMARY|test cases|All tests passed' "$out/memcheck.txt" | tr '\n' ' ')"
  [ $rc -eq 0 ] || { san_rc=$rc; tail -40 "$out/memcheck.txt"; }
done
compute-sanitizer --tool memcheck --error-exitcode 99 $build/tests/gpu/02_embed_device_quantize 2>&1 | tail -3

step "benchmark"
$build/bench/gpu/bench_quantize_gpu --results "$out/results_rows.md"
bench_rc=$?

step "SASS of quantize_kernel<mxfp4, bf16> and <mxfp8_e4m3, bf16>"
cuobjdump --dump-sass $build/bench/gpu/bench_quantize_gpu >"$out/sass.txt" 2>&1
python3 - "$out/sass.txt" <<'PY' | tee "$out/sass_stats.txt"
import re, sys, collections
text = open(sys.argv[1]).read()
funcs = re.split(r"\n\s*Function : ", text)
for f in funcs[1:]:
    name = f.split("\n", 1)[0].strip()
    if "quantize_kernel" not in name: continue
    ops = re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)(?:\.[A-Z0-9_.]+)?", f)
    c = collections.Counter(ops)
    print(f"{name[:140]}: {sum(c.values())} instructions")
    print("   " + ", ".join(f"{k} {v}" for k, v in c.most_common(40)))
    if "quantize_kernelINS0_9mx_formatILNS0_7mx_typeE0EEENS0_9minifloatINS0_8encodingILi8ELi7E" in name and "Lb1ELb0ELi6E" in name:
        open(sys.argv[1].replace("sass.txt", "sass_mxfp4_bf16.txt"), "w").write(name + "\n" + f)
PY
rm -f "$out/sass.txt"

if [ -n "${MXKIT_NCU_CASE:-}" ]; then
  step "ncu: $MXKIT_NCU_CASE"
  MXKIT_BENCH_ONLY="$MXKIT_NCU_CASE" ncu --clock-control none -k regex:quantize_kernel --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section InstructionStats --section Occupancy \
    --section WarpStateStats --section MemoryWorkloadAnalysis \
    --metrics sass__inst_executed_per_opcode,smsp__inst_executed_pipe_alu.sum,smsp__inst_executed_pipe_fma.sum,smsp__inst_executed_pipe_lsu.sum,smsp__inst_executed.sum,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio \
    --print-metric-instances values $build/bench/gpu/bench_quantize_gpu --repeats 1 >"$out/ncu.txt" 2>&1
  grep -v -E "^ *(----|Metric Name)" "$out/ncu.txt" | grep -v -E "stalled.* 0(\.0+)?$" | tail -110
fi

step "summary"
echo "tests rc=$test_rc, memcheck rc=$san_rc, bench rc=$bench_rc"
