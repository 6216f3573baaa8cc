#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Llama 2 70B LoRA with an MXFP4 base healed to FP8 (issue 34) on a GPU machine (device tool,
# carry [".deps"]). Parts, in the order given (default: build test small 70b):
#   build  configure (Release, MXKIT_GPU=CUDA, CMAKE_CUDA_ARCHITECTURES=90a) and build with -j16
#          only bench_lora70b and catch2_test_lora_base_device
#   test   the scaled-down GPU test (3 layers, d_model 128)
#   small  bench_lora70b --layers 2 (the 70B layer shape, 2 layers: fits any GPU) with its peer
#   70b    bench_lora70b at the real size (80 layers) --record, with its peer on every visible GPU
# Every part is time-bounded (timeout) and the script goes on when one fails; logs and
# bench/RESULTS.md land in $OUT. The parts together exceed one 10-minute call: run
#   call 1 (any GPU):                 bash scripts/gpu_lora70b_check.sh build test small
#   call 2 (nvidia-h200-x2, warm):    bash scripts/gpu_lora70b_check.sh build 70b
# (the second build finds everything built). One H200 holds both phases of mxkit's 70B; the bf16
# peer needs two (bench/NOTES_lora70b.md). On H100s (80 GB) the 70B mxkit run reports that it
# does not fit and skips itself; the peer still runs.
#   MXKIT_PEER_GPUS   GPUs for the peer (default: all visible)
#   MXKIT_BUDGET      seconds of timed steps per phase (default 60)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
final=${OUT:-build-gpu-out}
mkdir -p "$final"
build=${MXKIT_GPU_BUILD:-build-gpu-lora70b}
parts=${*:-build test small 70b}
budget=${MXKIT_BUDGET:-60}
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
peer_gpus=${MXKIT_PEER_GPUS:-$gpus}
[ -n "${MXKIT_COMMIT:-}" ] || echo "note: MXKIT_COMMIT not set; RESULTS.md rows take the commit git reports here"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
free -g | head -2
status=0
bin() { find "$build" -name "$1" -type f -perm -u+x | head -1; }
for part in $parts; do
  t0=$SECONDS
  case $part in
    build)
      timeout 300 cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DMXKIT_GPU=CUDA -DCMAKE_CUDA_ARCHITECTURES=90a \
        "-DCMAKE_PREFIX_PATH=$PWD/.deps/catch2/usr" -DMXKIT_BUILD_TESTS=ON -DMXKIT_BUILD_HOST_TESTS=OFF \
        -DMXKIT_BUILD_EXAMPLES=OFF -DMXKIT_BUILD_BENCH=ON >"$final/configure.log" 2>&1 || { tail -20 "$final/configure.log"; status=1; }
      timeout 300 cmake --build "$build" -j 16 --target bench_lora70b catch2_test_lora_base_device >"$final/build.log" 2>&1 ||
        { grep -E "error" "$final/build.log" | head -40; status=1; }
      ;;
    test)
      f=$(bin catch2_test_lora_base_device)
      if [ -z "$f" ]; then echo "catch2_test_lora_base_device: not built"; status=1; else
        timeout 120 "$f" -s -r compact >"$final/catch2_test_lora_base_device.log" 2>&1
        rc=$?; [ $rc -ne 0 ] && status=1
        echo "catch2_test_lora_base_device rc=$rc: $(grep -hE 'All tests passed|test cases' "$final/catch2_test_lora_base_device.log" | tail -1)"
        [ $rc -ne 0 ] && grep -B2 -A12 "FAILED\|failed" "$final/catch2_test_lora_base_device.log" | head -80
      fi
      ;;
    small | 70b)
      f=$(bin bench_lora70b)
      if [ -z "$f" ]; then echo "bench_lora70b: not built"; status=1; else
        if [ "$part" = small ]; then args=(--layers 2 --budget 20 --steps 3); limit=150; peer_limit=100
        else args=(--record --budget "$budget" --steps 3); limit=560; peer_limit=260; fi
        MXKIT_LORA70B_PEER="timeout $peer_limit torchrun --standalone --nproc_per_node $peer_gpus bench/lora70b_peer.py" \
          timeout $limit "$f" "${args[@]}" --peer-gpus "$peer_gpus" >"$final/bench_lora70b_$part.log" 2>&1
        rc=$?; [ $rc -ne 0 ] && status=1
        echo "== bench_lora70b ${args[*]} rc=$rc"
        grep -v "^peer: \[\|^peer: W\|^peer: *$" "$final/bench_lora70b_$part.log" | tail -60
      fi
      ;;
    *) echo "unknown part '$part' (build test small 70b)"; status=2 ;;
  esac
  echo "-- $part: $((SECONDS - t0)) s"
done
cp bench/RESULTS.md "$final/RESULTS.md"
echo "status=$status"
exit $status
