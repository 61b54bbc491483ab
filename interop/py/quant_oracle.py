"""NumPy + ml_dtypes as the oracle for ckpt's dequantization of scaled layouts.

Usage (driven by interop/quant_test.go, data exchanged through files):

  quant_oracle.py DIR
      Reads DIR/cases.json, a list of cases:
        {"id": "c0", "layout": "deepseek-fp8-block", "shape": [out, in],
         "elem": "F8_E4M3" | "F8_E5M2" | "F4",
         "data": "c0.data",                      raw stored bytes
         "data_shape": [...],                    stored shape
         "scales": [{"file": ..., "dtype": "F32" | "BF16" | "F16" | "F8_E4M3" | "U8",
                     "shape": [...]}, ...],      stored order
         "params": {"block": [b0, b1], "strategy": ..., "group": g},
         "targets": ["F32", "BF16", "F16", "F64"]}
      and writes DIR/ID.TARGET.bin: the logical tensor in TARGET, computed
      from the layout's own formula (not from ckpt's description of scale
      blocks):
        value = q * scale [* scale_2 | / global_scale]
      with q and the scales decoded to float64 by ml_dtypes (exact), the
      product in float64 (exact: at most 52 significant bits), the
      compressed-tensors NVFP4 quotient as one float64 division, then ONE
      rounding to the target done here: float64 -> float32 by numpy (a single
      IEEE rounding), float64 -> bfloat16 / float16 by round_once below. Not
      ml_dtypes' astype(bfloat16) from float64, which rounds through float32
      (1 + 2**-8 + 2**-30 would become 1.0 instead of 1 + 2**-7).
"""

import json
import os
import sys

import ml_dtypes
import numpy as np

NARROW = {
    "F8_E4M3": ml_dtypes.float8_e4m3fn,
    "F8_E5M2": ml_dtypes.float8_e5m2,
    "F8_E8M0": ml_dtypes.float8_e8m0fnu,
    "U8": ml_dtypes.float8_e8m0fnu,  # MXFP4 scales: E8M0 exponents in U8
}


def decode(raw, dt, shape):
    """Exact float64 values of stored bytes."""
    if dt == "F32":
        a = np.frombuffer(raw, dtype="<f4").astype(np.float64)
    elif dt == "F16":
        a = np.frombuffer(raw, dtype="<f2").astype(np.float64)
    elif dt == "BF16":
        a = np.frombuffer(raw, dtype="<u2").view(ml_dtypes.bfloat16).astype(np.float64)
    elif dt == "F4":
        b = np.frombuffer(raw, dtype=np.uint8)
        codes = np.empty(2 * b.size, dtype=np.uint8)
        codes[0::2] = b & 15  # element 2i in the low nibble
        codes[1::2] = b >> 4
        a = codes.view(ml_dtypes.float4_e2m1fn).astype(np.float64)
        shape = list(shape[:-1]) + [2 * shape[-1]]  # U8 container: two values a byte
    else:
        a = np.frombuffer(raw, dtype=np.uint8).view(NARROW[dt]).astype(np.float64)
    return a.reshape(shape)


def expand(s, rows, cols, b0, b1):
    """Scale grid s [ceil(rows/b0), ceil(cols/b1)] -> one scale per element."""
    return np.repeat(np.repeat(s, b0, axis=0), b1, axis=1)[:rows, :cols]


def round_once(x, mbits, emin, maxv):
    """Round float64 x once to a binary format with mbits stored mantissa
    bits and smallest normal exponent emin: to nearest, ties to even, as if
    the exponent were unbounded below emin's subnormal spacing; beyond maxv
    -> +-inf. Returns float64 values the format represents exactly."""
    a = np.abs(x)
    special = ~np.isfinite(a) | (a == 0)
    safe = np.where(special, 1.0, a)
    _, e = np.frexp(safe)  # safe = m * 2**e, m in [0.5, 1)
    q = np.ldexp(1.0, np.maximum(e - 1, emin) - mbits)
    r = np.rint(safe / q) * q  # safe / q is exact; rint rounds half to even
    r = np.where(r > maxv, np.inf, r)
    r = np.where(special, a, r)
    return np.copysign(r, x)


def to_target(v, target):
    if target == "F64":
        return v.astype("<f8").tobytes()
    if target == "F32":
        return v.astype("<f4").tobytes()  # numpy: one IEEE rounding
    if target == "BF16":
        r = round_once(v, 7, -126, float(ml_dtypes.finfo(ml_dtypes.bfloat16).max))
        bits = (r.astype(np.float32).view(np.uint32) >> 16).astype("<u2")  # exact: r is a bfloat16 value
        return bits.tobytes()
    if target == "F16":
        r = round_once(v, 10, -14, 65504.0)
        return r.astype("<f2").tobytes()  # exact: r is a float16 value
    raise ValueError(target)


def compute(case, d):
    shape = case["shape"]
    p = case["params"]
    q = decode(read(d, case["data"]), case["elem"], case["data_shape"])
    scales = [decode(read(d, s["file"]), s["dtype"], s["shape"]) for s in case["scales"]]
    layout = case["layout"]
    if layout == "mxfp4":
        # data [..., G, 16] bytes = [..., G, 32] values; scales [..., G]
        v = q * scales[0][..., None]  # q is [..., G, 32]
        return v.reshape(shape)
    rows, cols = int(np.prod(shape[:-1])), shape[-1]
    q = q.reshape(rows, cols)
    if layout in ("compressed-tensors-nvfp4", "modelopt-nvfp4"):
        s = np.repeat(scales[0].reshape(rows, cols // p["group"]), p["group"], axis=1)
        g = scales[1].reshape(())
        if layout == "compressed-tensors-nvfp4":
            v = (q * s) / g  # the dividing layout: one float64 quotient
        else:
            v = (q * s) * g
        return v.reshape(shape)
    s = scales[0]
    strategy = p.get("strategy", "tensor")
    if strategy == "tensor":
        v = q * s.reshape(())
    elif strategy == "channel":
        v = q * s.reshape(rows, 1)
    elif strategy == "group":
        v = q * np.repeat(s.reshape(rows, -1), p["group"], axis=1)
    elif strategy == "block":
        b0, b1 = p["block"]
        v = q * expand(s.reshape(-(-rows // b0), -(-cols // b1)), rows, cols, b0, b1)
    else:
        raise ValueError(strategy)
    return v.reshape(shape)


def read(d, name):
    with open(os.path.join(d, name), "rb") as fh:
        return fh.read()


def main():
    d = sys.argv[1]
    with open(os.path.join(d, "cases.json")) as fh:
        cases = json.load(fh)
    with np.errstate(all="ignore"):
        for case in cases:
            v = compute(case, d)
            for t in case["targets"]:
                with open(os.path.join(d, "%s.%s.bin" % (case["id"], t)), "wb") as fh:
                    fh.write(to_target(v, t))
    print(json.dumps({"cases": len(cases), "ml_dtypes": ml_dtypes.__version__, "numpy": np.__version__}))


if __name__ == "__main__":
    main()
