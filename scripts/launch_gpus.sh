#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs PROGRAM on N GPUs of this machine, one process per GPU, with the environment torchrun sets
# (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR=127.0.0.1, MASTER_PORT), so mxkit's programs start
# their NCCL communicator without MPI (parallel/rendezvous.hpp: rank 0 hands out NCCL's id over TCP).
#   bash scripts/launch_gpus.sh N PROGRAM [ARGS...]
#   bash scripts/launch_gpus.sh 4 build/examples/06_train_gpu --fsdp --recompute
# Rank 0 writes to this terminal; rank r > 0 writes its lines prefixed with "[rank r] " (stderr).
# When a rank fails, the others end within the communicator's bounds (its abort reaches them at
# once); this script also stops the rest after MXKIT_LAUNCH_GRACE seconds (default 30) and exits
# with the first failing rank's status.
# Environment: MASTER_PORT (default: a free port), NCCL_NVLS_ENABLE (forced to 0: no NVLink
# multicast), MXKIT_NCCL_LIBRARY (default: PyTorch's NCCL wheel where python3 can import it).
set -uo pipefail
if [ $# -lt 2 ] || ! [[ $1 =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: $0 N PROGRAM [ARGS...]   (N: processes, one per GPU)" >&2
  exit 2
fi
n=$1
shift
export NCCL_NVLS_ENABLE=0
export WORLD_SIZE=$n MASTER_ADDR=127.0.0.1
if [ -z "${MASTER_PORT:-}" ]; then
  MASTER_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null ||
                echo $((20000 + RANDOM % 20000)))
fi
export MASTER_PORT
if [ -z "${MXKIT_NCCL_LIBRARY:-}" ]; then
  nccl_dir=$(python3 -c "import nvidia.nccl as m; print(list(m.__path__)[0])" 2>/dev/null || true)
  [ -n "$nccl_dir" ] && [ -f "$nccl_dir/lib/libnccl.so.2" ] && export MXKIT_NCCL_LIBRARY=$nccl_dir/lib/libnccl.so.2
fi
grace=${MXKIT_LAUNCH_GRACE:-30}

pids=()
for ((r = 0; r < n; ++r)); do
  if [ "$r" -eq 0 ]; then
    RANK=0 LOCAL_RANK=0 "$@" &
  else
    RANK=$r LOCAL_RANK=$r "$@" > >(sed -u "s/^/[rank $r] /" >&2) 2>&1 &
  fi
  pids+=($!)
done

# Wait for every rank; after the first failure, give the others `grace` seconds, then stop them.
status=0
first_failure=""
remaining=$n
declare -A done_rank=()
deadline=""
while [ "$remaining" -gt 0 ]; do
  for ((r = 0; r < n; ++r)); do
    [ -n "${done_rank[$r]:-}" ] && continue
    if ! kill -0 "${pids[$r]}" 2>/dev/null; then
      wait "${pids[$r]}"
      rc=$?
      done_rank[$r]=1
      remaining=$((remaining - 1))
      if [ "$rc" -ne 0 ] && [ -z "$first_failure" ]; then
        first_failure=$r
        status=$rc
        deadline=$((SECONDS + grace))
        echo "launch_gpus: rank $r exited with status $rc" >&2
      fi
    fi
  done
  if [ -n "$deadline" ] && [ "$SECONDS" -ge "$deadline" ]; then
    for ((r = 0; r < n; ++r)); do
      if [ -z "${done_rank[$r]:-}" ]; then
        echo "launch_gpus: stopping rank $r (still running ${grace}s after rank $first_failure failed)" >&2
        kill "${pids[$r]}" 2>/dev/null
      fi
    done
    deadline=""
  fi
  [ "$remaining" -gt 0 ] && sleep 0.2
done
exit $status
