#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The project's demo (README "Demo"): builds the examples (Release) and runs them in the order
# of MXKIT_DEMO_PROGRAMS in examples/CMakeLists.txt. Extra arguments go to cmake's configure
# step, e.g. bash scripts/demo.sh -DMXKIT_GPU=CUDA.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${MXKIT_BUILD_ROOT:-build}/demo
jobs=${MXKIT_JOBS:-2}

cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DMXKIT_BUILD_EXAMPLES=ON -DMXKIT_BUILD_TESTS=OFF \
  -DMXKIT_BUILD_BENCH=OFF "$@" >/dev/null
cmake --build "$build" -j "$jobs"
while IFS= read -r program; do
  [ -n "$program" ] || continue
  printf '\n===== %s\n' "$(basename "$program")"
  "$program"
done < "$build/examples/demo_programs.txt"
