#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora (corpus/safetensors, corpus/disk_cache_index): a few
valid inputs built from the formats' descriptions, plus truncated and corrupted variants. No
downloaded data; rerun to regenerate (the output is deterministic)."""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def safetensors(entries, metadata=None):
    """entries: [(name, code, shape, raw bytes)] laid out back to back in the given order."""
    header, data = {}, b""
    for name, code, shape, raw in entries:
        header[name] = {"dtype": code, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


def fnv1a64(b):
    h = 0xCBF29CE484222325
    for c in b:
        h = ((h ^ c) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def write(folder, name, data):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


def main():
    st = os.path.join(HERE, "corpus", "safetensors")
    mlp = safetensors(
        [("fc1.weight", "F32", [2, 3], struct.pack("<6f", 1.5, -2, 0, 3, 3e38, 1e-40)),
         ("fc1.bias", "F32", [2], struct.pack("<2f", 0.25, -0.5)),
         ("steps", "I64", [], struct.pack("<q", 7))],
        {"format": "pt"})
    every = safetensors(
        [("f64", "F64", [2], struct.pack("<2d", 3.14, -1e-310)),
         ("i64", "I64", [1, 1], struct.pack("<q", -(2**53))),
         ("f32", "F32", [1], struct.pack("<f", 2.0)),
         ("i32", "I32", [2], struct.pack("<2i", 2**31 - 1, -(2**31))),
         ("f16", "F16", [2, 1], bytes.fromhex("003cffbb")),
         ("bf16", "BF16", [1], bytes.fromhex("803f")),
         ("bool", "BOOL", [3], bytes([1, 0, 1])),
         ("empty", "F32", [0, 3], b"")])
    write(st, "mlp.safetensors", mlp)
    write(st, "every_dtype.safetensors", every)
    write(st, "empty_header.safetensors", struct.pack("<Q", 2) + b"{}")
    write(st, "truncated_in_header.safetensors", mlp[: 8 + 20])
    write(st, "truncated_in_data.safetensors", every[:-3])
    write(st, "length_past_end.safetensors", struct.pack("<Q", 1 << 40) + b"{}")

    idx = os.path.join(HERE, "corpus", "disk_cache_index")
    entry = b"entry bytes"  # what fuzz_disk_cache_index.cpp writes as k.bin
    record = {"file": "k.bin", "size": len(entry), "checksum": fnv1a64(entry),
              "created": "2025-01-01T00:00:00Z"}
    valid = json.dumps({"version": 1, "entries": {"k": record}}, indent=1).encode()
    write(idx, "valid.json", valid)
    write(idx, "two_records.json", json.dumps(
        {"version": 1, "entries": {"k": record, "other": dict(record, file="other.bin")}}).encode())
    write(idx, "empty_entries.json", b'{"version": 1, "entries": {}}')
    write(idx, "version_string.json", json.dumps({"version": "1", "entries": {"k": record}}).encode())
    write(idx, "wrong_checksum.json", json.dumps(
        {"version": 1, "entries": {"k": dict(record, checksum="0" * 16)}}).encode())
    write(idx, "truncated.json", valid[: len(valid) // 2])


if __name__ == "__main__":
    main()
