#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes a small safetensors file with nothing but json + struct, independent of mxkit's writer,
and prints it as a C++ byte array for tests/nn/catch2_test_safetensors.cpp (the fixture
"written by another tool"). The layout differs from mxkit's writer on purpose: Python's JSON
spacing, keys in another order than the data, __metadata__ last, BF16 and F32 in one file, no
padding of the header. The values are chosen exact in BF16 so the test can state them.

    python3 tools/twin/safetensors_fixture.py [--out FILE]
"""
import argparse
import json
import struct


def fixture_bytes():
    # "w" F32 [2, 3]: (i - 2) / 4;  "g" BF16 [4]: 1, -2, 0.5, 3.75 (bf16 bits = top half of the f32)
    w = [(i - 2) / 4.0 for i in range(6)]
    g = [1.0, -2.0, 0.5, 3.75]
    w_bytes = struct.pack("<6f", *w)
    g_bytes = b"".join(struct.pack("<I", struct.unpack("<I", struct.pack("<f", v))[0] >> 16)[:2] for v in g)
    header = {
        "w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [len(g_bytes), len(g_bytes) + len(w_bytes)]},
        "g": {"dtype": "BF16", "shape": [4], "data_offsets": [0, len(g_bytes)]},
        "__metadata__": {"writer": "python json+struct", "note": "caf\u00e9 \"quoted\""},
    }
    text = json.dumps(header).encode("utf-8")
    return struct.pack("<Q", len(text)) + text + g_bytes + w_bytes


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="also write the file here")
    a = ap.parse_args()
    data = fixture_bytes()
    if a.out:
        with open(a.out, "wb") as f:
            f.write(data)
    rows = [", ".join("0x%02x" % b for b in data[i:i + 16]) for i in range(0, len(data), 16)]
    print("// %d bytes, from tools/twin/safetensors_fixture.py" % len(data))
    print("constexpr unsigned char python_fixture[] = {\n    " + ",\n    ".join(rows) + "};")


if __name__ == "__main__":
    main()
