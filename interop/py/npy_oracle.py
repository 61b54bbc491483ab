"""numpy (and ml_dtypes) as the oracle for ckpt's .npy writer (internal/npy).

Usage (driven by interop/npy_test.go; data exchanged through files):

  npy_oracle.py load OUT.json LIST [--ml-dtypes]
      For each .npy file named in LIST (one path a line): whether np.load
      reads it (or its error), the array's dtype name, shape, the hex of its
      bytes (tobytes), each element as a float.hex string for float and
      complex dtypes (complex: real then imaginary), and whether np.save of
      the loaded array writes the very bytes of the file. With --ml-dtypes,
      ml_dtypes is imported first (registering bfloat16, float8_*, ...);
      without it, numpy alone.
"""

import io
import json
import sys

import numpy as np


def main():
    mode, out_path, list_path = sys.argv[1:4]
    if mode != "load":
        raise SystemExit("unknown mode " + mode)
    if "--ml-dtypes" in sys.argv[4:]:
        import ml_dtypes  # noqa: F401  (registers the narrow float types)
    with open(list_path) as f:
        paths = [p for p in f.read().split("\n") if p]
    results = []
    for path in paths:
        with open(path, "rb") as f:
            raw = f.read()
        r = {"file": path}
        try:
            a = np.load(io.BytesIO(raw), allow_pickle=False)
        except Exception as e:  # the reference's refusal, reported
            r["ok"] = False
            r["error"] = str(e)
            results.append(r)
            continue
        r["ok"] = True
        r["dtype"] = a.dtype.name
        r["shape"] = list(a.shape)
        r["hex"] = a.tobytes().hex()
        kind = a.dtype.kind
        if kind == "c":
            flat = a.reshape(-1)
            r["values"] = [v for z in flat for v in (float(z.real).hex(), float(z.imag).hex())]
        elif kind in "fV":
            # numpy's floats, and the ml_dtypes types (kind 'V').
            r["values"] = [float(v).hex() for v in a.astype(np.float64).reshape(-1)]
        buf = io.BytesIO()
        np.save(buf, a)
        r["resave_equal"] = buf.getvalue() == raw
        results.append(r)
    with open(out_path, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
