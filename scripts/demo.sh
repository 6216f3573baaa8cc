#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The project's demo (README "Quick start"): builds the examples (Release) and runs them in the
# order of MXKIT_DEMO_PROGRAMS in examples/CMakeLists.txt.
#
#   bash scripts/demo.sh [--gpu] [--help] [cmake configure arguments...]
#
# Host programs only, unless a GPU is present (nvidia-smi lists one) or GPU programs are asked for
# (--gpu, or MXKIT_DEMO_GPU=1): then the GPU examples are built too (MXKIT_GPU detected, or as
# given, e.g. -DMXKIT_GPU=CUDA) and 02_embed_device_quantize runs. MXKIT_DEMO_GPU=0 forces host
# only. Other arguments go to cmake's configure step. MXKIT_BUILD_ROOT (default build) holds the
# build folder demo/, MXKIT_JOBS (default 2) sets the build's parallelism.
#
# Expected time, host only, on 2 cores: about 100 s to build the first time, then about 70 s to run
# when the cores are idle (03_train_recipes is nearly all of it). Measured on 2026-12-02 on 2 cores
# shared with other builds (load average 4 to 5): built in 100 s, ran in 245 s.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${MXKIT_BUILD_ROOT:-build}/demo
jobs=${MXKIT_JOBS:-2}

usage() {  # the comment above, from its third line to the blank line before the expected time
  sed -n '3,/^set -euo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'
}

gpu=${MXKIT_DEMO_GPU:-}
configure_args=()
for arg in "$@"; do
  case "$arg" in
    --gpu) gpu=1 ;;
    -h | --help) usage; exit 0 ;;
    *) configure_args+=("$arg") ;;
  esac
done

# A GPU is present when nvidia-smi lists one ("GPU 0: ...").
gpu_present=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  gpu_present=1
fi
if [ -z "$gpu" ]; then
  gpu=$gpu_present
fi
if [ "$gpu" = 1 ]; then
  why="--gpu or MXKIT_DEMO_GPU=1 asks for them"
  [ "$gpu_present" = 1 ] && why="nvidia-smi lists a GPU"
  echo "demo: host and GPU programs ($why); the GPU build adds minutes of compiling (docs/build.md)"
  gpu_flag=(-DMXKIT_GPU=)  # empty: detected from the installed compilers, unless an argument sets it
else
  echo "demo: host programs only (no GPU listed by nvidia-smi; --gpu or MXKIT_DEMO_GPU=1 builds the GPU ones too)"
  gpu_flag=(-DMXKIT_GPU=OFF)
fi
echo "demo: expected time on 2 cores: about 100 s to build the first time, then about 70 s to run (4 minutes or more when other work loads the cores)"

start=$SECONDS
mkdir -p "$build"
if ! cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DMXKIT_BUILD_EXAMPLES=ON -DMXKIT_BUILD_TESTS=OFF \
  -DMXKIT_BUILD_BENCH=OFF "${gpu_flag[@]}" "${configure_args[@]}" >"$build/configure.log" 2>&1; then
  cat "$build/configure.log" >&2
  echo "demo: the configure failed (its output is above and in $build/configure.log)" >&2
  exit 1
fi
grep -h 'MXKIT_GPU detected as' "$build/configure.log" | sed 's/^-- /demo: /' || true
cmake --build "$build" -j "$jobs"
echo "demo: built in $((SECONDS - start)) s"
run_start=$SECONDS
while IFS= read -r program; do
  [ -n "$program" ] || continue
  printf '\n===== %s\n' "$(basename "$program")"
  "$program"
done < "$build/examples/demo_programs.txt"
printf '\ndemo: ran in %d s (%d s in all)\n' "$((SECONDS - run_start))" "$((SECONDS - start))"
