#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One call on the GPU machine (device tool, kind nvidia-h200): build bench_quantize_gpu alone and
# profile one launch of the quantizer per case with Nsight Compute: duration, issue slots, L2 and
# DRAM throughput, L2 sectors read and written, and the stall reasons. The figures behind
# bench/NOTES_quantize.md's "where it stands".
#   run: bash scripts/gpu_quantize_profile.sh ["<bench case>" ...]      (carry: [".deps"])
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-build-gpu-out}
mkdir -p "$out"
cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=("mxfp4 rowwise+columnwise hadamard bf16 16384x8192" "mxfp4 rowwise+columnwise bf16 16384x8192"
                                 "mxfp4 rowwise hadamard bf16 16384x8192")
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DMXKIT_GPU=CUDA -DCMAKE_CUDA_ARCHITECTURES=90a \
  "-DCMAKE_PREFIX_PATH=$PWD/.deps/catch2/usr" -DMXKIT_BUILD_TESTS=OFF -DMXKIT_BUILD_HOST_TESTS=OFF \
  -DMXKIT_BUILD_EXAMPLES=OFF -DMXKIT_BUILD_BENCH=ON >"$out/configure.txt" 2>&1 || { tail -20 "$out/configure.txt"; exit 1; }
cmake --build build-gpu -j "${MXKIT_JOBS:-16}" --target bench_quantize_gpu 2>&1 | grep -E "error"
echo "built in ${SECONDS}s"
for c in "${cases[@]}"; do
  f=$out/ncu_$(echo "$c" | tr ' +' '__').txt
  MXKIT_BENCH_ONLY="$c" ncu --clock-control none -k regex:quantize_kernel --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section ComputeWorkloadAnalysis \
    --metrics smsp__inst_executed.sum,lts__t_sectors_op_write.sum,lts__t_sectors_op_read.sum,lts__t_requests_op_write.sum,dram__bytes_read.sum,dram__bytes_write.sum,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio \
    build-gpu/bench/gpu/bench_quantize_gpu --repeats 1 >"$f" 2>&1
  echo "== $c"
  grep -E "Duration|DRAM Throughput|L2 Cache Throughput|L1/TEX Cache|Issue Slots Busy|Executed Ipc A|Mem Busy|inst_executed.sum|lts__t_s|lts__t_r|dram__bytes|stalled_(long|math|wait|no_inst|short)" "$f" |
    grep -v " 0$" | sed 's/  */ /g'
done
