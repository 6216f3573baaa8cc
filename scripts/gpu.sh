#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Building, testing and measuring mxkit on a machine with NVIDIA GPUs (sm_90: H100, H200), or
# building here to run there. `scripts/gpu.sh --help` lists the subcommands.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

usage() {
  cat <<'EOF'
usage: scripts/gpu.sh SUBCOMMAND [ARGS...]

Every subcommand configures and builds what it needs in ONE build folder (CMake preset "gpu":
Release, CUDA, sm_90 with arch-specific 90a where the kernels need it; default build/gpu), runs
with time limits, keeps going after a failed part, writes logs to the output folder and exits
non-zero if anything failed.

  build [TARGET...]     configure (preset gpu) and build everything, or the targets named
                        (replaces the build steps of every scripts/gpu_*.sh)
  test [REGEX]          the GPU tests through ctest (label gpu, the GPU examples included; REGEX:
                        ctest -R) (replaces gpu_test_all.sh's runs, gpu_gemm_check.sh's tests,
                        gpu_quantize_check.sh's tests, gpu_train_check.sh's test runs)
  memcheck [--tool T] [PROGRAM...]
                        every GPU test program (or those named) under compute-sanitizer, T one of
                        memcheck (default), racecheck, synccheck, initcheck; the programs are dealt
                        over $MXKIT_TEST_GPUS (replaces gpu_test_all.sh's sanitizer runs and the
                        memcheck passes of gpu_quantize_check.sh, gpu_gemm_check.sh, gpu_train_check.sh)
  bench NAME...|all [-- ARGS]
                        each benchmark with --record (rows appended to bench/results/<bench>.jsonl,
                        copied to OUT/results/, then bench/RESULTS.md and SUMMARY.md rendered); NAME:
                        quantize_gpu gemm attention layer layer_kernels train allreduce lora70b
                        quantize_host validate_host; all: the first six (allreduce too on 2+ GPUs)
                        (replaces the benchmark runs of gpu_quantize_check.sh, gpu_gemm_check.sh,
                        gpu_train_check.sh and gpu_check_all.sh)
  sass NAME             the machine code of a benchmark: instructions per kernel, QGMMA/STL/LDL
                        counts (gemm), the opcode histogram of the quantize kernels (quantize_gpu)
                        (replaces the SASS parts of gpu_gemm_check.sh and gpu_quantize_check.sh)
  profile NAME [CASE...]
                        Nsight Compute on one launch per case: gemm (the 8192^3 MXFP8 fprop: stall
                        reasons) or quantize_gpu (default three MXFP4 cases at 16384x8192: issue
                        slots, L2 and DRAM traffic, stalls) (replaces gpu_quantize_profile.sh,
                        gpu_gemm_check.sh profile, gpu_quantize_check.sh's MXKIT_NCU_CASE)
  python [--bench] [PYTEST ARGS]
                        the Python module built for CUDA in the same build folder and every test of
                        tests/python (device, DLPack, host, mxkit.torch.Linear against the C++
                        linear) under faulthandler; a crash is rerun under gdb or cuda-gdb with the
                        module's DLPack trace (replaces gpu_python_check.sh); --bench then runs
                        bench/python_speed.py --record (quantize against torch's casts, per-call
                        overhead, the 8B MLP block against compiled nn.Linear; bench_quantize_gpu
                        built for its MXFP4 peer), rows into bench/results/python.jsonl
  train                 the training program's checks on the GPU: its refusals
                        (examples/train_program_test.cmake) and its default data found from the
                        build tree and from an install (replaces gpu_train_program_check.sh and
                        gpu_newcomer_check.sh's training-program part)
  readme                the documented device code (docs/gpu.md) in a kernel (also under memcheck)
                        and the compile time of its nvcc line (replaces gpu_newcomer_check.sh's
                        README part)
  multi [PART...]       several GPUs: PART of build tests memcheck allreduce scaling 8b (default
                        all, about 20 minutes; name parts to split it); rows of the training runs
                        through bench/multi_gpu_rows.py (replaces gpu_multi_check.sh)
  lora70b [--pair]      Llama 2 70B LoRA, MXFP4 base healed to FP8, at its real size with its
                        PyTorch peers, every part bounded by one deadline (2 H200): PART of build
                        70b peer1 (the FP8-base peer on one GPU, on GPU 1 beside mxkit's run;
                        rows by bench/lora70b_rows.py) peer (FSDP2 bf16 on every GPU, the second
                        reference) test small; --pair also
                        builds the device backend's tests and the Python module and runs them on
                        the two GPUs in the time left (replaces gpu_lora70b_check.sh and
                        gpu_h200_pair_check.sh)
  fidelity              the PyTorch twin against the GPU training program per step
                        (tools/twin/check_twin.py), then the paired MXFP4 gap comparison of
                        tools/twin/issue31_gpu.sh (replaces gpu_fidelity_check.sh)
  recipes [PART...]     the recipes as measured on one GPU (issue 43), PART of build 8b corpus ttt
                        heal (default all): 8b, the real Llama 3.1 8B at MXKIT_8B1_LAYERS (16) of its
                        layers, vocabulary 128,256, T 8192, each recipe against FSDP2 (1 rank) +
                        torch.compile (bench/llama8b_one_gpu.py); corpus, the text on the machine
                        as a token dataset with a tokenizer trained there; ttt, time to a held-out
                        loss target per recipe and seed against a compiled PyTorch peer
                        (bench/time_to_target.py); heal, issue 48's healing study on the corpus's
                        text (bench/healing_study.py): a bf16 base of 63 M parameters, then LoRA
                        rank 16 in bf16, fp8, mxfp4 and mxfp4 -> fp8 at 60 %, seeds 0 1 2, within
                        MXKIT_HEAL_BUDGET seconds (default 420, about 7 minutes on an H200)
  carry [WHAT...]       on a machine without a GPU (nvcc only): build the programs of WHAT (a
                        subcommand: multi (default), test, bench, train, readme, lora70b,
                        fidelity; or target names), strip them into build-carry/ to copy to the
                        GPU machine, where MXKIT_PREBUILT=build-carry runs them without building
                        (replaces gpu_multi_carry.sh)
  all                   test, memcheck, then bench all (replaces gpu_check_all.sh)
  device-code BASE      whether a change moved the device code: the kernel library
                        (mxkit_gpu_kernels) built from this tree and from the source tree BASE (an
                        older checkout, e.g. `git worktree add /tmp/base <commit>`) with the same
                        settings, each object's cubins extracted (cuobjdump) and compared byte for
                        byte, else function by function (SASS: a header move may only reorder the
                        functions in the cubin); needs nvcc and cuobjdump, no GPU
  launch N PROGRAM [ARGS...]
                        PROGRAM on N GPUs, one process per GPU (scripts/launch_gpus.sh, which
                        stays the launcher the training programs name)

Environment:
  MXKIT_GPU_BUILD       build folder (default build/gpu)
  MXKIT_PREBUILT        a folder of prebuilt binaries laid out as a build tree (from carry):
                        nothing is configured or built, programs are taken from there
  MXKIT_GPU_OUT         output folder for logs and rows (default $OUT where set, else build/gpu-out)
  MXKIT_GPU_PACK=1      pack each subcommand's log folder into OUT/<subcommand>-logs.tar.gz
  MXKIT_JOBS            build jobs (default: every core)
  MXKIT_GPU_BUILD_TYPE  CMAKE_BUILD_TYPE at the first configure (default Release; RelWithDebInfo
                        for a crash's backtrace with lines)
  MXKIT_GPU_CMAKE_ARGS  extra configure arguments (first configure; MXKIT_RECONFIGURE=1 again)
  CMAKE_CUDA_ARCHITECTURES  (default 90)
  MXKIT_COMMIT          the commit measured, e.g. abc1234 or abc1234+wip (default: git's HEAD,
                        +wip with uncommitted changes; set it where the tree has no .git)
  MXKIT_TEST_GPUS       GPUs to spread memcheck's programs over (default "0")
  MXKIT_MEMCHECK_SKIP   regex of program names run without the sanitizer
  MXKIT_BENCH_TIMEOUT   seconds per benchmark (default 600)
  multi: MXKIT_PARTS, MXKIT_8B_SEQ, MXKIT_8B_STEPS, MXKIT_8B_RECIPES, MXKIT_8B_GATHER,
         MXKIT_8B_FLAGS, MXKIT_8B_LIMIT, MXKIT_8B_PEER_LIMIT, MXKIT_8B_PEER=0, MXKIT_SCALING_STEPS
  lora70b: MXKIT_DEADLINE_S, MXKIT_PARTS, MXKIT_STEPS, MXKIT_BUDGET, MXKIT_WARM_GIB, MXKIT_PEER_GPUS,
         MXKIT_PEER1_BASE (fp8-tensorwise, default, or fp8-rowwise), MXKIT_PEER1_ARGS (more
         bench/lora70b_peer.py arguments, e.g. --compile-order compile-first), MXKIT_LORA70B_INIT_FROM
         (a Hugging Face Llama 2 70B checkpoint for the 70b part's base: bench_lora70b --init-from),
         MXKIT_LORA70B_GEMM (mxkit, default, or vendor: bench_lora70b --gemm)
  fidelity: SEEDS (default "0"), STEPS (default 1200), TWIN_ARGS
  recipes: MXKIT_PARTS, MXKIT_8B1_LAYERS, MXKIT_8B1_RECIPES, MXKIT_8B1_STEPS, MXKIT_8B1_COPIES, MXKIT_8B1_GEMM,
         MXKIT_TTT_DATA (default build/ttt-data), MXKIT_TTT_SEEDS, MXKIT_TTT_RECIPES, MXKIT_TTT_TARGET, MXKIT_TTT_ARGS,
         MXKIT_HEAL_DIR (default build/heal: data and base, kept between runs), MXKIT_HEAL_SEEDS, MXKIT_HEAL_BUDGET,
         MXKIT_HEAL_ARGS
  python: MXKIT_PYTHON_GDB=0 (no rerun under a debugger)
EOF
}

# ---- common -------------------------------------------------------------------------------------

BUILD=$(realpath -m "${MXKIT_GPU_BUILD:-build/gpu}")
PREBUILT=${MXKIT_PREBUILT:+$(realpath -m "$MXKIT_PREBUILT")}
OUTDIR=$(realpath -m "${MXKIT_GPU_OUT:-${OUT:-build/gpu-out}}")
JOBS=${MXKIT_JOBS:-$(nproc)}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # no NVLink multicast, ever
export PYTHONUNBUFFERED=1
status=0
failed() { status=1; echo "FAILED: $*"; }
note() { printf '\n=== %s (%ss)\n' "$*" "$SECONDS"; }

# The commit the benchmarks' rows name (bench_common.hpp and multi_gpu_rows.py read MXKIT_COMMIT).
if [ -z "${MXKIT_COMMIT:-}" ]; then
  if c=$(git rev-parse --short HEAD 2>/dev/null); then
    git diff --quiet HEAD -- 2>/dev/null || c+="+wip"
    export MXKIT_COMMIT=$c
  fi
fi

ngpus() { nvidia-smi -L 2>/dev/null | grep -c '^GPU'; }
device_line() { nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1; }

# The output folder of a subcommand: OUT/<name> (logs), OUT/results (rows).
logdir() {
  LOGS=$OUTDIR/$1
  mkdir -p "$LOGS"
}
pack_logs() {
  [ "${MXKIT_GPU_PACK:-0}" = 1 ] && [ -d "$LOGS" ] || return 0
  tar -czf "$OUTDIR/$(basename "$LOGS")-logs.tar.gz" -C "$LOGS" . && rm -rf "$LOGS"
}

# PyTorch's NCCL (the wheel), where python3 can import it: the library the communicator loads and
# the headers of the ABI check.
nccl_root() {
  local d
  d=$(python3 -c "import nvidia.nccl as m; print(list(m.__path__)[0])" 2>/dev/null) || return 1
  [ -f "$d/lib/libnccl.so.2" ] && echo "$d"
}
# Whether the Python module can be built: the build's own lookup (cmake/MxkitPython.cmake through
# cmake/python_probe, as scripts/test.sh decides), not a Python-side `import pybind11`.
python_module_ok() {
  local probe rc
  probe=$(mktemp -d) || return 1
  cmake -S cmake/python_probe -B "$probe" "-DPython3_EXECUTABLE=$(command -v python3)" >/dev/null 2>&1
  rc=$?
  rm -rf "$probe"
  return $rc
}

configure() {
  [ -n "$PREBUILT" ] && return 0
  [ -f "$BUILD/CMakeCache.txt" ] && [ "${MXKIT_RECONFIGURE:-0}" != 1 ] && [ $# -eq 0 ] && return 0
  local args=(--preset gpu -B "$BUILD") root
  [ -f "$BUILD/CMakeCache.txt" ] || { command -v ninja >/dev/null && args+=(-G Ninja); }
  args+=("-DCMAKE_BUILD_TYPE=${MXKIT_GPU_BUILD_TYPE:-Release}" "-DCMAKE_CUDA_ARCHITECTURES=${CMAKE_CUDA_ARCHITECTURES:-90}")
  command -v nvcc >/dev/null || [ ! -x /usr/local/cuda/bin/nvcc ] || args+=(-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)
  if root=$(nccl_root); then args+=("-DMXKIT_NCCL_ROOT=$root"); fi
  if python_module_ok; then args+=(-DMXKIT_BUILD_PYTHON=ON "-DPython3_EXECUTABLE=$(command -v python3)"); fi
  # shellcheck disable=SC2206  # several arguments, split on purpose
  [ -n "${MXKIT_GPU_CMAKE_ARGS:-}" ] && args+=(${MXKIT_GPU_CMAKE_ARGS})
  args+=("$@")
  mkdir -p "$OUTDIR"
  echo "configure: cmake ${args[*]}"
  if ! cmake "${args[@]}" >"$OUTDIR/configure.log" 2>&1; then
    tail -30 "$OUTDIR/configure.log"
    failed "configure (log: $OUTDIR/configure.log)"
    return 1
  fi
}

# Builds the targets (all where none is named): all at once, then, if that failed, one at a time,
# so that one target that does not build stops no other. The log: OUT/cmake-build.log.
build_targets() {
  [ -n "$PREBUILT" ] && { echo "prebuilt binaries from $PREBUILT: nothing built"; return 0; }
  configure || return 1
  local t0=$SECONDS rc=0 t
  mkdir -p "$OUTDIR"
  if [ $# -eq 0 ]; then
    cmake --build "$BUILD" -j "$JOBS" >>"$OUTDIR/cmake-build.log" 2>&1 || rc=$?
  elif ! cmake --build "$BUILD" -j "$JOBS" --target "$@" >>"$OUTDIR/cmake-build.log" 2>&1; then
    for t in "$@"; do
      cmake --build "$BUILD" -j "$JOBS" --target "$t" >>"$OUTDIR/cmake-build.log" 2>&1 || { echo "build of $t FAILED"; rc=1; }
    done
  fi
  if [ $rc -ne 0 ]; then
    grep -E "error" "$OUTDIR/cmake-build.log" | head -30
    failed "build (log: $OUTDIR/cmake-build.log)"
  fi
  echo "build: $((SECONDS - t0)) s"
  return $rc
}

# The executable NAME under the prebuilt folder or the build folder ("" if none).
exe() { find "${PREBUILT:-$BUILD}" -name "$1" -type f -perm -u+x 2>/dev/null | head -1; }

# Target lists.
gpu_test_programs() { (cd tests/gpu && ls catch2_test_*.cu 2>/dev/null) | sed 's/\.cu$//'; }
test_targets() { echo "$(gpu_test_programs | tr '\n' ' ')gpu_two_units 02_embed_device_quantize"; }
BENCHES_ALL="quantize_gpu gemm attention layer layer_kernels train"
nccl_tests="catch2_test_nccl_communicator catch2_test_nccl_quantized_gather"
multi_extra_tests() { (cd tests/gpu && ls catch2_test_*parallel*.cu catch2_test_*shard*.cu 2>/dev/null) | sed 's/\.cu$//' | tr '\n' ' '; }
multi_targets() { echo "$nccl_tests $(multi_extra_tests)06_train_gpu bench_allreduce"; }

# Runs one program with a time limit, its output in LOGS/<name>.log; prints the verdict.
run_logged() {  # name seconds command...
  local name=$1 limit=$2 t0=$SECONDS rc
  shift 2
  timeout --kill-after=20 "$limit" "$@" >"$LOGS/$name.log" 2>&1
  rc=$?
  echo "$name: rc=$rc in $((SECONDS - t0)) s $(grep -hE 'All tests passed|test cases' "$LOGS/$name.log" | tail -1)"
  [ $rc -ne 0 ] && [ $rc -ne 77 ] && status=1
  return $rc
}

# New rows of the benchmarks: what bench/results/*.jsonl gained since `rows_mark`, copied to
# OUT/results/ (to take off the machine: python3 bench/render_results.py add OUT/results), then
# RESULTS.md and SUMMARY.md rendered.
declare -A rows_before=()
rows_mark() {
  local f
  for f in bench/results/*.jsonl; do rows_before[$f]=$(wc -l <"$f"); done
}
rows_collect() {
  local f n new=0
  mkdir -p "$OUTDIR/results"
  for f in bench/results/*.jsonl; do
    n=$(wc -l <"$f")
    if [ "$n" -gt "${rows_before[$f]:-0}" ]; then
      tail -n +"$((${rows_before[$f]:-0} + 1))" "$f" >>"$OUTDIR/results/$(basename "$f")"
      echo "rows: $((n - ${rows_before[$f]:-0})) new in $f"
      new=1
    fi
  done
  [ $new = 1 ] || { echo "rows: none recorded"; return 0; }
  if command -v python3 >/dev/null; then
    python3 bench/render_results.py || failed "render_results.py"
  else
    echo "no python3 here: render bench/RESULTS.md and SUMMARY.md with python3 bench/render_results.py"
  fi
  echo "elsewhere: python3 bench/render_results.py add $OUTDIR/results"
}

# ---- subcommands --------------------------------------------------------------------------------

cmd_build() {
  device_line
  build_targets "$@"
}

# shellcheck disable=SC2120  # arguments come through run_sub
cmd_test() {
  logdir test
  device_line
  # On an H100 or H200 the GEMM test must take the sm90 path (catch2_test_gemm checks it), and
  # cuBLASLt must load for the vendor path (catch2_test_gemm_vendor checks it).
  nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | grep -q '^9\.0' && export MXKIT_EXPECT_GEMM_PATH=sm90
  if [ -z "$PREBUILT" ]; then
    configure || return
    # The programs ctest's gpu tests run (the tests' commands inside the build folder).
    local programs
    programs=$(python3 - "$BUILD" <<'PY' 2>/dev/null
import glob, os, re, sys
build = sys.argv[1]
exes, labels = {}, {}
for f in glob.glob(os.path.join(build, "**", "CTestTestfile.cmake"), recursive=True):
    text = open(f).read()
    exes.update(re.findall(r'add_test\(\[=\[(.+?)\]=\] "([^"]+)"', text))
    labels.update(re.findall(r'set_tests_properties\(\[=\[(.+?)\]=\] PROPERTIES .*?LABELS "([^"]*)"', text))
print(" ".join(sorted({os.path.basename(e) for t, e in exes.items() if e.startswith(build) and "gpu" in labels.get(t, "").split(";")})))
PY
)
    # shellcheck disable=SC2086  # one target a word
    build_targets ${programs:-$(test_targets)}
    local args=(--test-dir "$BUILD" -L gpu --output-on-failure --timeout 1200)
    [ $# -gt 0 ] && args+=(-R "$1")
    ctest "${args[@]}" 2>&1 | tee "$LOGS/ctest.log" | grep -vE "^\s*$" | tail -40
    [ "${PIPESTATUS[0]}" -eq 0 ] || failed "ctest (log: $LOGS/ctest.log)"
  else  # prebuilt: the programs themselves (77: skipped, as ctest reads it)
    local p f
    for p in $(test_targets); do
      [ $# -gt 0 ] && ! [[ $p =~ $1 ]] && continue
      f=$(exe "$p"); [ -n "$f" ] || continue
      run_logged "$p" 1200 "$f"
    done
  fi
  pack_logs
}

# shellcheck disable=SC2120  # arguments come through run_sub
cmd_memcheck() {
  logdir memcheck
  local tool=memcheck
  if [ "${1:-}" = --tool ]; then tool=${2:?--tool takes memcheck, racecheck, synccheck or initcheck}; shift 2; fi
  command -v compute-sanitizer >/dev/null || { failed "no compute-sanitizer on PATH"; return; }
  local programs=("$@")
  # shellcheck disable=SC2207
  [ ${#programs[@]} -gt 0 ] || programs=($(gpu_test_programs) 02_embed_device_quantize)
  build_targets "${programs[@]}"
  local paths=() p f
  for p in "${programs[@]}"; do
    f=$(exe "$p")
    if [ -n "$f" ]; then paths+=("$f"); else failed "$p: not built"; fi
  done
  rm -f "$LOGS"/rows.* "$LOGS"/failed.*
  # One program under the sanitizer: a row in LOGS/rows.<gpu>, a failure in LOGS/failed.<gpu>.
  one() {  # program gpu
    local f=$1 gpu=$2 name rc t0=$SECONDS filter=()
    name=$(basename "$f")
    [[ $name == catch2_test_* ]] && filter=("~[api-error]")  # cases that make a runtime call fail on purpose
    if [ -n "${MXKIT_MEMCHECK_SKIP:-}" ] && [[ $name =~ ${MXKIT_MEMCHECK_SKIP} ]]; then
      printf '%-40s gpu %s skipped (MXKIT_MEMCHECK_SKIP)\n' "$name" "$gpu" >>"$LOGS/rows.$gpu"; return
    fi
    CUDA_VISIBLE_DEVICES=$gpu timeout 600 compute-sanitizer --tool "$tool" --error-exitcode 99 "$f" "${filter[@]}" \
      >"$LOGS/$name.$tool.log" 2>&1
    rc=$?
    if [ $rc -ne 0 ] && [ $rc -ne 77 ]; then
      echo "$name" >>"$LOGS/failed.$gpu"
      grep -m5 -A6 "Invalid\|ERROR\|FAILED\|Race\|Hazard" "$LOGS/$name.$tool.log"
    fi
    printf '%-40s gpu %s %s rc=%-3s %4ss  %s\n' "$name" "$gpu" "$tool" "$rc" $((SECONDS - t0)) \
      "$(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' "$LOGS/$name.$tool.log" | tail -1)" >>"$LOGS/rows.$gpu"
  }
  local gpus w i
  read -r -a gpus <<<"${MXKIT_TEST_GPUS:-0}"
  for w in "${!gpus[@]}"; do
    (for ((i = w; i < ${#paths[@]}; i += ${#gpus[@]})); do one "${paths[$i]}" "${gpus[$w]}"; done) &
  done
  wait
  cat "$LOGS"/rows.* 2>/dev/null | sort
  if cat "$LOGS"/failed.* >/dev/null 2>&1; then failed "$tool: $(cat "$LOGS"/failed.* | tr '\n' ' ')"; fi
  pack_logs
}

bench_run() {  # name [args...]
  local name=${1#bench_} f args
  shift
  f=$(exe "bench_$name")
  [ -n "$f" ] || { failed "bench_$name: not built"; return; }
  args=(--record "$@")
  [ "$name" = gemm ] && [ $# -eq 0 ] && args+=(--repeats 10)
  note "bench_$name ${args[*]}"
  local t0=$SECONDS rc
  timeout -k 15 "${MXKIT_BENCH_TIMEOUT:-600}" "$f" "${args[@]}" >"$LOGS/bench_$name.log" 2>&1
  rc=$?
  grep -v -E "^  check .* ok|^peer: (torch_version|device_name)" "$LOGS/bench_$name.log" | tail -40
  if [ "$name" = gemm ]; then
    echo "checks ok: $(grep -c '^  check.* ok' "$LOGS/bench_gemm.log"), failed: $(grep -c '^  check.*FAILED' "$LOGS/bench_gemm.log")"
  fi
  echo "bench_$name: rc=$rc, $((SECONDS - t0)) s"
  [ $rc -eq 0 ] || [ $rc -eq 77 ] || failed "bench_$name"
}

cmd_bench() {
  logdir bench
  local names=() extra=() n
  while [ $# -gt 0 ]; do
    [ "$1" = -- ] && { shift; extra=("$@"); break; }
    names+=("${1#bench_}")
    shift
  done
  [ ${#names[@]} -gt 0 ] || { usage >&2; return 2; }
  if [ "${names[*]}" = all ]; then
    read -r -a names <<<"$BENCHES_ALL"
    [ "$(ngpus)" -ge 2 ] && names+=(allreduce)
  fi
  device_line
  [ -n "${MXKIT_COMMIT:-}" ] || echo "note: MXKIT_COMMIT not set and no git here: the rows say 'unknown'"
  build_targets "${names[@]/#/bench_}"
  rows_mark
  for n in "${names[@]}"; do
    if [ "$n" = lora70b ]; then echo "bench lora70b: run 'scripts/gpu.sh lora70b' (its deadline and peer)"; continue; fi
    bench_run "$n" "${extra[@]}"
  done
  rows_collect
  pack_logs
}

cmd_sass() {
  logdir sass
  local name=${1:?sass NAME} f
  name=${name#bench_}
  command -v cuobjdump >/dev/null || { failed "no cuobjdump on PATH"; return; }
  build_targets "bench_$name"
  f=$(exe "bench_$name")
  [ -n "$f" ] || { failed "bench_$name: not built"; return; }
  cuobjdump --dump-sass "$f" >"$LOGS/sass_$name.txt" 2>&1
  # Per kernel: instructions, tensor-core MMAs (QGMMA: wgmma), local-memory stores and loads (spills).
  awk '/Function :/ {f=$3} /\/\*[0-9a-f]{4}\*\// {n[f]++} /QGMMA|HGMMA/ {q[f]++} /STL/ {s[f]++} /LDL/ {l[f]++}
       END {for (k in n) printf "%-100s inst %6d GMMA %4d STL %3d LDL %3d\n", k, n[k], q[k], s[k], l[k]}' \
    "$LOGS/sass_$name.txt" | sort | tee "$LOGS/sass_summary_$name.txt" | tail -60
  if [ "$name" = quantize_gpu ]; then  # the opcode histogram of each quantize kernel
    python3 - "$LOGS/sass_$name.txt" <<'PY' | tee "$LOGS/sass_stats_$name.txt"
import re, sys, collections
text = open(sys.argv[1]).read()
for f in re.split(r"\n\s*Function : ", text)[1:]:
    name = f.split("\n", 1)[0].strip()
    if "quantize_kernel" not in name:
        continue
    ops = re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)(?:\.[A-Z0-9_.]+)?", f)
    c = collections.Counter(ops)
    print(f"{name[:140]}: {sum(c.values())} instructions")
    print("   " + ", ".join(f"{k} {v}" for k, v in c.most_common(40)))
PY
  fi
  gzip -f "$LOGS/sass_$name.txt"
  pack_logs
}

cmd_profile() {
  logdir profile
  local name=${1:?profile NAME [CASE...]} f ncu c out
  name=${name#bench_}
  shift
  ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
  [ -n "$ncu" ] || { failed "no ncu (Nsight Compute)"; return; }
  build_targets "bench_$name"
  f=$(exe "bench_$name")
  [ -n "$f" ] || { failed "bench_$name: not built"; return; }
  # --clock-control none: the GPU's clocks are left as found.
  case $name in
    gemm)
      timeout 300 "$ncu" --clock-control none --kernel-name regex:gemm_kernel --launch-skip 2 --launch-count 1 \
        --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
        --section MemoryWorkloadAnalysis --metrics regex:smsp__pcsamp_warps_issue_stalled_.* \
        "$f" --quick --no-check --no-peers --format mxfp8 --repeats 3 "$@" >"$LOGS/ncu_gemm.txt" 2>&1 || failed "ncu gemm"
      grep -E "pcsamp_warps_issue_stalled|Duration|SM Frequency|Issue Slots|L1/TEX Cache|FMA" "$LOGS/ncu_gemm.txt" | grep -v " 0$" | head -60
      ;;
    quantize_gpu)
      local cases=("$@")
      [ ${#cases[@]} -gt 0 ] || cases=("mxfp4 rowwise+columnwise hadamard bf16 16384x8192" "mxfp4 rowwise+columnwise bf16 16384x8192"
                                       "mxfp4 rowwise hadamard bf16 16384x8192")
      for c in "${cases[@]}"; do
        out=$LOGS/ncu_$(echo "$c" | tr ' +' '__').txt
        MXKIT_BENCH_ONLY="$c" timeout 300 "$ncu" --clock-control none -k regex:quantize_kernel --launch-skip 3 --launch-count 1 \
          --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section ComputeWorkloadAnalysis \
          --section InstructionStats --section Occupancy \
          --metrics smsp__inst_executed.sum,lts__t_sectors_op_write.sum,lts__t_sectors_op_read.sum,lts__t_requests_op_write.sum,dram__bytes_read.sum,dram__bytes_write.sum,sass__inst_executed_per_opcode,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio \
          "$f" --repeats 1 >"$out" 2>&1 || failed "ncu $c"
        echo "== $c"
        grep -E "Duration|DRAM Throughput|L2 Cache Throughput|L1/TEX Cache|Issue Slots Busy|Executed Ipc A|Mem Busy|inst_executed.sum|lts__t_s|lts__t_r|dram__bytes|stalled_(long|math|wait|no_inst|short)" "$out" |
          grep -v " 0$" | sed 's/  */ /g'
      done
      ;;
    *) failed "profile: gemm or quantize_gpu (others: ncu by hand, see the commands above in scripts/gpu.sh)" ;;
  esac
  pack_logs
}

cmd_python() {
  logdir python
  local py so rc=0 bench=0
  if [ "${1:-}" = --bench ]; then bench=1; shift; fi
  py=$(command -v python3) || { failed "no python3"; return; }
  "$py" -c 'import sys, torch, numpy, pytest, pybind11; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available(), "numpy", numpy.__version__, "pybind11", pybind11.__version__)' ||
    { failed "python3 needs torch, numpy, pytest and pybind11"; return; }
  if [ -z "$PREBUILT" ] && ! grep -q "^MXKIT_BUILD_PYTHON:BOOL=ON" "$BUILD/CMakeCache.txt" 2>/dev/null; then
    configure -DMXKIT_BUILD_PYTHON=ON "-DPython3_EXECUTABLE=$py" || return
  fi
  build_targets _mxkit mxkit_python_cpp_reference || return
  local dir ref
  ref=$(exe mxkit_python_cpp_reference)
  [ -n "$ref" ] || { failed "mxkit_python_cpp_reference: not built"; return; }
  dir=$(dirname "$ref")
  so=$(ls "$dir"/mxkit/_mxkit*.so 2>/dev/null | head -1)
  [ -n "$so" ] || { failed "the module is not built"; return; }
  # Which C++ runtime the module uses: it must name libstdc++.so.6 and define none of its code.
  echo "module C++ runtime: $(readelf -d "$so" | grep -o 'libstdc++[^]]*' | tr '\n' ' ')(needed); $(nm -C --defined-only "$so" | grep -c 'std::ostream::_M_insert') libstdc++ stream functions defined inside"
  export PYTHONPATH="$dir" MXKIT_CPP_REFERENCE="$ref" PYTHONFAULTHANDLER=1
  "$py" -X faulthandler -m pytest -p no:cacheprovider -v -rs tests/python "$@" 2>&1 | tee "$LOGS/pytest.log" | tail -30
  rc=${PIPESTATUS[0]}
  [ "$rc" -eq 0 ] || failed "pytest rc=$rc (log: $LOGS/pytest.log)"
  if [ "$rc" -gt 128 ] && [ "${MXKIT_PYTHON_GDB:-1}" != 0 ]; then
    echo "== pytest died of signal $((rc - 128)); the same run under a debugger, with the module's DLPack trace"
    local gdb
    gdb=$(command -v gdb || command -v cuda-gdb || true)
    if [ -n "$gdb" ]; then
      MXKIT_PYTHON_TRACE=1 "$gdb" -q -batch -ex "set confirm off" -ex "set pagination off" -ex "handle SIGPIPE nostop" \
        -ex run -ex "info sharedlibrary mxkit" -ex bt -ex "thread apply all bt 40" \
        --args "$py" -X faulthandler -m pytest -p no:cacheprovider -v -s -x tests/python "$@" >"$LOGS/gdb.log" 2>&1
      tail -80 "$LOGS/gdb.log"
    else
      echo "(no gdb or cuda-gdb: the trace alone)"
      MXKIT_PYTHON_TRACE=1 "$py" -X faulthandler -m pytest -p no:cacheprovider -v -s -x tests/python "$@" >"$LOGS/trace.log" 2>&1
      tail -80 "$LOGS/trace.log"
    fi
  fi
  if [ $bench = 1 ]; then
    # The C++ quantize benchmark is the MXFP4 case's peer; without it that row has none.
    local cpp=""
    if [ -z "$PREBUILT" ] && [ -z "$(exe bench_quantize_gpu)" ]; then build_targets bench_quantize_gpu || true; fi
    cpp=$(exe bench_quantize_gpu)
    rows_mark
    run_logged python_speed "${MXKIT_BENCH_TIMEOUT:-600}" "$py" bench/python_speed.py --record \
      --device "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)" ${cpp:+--cpp-bench "$cpp"}
    sed -n '/^case /,$p' "$LOGS/python_speed.log"
    grep -E "^(linear|mxfp4): " "$LOGS/python_speed.log"
    rows_collect
  fi
  pack_logs
}

cmd_train() {
  logdir train
  device_line
  build_targets 06_train_gpu || return
  local program case
  program=$(exe 06_train_gpu)
  [ -n "$program" ] || { failed "06_train_gpu: not built"; return; }
  # Its refusals, as ctest example.05_train.* checks the host program's: outputs that are inputs or
  # each other, files that are not the program's, outputs that cannot be saved, another run's
  # checkpoint, a diverged run, the messages for sizes too large; and --lora from an exported base,
  # healed from MXFP4 to FP8. (/dev/zero is left out: the GPU runtime needs more address space
  # than that case's 1 GiB limit.)
  for case in aliases foreign unwritable resume_config diverged messages lora; do
    if MXKIT_DATA_DIR=$PWD/data cmake "-DPROGRAM=$program" "-DWORK=$LOGS/work/$case" "-DCASE=$case" \
         "-DDATA=$PWD/data/stories.txt" -DMEMORY_LIMIT=OFF \
         "-DV1_CHECKPOINT=$PWD/tests/fuzz/corpus/fuzz_checkpoint_load/weights.ckpt" -P examples/train_program_test.cmake \
         >"$LOGS/refusal_$case.log" 2>&1; then
      echo "refusal $case: passed"
    else
      failed "refusal $case (log: $LOGS/refusal_$case.log)"
    fi
  done
  # Its default data, found from the executable: run from an empty folder with MXKIT_DATA_DIR unset,
  # from the build tree and from an install of the examples component (4 tiny steps each).
  local tiny=(--layers 1 --d-model 128 --heads 2 --kv-heads 1 --ffn 256 --seq 64 --batch 2 --steps 4 --eval-every 4 --eval-batches 1)
  local empty rc
  empty=$(mktemp -d)
  (cd "$empty" && env -u MXKIT_DATA_DIR "$program" "${tiny[@]}") >"$LOGS/default_data_build_tree.log" 2>&1; rc=$?
  echo "default data from the build tree: rc=$rc; $(grep -h '^data:' "$LOGS/default_data_build_tree.log")"
  [ $rc -eq 0 ] || failed "06_train_gpu from the build tree"
  if [ -z "$PREBUILT" ]; then
    if cmake --install "$BUILD" --component mxkit_examples --prefix "$empty/prefix" >"$LOGS/install.log" 2>&1; then
      (cd "$empty" && env -u MXKIT_DATA_DIR ./prefix/bin/06_train_gpu "${tiny[@]}") >"$LOGS/default_data_installed.log" 2>&1; rc=$?
      echo "default data installed: rc=$rc; $(grep -h '^data:' "$LOGS/default_data_installed.log")"
      [ $rc -eq 0 ] || failed "06_train_gpu installed"
    else
      failed "install of mxkit_examples (log: $LOGS/install.log)"
    fi
  fi
  rm -rf "$empty"
  pack_logs
}

cmd_readme() {
  logdir readme
  build_targets catch2_test_readme_device || return
  local t src flags t0
  t=$(exe catch2_test_readme_device)
  [ -n "$t" ] || { failed "catch2_test_readme_device: not built"; return; }
  run_logged readme_device 300 "$t"
  if command -v compute-sanitizer >/dev/null; then
    run_logged readme_device.memcheck 600 compute-sanitizer --tool memcheck --error-exitcode 99 "$t"
  fi
  # The nvcc line of docs/gpu.md against -arch=sm_90a: one kernel calling gpu::quantize, a compile each.
  src=$(mktemp -d)/quantize_call.cu
  printf '#include <mxkit/gpu/quantize.hpp>\nmxkit::gpu::device_mx_pair call(mxkit::matrix_view<const float> in) {\n  return mxkit::gpu::quantize_both(in, mxkit::mx_type::mxfp4);\n}\n' >"$src"
  for flags in "-arch=sm_90a" "--generate-code=arch=compute_90a,code=[sm_90a]"; do
    t0=$(date +%s%N)
    nvcc -std=c++20 "$flags" -I include -c "$src" -o /dev/null >>"$LOGS/nvcc.log" 2>&1 || failed "nvcc $flags (log: $LOGS/nvcc.log)"
    echo "nvcc $flags: $(( ($(date +%s%N) - t0) / 1000000 )) ms"
  done
  rm -rf "$(dirname "$src")"
  pack_logs
}

cmd_multi() {
  logdir multi
  local parts="$*"
  [ -n "$parts" ] || parts=${MXKIT_PARTS:-build tests memcheck allreduce scaling 8b}
  [ $# -gt 0 ] || [ -n "${MXKIT_PARTS:-}" ] || echo "note: every part runs, about 20 minutes in all; name parts to split it"
  has_part() { [[ " $parts " == *" $1 "* ]]; }
  local n ngpu train root targets f t mode name
  ngpu=$(ngpus)
  device_line
  echo "GPUs: $ngpu"
  if root=$(nccl_root); then
    export MXKIT_NCCL_LIBRARY=$root/lib/libnccl.so.2
    echo "NCCL: $MXKIT_NCCL_LIBRARY"
  else
    echo "NCCL: PyTorch's wheel not found; the loader's search path decides (libnccl.so.2)"
  fi
  targets="$(multi_targets)"
  [ -n "$root" ] && [ -f "$root/include/nccl.h" ] && targets+=" nccl_abi_check"
  if has_part build; then
    note "build: $targets"
    # shellcheck disable=SC2086
    build_targets $targets
  fi
  train=$(exe 06_train_gpu)
  local tiny=(--layers 2 --d-model 256 --heads 4 --kv-heads 2 --ffn 512 --seq 128 --batch 4 --steps 8 --warmup 1 --log-every 4 --eval-every 0)
  if has_part tests; then
    note "tests"
    f=$(exe nccl_abi_check) && [ -n "$f" ] && { run_logged nccl_abi 60 "$f"; cat "$LOGS/nccl_abi.log"; }
    for t in $nccl_tests $(multi_extra_tests); do
      f=$(exe "$t"); [ -n "$f" ] || continue
      run_logged "$t" 240 "$f" -r compact
      grep -B3 -A15 "FAILED" "$LOGS/$t.log" | head -60
    done
    # The training program on 2 processes, each mode it offers, a few steps (correctness, not speed).
    if [ -n "$train" ]; then
      for mode in "" "--shard optimizer" "--shard full" "--shard full --gather fp32" "--shard full --recompute on" \
        "--shard full --reshard-after-forward off --recompute on --micro-batches 2" "--micro-batches 2"; do
        [ -n "$mode" ] && ! "$train" --help 2>/dev/null | grep -q -- "${mode%% *}" && continue
        name="train2${mode// /}"
        # shellcheck disable=SC2086
        run_logged "$name" 120 bash scripts/launch_gpus.sh 2 "$train" "${tiny[@]}" --recipe mxfp4 $mode
        grep -E "step|error|throughput" "$LOGS/$name.log" | tail -4
      done
    fi
  fi
  if has_part memcheck && command -v compute-sanitizer >/dev/null; then
    note "memcheck on 2 ranks"
    for t in $nccl_tests; do
      f=$(exe "$t"); [ -n "$f" ] || continue
      # NCCL_CUMEM_ENABLE=0: NCCL's buffers from cudaMalloc, which memcheck tracks (its cuMem maps it may not).
      # --report-api-errors no: NCCL probes kernels it has no image for (cudaFuncGetAttributes errors).
      CUDA_VISIBLE_DEVICES=0,1 NCCL_CUMEM_ENABLE=0 run_logged "$t.memcheck" 200 \
        compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 99 "$f" "[memcheck]"
      grep -m5 -A6 "Invalid\|ERROR SUMMARY\|FAILED" "$LOGS/$t.memcheck.log"
    done
    if [ -n "$train" ]; then
      NCCL_CUMEM_ENABLE=0 run_logged train2.memcheck 300 bash scripts/launch_gpus.sh 2 \
        compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 99 "$train" "${tiny[@]}" --steps 4 --recipe mxfp4 --shard full
      grep -m5 -A6 "Invalid\|ERROR SUMMARY\|error" "$LOGS/train2.memcheck.log"
    fi
  fi
  rows_mark
  if has_part allreduce; then
    note "all-reduce bus bandwidth against torch.distributed"
    f=$(exe bench_allreduce)
    [ -n "$f" ] && { run_logged bench_allreduce 300 "$f" --record; grep -v "^peer: #" "$LOGS/bench_allreduce.log" | tail -14; }
  fi
  # Weak scaling: the default model, per-GPU batch fixed, on 1, 2, 4 GPUs; rank 0's summary line.
  if has_part scaling && [ -n "$train" ]; then
    note "weak scaling of 06_train_gpu's default model"
    for n in 1 2 4; do
      [ "$n" -le "$ngpu" ] || continue
      run_logged "scaling$n" 150 bash scripts/launch_gpus.sh "$n" "$train" --steps 400 --stop-after "${MXKIT_SCALING_STEPS:-60}" --log-every 20 --eval-every 0
      grep -E "^throughput|^exposed|tok/s" "$LOGS/scaling$n.log" | tail -3
    done
  fi
  # The Llama 3.1 8B shape, fully sharded with recompute, per recipe, and its PyTorch peer (about 5
  # minutes in all): start-up, one warm-up step, MXKIT_8B_STEPS timed steps; a case not finished in
  # MXKIT_8B_LIMIT s gives no row. The peer last (torch.compile's warm-up is the slowest part).
  if has_part 8b && [ "$ngpu" -ge 2 ]; then
    note "Llama 3.1 8B shape, fully sharded, recompute"
    local seq=${MXKIT_8B_SEQ:-8192} timed=${MXKIT_8B_STEPS:-6} gather_flag=() recipe rc
    n=$((ngpu >= 4 ? 4 : ngpu))
    [ -n "${MXKIT_8B_GATHER:-}" ] && [ -n "$train" ] && "$train" --help 2>/dev/null | grep -q -- "--gather" && gather_flag=(--gather "$MXKIT_8B_GATHER")
    if [ -n "$train" ] && "$train" --help 2>/dev/null | grep -q -- "--shard"; then
      for recipe in ${MXKIT_8B_RECIPES:-bf16 fp8 mxfp8 mxfp4}; do
        # --log-every 1: the first window (step 1, the warm-up) is left out of the summary line.
        # shellcheck disable=SC2086  # MXKIT_8B_FLAGS: several flags, split on purpose
        run_logged "8b_$recipe" "${MXKIT_8B_LIMIT:-70}" bash scripts/launch_gpus.sh "$n" "$train" --layers 32 --d-model 4096 --heads 32 \
          --kv-heads 8 --ffn 14336 --seq "$seq" --batch 1 --steps 100 --stop-after $((timed + 1)) --warmup 1 --log-every 1 \
          --eval-every 0 --shard full --recompute on --recipe "$recipe" ${gather_flag[@]+"${gather_flag[@]}"} ${MXKIT_8B_FLAGS:-}
        rc=$?
        grep -E "training state ready|tok/s|^throughput|^exposed|memory peak|error" "$LOGS/8b_$recipe.log" | tail -6
        if [ $rc -eq 2 ]; then echo "06_train_gpu refused the flags (exit 2): the other recipes are skipped"; break; fi
      done
    else
      echo "no 06_train_gpu with --shard here: the 8B runs are skipped"
    fi
    if [ "${MXKIT_8B_PEER:-1}" = 0 ]; then
      echo "MXKIT_8B_PEER=0: the FSDP2 peer is not run"
    elif python3 -c "import torch" 2>/dev/null; then
      run_logged fsdp_peer "${MXKIT_8B_PEER_LIMIT:-130}" python3 -m torch.distributed.run --standalone --nproc_per_node "$n" \
        bench/fsdp_peer.py --seq "$seq" --batch 1 --steps "$timed" --warmup 2 --vocab 256  # 06_train_gpu's vocabulary: the same model
      grep -vE "^\s*$" "$LOGS/fsdp_peer.log" | grep -E "^(#|tokens|tflops|mfu|peak|step|startup)|Error|error" | tail -10
    else
      echo "no PyTorch here: the FSDP2 peer is skipped"
    fi
  fi
  if has_part scaling || has_part 8b; then
    MXKIT_PARTS="$parts" python3 bench/multi_gpu_rows.py "$LOGS" "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" ||
      failed "multi_gpu_rows.py"
  fi
  has_part allreduce || has_part scaling || has_part 8b && rows_collect
  pack_logs
}

cmd_lora70b() {
  logdir lora70b
  local pair=0
  [ "${1:-}" = --pair ] && { pair=1; shift; }
  local parts=${MXKIT_PARTS:-build 70b peer1 peer test small}
  local peer1_base=${MXKIT_PEER1_BASE:-fp8-tensorwise}
  local steps=${MXKIT_STEPS:-5} budget=${MXKIT_BUDGET:-30}
  local gpus peer_gpus
  gpus=$(ngpus)
  peer_gpus=${MXKIT_PEER_GPUS:-$gpus}
  export MXKIT_DEADLINE_EPOCH=$(($(date +%s) + ${MXKIT_DEADLINE_S:-$([ $pair = 1 ] && echo 470 || echo 530)}))
  left() { echo $((MXKIT_DEADLINE_EPOCH - $(date +%s))); }
  has_part() { [[ " $parts " == *" $1 "* ]]; }
  local summary=""
  done_part() { summary+=$(printf '%-8s %-44s %5s s' "$1" "$2" "$3")$'\n'; }
  # Polls until every GPU's used memory is below 2 GiB (a killed peer's workers may linger a moment).
  wait_gpus_free() {
    local used
    for _ in $(seq 1 15); do
      used=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | sort -n | tail -1)
      [ -z "$used" ] || [ "$used" -lt 2048 ] && return 0
      sleep 2
    done
    echo "warning: a GPU still has ${used} MiB in use"
  }
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  echo "GPUs: $gpus; CPU cores: $(nproc); host memory: $(free -g | awk '/Mem:/ {print $2}') GiB (it may grow as used)"
  python3 -c 'import torch; print("torch", torch.__version__, "CUDA GPUs", torch.cuda.device_count())' 2>&1 | tail -1
  echo "deadline in $(left) s; parts: $parts"
  rows_mark

  # Host memory touched beside the build (MXKIT_WARM_GIB, default 72; 0: none): on machines whose
  # memory grows as it is first touched, 8 processes pay that while nvcc runs, and the stash's
  # page-locking then finds it there.
  local warm_pid="" warm_log=$LOGS/warm.log warm_gib=${MXKIT_WARM_GIB:-72}
  if has_part 70b && [ "$warm_gib" -gt 0 ]; then
    (
      t=$SECONDS
      for _ in $(seq 1 8); do
        nice -n 10 python3 -c "b = bytearray(b\"\\x01\") * (($warm_gib << 30) // 8); assert b[-1] == 1" &
      done
      wait
      echo "host memory warm-up: $warm_gib GiB first touched by 8 processes in $((SECONDS - t)) s"
    ) >"$warm_log" 2>&1 &
    warm_pid=$!
  fi

  local t0 rc limit t
  local extra_targets=()
  [ $pair = 1 ] && extra_targets=(catch2_test_device_backend catch2_test_device_training _mxkit mxkit_python_cpp_reference)
  if has_part build; then
    t0=$SECONDS
    limit=$(($(left) - 200))
    [ $limit -gt 330 ] && limit=330
    echo "== build (limit ${limit} s)"
    [ $pair = 1 ] && [ -z "$PREBUILT" ] && python_module_ok && ! grep -q "^MXKIT_BUILD_PYTHON:BOOL=ON" "$BUILD/CMakeCache.txt" 2>/dev/null &&
      configure -DMXKIT_BUILD_PYTHON=ON "-DPython3_EXECUTABLE=$(command -v python3)"
    MXKIT_GPU_OUT=$LOGS timeout "$limit" bash scripts/gpu.sh build bench_lora70b catch2_test_lora_base_device "${extra_targets[@]}" |
      grep -E "error|FAILED|build:" | head -40
    rc=${PIPESTATUS[0]}
    [ $rc -ne 0 ] && status=1
    done_part build "rc=$rc" $((SECONDS - t0))
  fi
  # The scaled-down GPU test: on GPU 1 beside the 70B run where there are two GPUs (~1 GiB, ~20 s;
  # bounded to 60 s so it is gone before the peer starts), else after.
  local test_bin test_rc_file="$LOGS/.test_rc" test_pid=""
  test_bin=$(exe catch2_test_lora_base_device)
  run_test() {  # device limit
    local t0=$SECONDS rc
    CUDA_VISIBLE_DEVICES=$1 timeout -k 5 "$2" "$test_bin" -r compact >"$LOGS/catch2_test_lora_base_device.log" 2>&1
    rc=$?
    echo "$rc $((SECONDS - t0))" >"$test_rc_file"
  }
  # The one-GPU FP8-base peer (issue 48; bench/lora70b_peer.py --base fp8-*): its --check, then
  # its run, each on one GPU; it leaves the FSDP2 peer (after mxkit, inside bench_lora70b) its
  # 150 s and the tail. Rows: bench/lora70b_rows.py at the end.
  local peer1_done=$LOGS/.peer1_done tail_s=10
  [ "$gpus" -ge 2 ] || tail_s=30
  rm -f "$peer1_done" "$LOGS/.peer1_rc"
  run_peer1() {  # device
    local t0=$SECONDS rc limit reserve=0
    has_part peer && [ "$gpus" -ge 2 ] && reserve=150
    CUDA_VISIBLE_DEVICES=$1 timeout -k 5 90 python3 bench/lora70b_peer.py --check --base "$peer1_base" \
      >"$LOGS/lora70b_peer1_check.log" 2>&1
    rc=$?
    if [ $rc -eq 0 ]; then
      limit=$(($(left) - tail_s - reserve))
      # shellcheck disable=SC2086  # MXKIT_PEER1_ARGS: several arguments, split on purpose
      CUDA_VISIBLE_DEVICES=$1 timeout -k 10 "$limit" python3 bench/lora70b_peer.py --base "$peer1_base" --steps "$steps" ${MXKIT_PEER1_ARGS:-} \
        --budget "$budget" >"$LOGS/lora70b_peer1.log" 2>&1
      rc=$?
    else
      echo "# check rc=$rc: the FP8 base linear is off its bound (or the check failed): the peer is not run" >"$LOGS/lora70b_peer1.log"
    fi
    echo "$rc $((SECONDS - t0))" >"$LOGS/.peer1_rc"
    touch "$peer1_done"
  }
  # With two GPUs: the test, then the FP8-base peer, on GPU 1 beside mxkit's run on GPU 0 (each
  # process its own GPU; the host is shared); the FSDP2 peer on both GPUs waits for them.
  local peer1_beside=0
  has_part peer1 && [ "$gpus" -ge 2 ] && peer1_beside=1
  if { has_part test && [ -n "$test_bin" ] || [ $peer1_beside = 1 ]; } && [ "$gpus" -ge 2 ]; then
    echo "== on GPU 1, beside the 70B run: $(has_part test && [ -n "$test_bin" ] && echo "test (limit 60 s) ")$([ $peer1_beside = 1 ] && echo "FP8-base peer ($peer1_base)")"
    (
      has_part test && [ -n "$test_bin" ] && run_test 1 60
      [ $peer1_beside = 1 ] && run_peer1 1
    ) &
    test_pid=$!
  fi
  if [ -n "$warm_pid" ]; then  # at most 60 s more for the warm-up, then its processes are ended
    for _ in $(seq 1 60); do kill -0 "$warm_pid" 2>/dev/null || break; sleep 1; done
    if kill -0 "$warm_pid" 2>/dev/null; then
      pkill -P "$warm_pid"; kill "$warm_pid" 2>/dev/null
      echo "host memory warm-up: stopped after the build and 60 s"
    fi
    cat "$warm_log"
  fi

  local bench mxkit_done=0
  bench=$(exe bench_lora70b)
  local peer_wait=""  # the FSDP2 peer starts once GPU 1's FP8-base peer is done (bounded by the deadline)
  [ $peer1_beside = 1 ] && peer_wait="while [ ! -e '$peer1_done' ] && [ \$(date +%s) -lt \$(( MXKIT_DEADLINE_EPOCH - 60 )) ]; do sleep 1; done; "
  local peer_cmd="${peer_wait}timeout -k 10 \$(( MXKIT_DEADLINE_EPOCH - \$(date +%s) - $tail_s )) python3 -m torch.distributed.run --standalone --nproc_per_node $peer_gpus bench/lora70b_peer.py"
  if has_part 70b; then
    t0=$SECONDS
    if [ -z "$bench" ]; then
      failed "bench_lora70b: not built"; done_part 70b "not built" 0
    else
      # mxkit may use what is left but the peer's 150 s and the tail (at most 300 s).
      local mx_limit=$(($(left) - 150 - tail_s))
      [ $mx_limit -gt 300 ] && mx_limit=300
      [ $mx_limit -lt 60 ] && mx_limit=60
      echo "== 70b: mxkit on GPU 0 (watchdog ${mx_limit} s), then the FSDP2 peer (second reference) on $peer_gpus GPUs (until the deadline - $tail_s s)"
      MXKIT_LORA70B_PEER="$peer_cmd" timeout -k 15 $(($(left) - tail_s + 8)) "$bench" --record --warmup 1 --steps "$steps" \
        --budget "$budget" --mxkit-limit "$mx_limit" --peer-gpus "$peer_gpus" \
        ${MXKIT_LORA70B_INIT_FROM:+--init-from "$MXKIT_LORA70B_INIT_FROM"} --gemm "${MXKIT_LORA70B_GEMM:-mxkit}" \
        >"$LOGS/bench_lora70b_70b.log" 2>&1
      rc=$?
      [ $rc -ne 0 ] && status=1
      # mxkit's lines up to its table of rows, then the peer's progress and values (the summary follows at the end).
      grep -v "^peer: " "$LOGS/bench_lora70b_70b.log" | sed -n '1,/^case  /p' | grep -v "^case  " | tail -60
      grep "^peer: #\|^peer: [a-z_]* [0-9.e+-]*$\|^peer: .*Error" "$LOGS/bench_lora70b_70b.log" | tail -20
      grep -q "^mxkit: done" "$LOGS/bench_lora70b_70b.log" && mxkit_done=1
      done_part 70b "rc=$rc, mxkit $([ $mxkit_done = 1 ] && echo 'done' || echo 'NOT done')" $((SECONDS - t0))
      wait_gpus_free
    fi
  fi
  # One GPU: the FP8-base peer after mxkit's run, on the same GPU.
  if has_part peer1 && [ $peer1_beside = 0 ]; then
    if [ "$(left)" -lt 150 ]; then
      echo "== FP8-base peer: skipped, $(left) s left"; done_part peer1 "skipped: no time" 0
    else
      echo "== FP8-base peer ($peer1_base) on GPU 0, after mxkit"
      run_peer1 0
      wait_gpus_free
    fi
  fi
  if has_part peer && [ -n "$bench" ] && ! grep -q "^peer: tokens_per_s_per_gpu" "$LOGS/bench_lora70b_70b.log" 2>/dev/null; then
    t0=$SECONDS
    if [ "$(left)" -lt 100 ]; then
      echo "== peer alone: skipped, $(left) s left"; done_part peer "skipped: no time" 0
    else
      echo "== peer alone (the 70b part printed no peer result)"
      MXKIT_LORA70B_PEER="$peer_cmd" timeout -k 15 $(($(left) - tail_s + 8)) "$bench" --record --peer-only --steps "$steps" --budget "$budget" \
        --peer-gpus "$peer_gpus" >"$LOGS/bench_lora70b_peer.log" 2>&1
      rc=$?
      grep "^peer: #\|^peer: [a-z_]* [0-9.e+-]*$\|Error\|error" "$LOGS/bench_lora70b_peer.log" | tail -25
      done_part peer "rc=$rc" $((SECONDS - t0))
      wait_gpus_free
    fi
  fi
  if has_part test; then
    if [ -z "$test_bin" ]; then
      failed "catch2_test_lora_base_device: not built"; done_part test "not built" 0
    else
      if [ -n "$test_pid" ]; then
        wait "$test_pid"
      elif [ "$(left)" -ge 15 ]; then
        limit=$(left); [ "$limit" -gt 90 ] && limit=90
        run_test 0 "$limit"
      fi
      if [ -f "$test_rc_file" ]; then
        read -r rc t <"$test_rc_file"
        rm -f "$test_rc_file"
        [ "$rc" -ne 0 ] && { status=1; grep -B2 -A12 "FAILED\|failed" "$LOGS/catch2_test_lora_base_device.log" | head -60; }
        done_part test "rc=$rc $(grep -hE 'All tests passed|test cases' "$LOGS/catch2_test_lora_base_device.log" | tail -1)" "$t"
      else
        done_part test "skipped: no time" 0
      fi
    fi
  fi
  if has_part small && [ -n "$bench" ] && [ $mxkit_done = 0 ] && [ "$(left)" -ge 60 ]; then
    t0=$SECONDS
    echo "== small: 2 layers of the 70B shape (mxkit's 70B part did not finish)"
    MXKIT_LORA70B_PEER="" timeout -k 10 $(($(left) - 5)) "$bench" --record --layers 2 --warmup 1 --steps 3 --budget 10 \
      >"$LOGS/bench_lora70b_small.log" 2>&1
    rc=$?
    sed -n '/^== summary/,$p' "$LOGS/bench_lora70b_small.log"
    done_part small "rc=$rc" $((SECONDS - t0))
  fi
  # --pair: the device backend's tests on GPU 0 and the Python tests on GPU 1, side by side, in the
  # time left (never beside the peer, whose timing would suffer).
  if [ $pair = 1 ]; then
    local left_s=$(($(left) + 100)) tests_pid dir
    [ $left_s -lt 20 ] && left_s=20
    for t in catch2_test_device_backend catch2_test_device_training; do
      f=$(exe "$t")
      [ -n "$f" ] && CUDA_VISIBLE_DEVICES=0 timeout -k 5 "$left_s" "$f" -r compact >"$LOGS/$t.log" 2>&1
      echo "$t rc=$? $(grep -hE 'All tests passed|test cases' "$LOGS/$t.log" 2>/dev/null | tail -1)"
    done &
    tests_pid=$!
    dir=$(dirname "$(exe mxkit_python_cpp_reference)")
    (
      export PYTHONPATH="$dir" MXKIT_CPP_REFERENCE="$dir/mxkit_python_cpp_reference" CUDA_VISIBLE_DEVICES=1
      timeout -k 5 "$left_s" python3 -X faulthandler -m pytest -p no:cacheprovider -v -rs tests/python >"$LOGS/pytest.log" 2>&1
      echo "pytest rc=$?"; tail -4 "$LOGS/pytest.log"
    )
    wait "$tests_pid"
    grep -B3 -A12 "FAILED" "$LOGS"/catch2_test_device_*.log 2>/dev/null | head -40
    grep -E "FAILED|Fatal|Segmentation|Error" "$LOGS/pytest.log" | head -20
  fi
  [ -n "$test_pid" ] && wait "$test_pid" 2>/dev/null  # GPU 1's test and FP8-base peer
  if [ -f "$LOGS/.peer1_rc" ]; then
    read -r rc t <"$LOGS/.peer1_rc"
    [ "$rc" -ne 0 ] && status=1
    grep "^check \|^# check" "$LOGS/lora70b_peer1_check.log" | tail -14
    grep "^#\|^settings\|^[a-z_]* [0-9.e+-]*$\|Error" "$LOGS/lora70b_peer1.log" | tail -20
    done_part peer1 "rc=$rc ($peer1_base, 1 GPU$([ $peer1_beside = 1 ] && echo ', GPU 1 beside mxkit'))" "$t"
  elif [ $peer1_beside = 1 ]; then
    done_part peer1 "not run" 0
  fi
  echo
  echo "================ summary ================"
  for log in "$LOGS/bench_lora70b_70b.log" "$LOGS/bench_lora70b_peer.log"; do
    [ -f "$log" ] && sed -n '/^== summary/,$p' "$log"
  done
  if has_part peer1; then
    python3 bench/lora70b_rows.py "$LOGS" "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" || failed "lora70b_rows.py"
  fi
  rows_collect
  printf '%s' "$summary"
  echo "total ${SECONDS} s"
  pack_logs
}

cmd_fidelity() {
  logdir fidelity
  build_targets catch2_test_device_backend 06_train_gpu || return
  local t prog
  t=$(exe catch2_test_device_backend)
  [ -n "$t" ] && run_logged catch2_test_device_backend 400 "$t" -r compact
  prog=$(exe 06_train_gpu)
  [ -n "$prog" ] || { failed "06_train_gpu: not built"; return; }
  # Per step, on a tiny model (head dim 64 for the GPU attention): the twin against the program.
  MXKIT_DATA_DIR=$PWD/data python3 tools/twin/check_twin.py "$prog" --d-model 128 --device cuda \
    --recipes bf16 fp8 mxfp8 mxfp4 mxfp4-no-hadamard 2>&1 | tee "$LOGS/check_twin.log" | grep -E "^==|agreement|disagreement"
  [ "${PIPESTATUS[0]}" -eq 0 ] || failed "check_twin.py"
  # The paired comparison of the MXFP4 gap at the scale of the study: SEEDS "0" about 10 minutes,
  # "0 1 2" about 30 (estimated); STEPS default 1200.
  SEEDS=${SEEDS:-0} tools/twin/issue31_gpu.sh "$prog" "$LOGS/gap" 2>&1 | tee "$LOGS/gap.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || failed "the gap comparison"
  pack_logs
}

cmd_recipes() {
  logdir recipes
  local parts="$*" prog="" device
  [ -n "$parts" ] || parts=${MXKIT_PARTS:-build 8b corpus ttt heal}
  has_part() { [[ " $parts " == *" $1 "* ]]; }
  device=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  device_line
  rows_mark
  if has_part build || has_part 8b || has_part ttt || has_part heal; then
    build_targets 06_train_gpu || return
    prog=$(exe 06_train_gpu)
    [ -n "$prog" ] || { failed "06_train_gpu: not built"; return; }
  fi
  # The corpus (CPU only) is built beside the 8B runs, niced and on half the cores: the GPU runs'
  # host threads keep theirs.
  local data=${MXKIT_TTT_DATA:-build/ttt-data} corpus_pid=""
  if has_part corpus; then
    if [ -f "$data/corpus.json" ]; then
      echo "corpus: $data/corpus.json is there (remove it to build it again)"
    else
      note "corpus: the text on this machine as a token dataset (log: corpus.log)"
      RAYON_NUM_THREADS=$(($(nproc) / 2)) RAYON_RS_NUM_CPUS=$(($(nproc) / 2)) nice -n 10 \
        python3 bench/time_to_target.py corpus --out "$data" >"$LOGS/corpus.log" 2>&1 &
      corpus_pid=$!
    fi
  fi
  if has_part 8b; then
    note "Llama 3.1 8B, ${MXKIT_8B1_LAYERS:-16} layers, vocabulary 128256, one GPU"
    # shellcheck disable=SC2086  # lists, split on purpose
    python3 bench/llama8b_one_gpu.py --program "$prog" --logs "$LOGS/8b" --layers "${MXKIT_8B1_LAYERS:-16}" \
      --recipes ${MXKIT_8B1_RECIPES:-bf16 fp8 mxfp4} --steps "${MXKIT_8B1_STEPS:-6}" --device "$device" \
      --weight-copies ${MXKIT_8B1_COPIES:-cached} --gemm "${MXKIT_8B1_GEMM:-mxkit}" ||
      failed "bench/llama8b_one_gpu.py"
  fi
  if [ -n "$corpus_pid" ]; then
    wait "$corpus_pid" || failed "corpus (log: $LOGS/corpus.log)"
    tail -n 6 "$LOGS/corpus.log"
  fi
  [ -f "$data/corpus.json" ] && cp "$data/corpus.json" "$LOGS/"
  if has_part ttt; then
    note "time to target: seeds ${MXKIT_TTT_SEEDS:-0}"
    # shellcheck disable=SC2086
    python3 bench/time_to_target.py run --program "$prog" --data "$data" --logs "$LOGS/ttt" --device "$device" \
      --seeds ${MXKIT_TTT_SEEDS:-0} --recipes ${MXKIT_TTT_RECIPES:-bf16 fp8 mxfp8 mxfp4 mxfp4-fp8 peer} \
      ${MXKIT_TTT_TARGET:+--target "$MXKIT_TTT_TARGET"} ${MXKIT_TTT_ARGS:-}
    [ $? -le 3 ] || failed "bench/time_to_target.py run"
  fi
  if has_part heal; then
    # The data and the base (a 250 MB export) stay in MXKIT_HEAL_DIR, out of the logs; the
    # curves, logs, plot and summary are copied to the logs.
    local heal=${MXKIT_HEAL_DIR:-build/heal}
    note "healing: LoRA from a bf16 base, bf16 fp8 mxfp4 mxfp4-fp8, seeds ${MXKIT_HEAL_SEEDS:-0 1 2}, budget ${MXKIT_HEAL_BUDGET:-420} s"
    if [ -f "$data/corpus.json" ]; then
      # shellcheck disable=SC2086
      python3 bench/healing_study.py --binary "$prog" --corpus "$data" --out "$heal" --device "$device" \
        --seeds ${MXKIT_HEAL_SEEDS:-0 1 2} --budget "${MXKIT_HEAL_BUDGET:-420}" ${MXKIT_HEAL_ARGS:-}
      [ $? -le 3 ] || failed "bench/healing_study.py"
      mkdir -p "$LOGS/heal"
      cp -r "$heal/runs" "$LOGS/heal/" 2>/dev/null
      cp "$heal/healing.svg" "$heal/healing_gap.svg" "$heal/summary.json" "$heal/data/data.json" "$LOGS/heal/" 2>/dev/null
    else
      failed "heal: no corpus at $data (the corpus part makes it)"
    fi
  fi
  rows_collect
  pack_logs
}

cmd_carry() {
  local what=("$@") targets="" w
  [ ${#what[@]} -gt 0 ] || what=(multi)
  command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || { failed "no nvcc"; return; }
  for w in "${what[@]}"; do
    case $w in
      multi) targets+=" $(multi_targets)" ;;
      test) targets+=" $(test_targets)" ;;
      bench) for b in $BENCHES_ALL allreduce; do targets+=" bench_$b"; done ;;
      train) targets+=" 06_train_gpu" ;;
      readme) targets+=" catch2_test_readme_device" ;;
      lora70b) targets+=" bench_lora70b catch2_test_lora_base_device" ;;
      fidelity) targets+=" catch2_test_device_backend 06_train_gpu" ;;
      *) targets+=" $w" ;;
    esac
  done
  # The NCCL library is loaded at run time (MXKIT_NCCL_LIBRARY; multi sets it to PyTorch's wheel
  # there); nccl_abi_check needs the wheel's nccl.h and is built on the GPU machine only.
  local dest=${MXKIT_CARRY_DIR:-build-carry} t f b
  # shellcheck disable=SC2086
  PREBUILT="" build_targets $targets || return
  rm -rf "$dest"
  for t in $targets; do
    f=$(cd "$BUILD" && find . -name "$t" -type f -perm -u+x | head -1)
    [ -n "$f" ] || { failed "no $t in $BUILD"; continue; }
    mkdir -p "$dest/$(dirname "$f")"
    strip -o "$dest/$f" "$BUILD/$f"
  done
  du -sh "$dest"
  echo "copy $dest (and .deps if the GPU machine needs Catch2) to the GPU machine, then there:"
  echo "  MXKIT_PREBUILT=$dest scripts/gpu.sh ${what[0]} ..."
}

# Every function's SASS of an object, functions sorted by name, instruction addresses dropped.
function_sass() {
  cuobjdump -sass "$1" | awk '/Function :/ { name = $3 } { sub(/\/\*[0-9a-f]+\*\//, ""); print name "\t" $0 }' | sort -s -k1,1
}

# The kernel library of this tree and of BASE, each object's embedded cubins compared byte for
# byte, else function by function (SASS): a reorganisation of headers must leave the device code
# as it was.
cmd_device_code() {
  local base=${1:-}
  [ -n "$base" ] && [ -f "$base/CMakeLists.txt" ] || { echo "device-code: BASE must be a source tree (got '$base')"; return 2; }
  base=$(realpath "$base")
  logdir device-code
  PREBUILT="" build_targets mxkit_gpu_kernels || return
  local bbuild=$BUILD-base args=(-DCMAKE_BUILD_TYPE=Release -DMXKIT_GPU=CUDA -DCMAKE_CUDA_ARCHITECTURES=90 -DMXKIT_BUILD_TESTS=ON
                                 -DMXKIT_BUILD_HOST_TESTS=OFF -DMXKIT_FETCH_CATCH2=OFF)
  command -v nvcc >/dev/null || [ ! -x /usr/local/cuda/bin/nvcc ] || args+=(-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)
  [ -d "$PWD/.deps/catch2/usr" ] && args+=("-DCMAKE_PREFIX_PATH=$PWD/.deps/catch2/usr")
  if root=$(nccl_root); then args+=("-DMXKIT_NCCL_ROOT=$root"); fi
  if ! { cmake -S "$base" -B "$bbuild" "${args[@]}" && cmake --build "$bbuild" -j "$JOBS" --target mxkit_gpu_kernels; } >"$LOGS/base-build.log" 2>&1; then
    tail -20 "$LOGS/base-build.log"; failed "base build (log: $LOGS/base-build.log)"; return 1
  fi
  local same=0 differ=0 o b name d
  while IFS= read -r o; do
    name=${o##*/}
    b=$(find "$bbuild" -path '*mxkit_gpu_kernels.dir*' -name "$name" | head -1)
    [ -n "$b" ] || { failed "$name: not in the base build"; differ=$((differ + 1)); continue; }
    d=$LOGS/${name%.o}
    rm -rf "$d" && mkdir -p "$d/new" "$d/base"
    (cd "$d/new" && cuobjdump --extract-elf all "$o" >/dev/null) && (cd "$d/base" && cuobjdump --extract-elf all "$b" >/dev/null)
    if diff -r "$d/new" "$d/base" >/dev/null && [ -n "$(ls "$d/new")" ]; then
      echo "same      $name ($(ls "$d/new" | wc -l) cubins, byte for byte)"; same=$((same + 1)); rm -rf "$d"
    elif [ "$(function_sass "$o")" = "$(function_sass "$b")" ]; then
      # The bytes differ where only the order of the functions in the ELF moved (a header move
      # changes the order in which templates are instantiated): every function's machine code,
      # and the set of functions, is the same.
      echo "same      $name (every function's SASS identical; the functions' order in the cubin differs)"
      same=$((same + 1)); rm -rf "$d"
    else
      echo "DIFFERENT $name"; diff -rq "$d/new" "$d/base" | head -5; differ=$((differ + 1))
    fi
  done < <(find "$BUILD" -path '*mxkit_gpu_kernels.dir*' -name '*.o' | sort)
  echo "device code: $same objects the same, $differ different"
  [ "$differ" -eq 0 ] && [ "$same" -gt 0 ] || failed "device code changed"
}

cmd_all() {
  cmd_test
  cmd_memcheck
  cmd_bench all
}

# ---- main ---------------------------------------------------------------------------------------

[ $# -gt 0 ] || { usage; exit 2; }
sub=$1
shift
case $sub in
  -h | --help | help) usage; exit 0 ;;
  launch) exec bash scripts/launch_gpus.sh "$@" ;;
  build | test | memcheck | bench | sass | profile | python | train | readme | multi | lora70b | fidelity | recipes | carry | all | device-code)
    sub=${sub//-/_}
    mkdir -p "$OUTDIR"
    # The subcommand's status: a failed part's (status=1), else its own exit code.
    run_sub() {
      "cmd_$sub" "$@"
      local rc=$?
      [ "$status" -eq 0 ] && status=$rc
      return "$status"
    }
    run_sub "$@" 2>&1 | tee "$OUTDIR/$sub.log"
    rc=${PIPESTATUS[0]}
    echo "scripts/gpu.sh $sub: $([ "$rc" -eq 0 ] && echo passed || echo FAILED) in ${SECONDS} s (logs: $OUTDIR)"
    exit "$rc" ;;
  *) echo "scripts/gpu.sh: unknown subcommand '$sub'" >&2; usage >&2; exit 2 ;;
esac
