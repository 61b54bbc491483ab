"""The Python peer of bench/convert.sh: the conversion script users write.

    python convert_torch.py SRC DST [--fsync]

Loads SRC with safetensors.torch.load_file, casts every tensor to
torch.bfloat16 with .to(), and writes DST with safetensors.torch.save_file,
as a user converts a checkpoint by hand. With --fsync it then makes DST
durable as `ckpt convert` does (fsync of the file, then of its folder), so
the two can be compared at equal durability.

The timer starts after the imports (torch's import alone takes seconds) and
covers load, cast, save and, with --fsync, the syncs. Output: one line

    RESULT work_seconds=S work_cpu_seconds=C maxrss_kib=K tensors=N

where work_cpu_seconds is the CPU time (user and system, all threads) this
process spent in the same span and maxrss_kib its peak resident set
(getrusage).
"""

import os
import resource
import sys
import time

import torch
from safetensors.torch import load_file, save_file


def fsync_path(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main(argv):
    args = [a for a in argv if a != "--fsync"]
    if len(args) != 2:
        sys.exit("usage: convert_torch.py SRC DST [--fsync]")
    src, dst = args
    sync = "--fsync" in argv

    start, cpu0 = time.perf_counter(), cpu()
    state = load_file(src)
    state = {name: t.to(torch.bfloat16) for name, t in state.items()}
    save_file(state, dst, metadata={"format": "pt"})
    if sync:
        fsync_path(dst)
        fsync_path(os.path.dirname(os.path.abspath(dst)))
    work, work_cpu = time.perf_counter() - start, cpu() - cpu0

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"RESULT work_seconds={work:.4f} work_cpu_seconds={work_cpu:.4f} maxrss_kib={rss} tensors={len(state)}")


if __name__ == "__main__":
    main(sys.argv[1:])
