#!/usr/bin/env python3
"""peers.py: the PyTorch/safetensors peers and the disk limit for bench/gpu.

Prints one JSON object of figures (GB/s, TFLOP/s), each the median of --runs:
  load_file_warm, load_file_cold: safetensors.torch.load_file(f, device="cuda:0")
      over the shards (bytes of the files per second);
  dd_cold: dd of the shards to /dev/null after dropping the page cache;
  matmul_BF16: torch.matmul of dim x dim BF16 matrices;
  matmul_F8_E4M3: torch._scaled_mm with float8_e4m3fn operands when this
      PyTorch and GPU have it (row-wise scales), else absent.
Cold figures need root (the page cache is dropped with
/proc/sys/vm/drop_caches). Usage: peers.py [--runs N] [--dim D] [--cold] SHARD...
"""
import argparse, json, os, statistics, subprocess, sys, time


def drop_caches():
    subprocess.run(["sync"], check=False)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dim", type=int, default=4096)
    ap.add_argument("--cold", action="store_true")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    import torch
    from safetensors.torch import load_file

    total = sum(os.path.getsize(f) for f in a.files)
    out = {}

    def timed(fn, cold):
        ts = []
        if not cold:
            fn()
        for _ in range(a.runs):
            if cold:
                drop_caches()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts)

    def load():
        for f in a.files:
            d = load_file(f, device="cuda:0")
            del d

    out["load_file_warm"] = total / timed(load, False) / 1e9
    if a.cold:
        out["load_file_cold"] = total / timed(load, True) / 1e9

        def dd():
            for f in a.files:
                subprocess.run(["dd", "if=" + f, "of=/dev/null", "bs=16M"], check=True, capture_output=True)

        out["dd_cold"] = total / timed(dd, True) / 1e9

    n = a.dim
    x = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    out["matmul_BF16"] = 2 * n ** 3 / timed(lambda: torch.matmul(x, w.t()), False) / 1e12
    try:
        x8 = x.to(torch.float8_e4m3fn)
        w8 = w.to(torch.float8_e4m3fn)
        one = torch.ones((), device="cuda")
        f = lambda: torch._scaled_mm(x8, w8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        f()
        out["matmul_F8_E4M3"] = 2 * n ** 3 / timed(f, False) / 1e12
    except Exception as e:  # no FP8 matmul on this GPU or PyTorch
        print("peers.py: no FP8 matmul:", e, file=sys.stderr)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
