"""Counts the pixels of a PNG screenshot painted in the HTML report's flame graph colours:
Python frames (cool: r 90-130, g 150-200, b 200-240) and native frames (warm: r 225-250,
g 110-190, b 50-80). Usage: flame_pixels.py FILE.png -> prints "python N native M".
PNG decoding with zlib only (no PIL), as tests/tools/html_report_test.sh does."""
import struct
import sys
import zlib

data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
pos, idat, hdr = 8, b"", None
while pos < len(data):
    n, kind = struct.unpack(">I4s", data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + n]
    if kind == b"IHDR":
        hdr = struct.unpack(">IIBBBBB", body)
    elif kind == b"IDAT":
        idat += body
    pos += 12 + n
w, h, depth, ctype = hdr[0], hdr[1], hdr[2], hdr[3]
assert depth == 8 and ctype in (2, 6), f"unexpected PNG format depth={depth} type={ctype}"
bpp = 3 if ctype == 2 else 4
raw = zlib.decompress(idat)
stride = w * bpp
prev = bytearray(stride)
python = native = 0
for y in range(h):
    f = raw[y * (stride + 1)]
    line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
    if f == 1:
        for i in range(bpp, stride):
            line[i] = (line[i] + line[i - bpp]) & 255
    elif f == 2:
        for i in range(stride):
            line[i] = (line[i] + prev[i]) & 255
    elif f == 3:
        for i in range(stride):
            line[i] = (line[i] + ((line[i - bpp] if i >= bpp else 0) + prev[i]) // 2) & 255
    elif f == 4:
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    for x in range(0, stride, bpp):
        r, g, b = line[x], line[x + 1], line[x + 2]
        if 88 <= r <= 131 and 148 <= g <= 201 and 198 <= b <= 241:
            python += 1
        elif 223 <= r <= 251 and 108 <= g <= 191 and 48 <= b <= 81:
            native += 1
    prev = line
print(f"python {python} native {native}")
