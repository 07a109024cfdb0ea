"""Chart reading without value labels: one or a few bars against a numbered y axis (kind "bars_axis").

Nothing is printed on the bars: the value has to be read against the axis (ticks 0 .. axis_max, labelled
in a 3x5 pixel font, scaled by whole pixels on large images). Values are multiples of 10**-places in
[0, axis_max) (default 0..99; e.g. axis_max=1000 for 0..999, places=1 for 0.0..99.9), answered with
exactly `places` decimals. Drawn with numpy on whole pixels, so it is fast (thousands of images a second
at 56-112 px) and exact:

- The plot is P px high, P chosen so that tick rows are whole pixels; when the image has room for one
  pixel per unit (e.g. 112 px, values 0..99), P is a whole multiple of the unit count, so every unit is
  >= 1 px and bar tops are crisp.
- A bar of value v is h = v * P / axis_max px high, standing on the x axis (the row of the 0 tick):
  floor(h) full rows, and when h is fractional (small images: 56 px gives 0.48 px per unit for 0..99) one
  more row shaded with the bar colour at coverage h - floor(h) (rounded to the nearest 8-bit level). The
  value is therefore recoverable from the pixels: height = full rows + (pixel - background) / (colour -
  background), value = height * axis_max / P. The resolution is 1 / (P * contrast) of the axis range (the
  colour's largest channel difference from the white background is >= 152 levels); a setting where that
  cannot resolve one unit with margin is refused.
- Tick rows: the row of tick t is (axis row) - t * P / axis_max, so a bar of value t ends on that row.

Several bars (`bars=(lo, hi)` per chart, hi > 1) are labelled A, B, C... under the axis and the question
names the letter; the vertical layout depends only on the options (not on the bar count of a chart), so
every chart of a dataset has the same axis.
"""

from __future__ import annotations

import random
from fractions import Fraction
from functools import lru_cache

import numpy as np
from PIL import Image

KIND = "bars_axis"
BACKGROUND = (255, 255, 255)
INK = (0, 0, 0)  # axis, ticks and labels
COLORS = ((31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189))
MIN_CONTRAST = min(max(abs(c - b) for c, b in zip(color, BACKGROUND)) for color in COLORS)  # 152
LETTERS = "ABCDEFGHIJ"

# 3x5 glyphs, rows top to bottom, "#" = ink
_GLYPHS = {
    "0": "###|#.#|#.#|#.#|###", "1": ".#.|##.|.#.|.#.|###", "2": "###|..#|###|#..|###",
    "3": "###|..#|.##|..#|###", "4": "#.#|#.#|###|..#|..#", "5": "###|#..|###|..#|###",
    "6": "###|#..|###|#.#|###", "7": "###|..#|.#.|.#.|.#.", "8": "###|#.#|###|#.#|###",
    "9": "###|#.#|###|..#|###", "A": ".#.|#.#|###|#.#|#.#", "B": "##.|#.#|##.|#.#|##.",
    "C": ".##|#..|#..|#..|.##", "D": "##.|#.#|#.#|#.#|##.", "E": "###|#..|##.|#..|###",
    "F": "###|#..|##.|#..|#..", "G": ".##|#..|#.#|#.#|.##", "H": "#.#|#.#|###|#.#|#.#",
    "I": "###|.#.|.#.|.#.|###", "J": "..#|..#|..#|#.#|.#.",
}


def _glyph(char: str, scale: int) -> np.ndarray:
    """[5*scale, 3*scale] bool mask of one character."""
    rows = np.array([[c == "#" for c in row] for row in _GLYPHS[char].split("|")])
    return rows.repeat(scale, 0).repeat(scale, 1)


def _text(text: str, scale: int) -> np.ndarray:
    """[5*scale, (4*len - 1)*scale] bool mask of a string (one pixel column of space between glyphs)."""
    gap = np.zeros((5 * scale, scale), bool)
    parts = []
    for k, char in enumerate(text):
        parts += [gap] if k else []
        parts.append(_glyph(char, scale))
    return np.concatenate(parts, axis=1)


def ticks(axis_max: int) -> list[int]:
    """Tick values: quarters of the axis when they are whole numbers, else halves, else 0 and the top."""
    step = next(axis_max // k for k in (4, 2, 1) if axis_max % k == 0)
    return list(range(0, axis_max + 1, step))


def layout(size, axis_max: int, places: int, max_bars: int) -> dict:
    """Pixel geometry of every chart with these options; ValueError when it does not fit or cannot
    resolve one unit. Keys: scale, axis_x (column of the y axis), base (row of the x axis), plot_height
    P, plot_right (first column right of the plot), tick_rows {value: row}."""
    width, height = size
    if isinstance(axis_max, bool) or not isinstance(axis_max, int) or axis_max < 1:
        raise ValueError(f"bar_axis_max must be an integer >= 1, got {axis_max!r}")
    if isinstance(places, bool) or places not in (0, 1, 2):
        raise ValueError(f"bar_places must be 0, 1 or 2, got {places!r}")
    if isinstance(max_bars, bool) or not isinstance(max_bars, int) or not 1 <= max_bars <= len(LETTERS):
        raise ValueError(f"bars per chart must be 1..{len(LETTERS)}, got {max_bars!r}")
    scale = max(1, min(width, height) // 128)
    tick_values = ticks(axis_max)
    label_width = (4 * len(str(axis_max)) - 1) * scale
    axis_x = scale + label_width + 3 * scale  # margin, labels, gap, tick of 2*scale
    half = 5 * scale // 2  # tick labels are centred on their rows
    below = max(5 * scale - half - 1, 7 * scale if max_bars > 1 else 0)  # rows under the x axis
    base = height - 1 - scale - below
    top_min = half + scale
    room = base - top_min
    units = axis_max * 10 ** places
    intervals = len(tick_values) - 1
    plot_height = room // units * units if room >= units else room // intervals * intervals
    plot_right = width - scale
    slot = (plot_right - axis_x - 1) // max_bars
    if plot_height < (5 * scale + 1) * intervals or slot < max(3, 4 * scale) or (max_bars > 1 and slot < 3 * scale + 2):
        raise ValueError(f"a {width}x{height} image has no room for an axis to {axis_max} and {max_bars} "
                         "bar(s); use a larger size")
    if units > plot_height * MIN_CONTRAST // 2:
        raise ValueError(f"a {width}x{height} image cannot resolve {10 ** -places:g} on an axis to {axis_max} "
                         f"({plot_height} px for {units} units); use a larger size, a shorter axis or fewer places")
    tick_rows = {t: base - t * plot_height // axis_max for t in tick_values}
    return {"scale": scale, "axis_x": axis_x, "base": base, "plot_height": plot_height,
            "plot_right": plot_right, "tick_rows": tick_rows}


def bar_columns(geometry: dict, count: int, max_bars: int) -> list[tuple[int, int]]:
    """[(first column, width)] of each of `count` bars, centred in equal slots across the plot."""
    left = geometry["axis_x"] + 1
    slot = (geometry["plot_right"] - left) // max(count, 1)
    width = max(geometry["scale"] * 3 if max_bars > 1 else 1, slot * 3 // 5)
    return [(left + k * slot + (slot - width) // 2, width) for k in range(count)]


def make_bar_chart(rng: random.Random, *, axis_max: int = 100, places: int = 0, bars=(1, 1)) -> dict:
    """Random bar values (JSON-able; exact decimal strings with `places` decimals) and colour."""
    lo, hi = bars
    if not 1 <= lo <= hi <= len(LETTERS):
        raise ValueError(f"bars per chart must be (lowest, highest) within 1..{len(LETTERS)}, got {bars!r}")
    count = rng.randint(lo, hi)
    one = 10 ** places
    counts = [rng.randrange(axis_max * one) for _ in range(count)]  # values in units of 10**-places
    values = [f"{n // one}.{n % one:0{places}d}" if places else str(n) for n in counts]
    return {"kind": KIND, "value_kind": "decimal" if places else "integer", "topic": "bars", "title": "",
            "x_label": "Bar", "x_plural": "bars", "y_label": "Value", "categories": list(LETTERS[:count]),
            "series": [{"name": None, "values": values}], "places": places, "axis_max": axis_max,
            "max_bars": hi, "style": {"color": list(rng.choice(COLORS))}}


def bar_questions(chart: dict, rng: random.Random, count: int) -> list[dict]:
    """Value questions about `count` distinct bars (all of them when the chart has fewer)."""
    picked = sorted(rng.sample(range(len(chart["categories"])), min(count, len(chart["categories"]))))
    out = []
    for k in picked:
        text = ("What is the value of the bar?" if chart["max_bars"] == 1 else
                f"What is the value of bar {chart['categories'][k]}?")
        out.append({"qtype": "value", "args": {"series": 0, "category": k}, "question": text,
                    "answer": chart["series"][0]["values"][k], "numeric": True, "template_id": "data",
                    "template": "data_retrieval"})
    return out


@lru_cache(maxsize=64)
def _background(size: tuple[int, int], axis_max: int, places: int, max_bars: int, count: int) -> np.ndarray:
    """[H, W, 3] uint8 image of the axes, ticks and labels (read-only; copied per chart)."""
    width, height = size
    g = layout(size, axis_max, places, max_bars)
    s, ax, base = g["scale"], g["axis_x"], g["base"]
    img = np.empty((height, width, 3), np.uint8)
    img[:] = BACKGROUND
    top = min(g["tick_rows"].values())
    img[top:base + 1, ax] = INK  # y axis
    img[base, ax:g["plot_right"]] = INK  # x axis
    for value, row in g["tick_rows"].items():
        img[row, ax - 2 * s:ax] = INK
        mask = _text(str(value), s)
        r0, c0 = row - 5 * s // 2, ax - 3 * s - mask.shape[1]
        img[r0:r0 + mask.shape[0], c0:c0 + mask.shape[1]][mask] = INK
    if max_bars > 1:
        for k, (x, w) in enumerate(bar_columns(g, count, max_bars)):
            mask = _glyph(LETTERS[k], s)
            r0, c0 = base + 2 * s, x + (w - 3 * s) // 2
            img[r0:r0 + mask.shape[0], c0:c0 + mask.shape[1]][mask] = INK
    img.flags.writeable = False
    return img


def render_bar_chart(chart: dict, size=(56, 56)) -> Image.Image:
    """The chart as an RGB image of `size` = (width, height)."""
    size = tuple(size)
    axis_max, places, max_bars = chart["axis_max"], chart["places"], chart["max_bars"]
    values = chart["series"][0]["values"]
    img = _background(size, axis_max, places, max_bars, len(values)).copy()
    g = layout(size, axis_max, places, max_bars)
    base, plot_height = g["base"], g["plot_height"]
    color = np.array(chart["style"]["color"], np.int64)
    back = np.array(BACKGROUND, np.int64)
    for (x, w), text in zip(bar_columns(g, len(values), max_bars), values):
        h = Fraction(text) * plot_height / axis_max
        full = h.numerator // h.denominator
        img[base - full:base, x:x + w] = color
        cover = h - full
        if cover:  # the partial top row: each channel rounded half up to the nearest level
            shade = (2 * (back * cover.denominator + (color - back) * cover.numerator) + cover.denominator) \
                // (2 * cover.denominator)
            img[base - full - 1, x:x + w] = shade
    return Image.fromarray(img, "RGB")
