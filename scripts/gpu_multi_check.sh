#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Multi-GPU training on a machine of 2 to 8 GPUs in one call (device tool, kind nvidia-h100-x4 or
# nvidia-h100-x2, carry [".deps"]). Every part is time-bounded and runs even where an earlier one
# failed; logs land in $OUT, with RESULTS.md (the rows appended by this run's benchmarks).
#   1 build (-j16) against PyTorch's NCCL wheel (-DMXKIT_NCCL_ROOT): the NCCL tests, the ABI
#     check, the multi-rank GPU tests of tests/gpu that exist, 06_train_gpu, bench_allreduce;
#   2 tests: gpu.nccl_abi (our NCCL declarations against the wheel's nccl.h), the communicator and
#     the quantized gather on every GPU (threads), the other multi-rank GPU tests, 06_train_gpu on
#     2 processes in each mode (--shard none/optimizer/full, --gather fp32, --recompute on,
#     --reshard-after-forward off, --micro-batches 2); then compute-sanitizer memcheck on 2 ranks:
#     the NCCL tests' [memcheck] cases, and 06_train_gpu on 2 processes;
#   3 benchmarks: all-reduce bus bandwidth against torch.distributed (bench_allreduce --record);
#     06_train_gpu's default model on 1, 2 and 4 GPUs (weak scaling, a few steps each); the Llama
#     3.1 8B shape fully sharded with recompute per recipe (MXKIT_8B_SEQ, default 8192) and its
#     peer bench/fsdp_peer.py (FSDP2 + torch.compile, bf16).
# Environment: MXKIT_PARTS (default "build tests memcheck allreduce scaling 8b"), MXKIT_8B_SEQ,
# MXKIT_SCALING_STEPS (each weak-scaling run's steps, default 60),
# MXKIT_8B_RECIPES (default "bf16 fp8 mxfp8 mxfp4"), MXKIT_8B_STEPS (timed steps, default 6: the
# first steps after the warm-up vary by 10 %),
# MXKIT_8B_GATHER (copies|fp32: what full sharding gathers, default the program's: copies),
# MXKIT_8B_FLAGS (extra 06_train_gpu flags appended to each 8B mxkit run, e.g.
# "--reshard-after-forward on"; the RESULTS.md rows name them),
# MXKIT_8B_LIMIT / MXKIT_8B_PEER_LIMIT (seconds per case, default 70 / 130), MXKIT_8B_PEER=0 (no
# peer run: when only mxkit's flags change against a peer measured on the same kind), MXKIT_COMMIT (the
# commit measured).
# Without the build part: scripts/gpu_multi_carry.sh builds the programs here (no GPU needed) into
# build-carry/, carried to the device with MXKIT_GPU_BUILD=build-carry (saves 150-200 s a lease).
# The device tool allows 10 minutes a command: run it in three calls on one warm machine (the
# build folder stays), e.g.
#   MXKIT_PARTS="build tests"                 bash scripts/gpu_multi_check.sh
#   MXKIT_PARTS="memcheck allreduce scaling"  bash scripts/gpu_multi_check.sh
#   MXKIT_PARTS="8b"                          bash scripts/gpu_multi_check.sh
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
export NCCL_NVLS_ENABLE=0  # no NVLink multicast, in every process started from here
final=${OUT:-build-multi-out}
mkdir -p "$final"
build=${MXKIT_GPU_BUILD:-build-gpu-multi}
parts=${MXKIT_PARTS:-build tests memcheck allreduce scaling 8b}
[ -n "${MXKIT_PARTS:-}" ] || echo "note: MXKIT_PARTS not set: every part runs, about 20 minutes in all (longer than one device call)"
has_part() { [[ " $parts " == *" $1 "* ]]; }
status=0
note() { printf '\n=== %s (%ss)\n' "$*" "$SECONDS"; }
run_logged() {  # name seconds command...: runs it with a timeout, logs to $final/name.log, prints the tail
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  timeout --kill-after=20 "$limit" "$@" >"$final/$name.log" 2>&1
  local rc=$?
  echo "$name: rc=$rc in $((SECONDS - t0)) s"
  [ $rc -ne 0 ] && status=1
  return $rc
}

ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1
echo "GPUs: $ngpu"
nccl_root=$(python3 -c "import nvidia.nccl as m; print(list(m.__path__)[0])" 2>/dev/null || true)
if [ -n "$nccl_root" ] && [ -f "$nccl_root/lib/libnccl.so.2" ]; then
  export MXKIT_NCCL_LIBRARY=$nccl_root/lib/libnccl.so.2
  echo "NCCL: $MXKIT_NCCL_LIBRARY"
else
  echo "NCCL: PyTorch's wheel not found; the loader's search path decides (libnccl.so.2)"
  nccl_root=""
fi
[ -n "${MXKIT_COMMIT:-}" ] || echo "note: MXKIT_COMMIT not set; RESULTS.md rows take the commit git reports here"

nccl_tests="catch2_test_nccl_communicator catch2_test_nccl_quantized_gather"
targets="$nccl_tests 06_train_gpu bench_allreduce"
[ -n "$nccl_root" ] && [ -f "$nccl_root/include/nccl.h" ] && targets+=" nccl_abi_check"
# Multi-rank GPU tests beside the communicator's (the data-parallel ones, where they exist).
extra_tests=$(cd tests/gpu && ls catch2_test_*parallel*.cu catch2_test_*shard*.cu 2>/dev/null | sed 's/\.cu$//' | tr '\n' ' ')
targets+=" $extra_tests"
exe() { find "$build" -name "$1" -type f -perm -u+x | head -1; }

if has_part build; then
  note "build: $targets"
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DMXKIT_GPU=CUDA -DCMAKE_CUDA_ARCHITECTURES=90 \
    "-DCMAKE_PREFIX_PATH=$PWD/.deps/catch2/usr" -DMXKIT_BUILD_TESTS=ON -DMXKIT_BUILD_HOST_TESTS=OFF \
    -DMXKIT_BUILD_EXAMPLES=ON -DMXKIT_BUILD_BENCH=ON ${nccl_root:+"-DMXKIT_NCCL_ROOT=$nccl_root"} \
    >"$final/configure.log" 2>&1 || { tail -30 "$final/configure.log"; status=1; }
  # One target at a time after a parallel attempt, so one that fails does not stop the others.
  # shellcheck disable=SC2086
  if ! cmake --build "$build" -j 16 --target $targets >"$final/build.log" 2>&1; then
    grep -E "error" "$final/build.log" | head -30
    for t in $targets; do cmake --build "$build" -j 16 --target "$t" >>"$final/build.log" 2>&1 || { echo "build of $t FAILED"; status=1; }; done
  fi
  echo "build done at ${SECONDS}s"
fi

train=$(exe 06_train_gpu)
tiny=(--layers 2 --d-model 256 --heads 4 --kv-heads 2 --ffn 512 --seq 128 --batch 4 --steps 8 --warmup 1 --log-every 4 --eval-every 0)
if has_part tests; then
  note "tests"
  f=$(exe nccl_abi_check) && [ -n "$f" ] && { run_logged nccl_abi 60 "$f"; cat "$final/nccl_abi.log"; }
  for t in $nccl_tests $extra_tests; do
    f=$(exe "$t") || continue
    [ -n "$f" ] || continue
    run_logged "$t" 240 "$f" -r compact
    grep -hE "All tests passed|test cases?|SKIPPED" "$final/$t.log" | tail -2
    grep -B3 -A15 "FAILED" "$final/$t.log" | head -60
  done
  # The training program on 2 processes, each mode it offers, a few steps (correctness, not speed).
  if [ -n "$train" ]; then
    for mode in "" "--shard optimizer" "--shard full" "--shard full --gather fp32" "--shard full --recompute on" \
      "--shard full --reshard-after-forward off --recompute on --micro-batches 2" "--micro-batches 2"; do
      [ -n "$mode" ] && ! "$train" --help 2>/dev/null | grep -q -- "${mode%% *}" && continue
      name="train2${mode// /}"
      # shellcheck disable=SC2086
      run_logged "$name" 120 bash scripts/launch_gpus.sh 2 "$train" "${tiny[@]}" --recipe mxfp4 $mode
      grep -E "step|error|throughput" "$final/$name.log" | tail -4
    done
  fi
fi

if has_part memcheck && command -v compute-sanitizer >/dev/null; then
  note "memcheck on 2 ranks"
  for t in $nccl_tests; do
    f=$(exe "$t")
    [ -n "$f" ] || continue
    # NCCL_CUMEM_ENABLE=0: NCCL's buffers from cudaMalloc, which memcheck tracks (its cuMem maps it may not).
    # --report-api-errors no: NCCL probes kernels it has no image for (cudaFuncGetAttributes errors).
    CUDA_VISIBLE_DEVICES=0,1 NCCL_CUMEM_ENABLE=0 run_logged "$t.memcheck" 200 \
      compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 99 "$f" "[memcheck]"
    grep -m5 -A6 "Invalid\|ERROR SUMMARY\|FAILED" "$final/$t.memcheck.log"
  done
  if [ -n "$train" ]; then
    NCCL_CUMEM_ENABLE=0 run_logged train2.memcheck 300 bash scripts/launch_gpus.sh 2 \
      compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 99 "$train" "${tiny[@]}" --steps 4 --recipe mxfp4 --shard full
    grep -m5 -A6 "Invalid\|ERROR SUMMARY\|error" "$final/train2.memcheck.log"
  fi
fi

if has_part allreduce; then
  note "all-reduce bus bandwidth vs torch.distributed"
  f=$(exe bench_allreduce)
  [ -n "$f" ] && { run_logged bench_allreduce 300 "$f" --record; grep -v "^peer: #" "$final/bench_allreduce.log" | tail -14; }
fi

# Weak scaling: the default model, per-GPU batch fixed, on 1, 2, 4 GPUs; rank 0's summary line.
if has_part scaling && [ -n "$train" ]; then
  note "weak scaling of 06_train_gpu's default model"
  for n in 1 2 4; do
    [ "$n" -le "$ngpu" ] || continue
    run_logged "scaling$n" 150 bash scripts/launch_gpus.sh "$n" "$train" --steps 400 --stop-after "${MXKIT_SCALING_STEPS:-60}" --log-every 20 --eval-every 0
    grep -E "^throughput|^exposed|tok/s" "$final/scaling$n.log" | tail -3
  done
fi

# The Llama 3.1 8B shape, fully sharded with recompute, per recipe, and its PyTorch peer: about
# 5 minutes in all. Each mxkit case: start-up (the rank builds and fills only its shard: about
# 10-20 s with NCCL's start), one warm-up step, then MXKIT_8B_STEPS timed steps (default 6, ~1 s
# each); a case that has not finished in MXKIT_8B_LIMIT s (default 70) is stopped and gives no row.
# The peer last (torch.compile in its two warm-up steps is the slowest part), at most
# MXKIT_8B_PEER_LIMIT s.
if has_part 8b && [ "$ngpu" -ge 2 ]; then
  note "Llama 3.1 8B shape, fully sharded, recompute"
  seq=${MXKIT_8B_SEQ:-8192}
  n=$((ngpu >= 4 ? 4 : ngpu))
  timed=${MXKIT_8B_STEPS:-6}
  gather_flag=()  # MXKIT_8B_GATHER=fp32: the fp32 weight gather, against the default quantized copies
  [ -n "${MXKIT_8B_GATHER:-}" ] && [ -n "$train" ] && "$train" --help 2>/dev/null | grep -q -- "--gather" && gather_flag=(--gather "$MXKIT_8B_GATHER")
  if [ -n "$train" ] && "$train" --help 2>/dev/null | grep -q -- "--shard"; then
    for recipe in ${MXKIT_8B_RECIPES:-bf16 fp8 mxfp8 mxfp4}; do
      # --log-every 1: the first window (step 1, the warm-up) is left out of the summary line.
      # shellcheck disable=SC2086  # MXKIT_8B_FLAGS: several flags, split on purpose
      run_logged "8b_$recipe" "${MXKIT_8B_LIMIT:-70}" bash scripts/launch_gpus.sh "$n" "$train" --layers 32 --d-model 4096 --heads 32 \
        --kv-heads 8 --ffn 14336 --seq "$seq" --batch 1 --steps 100 --stop-after $((timed + 1)) --warmup 1 --log-every 1 \
        --eval-every 0 --shard full --recompute on --recipe "$recipe" ${gather_flag[@]+"${gather_flag[@]}"} ${MXKIT_8B_FLAGS:-}
      rc=$?
      grep -E "training state ready|tok/s|^throughput|^exposed|memory peak|error" "$final/8b_$recipe.log" | tail -6
      if [ $rc -eq 2 ]; then echo "06_train_gpu refused the flags (exit 2): the other recipes are skipped"; break; fi
    done
  else
    echo "06_train_gpu has no --shard here: the 8B runs are skipped"
  fi
  if [ "${MXKIT_8B_PEER:-1}" = 0 ]; then
    echo "MXKIT_8B_PEER=0: the FSDP2 peer is not run"
  elif python3 -c "import torch" 2>/dev/null; then
    run_logged fsdp_peer "${MXKIT_8B_PEER_LIMIT:-130}" python3 -m torch.distributed.run --standalone --nproc_per_node "$n" \
      bench/fsdp_peer.py --seq "$seq" --batch 1 --steps "$timed" --warmup 2 --vocab 256  # 06_train_gpu's vocabulary: the same model
    grep -vE "^\s*$" "$final/fsdp_peer.log" | grep -E "^(#|tokens|tflops|mfu|peak|step|startup)|Error|error" | tail -10
  else
    echo "no PyTorch here: the FSDP2 peer is skipped"
  fi
fi

if has_part scaling || has_part 8b; then
  gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
  python3 bench/multi_gpu_rows.py "$final" "$gpu_name" || status=1
fi
cp bench/RESULTS.md "$final/RESULTS.md"
echo "status=$status (${SECONDS}s)"
exit $status
