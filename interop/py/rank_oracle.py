"""Rank parts oracle: numpy.array_split of every case's tensor.

usage: rank_oracle.py CASES.json OUT.json

CASES.json lists {"file", "tensor", "dim", "world"}; OUT.json gets, per
case, every rank's part as numpy.array_split(a, world, axis=dim)[rank]:
its shape and the sha256 of its C-order bytes.
"""
import hashlib
import json
import sys

import numpy as np
from safetensors.numpy import load_file


def main():
    cases_path, out_path = sys.argv[1:3]
    with open(cases_path) as f:
        cases = json.load(f)
    files = {}
    out = []
    for c in cases:
        if c["file"] not in files:
            files[c["file"]] = load_file(c["file"])
        a = files[c["file"]][c["tensor"]]
        parts = []
        for p in np.array_split(a, c["world"], axis=c["dim"]):
            p = np.ascontiguousarray(p)
            parts.append({"shape": list(p.shape), "sha256": hashlib.sha256(p.tobytes()).hexdigest()})
        out.append(parts)
    with open(out_path, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
