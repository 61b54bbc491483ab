"""The Python peer of ckpt's benchmark driver (bench/cmd/peers).

The reference Python path, as its users write it: safetensors' safe_open
with framework="numpy" (which returns BF16 tensors as ml_dtypes.bfloat16
arrays), then .astype(np.float32). One run per process; the timer covers
opening, reading and converting, not the interpreter start or the imports.

    python peer.py convert PATH        every tensor to a float32 ndarray
    python peer.py steady PATH ITERS   convert ITERS times in this process;
                                       seconds: median of the iterations
                                       after the first (each iteration's
                                       arrays are freed after its timer, so
                                       NumPy's allocator reuses that memory
                                       where it does)
    python peer.py open PATH           open every shard, look every tensor up

PATH is a .safetensors file or a *.index.json naming shards in its folder.
Output: one line

    RESULT impl=python op=OP seconds=S bytes=B tensors=N check=C

where bytes counts source bytes and check is ckpt's sampled checksum of the
float32 output (the wrapping sum of the bits of every 1021st element and of
the last), so the driver can see that every implementation agrees.
"""

import json
import os
import sys
import time

import ml_dtypes  # noqa: F401  (registers bfloat16 with numpy)
import numpy as np
from safetensors import safe_open


def shards(path):
    """The shard files of path, sorted, and the index's weight map ({} for a file)."""
    if not path.endswith(".json"):
        return [path], {}
    with open(path) as f:
        wm = json.load(f)["weight_map"]
    d = os.path.dirname(path)
    return [os.path.join(d, s) for s in sorted(set(wm.values()))], wm


def checksum(a):
    bits = a.reshape(-1).view(np.uint32)
    if bits.size == 0:
        return 0
    return (int(bits[::1021].astype(np.uint64).sum()) + int(bits[-1])) % (1 << 64)


def convert_once(path):
    """One load; returns seconds, source bytes, tensors, checksum."""
    start = time.perf_counter()
    files, _ = shards(path)
    out = {}
    nbytes = 0
    for p in files:
        with safe_open(p, framework="numpy") as f:
            for k in f.keys():
                t = f.get_tensor(k)
                nbytes += t.nbytes
                out[k] = t.astype(np.float32)
    secs = time.perf_counter() - start
    check = sum(checksum(a) for a in out.values()) % (1 << 64)
    return secs, nbytes, len(out), check


def convert(path):
    secs, nbytes, n, check = convert_once(path)
    print(f"RESULT impl=python op=convert seconds={secs:.6f} bytes={nbytes} tensors={n} check={check}")


def steady(path, iters):
    if iters < 2:
        raise SystemExit("ITERS must be at least 2")
    times = []
    for _ in range(iters):
        secs, nbytes, n, check = convert_once(path)
        times.append(secs)
    later = sorted(times[1:])
    k = len(later)
    secs = later[k // 2] if k % 2 else (later[k // 2 - 1] + later[k // 2]) / 2
    print(f"RESULT impl=python op=steady seconds={secs:.6f} bytes={nbytes} tensors={n} check={check}")


def open_(path):
    start = time.perf_counter()
    files, wm = shards(path)
    handles = {os.path.basename(p): safe_open(p, framework="numpy") for p in files}
    if not wm:
        only = os.path.basename(files[0])
        wm = {k: only for k in handles[only].keys()}
    n = 0
    for name, shard in wm.items():
        handles[shard].get_slice(name).get_shape()
        n += 1
    secs = time.perf_counter() - start
    print(f"RESULT impl=python op=open seconds={secs:.6f} bytes=0 tensors={n} check=0")


def main():
    if sys.argv[1:2] == ["steady"] and len(sys.argv) == 4:
        steady(sys.argv[2], int(sys.argv[3]))
        return
    if len(sys.argv) != 3 or sys.argv[1] not in ("convert", "open"):
        print("usage: peer.py convert|open PATH | peer.py steady PATH ITERS", file=sys.stderr)
        sys.exit(2)
    (convert if sys.argv[1] == "convert" else open_)(sys.argv[2])


if __name__ == "__main__":
    main()
