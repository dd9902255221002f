#!/usr/bin/env bash
# `gmem report` rendered by headless Chromium: the page must draw its plots. Runs leak_sites
# (which sets markers) under `gmem run` on the fake driver, writes the report, checks the SVG
# has real path/rect content and no network references, takes a screenshot and checks that it
# is not blank and that the timeline's blue "live" area was painted.
set -u
B=${GMEM_BUILD:-build}
GMEM=$B/bin/gmem
LEAK=$B/tests/tools/leak_sites
for f in "$GMEM" "$LEAK" "$B/lib/libgmem.so" "$B/tests/fake_cuda/libcuda.so.1"; do
  [ -e "$f" ] || { echo "missing $f (make builds it)"; exit 1; }
done
CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$CHROMIUM" ]; then
  if command -v apt-get >/dev/null; then
    echo "chromium is missing: scripts/install-deps.sh test installs it"; exit 1
  fi
  echo "skip: no chromium and no apt-get to install it on this system"; exit 77
fi
export LD_LIBRARY_PATH=$B/tests/fake_cuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
W=$(mktemp -d)
PID=
cleanup() {
  [ -n "$PID" ] && "$GMEM" clean --force "$PID" >/dev/null 2>&1
  rm -rf "$W"
}
trap cleanup EXIT

"$GMEM" run -- "$LEAK" >/dev/null 2>"$W/run.err" || { cat "$W/run.err"; exit 1; }
PID=$(sed -n 's/.*(pid \([0-9]*\)) exited.*/\1/p' "$W/run.err")
"$GMEM" report "$PID" -o "$W/report.html" || exit 1

python3 - "$W/report.html" <<'PY' || exit 1
import re, sys
h = open(sys.argv[1]).read()
assert "<script" not in h, "report must not need scripts"
assert not re.search(r'(src|href)="(https?:)?//', h), "report must not load anything"
live = re.findall(r'<path class="live" d="([^"]*)"', h)
reserved = re.findall(r'<path class="reserved" d="([^"]*)"', h)
assert live and reserved, "no timeline paths"
assert len(live[0].split("L")) > 10 and len(reserved[0].split("L")) > 4, "empty timeline path"
rects = re.findall(r'<svg class="segmap".*?</svg>', h, re.S)
assert rects and rects[0].count("<rect") >= 6, "segment map has no blocks"
for label in ("start", "weights", "done"):
    assert ">%s</text>" % label in h, "marker %s missing" % label
assert "leak_workspace" in h and "leak_weights" in h and "leak_lookup_table" in h
flames = re.findall(r'<svg class="flame".*?</svg>', h, re.S)
assert len(flames) == 2, "expected the outstanding and the peak flame graphs"
for f in flames:
    titles = re.findall(r"<title>([^<]*)</title>", f)
    assert any("leak_workspace" in x for x in titles), "flame graph lacks the leak_workspace frame"
    assert any(x.startswith("main (leak_sites.cpp") for x in titles), "flame graph lacks main"
print("html: timeline path with %d points, %d segment-map rects" % (len(live[0].split("L")), rects[0].count("<rect")))
PY

PROFILE=$(mktemp -d "$W/chromium.XXXXXX")
"$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync \
  --user-data-dir="$PROFILE" --screenshot="$W/report.png" --window-size=1100,1300 \
  "file://$(realpath "$W/report.html")" >"$W/chromium.log" 2>&1
[ -s "$W/report.png" ] || { echo "chromium wrote no screenshot"; tail -5 "$W/chromium.log"; exit 1; }
[ -n "${GMEM_KEEP_SCREENSHOT:-}" ] && cp "$W/report.png" "$GMEM_KEEP_SCREENSHOT"

# PNG decoding with zlib only (no PIL): count non-white pixels, and "live blue" pixels in the
# upper half of the page where the timeline is.
python3 - "$W/report.png" <<'PY'
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
pos, idat, hdr = 8, b"", None
while pos < len(data):
    n, kind = struct.unpack(">I4s", data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + n]
    if kind == b"IHDR": hdr = struct.unpack(">IIBBBBB", body)
    elif kind == b"IDAT": idat += body
    pos += 12 + n
w, h, depth, ctype = hdr[0], hdr[1], hdr[2], hdr[3]
assert depth == 8 and ctype in (2, 6), f"unexpected PNG format depth={depth} type={ctype}"
bpp = 3 if ctype == 2 else 4
raw = zlib.decompress(idat)
stride = w * bpp
prev = bytearray(stride)
nonwhite = blue = 0
for y in range(h):
    f = raw[y * (stride + 1)]
    line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
    if f == 1:
        for i in range(bpp, stride): line[i] = (line[i] + line[i - bpp]) & 255
    elif f == 2:
        for i in range(stride): line[i] = (line[i] + prev[i]) & 255
    elif f == 3:
        for i in range(stride): line[i] = (line[i] + ((line[i - bpp] if i >= bpp else 0) + prev[i]) // 2) & 255
    elif f == 4:
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]; c = prev[i - bpp] if i >= bpp else 0
            p = a + b - c; pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    for x in range(0, stride, bpp * 2):  # every other pixel is plenty
        r, g, b = line[x], line[x + 1], line[x + 2]
        if r < 235 or g < 235 or b < 235: nonwhite += 1
        if y < h // 2 and b > 180 and b - r > 60 and b - g > 30: blue += 1
    prev = line
total = w * h // 2
print(f"screenshot {w}x{h}: {nonwhite} of {total} sampled pixels not white, {blue} live-blue in the upper half")
assert nonwhite > total // 50, "the page is blank"
# The legend's swatch alone is ~100 sampled pixels. The live area is drawn at the true time
# scale, so when the fake driver's first allocation page-faults for a few ms after the "start"
# marker it is squeezed into the chart's last tenth: 1500-3000 pixels were seen then.
assert blue > 600, "the timeline's live area was not drawn"
PY
