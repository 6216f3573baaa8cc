# SPDX-License-Identifier: Apache-2.0
# The peer of bench/gpu/bench_allreduce: torch.distributed.all_reduce (NCCL backend), bf16 sum,
# the same sizes and iteration count, one process per GPU under torchrun. Rank 0 prints
# "busbw_gbs_<MiB> <GB/s>" per size (nccl-tests' bus bandwidth: bytes x 2 (n-1)/n / time).
#   NCCL_NVLS_ENABLE=0 python3 -m torch.distributed.run --standalone --nproc_per_node 4 \
#       bench/allreduce_peer.py --sizes-mib 8,64,256 --iterations 20
import argparse
import os
import time

import torch
import torch.distributed as dist


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sizes-mib", default="8,64,256")
    p.add_argument("--iterations", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    a = p.parse_args()
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    try:
        dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    except TypeError:  # torch < 2.3: no device_id
        dist.init_process_group("nccl")
    n = dist.get_world_size()
    for mib in (int(s) for s in a.sizes_mib.split(",")):
        x = torch.full((mib * (1 << 20) // 2,), 1.0, dtype=torch.bfloat16, device="cuda")
        for _ in range(a.warmup):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(a.iterations):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        seconds = (time.perf_counter() - t0) / a.iterations
        if dist.get_rank() == 0:
            busbw = mib * (1 << 20) * 2 * (n - 1) / n / seconds / 1e9
            print(f"busbw_gbs_{mib} {busbw:.2f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
