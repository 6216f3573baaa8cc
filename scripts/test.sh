#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The project's test command (README "Quick start"; docs/build.md):   bash scripts/test.sh [stage...]
# Stages, all by default, each in its own build folder under $MXKIT_BUILD_ROOT (default build/):
#   release   Release host build (MXKIT_GPU=OFF) with the default compiler; every ctest test
#             (per-header compile, documentation, C++17 and SPDX checks, the training program's,
#             packaging including the offline lean install; the Python module's pytest where
#             python3-dev, pybind11, NumPy and pytest are installed, required under CI=true). The
#             unit and exhaustive tests too, unless the sanitize stage runs in the same command
#             with a working sanitizer compiler: then they are built and run once, there.
#   sanitize  AddressSanitizer + UndefinedBehaviorSanitizer build with clang++-22 (so host code is
#             checked by a second compiler too) at -O1 without debug information (UBSan's reports
#             carry their file and line in the checks themselves, ASan's stacks name the
#             functions; line tables cost a third more compile time, -O0 ten times the test
#             time: docs/perf/build.md), without
#             the benchmarks and demo programs (no test runs them), with one header check (the
#             umbrella's: each header alone is the release stage's check);
#             ctest without the `package` label (the consumer projects are not sanitized
#             builds), with sanitizer.* proving the build is sanitized.
#             The compiler must compile, link and run an ASan + UBSan probe first; outside CI a
#             compiler that cannot (no runtime installed) is passed over for clang++, then g++,
#             and the summary names the one used. Labels skipped there: MXKIT_SANITIZE_SKIP_LABELS
#             (default training_run: the tests that train several runs end to end to check a
#             study's or a command's output, which the release stage runs; empty: none;
#             exhaustive|training_run also skips the [exhaustive] cases).
#   fuzz      libFuzzer targets (tests/fuzz) built with clang++-22 and -fsanitize=fuzzer,address,
#             undefined at -O1 -g1; each runs MXKIT_FUZZ_SECONDS (default 30) from its seed
#             corpus, all at once; any finding fails the stage.
#   cuda      -DMXKIT_GPU=CUDA when nvcc is found: the CUDA kernel library (to PTX), GPU tests (in
#             unity batches, one executable: MXKIT_UNITY_GPU_TESTS) and GPU header checks (only
#             the CUDA-specific headers alone when the hip stage runs too) compile (not the GPU
#             benchmarks: scripts/gpu.sh builds those); the GPU tests run and report themselves
#             skipped where no GPU is present; CUDA consumers of the package build and run.
#   hip       -DMXKIT_GPU=HIP when clang++-22 is found: device-only compile for AMD GPUs (tests
#             and every GPU header; the kernel library at -O3 for gfx950, -O1 for gfx942), the
#             kernel library's host compiles, a host link of two units.
# A stage whose tool is missing (sanitize, fuzz: a compiler whose sanitizer runtime links; cuda:
# nvcc; hip: clang++-22) is reported skipped, except under CI=true, where it fails; under CI=true
# the sanitize stage accepts only clang++-22 (or MXKIT_SANITIZE_CXX), never a fallback.
# Environment: MXKIT_JOBS (default 2), MXKIT_SANITIZE_CXX, MXKIT_SANITIZE_SKIP_LABELS, MXKIT_FUZZ_CXX, MXKIT_FUZZ_SECONDS,
# MXKIT_FETCH_CATCH2 (default ON),
# MXKIT_CUDA_CMAKE_ARGS, MXKIT_HIP_CMAKE_ARGS (extra configure arguments).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

root=${MXKIT_BUILD_ROOT:-build}
jobs=${MXKIT_JOBS:-2}
skip_labels=${MXKIT_SANITIZE_SKIP_LABELS-training_run}
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(release sanitize fuzz cuda hip)

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
  local start=$SECONDS ctest_args=(--test-dir "$dir" -j "${ctest_jobs:-$jobs}" --output-on-failure)
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

# A missing tool skips its stage on a developer's machine but fails CI (CI=true), where every
# stage must run.
missing_tool() {  # stage reason
  if [ "${CI:-}" = true ]; then record "$1" FAILED 0 "$2 (required in CI)"; else record "$1" skipped 0 "$2"; fi
}

# Whether compiler $1 compiles, links and runs a probe with the flags that follow: a sanitizer
# flag is accepted by any clang or g++, but without the runtime library (Debian:
# libclang-rt-<version>-dev for clang) the link fails. A libFuzzer probe (-fsanitize=fuzzer) is
# run on one empty input. The probe also fails to compile if ASan is requested but not active.
sanitizer_probe() {  # compiler flags...
  local cxx=$1 dir rc
  shift
  dir=$(mktemp -d) || return 1
  cat > "$dir/probe.cpp" <<'PROBE'
#include <cstddef>
#include <cstdint>
#include <cstdio>
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PROBE_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define PROBE_ASAN 1
#endif
#if !defined(PROBE_ASAN)
#error "AddressSanitizer is not active"
#endif
#if defined(PROBE_FUZZER)
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t*, std::size_t) { return 0; }
#else
int main(int argc, char**) {
  int* p = new int[2]{argc, 0};
  const int r = p[0] - argc;
  delete[] p;
  return r;
}
#endif
PROBE
  if ! "$cxx" -std=c++20 "$@" "$dir/probe.cpp" -o "$dir/probe" > "$dir/log" 2>&1; then
    rc=1
  else
    case " $* " in
      *fuzzer*) "$dir/probe" -runs=1 > "$dir/log" 2>&1 ;;
      *) "$dir/probe" > "$dir/log" 2>&1 ;;
    esac
    rc=$?
  fi
  [ $rc -eq 0 ] || sed 's/^/    /' "$dir/log" | tail -n 5 >&2
  rm -rf "$dir"
  return $rc
}

# The first python3 (PATH, then Debian's) for which the Python module can be built and tested:
# cmake/python_probe is configured with it, which makes the build's own lookup
# (cmake/MxkitPython.cmake: Python.h, pybind11's CMake package) and imports numpy and pytest.
# Configuring a project that builds nothing costs about a second; a Python-side `import pybind11`
# is not asked, since the build does not use it (Debian's pybind11-dev has no Python module).
python_for_module() {
  local c probe
  probe=$(mktemp -d) || return 1
  for c in python3 /usr/bin/python3; do
    command -v "$c" > /dev/null || continue
    rm -rf "${probe:?}"/*
    if cmake -S cmake/python_probe -B "$probe" "-DPython3_EXECUTABLE=$(command -v "$c")" > "$probe.log" 2>&1; then
      command -v "$c"; rm -rf "$probe" "$probe.log"; return 0
    fi
    printf '  python: %s passed over: %s\n' "$(command -v "$c")" \
      "$(grep -m 1 -A 2 'CMake Error' "$probe.log" | tail -n 2 | tr -s ' \n' ' ')" >&2
  done
  rm -rf "$probe" "$probe.log"
  return 1
}

# The sanitize stage's compiler, chosen once before any stage runs: the release stage leaves the
# unit tests to it when it will run them.
sanitize_cxx="" sanitize_tried=""
choose_sanitize_cxx() {
  local candidates c p
  if [ -n "${MXKIT_SANITIZE_CXX:-}" ]; then
    candidates=("$MXKIT_SANITIZE_CXX")
  elif [ "${CI:-}" = true ]; then
    candidates=(clang++-22)
  else
    candidates=(clang++-22 clang++ g++)
  fi
  for c in "${candidates[@]}"; do
    if ! p=$(command -v "$c"); then sanitize_tried+=" $c: not found;"; continue; fi
    note "sanitize: probing $p -fsanitize=address,undefined"
    if sanitizer_probe "$p" -fsanitize=address,undefined; then sanitize_cxx=$p; return; fi
    sanitize_tried+=" $c: its ASan/UBSan runtime does not link or run;"
  done
}
case " ${stages[*]} " in *" sanitize "*) choose_sanitize_cxx ;; esac

for stage in "${stages[@]}"; do
  case $stage in
    release)
      # The Python module and its pytest (python.pytest, label unit) join where a python3 with its
      # headers, pybind11's CMake package, NumPy and pytest is found (Debian: python3-dev
      # pybind11-dev python3-numpy python3-pytest); CI requires them.
      py_args=(-DMXKIT_BUILD_PYTHON=OFF)
      if py=$(python_for_module); then
        py_args=(-DMXKIT_BUILD_PYTHON=ON "-DPython3_EXECUTABLE=$py")
      elif [ "${CI:-}" = true ]; then
        record release FAILED 0 "no python3 with python3-dev, pybind11-dev, numpy and pytest (required in CI; see above)"; continue
      fi
      # The unit tests are built and run once, by the sanitize stage when it runs in the same
      # command (clang++-22, ASan + UBSan): g++ still compiles every header alone, the training
      # program, the examples and the Python module here, and runs their checks.
      unit_args=()
      if [ -n "$sanitize_cxx" ]; then unit_args=(-DMXKIT_BUILD_UNIT_TESTS=OFF); else unit_args=(-DMXKIT_BUILD_UNIT_TESTS=ON); fi
      # What is only compiled to be checked (demo examples, host benchmarks, per-header units,
      # README programs, the Python module) at -O0 or -O1 (MXKIT_CHECK_BUILDS_UNOPTIMIZED).
      build_and_test release "$root/release" "" -DCMAKE_BUILD_TYPE=Release -DMXKIT_GPU=OFF "${py_args[@]}" "${unit_args[@]}" \
        -DMXKIT_CHECK_BUILDS_UNOPTIMIZED=ON
      [ -n "$sanitize_cxx" ] && summary[-1]+=" (unit tests: the sanitize stage's)" ;;
    sanitize)
      cxx=$sanitize_cxx tried=$sanitize_tried
      if [ -z "$cxx" ]; then
        missing_tool sanitize "no usable sanitizer compiler:${tried%;}"
      else
        # No benchmarks or demo programs: no test runs them, and the release stage compiles them.
        build_and_test sanitize "$root/sanitize" "package${skip_labels:+|$skip_labels}" \
          -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMXKIT_GPU=OFF "-DCMAKE_CXX_COMPILER=$cxx" "-DMXKIT_SANITIZE=address;undefined" \
          "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g0 -DNDEBUG" -DMXKIT_HEADER_UNITS=OFF -DMXKIT_BUILD_BENCH=OFF \
          -DMXKIT_DEMO_EXAMPLES=OFF
        summary[-1]+=" ($(basename "$cxx")${tried:+; passed over:${tried%;}})"
      fi ;;
    fuzz)
      fcxx=${MXKIT_FUZZ_CXX:-clang++-22}
      if ! p=$(command -v "$fcxx"); then
        missing_tool fuzz "no $fcxx (libFuzzer needs clang)"
      elif note "fuzz: probing $p -fsanitize=fuzzer,address,undefined" &&
           ! sanitizer_probe "$p" -DPROBE_FUZZER -fsanitize=fuzzer,address,undefined; then
        missing_tool fuzz "$fcxx cannot link or run -fsanitize=fuzzer,address,undefined (Debian: libclang-rt-22-dev)"
      else
        # Every target at once (ctest -j one per target): each runs MXKIT_FUZZ_SECONDS of wall time,
        # so the stage takes that long whatever the number of targets or cores.
        fuzz_targets=(tests/fuzz/fuzz_*.cpp)
        # -O1 with line tables, as OSS-Fuzz builds its targets (-O1 -gline-tables-only).
        ctest_jobs=${#fuzz_targets[@]} build_and_test fuzz "$root/fuzz" "" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMXKIT_GPU=OFF "-DCMAKE_CXX_COMPILER=$p" \
          "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" \
          -DMXKIT_BUILD_FUZZERS=ON -DMXKIT_BUILD_TESTS=OFF -DMXKIT_BUILD_EXAMPLES=OFF -DMXKIT_BUILD_BENCH=OFF \
          -DMXKIT_INSTALL=OFF "-DMXKIT_FUZZ_SECONDS=${MXKIT_FUZZ_SECONDS:-30}"
      fi ;;
    cuda)
      nvcc=$(command -v nvcc || true)
      [ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc
      if [ -z "$nvcc" ]; then
        missing_tool cuda "no nvcc on PATH or in /usr/local/cuda/bin"
      else
        # The host tests, examples and benchmarks are the release stage's (the same g++ build).
        # With no GPU here the GPU programs are compiled to be checked and run to report
        # themselves skipped: unoptimized (MXKIT_GPU_PROGRAMS_UNOPTIMIZED), the library too, to
        # PTX only (MXKIT_GPU_KERNEL_LIBRARY_PTX_ONLY: no ptxas, NVVM -O1; the GPU machine's builds,
        # scripts/gpu.sh, compile it at -O3 and assemble it for sm_90a before every run). No GPU
        # benchmarks: they time nothing here, and scripts/gpu.sh builds the ones it runs.
        # When the hip stage runs in the same command, each shared GPU header's compile alone is
        # its check, and nvcc compiles alone only the CUDA-specific ones (MXKIT_GPU_HEADER_UNITS).
        header_units=ALL
        case " ${stages[*]} " in *" hip "*) command -v clang++-22 > /dev/null && header_units=VENDOR ;; esac
        # shellcheck disable=SC2086  # word splitting of the extra arguments is intended
        build_and_test cuda "$root/cuda" "" -DCMAKE_BUILD_TYPE=Release -DMXKIT_GPU=CUDA \
          "-DCMAKE_CUDA_COMPILER=$nvcc" -DMXKIT_BUILD_HOST_TESTS=OFF -DMXKIT_BUILD_EXAMPLES=OFF \
          -DMXKIT_BUILD_BENCH=OFF -DMXKIT_GPU_PROGRAMS_UNOPTIMIZED=ON -DMXKIT_GPU_KERNEL_LIBRARY_PTX_ONLY=ON \
          -DMXKIT_UNITY_GPU_TESTS=ON "-DMXKIT_GPU_HEADER_UNITS=$header_units" ${MXKIT_CUDA_CMAKE_ARGS:-}
      fi ;;
    hip)
      hipcxx=$(command -v clang++-22 || true)
      if [ -z "$hipcxx" ]; then
        missing_tool hip "no clang++-22"
      else
        # Each GPU test file compiled alone: in unity batches (MXKIT_UNITY_GPU_TESTS, as the cuda
        # stage) this stage took longer, a batch's device pass being one long serial compile at
        # its end (docs/perf/build.md).
        # No benchmarks: they time NVIDIA runs against NVIDIA peers, and the kernels they call are
        # compiled for AMD through the tests and the per-header checks (keeps CI under 45 min).
        # Tests and header checks unoptimized as in the cuda stage, device passes only (clang's
        # device pass checks their host code too); the library's sources at -O3 for the host and
        # gfx950 (the MX instructions' target), at -O1 for gfx942 (MXKIT_HIP_LIBRARY_OPTIMIZED_ARCHS:
        # a quarter of the back end's time; the ISA check compiles the GEMM kernels at -O3 for both).
        # shellcheck disable=SC2086
        build_and_test hip "$root/hip" "" -DCMAKE_BUILD_TYPE=Release -DMXKIT_GPU=HIP \
          "-DCMAKE_HIP_COMPILER=$hipcxx" -DMXKIT_BUILD_HOST_TESTS=OFF -DMXKIT_BUILD_EXAMPLES=OFF \
          -DMXKIT_BUILD_BENCH=OFF -DMXKIT_GPU_PROGRAMS_UNOPTIMIZED=ON -DMXKIT_HIP_LIBRARY_OPTIMIZED_ARCHS=gfx950 \
          ${MXKIT_HIP_CMAKE_ARGS:-}
      fi ;;
    *)
      echo "unknown stage '$stage' (release, sanitize, fuzz, cuda, hip)" >&2; exit 2 ;;
  esac
done

printf '\n=== mxkit test summary (%s jobs)\n' "$jobs"
printf '%s\n' "${summary[@]}"
if [ $failed -ne 0 ]; then
  echo "RESULT: FAILED"
  exit 1
fi
echo "RESULT: passed"
