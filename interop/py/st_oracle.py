"""Hugging Face safetensors as the oracle for ckpt's file format.

Usage (driven by interop/safetensors_test.go; data exchanged through files):

  st_oracle.py write SPEC.json BLOB OUTDIR
      SPEC.json: {"files": [{"name": N, "metadata": {..} or null,
                              "tensors": [{"name", "dtype", "shape",
                                           "off", "len"}]}]}
      where dtype is a safetensors name and off/len locate the tensor's raw
      bytes in BLOB. Writes OUTDIR/N with the low-level serialize_file (any
      dtype, raw bytes), and checks that serialize() gives the same bytes
      (up to the order of metadata keys, see below).

  st_oracle.py read OUT.json LIST
      For each file named in LIST (one path a line): accepted or not (with
      the reference's message), the metadata, and per tensor (in the
      reference's order) its dtype, shape, sha256 of the raw bytes
      (deserialize), and the sha256 of the bytes of the numpy array that
      safe_open(framework="numpy") and load_file give where numpy has the
      dtype (null otherwise).

  st_oracle.py check OUT.json LIST
      Accept/reject of each file named in LIST by deserialize(bytes) and by
      safe_open(path), with the error messages; no tensor data is read.

  st_oracle.py reserialize OUT.json LIST OUTDIR
      Reads each file named in LIST with the reference and writes to
      OUTDIR/<i>.safetensors what the reference's writer produces for the
      same tensors and metadata; OUT.json tells, per file, whether it could
      ("" or why not: e.g. F6, which the writer does not take).

  st_oracle.py slice SPEC.json OUT.json
      SPEC.json: [{"file", "tensor", "sel": [["full"] | ["span", a, b] |
      ["at", i], ...]}]. For each, the reference's
      safe_open(framework="numpy").get_slice(tensor)[sel]: "" or its error,
      the result's shape and the sha256 of its bytes.

  st_oracle.py decode OUT.json FILE
      Every float tensor of FILE (raw bytes through deserialize) widened to
      float32 by ml_dtypes: F4 unpacked two per byte (element 0 in the low
      nibble), F6 four per three bytes (little-endian bit stream, element 0
      in the low bits). Per tensor, the sha256 of the float32 bytes with
      every NaN made the quiet NaN 0x7fc00000.

  The reference keeps __metadata__ in a hash map, so with two or more
  metadata keys the order it writes them in changes from run to run.
"""

import hashlib
import json
import sys

import numpy as np
from safetensors import TensorSpec, deserialize, safe_open, serialize, serialize_file
from safetensors.numpy import load_file

# safetensors name -> the name TensorSpec takes (PyTorch's spelling).
SPEC_DTYPE = {
    "BOOL": "bool",
    "U8": "uint8",
    "I8": "int8",
    "I16": "int16",
    "U16": "uint16",
    "I32": "int32",
    "U32": "uint32",
    "I64": "int64",
    "U64": "uint64",
    "F16": "float16",
    "F32": "float32",
    "F64": "float64",
    "BF16": "bfloat16",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E4M3FNUZ": "float8_e4m3fnuz",
    "F8_E5M2": "float8_e5m2",
    "F8_E5M2FNUZ": "float8_e5m2fnuz",
    "F8_E8M0": "float8_e8m0fnu",
    "F4": "float4_e2m1fn_x2",
    "C64": "complex64",
}


class Unwritable(Exception):
    pass


def specs(tensors, base_ptr):
    """TensorSpecs for (name, dtype, shape, offset, length) relative to base_ptr."""
    out = {}
    for name, dt, shape, off, ln in tensors:
        if dt not in SPEC_DTYPE:
            raise Unwritable("the reference writer takes no dtype %s" % dt)
        shape = list(shape)
        if dt == "F4":
            # TensorSpec takes PyTorch's storage shape for float4_e2m1fn_x2
            # (two elements per byte) and doubles the last dimension.
            if not shape or shape[-1] % 2:
                raise Unwritable("F4 shape %r has no packed storage shape" % shape)
            shape[-1] //= 2
        out[name] = TensorSpec(dtype=SPEC_DTYPE[dt], shape=shape, data_ptr=base_ptr + off, data_len=ln)
    return out


def cmd_write(spec_path, blob_path, outdir):
    with open(spec_path) as fh:
        spec = json.load(fh)
    blob = np.fromfile(blob_path, dtype=np.uint8)
    if blob.size == 0:
        blob = np.zeros(1, dtype=np.uint8)
    base = blob.ctypes.data
    for f in spec["files"]:
        ts = specs([(t["name"], t["dtype"], t["shape"], t["off"], t["len"]) for t in f["tensors"] or []], base)
        path = outdir + "/" + f["name"]
        serialize_file(ts, path, metadata=f["metadata"])
        mem = bytes(serialize(ts, metadata=f["metadata"]))
        with open(path, "rb") as fh:
            same = fh.read() == mem
        if not same and len(f["metadata"] or {}) < 2:
            raise SystemExit("serialize and serialize_file differ for " + f["name"])


def sha(b):
    return hashlib.sha256(bytes(b)).hexdigest()


def _crc32c_table():
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


CRC32C_TABLE = _crc32c_table()


def header_crc32c(raw):
    """The CRC-32C of a header's canonical form, as ckpt's safetensors
    package documents it for the key ckpt.header.crc32c: metadata other
    than checksums sorted by key, then tensors in file order, every string
    length-prefixed (in UTF-8 bytes)."""
    n = int.from_bytes(raw[:8], "little")
    hdr = json.loads(raw[8:8 + n].decode("utf-8"))
    meta = hdr.pop("__metadata__", None) or {}
    out = bytearray()

    def s(x):
        b = x.encode("utf-8")
        out.extend(b"%d:" % len(b))
        out.extend(b)

    for k in sorted((k for k in meta if not (k.startswith("ckpt.crc32c.") or k == "ckpt.header.crc32c")), key=lambda k: k.encode("utf-8")):
        out.extend(b"m")
        s(k)
        s(meta[k])
    for name, t in sorted(hdr.items(), key=lambda kv: (kv[1]["data_offsets"][0], kv[1]["data_offsets"][1])):
        out.extend(b"t")
        s(name)
        out.extend(t["dtype"].encode("ascii") + b":")
        out.extend(",".join(str(d) for d in t["shape"]).encode("ascii") + b";")
        out.extend(b"%d,%d;" % tuple(t["data_offsets"]))
    return crc32c(out)


def crc32c(b):
    """CRC-32C (Castagnoli, reflected), written out here as an independent
    check of the checksums ckpt's writers put in __metadata__."""
    c = 0xFFFFFFFF
    for x in bytes(b):
        c = CRC32C_TABLE[(c ^ x) & 0xFF] ^ (c >> 8)
    return "%08x" % (c ^ 0xFFFFFFFF)


def cmd_read(out_path, paths):
    res = []
    for p in paths:
        entry = {"file": p}
        try:
            with open(p, "rb") as fh:
                raw = fh.read()
            items = deserialize(raw)
            with safe_open(p, framework="numpy") as f:
                meta = f.metadata()
                npt = {}
                for k in f.keys():
                    try:
                        npt[k] = sha(f.get_tensor(k).tobytes())
                    except Exception:  # dtype numpy does not have
                        npt[k] = None
            try:
                lf = {k: sha(v.tobytes()) for k, v in load_file(p).items()}
            except Exception:
                lf = None
            tensors = []
            for name, t in items:
                tensors.append({
                    "name": name,
                    "dtype": t["dtype"],
                    "shape": list(t["shape"]),
                    "sha256": sha(t["data"]),
                    "crc32c": crc32c(t["data"]),
                    "len": len(t["data"]),
                    "numpy_sha256": npt.get(name),
                    "load_file_sha256": None if lf is None else lf.get(name),
                })
            entry.update(ok=True, metadata=meta, tensors=tensors, header_crc32c=header_crc32c(raw))
        except Exception as e:
            entry.update(ok=False, error="%s: %s" % (type(e).__name__, e))
        res.append(entry)
    with open(out_path, "w") as fh:
        json.dump(res, fh)


def cmd_check(out_path, paths):
    res = []
    for p in paths:
        entry = {"file": p}
        try:
            with open(p, "rb") as fh:
                deserialize(fh.read())
            entry["deserialize"] = ""
        except Exception as e:
            entry["deserialize"] = "%s: %s" % (type(e).__name__, e) or "error"
        try:
            with safe_open(p, framework="numpy") as f:
                f.keys()
            entry["safe_open"] = ""
        except Exception as e:
            entry["safe_open"] = "%s: %s" % (type(e).__name__, e) or "error"
        res.append(entry)
    with open(out_path, "w") as fh:
        json.dump(res, fh)


def reserialize(inp, out):
    with open(inp, "rb") as fh:
        raw = fh.read()
    items = deserialize(raw)
    with safe_open(inp, framework="numpy") as f:
        meta = f.metadata()
    keep = []
    ts = {}
    for name, t in items:
        d = np.frombuffer(bytes(t["data"]) or b"\0", dtype=np.uint8)
        keep.append(d)
        ts.update(specs([(name, t["dtype"], t["shape"], 0, len(t["data"]))], d.ctypes.data))
    serialize_file(ts, out, metadata=meta)


def cmd_reserialize(out_path, paths, outdir):
    res = []
    for i, p in enumerate(paths):
        try:
            reserialize(p, "%s/%d.safetensors" % (outdir, i))
            res.append("")
        except Unwritable as e:
            res.append(str(e))
        except Exception as e:  # a file the reference does not read
            res.append("%s: %s" % (type(e).__name__, e))
    with open(out_path, "w") as fh:
        json.dump(res, fh)


def cmd_slice(spec_path, out_path):
    with open(spec_path) as fh:
        spec = json.load(fh)
    res = []
    handles = {}
    try:
        for q in spec:
            if q["file"] not in handles:
                handles[q["file"]] = safe_open(q["file"], framework="numpy")
            f = handles[q["file"]]
            idx = []
            for s in q["sel"] or []:
                if s[0] == "full":
                    idx.append(slice(None))
                elif s[0] == "span":
                    idx.append(slice(s[1], s[2]))
                else:
                    idx.append(s[1])
            try:
                a = np.asarray(f.get_slice(q["tensor"])[tuple(idx)])
                res.append({"error": "", "shape": list(a.shape), "sha256": sha(a.tobytes())})
            except Exception as e:
                res.append({"error": "%s: %s" % (type(e).__name__, e), "shape": None, "sha256": ""})
    finally:
        for f in handles.values():
            f.__exit__(None, None, None)
    with open(out_path, "w") as fh:
        json.dump(res, fh)


def unpack_bits(data, bits, n):
    """Codes of n elements packed as a little-endian bit stream."""
    b = np.frombuffer(bytes(data), dtype=np.uint8)
    if bits == 4:
        out = np.empty(2 * b.size, dtype=np.uint8)
        out[0::2] = b & 0x0F
        out[1::2] = b >> 4
        return out[:n]
    g = b[: b.size // 3 * 3].reshape(-1, 3).astype(np.uint32)
    w = g[:, 0] | (g[:, 1] << 8) | (g[:, 2] << 16)
    out = np.empty((w.size, 4), dtype=np.uint8)
    for k in range(4):
        out[:, k] = (w >> (6 * k)) & 0x3F
    return out.reshape(-1)[:n]


def widen(dt, data, n):
    import ml_dtypes

    narrow = {
        "BF16": ml_dtypes.bfloat16, "F16": np.float16, "F32": np.float32,
        "F8_E4M3": ml_dtypes.float8_e4m3fn, "F8_E5M2": ml_dtypes.float8_e5m2,
        "F8_E4M3FNUZ": ml_dtypes.float8_e4m3fnuz, "F8_E5M2FNUZ": ml_dtypes.float8_e5m2fnuz,
        "F8_E8M0": ml_dtypes.float8_e8m0fnu,
    }
    if dt in narrow:
        a = np.frombuffer(bytes(data), dtype=np.dtype(narrow[dt]).newbyteorder("<"))
    elif dt == "F4":
        a = unpack_bits(data, 4, n).view(ml_dtypes.float4_e2m1fn)
    elif dt in ("F6_E2M3", "F6_E3M2"):
        t = ml_dtypes.float6_e2m3fn if dt == "F6_E2M3" else ml_dtypes.float6_e3m2fn
        a = unpack_bits(data, 6, n).view(t)
    else:
        return None
    with np.errstate(all="ignore"):
        f = a.astype("<f4")
    f[np.isnan(f)] = np.float32("nan")
    return f


def cmd_decode(out_path, path):
    with open(path, "rb") as fh:
        items = deserialize(fh.read())
    res = {}
    for name, t in items:
        n = int(np.prod(t["shape"], dtype=np.int64))
        f = widen(t["dtype"], t["data"], n)
        if f is not None:
            res[name] = {"n": int(f.size), "sha256": sha(f.view(np.uint32).astype("<u4").tobytes())}
    with open(out_path, "w") as fh:
        json.dump(res, fh)


def main(argv):
    if len(argv) == 5 and argv[1] == "write":
        cmd_write(argv[2], argv[3], argv[4])
    elif len(argv) == 4 and argv[1] in ("read", "check"):
        with open(argv[3]) as fh:
            paths = [l.rstrip("\n") for l in fh if l.strip()]
        (cmd_read if argv[1] == "read" else cmd_check)(argv[2], paths)
    elif len(argv) == 4 and argv[1] == "decode":
        cmd_decode(argv[2], argv[3])
    elif len(argv) == 4 and argv[1] == "slice":
        cmd_slice(argv[2], argv[3])
    elif len(argv) == 5 and argv[1] == "reserialize":
        with open(argv[3]) as fh:
            paths = [l.rstrip("\n") for l in fh if l.strip()]
        cmd_reserialize(argv[2], paths, argv[4])
    else:
        sys.stderr.write(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
