#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Llama 2 70B LoRA with an MXFP4 base healed to FP8 (issue 34) in ONE device call of under 9
# minutes on a machine of 2 H200 (device tool, kind nvidia-h200-x2, carry [".deps"]):
#   MXKIT_COMMIT=<sha> bash scripts/gpu_lora70b_check.sh
# Parts, each bounded by a share of one deadline (MXKIT_DEADLINE_S seconds after the start,
# default 530), so that a slow part cannot eat the others:
#   build  configure (Release, MXKIT_GPU=CUDA, sm_90a) and build with -j16 only bench_lora70b and
#          catch2_test_lora_base_device (and the kernel library they link), keep-going;
#   70b    bench_lora70b --record at the real size on GPU 0: the stash's page-locked memory, the
#          layer-by-layer build, MXFP4 steps, healing, FP8 steps, memory at each phase; then, in
#          the same process once mxkit has freed the device, the peer bench/lora70b_peer.py on
#          every GPU (torchrun, FSDP2, torch.compile, activation checkpointing, bf16 base). A
#          watchdog (--mxkit-limit) keeps the time the peer needs;
#   peer   only where the 70b part printed no peer result: bench_lora70b --peer-only --record;
#   test   the scaled-down GPU test (3 layers, d_model 128): on GPU 1 beside the 70b part where
#          there are 2 GPUs, else after it;
#   small  only where mxkit's 70B part did not finish: 2 layers of the 70B shape, no peer.
# Then a summary table (mxkit and the peer, ratios against the targets, memory per phase, each
# part's status and time). $OUT gets run.log (everything printed here), build.log, one log per
# part and RESULTS.md (this run's rows appended).
# Environment: MXKIT_DEADLINE_S (default 530), MXKIT_PARTS (default "build 70b peer test small"),
# MXKIT_STEPS (timed steps per phase at most, default 5; --budget and the deadline may stop
# earlier), MXKIT_BUDGET (seconds per phase, default 30), MXKIT_WARM_GIB (host memory touched
# beside the build, default 72), MXKIT_PEER_GPUS (default: every GPU), MXKIT_GPU_BUILD (build
# folder), MXKIT_COMMIT.
# Time plan at 70B (bench/NOTES_lora70b.md): build ~2-3 min, mxkit ~1.5-2 min, peer ~1.5-2 min,
# test ~20 s.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # no NVLink multicast, ever
export PYTHONUNBUFFERED=1
final=${OUT:-build-gpu-out}
mkdir -p "$final"

main() {
  local build=${MXKIT_GPU_BUILD:-build-gpu-lora70b}
  local parts=${MXKIT_PARTS:-build 70b peer test small}
  local steps=${MXKIT_STEPS:-5} budget=${MXKIT_BUDGET:-30}
  local gpus peer_gpus
  gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
  peer_gpus=${MXKIT_PEER_GPUS:-$gpus}
  export MXKIT_DEADLINE_EPOCH=$(($(date +%s) + ${MXKIT_DEADLINE_S:-530}))
  left() { echo $((MXKIT_DEADLINE_EPOCH - $(date +%s))); }
  has_part() { [[ " $parts " == *" $1 "* ]]; }
  exe() { find "$build" -name "$1" -type f -perm -u+x 2>/dev/null | head -1; }
  local status=0 summary=""
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
  echo "GPUs: $gpus; CPU cores: $(nproc); host memory: $(free -g | awk '/Mem:/ {print $2}') GiB (it grows as used)"
  python3 -c 'import torch; print("torch", torch.__version__, "CUDA GPUs", torch.cuda.device_count())' 2>&1 | tail -1
  [ -n "${MXKIT_COMMIT:-}" ] || echo "note: MXKIT_COMMIT not set; RESULTS.md rows take the commit git reports here"
  echo "deadline in $(left) s; parts: $parts"
  cp bench/RESULTS.md "$final/RESULTS.before" 2>/dev/null

  # Host memory warm-up beside the build: the H200 machines' memory grows as it is first touched
  # (~3 s per 8 GiB for one thread, KINDS.md), so 72 GiB (the stash's 64 and some; MXKIT_WARM_GIB,
  # 0: none) are touched and let go by 8 processes while nvcc runs; the stash's page-locking then
  # finds them there.
  local warm_pid="" warm_log=/tmp/mxkit_lora70b_warm.log
  local warm_gib=${MXKIT_WARM_GIB:-72}
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
  if has_part build; then
    t0=$SECONDS
    limit=$(($(left) - 200))
    [ $limit -gt 330 ] && limit=330
    local gen=() keep=(-k)
    command -v ninja >/dev/null && { gen=(-G Ninja); keep=(-k 0); }
    echo "== build (limit ${limit} s, ${gen[*]:-make})"
    timeout "$limit" cmake -S . -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DMXKIT_GPU=CUDA -DCMAKE_CUDA_ARCHITECTURES=90 \
      "-DCMAKE_PREFIX_PATH=$PWD/.deps/catch2/usr" -DMXKIT_BUILD_TESTS=ON -DMXKIT_BUILD_HOST_TESTS=OFF \
      -DMXKIT_BUILD_EXAMPLES=OFF -DMXKIT_BUILD_BENCH=ON >"$final/build.log" 2>&1 || { tail -20 "$final/build.log"; status=1; }
    timeout "$((limit - (SECONDS - t0)))" cmake --build "$build" -j 16 --target bench_lora70b catch2_test_lora_base_device \
      -- "${keep[@]}" >>"$final/build.log" 2>&1
    rc=$?
    [ $rc -ne 0 ] && { grep -E "error|Error" "$final/build.log" | head -40; status=1; }
    done_part build "rc=$rc" $((SECONDS - t0))
  fi

  # The scaled-down GPU test: on GPU 1 while mxkit's 70B runs on GPU 0 where there are two GPUs
  # (it needs ~1 GiB and ~20 s; bounded to 60 s so it is gone before the peer starts), else after.
  local test_bin test_rc_file="$final/.test_rc"
  test_bin=$(exe catch2_test_lora_base_device)
  run_test() {  # device limit
    local t0=$SECONDS rc
    CUDA_VISIBLE_DEVICES=$1 timeout -k 5 "$2" "$test_bin" -r compact >"$final/catch2_test_lora_base_device.log" 2>&1
    rc=$?
    echo "$rc $((SECONDS - t0))" >"$test_rc_file"
  }
  local test_pid=""
  if has_part test && [ -n "$test_bin" ] && [ "$gpus" -ge 2 ]; then
    echo "== test on GPU 1, beside the 70B run (limit 60 s)"
    run_test 1 60 &
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

  local bench
  bench=$(exe bench_lora70b)
  # After the peer: the summary, and the test where it did not run beside the 70B (one GPU).
  local tail_s=10
  [ "$gpus" -ge 2 ] || tail_s=30
  local peer_cmd="timeout -k 10 \$(( MXKIT_DEADLINE_EPOCH - \$(date +%s) - $tail_s )) python3 -m torch.distributed.run --standalone --nproc_per_node $peer_gpus bench/lora70b_peer.py"
  local mxkit_done=0
  if has_part 70b; then
    t0=$SECONDS
    if [ -z "$bench" ]; then
      echo "bench_lora70b: not built"; status=1; done_part 70b "not built" 0
    else
      # mxkit may use what is left but the peer's 150 s (~110 s expected) and the tail (at most 300 s).
      local mx_limit=$(($(left) - 150 - tail_s))
      [ $mx_limit -gt 300 ] && mx_limit=300
      [ $mx_limit -lt 60 ] && mx_limit=60
      echo "== 70b: mxkit on GPU 0 (watchdog ${mx_limit} s), then the peer on $peer_gpus GPUs (until the deadline - $tail_s s)"
      MXKIT_LORA70B_PEER="$peer_cmd" timeout -k 15 $(($(left) - tail_s + 8)) "$bench" --record --warmup 1 --steps "$steps" \
        --budget "$budget" --mxkit-limit "$mx_limit" --peer-gpus "$peer_gpus" >"$final/bench_lora70b_70b.log" 2>&1
      rc=$?
      [ $rc -ne 0 ] && status=1
      # mxkit's lines up to its table of rows, then the peer's progress and values (the summary follows at the end).
      grep -v "^peer: " "$final/bench_lora70b_70b.log" | sed -n '1,/^case  /p' | grep -v "^case  " | tail -60
      grep "^peer: #\|^peer: [a-z_]* [0-9.e+-]*$\|^peer: .*Error" "$final/bench_lora70b_70b.log" | tail -20
      grep -q "^mxkit: done" "$final/bench_lora70b_70b.log" && mxkit_done=1
      done_part 70b "rc=$rc, mxkit $([ $mxkit_done = 1 ] && echo 'done' || echo 'NOT done')" $((SECONDS - t0))
      wait_gpus_free
    fi
  fi

  if has_part peer && [ -n "$bench" ] && ! grep -q "^peer: tokens_per_s_per_gpu" "$final/bench_lora70b_70b.log" 2>/dev/null; then
    t0=$SECONDS
    if [ "$(left)" -lt 100 ]; then
      echo "== peer alone: skipped, $(left) s left"; done_part peer "skipped: no time" 0
    else
      echo "== peer alone (the 70b part printed no peer result)"
      MXKIT_LORA70B_PEER="$peer_cmd" timeout -k 15 $(($(left) - tail_s + 8)) "$bench" --record --peer-only --steps "$steps" --budget "$budget" \
        --peer-gpus "$peer_gpus" >"$final/bench_lora70b_peer.log" 2>&1
      rc=$?
      grep "^peer: #\|^peer: [a-z_]* [0-9.e+-]*$\|Error\|error" "$final/bench_lora70b_peer.log" | tail -25
      done_part peer "rc=$rc" $((SECONDS - t0))
      wait_gpus_free
    fi
  fi

  if has_part test; then
    if [ -z "$test_bin" ]; then
      echo "catch2_test_lora_base_device: not built"; status=1; done_part test "not built" 0
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
        [ "$rc" -ne 0 ] && { status=1; grep -B2 -A12 "FAILED\|failed" "$final/catch2_test_lora_base_device.log" | head -60; }
        done_part test "rc=$rc $(grep -hE 'All tests passed|test cases' "$final/catch2_test_lora_base_device.log" | tail -1)" "$t"
      else
        done_part test "skipped: no time" 0
      fi
    fi
  fi

  if has_part small && [ -n "$bench" ] && [ $mxkit_done = 0 ] && [ "$(left)" -ge 60 ]; then
    t0=$SECONDS
    echo "== small: 2 layers of the 70B shape (mxkit's 70B part did not finish)"
    MXKIT_LORA70B_PEER="" timeout -k 10 $(($(left) - 5)) "$bench" --record --layers 2 --warmup 1 --steps 3 --budget 10 \
      >"$final/bench_lora70b_small.log" 2>&1
    rc=$?
    sed -n '/^== summary/,$p' "$final/bench_lora70b_small.log"
    done_part small "rc=$rc" $((SECONDS - t0))
  fi

  # This run's rows (everything RESULTS.md gained), then the summary.
  cp bench/RESULTS.md "$final/RESULTS.md"
  echo
  echo "================ summary ================"
  for log in "$final/bench_lora70b_70b.log" "$final/bench_lora70b_peer.log"; do
    [ -f "$log" ] && sed -n '/^== summary/,$p' "$log"
  done
  echo "rows appended to bench/RESULTS.md: $(($(wc -l <bench/RESULTS.md) - $(wc -l <"$final/RESULTS.before" 2>/dev/null || echo 0)))"
  rm -f "$final/RESULTS.before"
  printf '%s' "$summary"
  echo "total ${SECONDS} s; status=$status"
  return $status
}

main "$@" 2>&1 | tee "$final/run.log"
