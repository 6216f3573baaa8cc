#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One device call (kind nvidia-h200, carry [".deps"]) that re-checks everything GPU at one commit:
# the quantizer's tests + compute-sanitizer + benchmark (gpu_quantize_check.sh) and the GEMM tests
# + benchmark (gpu_gemm_check.sh), keeping the key logs and the RESULTS.md rows in $OUT.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
# The device copy of the tree has no .git: pass MXKIT_COMMIT=<short hash> to label the rows.
export MXKIT_COMMIT=${MXKIT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
final=${OUT:-$PWD/build-gpu-out}
mkdir -p "$final" /tmp/mxkit_q /tmp/mxkit_g
OUT=/tmp/mxkit_q bash scripts/gpu_quantize_check.sh > /dev/null 2>&1; q=$?
OUT=/tmp/mxkit_g bash scripts/gpu_gemm_check.sh "${1:-full}" > "$final/gemm_summary.txt" 2>&1; g=$?
cp /tmp/mxkit_q/log.txt "$final/quantize_log.txt"
cp /tmp/mxkit_q/results_rows.md "$final/quantize_rows.md" 2>/dev/null
cp /tmp/mxkit_g/gemm_rows.md /tmp/mxkit_g/test_gemm.log /tmp/mxkit_g/bench_gemm.log /tmp/mxkit_g/memcheck_gemm.log "$final/" 2>/dev/null
grep -E "tests passed|memcheck|ERROR SUMMARY|rc=" "$final/quantize_log.txt" | tail -12
tail -40 "$final/gemm_summary.txt"
echo "quantize script rc=$q, gemm script rc=$g"
