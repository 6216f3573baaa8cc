# SPDX-License-Identifier: Apache-2.0
# Peer of bench/gpu/bench_attention.cu: torch's scaled_dot_product_attention (causal, GQA through
# enable_gqa) in bf16 on the same shape, timed with CUDA events (median of 20 after 5 warm-ups).
# Prints "fwd_tflops X" and "fwdbwd_tflops Y" with the FLOP convention of the mxkit benchmark:
# causal forward 2 B H T^2 D, backward 2.5 times that.
# Usage: python3 bench/attention_peer.py [B T H Hkv D]
import sys

import torch
import torch.nn.functional as F


def median_ms(fn, reps=20, warm=5):
    for _ in range(warm):
        fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def main():
    B, T, H, Hkv, D = (int(x) for x in sys.argv[1:6]) if len(sys.argv) >= 6 else (1, 8192, 32, 8, 128)
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(1)
    q = torch.randn(B, H, T, D, device=dev, dtype=torch.bfloat16, generator=g).requires_grad_()
    k = torch.randn(B, Hkv, T, D, device=dev, dtype=torch.bfloat16, generator=g).requires_grad_()
    v = torch.randn(B, Hkv, T, D, device=dev, dtype=torch.bfloat16, generator=g).requires_grad_()
    do = torch.randn(B, H, T, D, device=dev, dtype=torch.bfloat16, generator=g)
    flops = 2.0 * B * H * T * T * D

    def fwd():
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    def fwdbwd():
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        q.grad = k.grad = v.grad = None
        o.backward(do)

    f = median_ms(fwd)
    fb = median_ms(fwdbwd)
    print(f"torch {torch.__version__} device {torch.cuda.get_device_name()}")
    print(f"fwd_ms {f:.4f} fwdbwd_ms {fb:.4f}")
    print(f"fwd_tflops {flops / f / 1e9:.2f}")
    print(f"fwdbwd_tflops {3.5 * flops / fb / 1e9:.2f}")


if __name__ == "__main__":
    main()
