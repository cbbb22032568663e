"""sdpa_decode.py -- the baseline of bench_cuda_attention: torch SDPA decode attention on
the same shapes (one query token per sequence, GQA 32/8 heads x 128, bf16) with contiguous
K/V [B, 8, ctx, 128], timed with CUDA events after 3 warm-ups two ways, as
bench_cuda_attention times its kernels: one call between two events, median of 20 (iso:
includes the launch latency of the first kernel while the GPU idles), and 20 calls queued
back to back between two events, the per-call mean, median of 5 batches (queued).

Tries the flash backend with enable_gqa first (K/V read once per K/V head), then the
efficient backend, then flash on K/V expanded to 32 heads (which reads 4x the bytes; the
effective bandwidth still counts the 8-head bytes). Prints which ran.

    python3 bench/cuda/sdpa_decode.py [B:CTX ...]     default 32:4096 64:8192 8:32768
"""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

NH, NKV, HD = 32, 8, 128


def median_ms(fn, reps=20):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def queued_ms(fn, reps=20, batches=5):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(3):
        fn()
    times = []
    for _ in range(batches):
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / reps)
    times.sort()
    return times[len(times) // 2]


def main():
    shapes = sys.argv[1:] or ["32:4096", "64:8192", "8:32768"]
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    # The read-only ceiling: a sum over 2 GiB of bf16 (bytes read / time, queued).
    x = torch.randn(1 << 30, device="cuda", dtype=torch.bfloat16)
    r = queued_ms(lambda: x.sum())
    print(f"read ceiling: torch x.sum over 2 GiB bf16, queued {r:.4f} ms, {2 * (1 << 30) / (r * 1e-3) / 1e12:.2f} TB/s")
    del x
    for s in shapes:
        b, ctx = (int(x) for x in s.split(":"))
        q = torch.randn(b, NH, 1, HD, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b, NKV, ctx, HD, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(b, NKV, ctx, HD, device="cuda", dtype=torch.bfloat16)
        kv_bytes = 2 * b * ctx * NKV * HD * 2
        tried = [
            ("flash+gqa", SDPBackend.FLASH_ATTENTION, lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)),
            ("efficient+gqa", SDPBackend.EFFICIENT_ATTENTION,
             lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)),
        ]
        ke, ve = k.repeat_interleave(NH // NKV, dim=1), v.repeat_interleave(NH // NKV, dim=1)
        tried.append(("flash, K/V expanded to 32 heads", SDPBackend.FLASH_ATTENTION,
                      lambda: F.scaled_dot_product_attention(q, ke, ve)))
        for name, backend, fn in tried:
            try:
                with sdpa_kernel(backend):
                    ms = median_ms(fn)
                    qms = queued_ms(fn)
            except RuntimeError as e:
                print(f"B={b:<3} ctx={ctx:<6} {name}: not available ({str(e).splitlines()[0][:100]})")
                continue
            print(f"B={b:<3} ctx={ctx:<6} sdpa {name}: iso {ms:.4f} ms {kv_bytes / (ms * 1e-3) / 1e12:.2f} TB/s, "
                  f"queued {qms:.4f} ms {kv_bytes / (qms * 1e-3) / 1e12:.2f} TB/s (effective K+V)")
        del ke, ve, k, v, q
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
