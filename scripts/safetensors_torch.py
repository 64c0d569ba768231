#!/usr/bin/python3
"""safetensors files for PyTorch tensors, without the safetensors package.

Debian has no python3-safetensors, so Kiln's PyTorch interop and parity tests
use this reader and writer instead. It follows the reference implementation
(https://github.com/huggingface/safetensors) byte for byte when writing:
"__metadata__" first, then tensors sorted by descending dtype and then name,
compact JSON padded with spaces to a multiple of 8, tensors stored in header
order. It reads as strictly as the reference: the tensors must tile the data
buffer exactly. Kiln's writer (tensor/safetensors.cpp) is a separate
implementation, so each checks the other.

    import safetensors_torch as st
    st.save_file({"w": torch.ones(2, 3)}, "w.safetensors", metadata={"step": "1"})
    tensors = st.load_file("w.safetensors")
    metadata = st.load_metadata("w.safetensors")

As a command, `safetensors_torch.py show FILE` lists a file's tensors.
"""

import ctypes
import json
import struct
import sys

import torch

# The reference's dtype codes; the order is its sort order for the buffer
# (widest first when sorted descending).
_DTYPES = [
    ("BOOL", torch.bool),
    ("U8", torch.uint8),
    ("I8", torch.int8),
    ("I16", torch.int16),
    ("F16", torch.float16),
    ("BF16", torch.bfloat16),
    ("I32", torch.int32),
    ("F32", torch.float32),
    ("F64", torch.float64),
    ("I64", torch.int64),
]
_CODE_OF = {dtype: code for code, dtype in _DTYPES}
_DTYPE_OF = {code: dtype for code, dtype in _DTYPES}
_RANK = {code: rank for rank, (code, _) in enumerate(_DTYPES)}
_MAX_HEADER_SIZE = 100_000_000


class SafetensorsError(ValueError):
    pass


def _tensor_bytes(t):
    t = t.detach().to("cpu").contiguous()
    n = t.numel() * t.element_size()
    return ctypes.string_at(t.data_ptr(), n) if n else b""


def save(tensors, metadata=None):
    """The bytes of a safetensors file holding `tensors` (a dict name -> tensor)."""
    for name, t in tensors.items():
        if name == "__metadata__":
            raise SafetensorsError('a tensor may not be named "__metadata__"')
        if t.dtype not in _CODE_OF:
            raise SafetensorsError(f"tensor {name!r}: dtype {t.dtype} has no safetensors code here")
    order = sorted(tensors, key=lambda name: (-_RANK[_CODE_OF[tensors[name].dtype]], name))
    header = {}
    if metadata is not None:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    chunks = []
    offset = 0
    for name in order:
        t = tensors[name]
        data = _tensor_bytes(t)
        header[name] = {
            "dtype": _CODE_OF[t.dtype],
            "shape": list(t.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(chunks)


def save_file(tensors, path, metadata=None):
    with open(path, "wb") as f:
        f.write(save(tensors, metadata))


def _parse(blob, where):
    def fail(problem):
        raise SafetensorsError(f"{where}: {problem}")

    if len(blob) < 8:
        fail(f"{len(blob)} bytes, too short for the header size")
    (n,) = struct.unpack("<Q", blob[:8])
    if n > _MAX_HEADER_SIZE or 8 + n > len(blob):
        fail(f"header size {n} is too large for a file of {len(blob)} bytes")

    def no_duplicates(pairs):
        keys = [k for k, _ in pairs]
        if len(keys) != len(set(keys)):
            fail(f"duplicate keys in {keys}")
        return dict(pairs)

    try:
        header = json.loads(blob[8 : 8 + n].decode("utf-8"), object_pairs_hook=no_duplicates)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        fail(f"header is not valid JSON: {e}")
    if not isinstance(header, dict):
        fail("header is not a JSON object")
    metadata = header.pop("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        fail("__metadata__ must map strings to strings")
    buffer = memoryview(blob)[8 + n :]
    spans = []
    for name, info in header.items():
        if not isinstance(info, dict) or info.get("dtype") not in _DTYPE_OF:
            fail(f"tensor {name!r}: bad entry {info!r}")
        shape, offsets = info.get("shape"), info.get("data_offsets")
        if not isinstance(shape, list) or not all(type(s) is int and s >= 0 for s in shape):
            fail(f"tensor {name!r}: bad shape {shape!r}")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets)):
            fail(f"tensor {name!r}: bad data_offsets {offsets!r}")
        begin, end = offsets
        numel = 1
        for s in shape:
            numel *= s
        itemsize = torch.empty((), dtype=_DTYPE_OF[info["dtype"]]).element_size()
        if not 0 <= begin <= end or end - begin != numel * itemsize:
            fail(f"tensor {name!r}: data_offsets {offsets} do not hold {numel} x {info['dtype']}")
        spans.append((begin, end, name))
    covered = 0
    for begin, end, name in sorted(spans):
        if begin != covered:
            fail(f"tensor {name!r} starts at {begin}, expected {covered} (overlap or hole)")
        covered = end
    if covered != len(buffer):
        fail(f"tensors cover {covered} bytes of a {len(buffer)}-byte data buffer")
    return header, metadata, buffer


def load(blob, where="<bytes>"):
    """The tensors of a safetensors file's bytes, as a dict in header order."""
    header, _, buffer = _parse(blob, where)
    tensors = {}
    for name, info in header.items():
        dtype = _DTYPE_OF[info["dtype"]]
        begin, end = info["data_offsets"]
        if end == begin:
            tensors[name] = torch.empty(info["shape"], dtype=dtype)
        else:
            # bytearray: frombuffer needs a writable buffer to avoid a warning,
            # and the copy frees the tensor from the file's bytes.
            flat = torch.frombuffer(bytearray(buffer[begin:end]), dtype=dtype)
            tensors[name] = flat.reshape(info["shape"])
    return tensors


def load_file(path):
    with open(path, "rb") as f:
        return load(f.read(), path)


def load_metadata(path):
    with open(path, "rb") as f:
        return _parse(f.read(), path)[1]


def _main(argv):
    if len(argv) != 3 or argv[1] != "show":
        print(f"usage: {argv[0]} show FILE", file=sys.stderr)
        return 2
    for key, value in load_metadata(argv[2]).items():
        print(f"metadata {key} = {value}")
    for name, t in load_file(argv[2]).items():
        print(f"{name}: {_CODE_OF[t.dtype]} {list(t.shape)}")
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv))
