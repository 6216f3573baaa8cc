#!/usr/bin/env bash
# The project's test command (README "Tests"):   bash scripts/test.sh [stage...]
# Stages, all by default, each in its own build folder under $MXKIT_BUILD_ROOT (default build/):
#   release   Release host build (MXKIT_GPU=OFF) with the default compiler; every ctest test
#             (unit, exhaustive, per-header compile, README, C++17 and SPDX checks, packaging
#             including the offline lean install).
#   sanitize  AddressSanitizer + UndefinedBehaviorSanitizer build with clang when one is installed
#             (so host code is checked by a second compiler too), else the default compiler;
#             ctest without the `package` label (the consumer projects are not sanitized builds).
#             MXKIT_SANITIZE_SKIP_LABELS=exhaustive also skips the [exhaustive] test cases there
#             (not needed today: they take seconds under the sanitizers).
#   cuda      -DMXKIT_GPU=CUDA when nvcc is found: the CUDA kernels, GPU tests, GPU header checks
#             and benchmarks compile; the GPU tests run and report themselves skipped where no
#             GPU is present; CUDA consumers of the package build and run.
#   hip       -DMXKIT_GPU=HIP when clang++-22 is found: device-only compile for AMD GPUs (tests
#             and every GPU header), host compiles, a host link of two units.
# cuda/hip are skipped where their compiler is missing, except under CI=true, where that fails.
# Environment: MXKIT_JOBS (default 2), MXKIT_SANITIZE_CXX, MXKIT_FETCH_CATCH2 (default ON),
# MXKIT_CUDA_CMAKE_ARGS, MXKIT_HIP_CMAKE_ARGS (extra configure arguments).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

root=${MXKIT_BUILD_ROOT:-build}
jobs=${MXKIT_JOBS:-2}
skip_labels=${MXKIT_SANITIZE_SKIP_LABELS:-}
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(release sanitize cuda hip)

# Tests, examples and benchmarks are off by default (a plain configure is the lean install):
# every stage asks for them, and for a Catch2 download where no Catch2 package is installed
# (MXKIT_FETCH_CATCH2=OFF forbids it).
common=(-DMXKIT_BUILD_TESTS=ON -DMXKIT_BUILD_EXAMPLES=ON -DMXKIT_BUILD_BENCH=ON
        "-DMXKIT_FETCH_CATCH2=${MXKIT_FETCH_CATCH2:-ON}")
# The GPU machine has no Catch2 package; the team unpacks one here (git-ignored).
[ -d .deps/catch2/usr ] && common+=("-DCMAKE_PREFIX_PATH=$PWD/.deps/catch2/usr")

summary=()
failed=0
note() { printf '\n=== %s\n' "$*"; }
record() {  # stage status seconds detail
  summary+=("$(printf '%-9s %-7s %6ss  %s' "$1" "$2" "$3" "$4")")
  [ "$2" = FAILED ] && failed=1
}

# configure + build + ctest; $1 stage, $2 build dir, $3 ctest label exclusion regex ('' none),
# the rest cmake arguments.
build_and_test() {
  local stage=$1 dir=$2 exclude=$3
  shift 3
  local start=$SECONDS ctest_args=(--test-dir "$dir" -j "$jobs" --output-on-failure)
  [ -n "$exclude" ] && ctest_args+=(-LE "$exclude")
  note "$stage: configure $dir"
  if ! cmake -S . -B "$dir" "${common[@]}" "$@"; then
    record "$stage" FAILED $((SECONDS - start)) "configure"; return
  fi
  note "$stage: build"
  if ! cmake --build "$dir" -j "$jobs"; then
    record "$stage" FAILED $((SECONDS - start)) "build"; return
  fi
  note "$stage: ctest ${exclude:+(skipping labels: $exclude)}"
  ctest "${ctest_args[@]}" 2>&1 | tee "$dir/ctest.log"
  local rc=${PIPESTATUS[0]} tally
  tally=$(grep -E 'tests passed|No tests were found' "$dir/ctest.log" | tail -n 1)
  local skipped
  skipped=$(grep -c -F '***Skipped' "$dir/ctest.log")
  [ "$skipped" -gt 0 ] && tally+=" ($skipped skipped)"
  if [ "$rc" -eq 0 ]; then
    record "$stage" passed $((SECONDS - start)) "${tally}${exclude:+; skipped labels: $exclude}"
  else
    record "$stage" FAILED $((SECONDS - start)) "ctest: ${tally}"
  fi
}

# A missing GPU compiler skips its stage on a developer's machine but fails CI (CI=true), where
# both backends must compile.
missing_tool() {  # stage reason
  if [ "${CI:-}" = true ]; then record "$1" FAILED 0 "$2 (required in CI)"; else record "$1" skipped 0 "$2"; fi
}

for stage in "${stages[@]}"; do
  case $stage in
    release)
      build_and_test release "$root/release" "" -DCMAKE_BUILD_TYPE=Release -DMXKIT_GPU=OFF ;;
    sanitize)
      cxx=${MXKIT_SANITIZE_CXX:-}
      if [ -z "$cxx" ]; then
        for c in clang++-22 clang++ c++; do command -v "$c" >/dev/null && { cxx=$(command -v "$c"); break; }; done
      fi
      build_and_test sanitize "$root/sanitize" "package${skip_labels:+|$skip_labels}" \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMXKIT_GPU=OFF "-DCMAKE_CXX_COMPILER=$cxx" "-DMXKIT_SANITIZE=address;undefined"
      summary[-1]+=" ($(basename "$cxx"))" ;;
    cuda)
      nvcc=$(command -v nvcc || true)
      [ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc
      if [ -z "$nvcc" ]; then
        missing_tool cuda "no nvcc on PATH or in /usr/local/cuda/bin"
      else
        # shellcheck disable=SC2086  # word splitting of the extra arguments is intended
        build_and_test cuda "$root/cuda" "" -DCMAKE_BUILD_TYPE=Release -DMXKIT_GPU=CUDA \
          "-DCMAKE_CUDA_COMPILER=$nvcc" -DMXKIT_BUILD_HOST_TESTS=OFF -DMXKIT_BUILD_EXAMPLES=OFF \
          ${MXKIT_CUDA_CMAKE_ARGS:-}
      fi ;;
    hip)
      hipcxx=$(command -v clang++-22 || true)
      if [ -z "$hipcxx" ]; then
        missing_tool hip "no clang++-22"
      else
        # shellcheck disable=SC2086
        build_and_test hip "$root/hip" "" -DCMAKE_BUILD_TYPE=Release -DMXKIT_GPU=HIP \
          "-DCMAKE_HIP_COMPILER=$hipcxx" -DMXKIT_BUILD_HOST_TESTS=OFF -DMXKIT_BUILD_EXAMPLES=OFF \
          ${MXKIT_HIP_CMAKE_ARGS:-}
      fi ;;
    *)
      echo "unknown stage '$stage' (release, sanitize, cuda, hip)" >&2; exit 2 ;;
  esac
done

printf '\n=== mxkit test summary (%s jobs)\n' "$jobs"
printf '%s\n' "${summary[@]}"
if [ $failed -ne 0 ]; then
  echo "RESULT: FAILED"
  exit 1
fi
echo "RESULT: passed"
