"""ml_dtypes as the oracle for ckpt's dtype conversions.

Usage (driven by interop/dtype_test.go, data exchanged through files):

  dtype_oracle.py codes OUTDIR
      For every target type T writes OUTDIR/codes_T.f32: every code of T
      (all 256 for 8-bit types, 16 for F4, 64 for F6, 65536 for BF16/F16)
      decoded to float32, little-endian. Also writes OUTDIR/info.json with
      the versions and each type's finfo max.

  dtype_oracle.py convert IN.f32 OUTDIR
      Reads little-endian float32 values and writes, for every target T:
        nonsat_T.bin   x.astype(T) (ml_dtypes' only cast: non-saturating)
        sat_T.bin      clip(x, -max, max).astype(T): OCP SAT / SATFINITE,
                       finite overflow and +-Inf become +-max, NaN stays NaN
        satfin_T.bin   like sat, but +-Inf stays +-Inf where T has Inf
      and, for S in bfloat16, float16, every code of S cast to T:
        from_S_T.bin
      Elements are one byte each for 8-bit and narrower types (ml_dtypes
      keeps one element per byte, code in the low bits) and two bytes,
      little-endian, for bfloat16/float16.
"""

import json
import os
import sys

import ml_dtypes
import numpy as np

# ckpt / safetensors name -> numpy dtype
TYPES = {
    "F8_E4M3": ml_dtypes.float8_e4m3fn,
    "F8_E5M2": ml_dtypes.float8_e5m2,
    "F8_E4M3FNUZ": ml_dtypes.float8_e4m3fnuz,
    "F8_E5M2FNUZ": ml_dtypes.float8_e5m2fnuz,
    "F8_E8M0": ml_dtypes.float8_e8m0fnu,
    "F4": ml_dtypes.float4_e2m1fn,
    "F6_E2M3": ml_dtypes.float6_e2m3fn,
    "F6_E3M2": ml_dtypes.float6_e3m2fn,
    "BF16": ml_dtypes.bfloat16,
    "F16": np.float16,
}
BITS = {"F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "BF16": 16, "F16": 16}
WIDE = ("BF16", "F16")


def raw(a):
    """Storage bytes of a little-endian array of T."""
    if a.dtype.itemsize == 1:
        return a.view(np.uint8).tobytes()
    return a.view("<u2").tobytes()


def codes(name):
    bits = BITS.get(name, 8)
    if bits == 16:
        return np.arange(1 << 16, dtype="<u2").view(TYPES[name])
    return np.arange(1 << bits, dtype=np.uint8).view(TYPES[name])


def cmd_codes(outdir):
    info = {
        "ml_dtypes": ml_dtypes.__version__,
        "numpy": np.__version__,
        "max": {},
    }
    for name, t in TYPES.items():
        c = codes(name)
        with np.errstate(all="ignore"):
            f = c.astype(np.float32)
        with open(os.path.join(outdir, "codes_%s.f32" % name), "wb") as fh:
            fh.write(f.astype("<f4").tobytes())
        info["max"][name] = float(ml_dtypes.finfo(t).max)
    with open(os.path.join(outdir, "info.json"), "w") as fh:
        json.dump(info, fh)


def cmd_convert(inpath, outdir):
    x = np.fromfile(inpath, dtype="<f4")
    for name, t in TYPES.items():
        mx = np.float32(ml_dtypes.finfo(t).max)
        with np.errstate(all="ignore"):
            ns = x.astype(t)
            sat = np.clip(x, -mx, mx).astype(t)  # NaN passes through clip
            fin = np.where(np.isinf(x), x, np.clip(x, -mx, mx)).astype(t)
        for prefix, a in (("nonsat", ns), ("sat", sat), ("satfin", fin)):
            with open(os.path.join(outdir, "%s_%s.bin" % (prefix, name)), "wb") as fh:
                fh.write(raw(a))
    for src in WIDE:
        c = codes(src)
        for name, t in TYPES.items():
            with np.errstate(all="ignore"):
                a = c.astype(t)
            with open(os.path.join(outdir, "from_%s_%s.bin" % (src, name)), "wb") as fh:
                fh.write(raw(a))


def main(argv):
    if len(argv) == 3 and argv[1] == "codes":
        cmd_codes(argv[2])
    elif len(argv) == 4 and argv[1] == "convert":
        cmd_convert(argv[2], argv[3])
    else:
        sys.stderr.write(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
