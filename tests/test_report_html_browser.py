"""The HTML report in a real browser: headless Chromium renders it, we read the pixels.

Needs ``/usr/bin/chromium`` (Debian package ``chromium``). A missing browser is a failure,
not a skip: CI must install it. Chromium runs with networking features off and a throwaway
profile; the page itself has no external assets to fetch.
"""

from __future__ import annotations

import re
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from little_dist.report import STATUS_COLOURS, build_run_report, render_html
from tests.test_report import HOSTILE_STEP, _parse, retry_run_events

CHROMIUM = Path("/usr/bin/chromium")
WINDOW = (1200, 900)


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: install the Debian package 'chromium'")
    profile = tmp_path / "profile"
    profile.mkdir(exist_ok=True)
    command = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
        *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def page_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("report") / "report.html"
    path.write_text(render_html(build_run_report(retry_run_events())), encoding="utf-8")
    return path


# --- a small PNG decoder (stdlib only) ---------------------------------------------------


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def decode_png(data: bytes) -> tuple[int, int, int, list[bytes]]:
    """``(width, height, bytes_per_pixel, rows)`` of an 8-bit RGB/RGBA, non-interlaced PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    offset, idat, header = 8, bytearray(), b""
    while offset < len(data):
        (length,) = struct.unpack(">I", data[offset : offset + 4])
        kind = data[offset + 4 : offset + 8]
        body = data[offset + 8 : offset + 8 + length]
        offset += 12 + length
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
    width, height, depth, colour_type, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and colour_type in (2, 6) and interlace == 0, (depth, colour_type)
    bpp = 3 if colour_type == 2 else 4
    raw = zlib.decompress(bytes(idat))
    stride = width * bpp
    rows: list[bytes] = []
    previous = bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind = raw[start]
        line = bytearray(raw[start + 1 : start + 1 + stride])
        if kind == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 0xFF
        elif kind == 2:
            line = bytearray((a + b) & 0xFF for a, b in zip(line, previous, strict=True))
        elif kind == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + previous[i]) >> 1)) & 0xFF
        elif kind == 4:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                upper_left = previous[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + _paeth(left, previous[i], upper_left)) & 0xFF
        rows.append(bytes(line))
        previous = line
    return width, height, bpp, rows


def _pixel_counts(rows: list[bytes], bpp: int) -> dict[tuple[int, int, int], int]:
    counts: dict[tuple[int, int, int], int] = {}
    for row in rows:
        for i in range(0, len(row), bpp):
            rgb = (row[i], row[i + 1], row[i + 2])
            counts[rgb] = counts.get(rgb, 0) + 1
    return counts


def _rgb(hex_colour: str) -> tuple[int, int, int]:
    value = int(hex_colour.lstrip("#"), 16)
    return (value >> 16) & 0xFF, (value >> 8) & 0xFF, value & 0xFF


def _near(counts: dict[tuple[int, int, int], int], target: tuple[int, int, int]) -> int:
    # Colour management may shift a channel by a step or two.
    return sum(
        n
        for rgb, n in counts.items()
        if all(abs(a - b) <= 3 for a, b in zip(rgb, target, strict=True))
    )


# --- tests -------------------------------------------------------------------------------


def test_screenshot_shows_a_coloured_timeline(tmp_path: Path, page_file: Path) -> None:
    shot = tmp_path / "report.png"
    result = _chromium(tmp_path, f"--screenshot={shot}", page_file.as_uri())
    assert shot.exists(), f"no screenshot; chromium said: {result.stderr[-2000:]}"
    width, height, bpp, rows = decode_png(shot.read_bytes())
    assert (width, height) == WINDOW
    counts = _pixel_counts(rows, bpp)
    assert len(counts) > 50, f"page looks blank: {len(counts)} distinct colours"
    background = max(counts.values())
    assert background < 0.9 * width * height, "one colour covers almost the whole page"
    # Bars are solid rectangles in their status colour: the completed bars alone cover
    # several thousand pixels, the failed one (2 s of 16 s, 18 px high) about a thousand.
    assert _near(counts, _rgb(STATUS_COLOURS["completed"])) > 3000
    assert _near(counts, _rgb(STATUS_COLOURS["failed"])) > 800


def test_rendered_dom_has_the_bars_and_no_injected_markup(tmp_path: Path, page_file: Path) -> None:
    result = _chromium(tmp_path, "--dump-dom", page_file.as_uri())
    dom = result.stdout
    assert "</html>" in dom, f"no DOM dumped; chromium said: {result.stderr[-2000:]}"
    bars = re.findall(r'<g class="bar"[^>]*data-status="([a-z]+)"', dom)
    assert bars == ["completed", "failed", "completed", "completed", "running"]
    # Each bar's rectangle made it into the SVG DOM.
    assert len(re.findall(r'<g class="bar".*?<rect ', dom, flags=re.S)) == 5
    parsed = _parse(dom)
    assert not any(tag in {"img", "script", "iframe"} for tag, _ in parsed.tags)
    # The hostile name is shown as text (in the bar's label and in the table), not run.
    text = "".join(parsed.text)
    assert text.count(HOSTILE_STEP) >= 2
    assert [a.get("data-step") for t, a in parsed.tags if a.get("class") == "bar"].count(
        HOSTILE_STEP
    ) == 1
