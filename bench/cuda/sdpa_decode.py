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

--rounds N --between CMD (session 8): N rounds, each SDPA flash+gqa on the shapes (queued,
one line per shape) and CMD run once (a shell command: our bench), in the order A B B A ...
(CMD first in even rounds, so drift over the run falls on both alike); the SDPA process
and its tensors stay alive between rounds, so a round costs no torch start. At the end:
SDPA's median over the rounds per shape.
"""
import statistics
import subprocess
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


def interleaved(shapes, rounds, between):
    """SDPA flash+gqa queued on each shape against `between` (a shell command), `rounds`
    times, A B B A; prints each time and the medians."""
    data = []
    for s in shapes:
        b, ctx = (int(x) for x in s.split(":"))
        q = torch.randn(b, NH, 1, HD, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b, NKV, ctx, HD, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(b, NKV, ctx, HD, device="cuda", dtype=torch.bfloat16)
        data.append((s, 2 * b * ctx * NKV * HD * 2, q, k, v))
    got = {s: [] for s in shapes}

    def sdpa_round(r):
        for s, kv_bytes, q, k, v in data:
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                qms = queued_ms(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True))
            got[s].append(qms)
            print(f"round {r} {s} sdpa flash+gqa queued {qms:.4f} ms {kv_bytes / (qms * 1e-3) / 1e12:.2f} TB/s",
                  flush=True)

    for r in range(rounds):
        if r % 2 == 0:
            subprocess.run(between, shell=True)
            sdpa_round(r)
        else:
            sdpa_round(r)
            subprocess.run(between, shell=True)
    for s in shapes:
        print(f"sdpa flash+gqa {s}: median of {rounds} {statistics.median(got[s]):.4f} ms "
              f"(min {min(got[s]):.4f}, max {max(got[s]):.4f})")


def main():
    args = sys.argv[1:]
    if "--rounds" in args:
        i = args.index("--rounds")
        rounds = int(args[i + 1])
        del args[i:i + 2]
        i = args.index("--between")
        between = args[i + 1]
        del args[i:i + 2]
        print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
        interleaved(args or ["8:32768"], rounds, between)
        return
    shapes = args or ["32:4096", "64:8192", "8:32768"]
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
