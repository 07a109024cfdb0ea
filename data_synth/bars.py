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
  colour's largest channel difference from the background is >= 152 levels); a setting where that
  cannot resolve one unit with margin is refused.
- Tick rows: the row of tick t is (axis row) - t * P / axis_max, so a bar of value t ends on that row.

Several bars (`bars=(lo, hi)` per chart, hi > 1) are labelled A, B, C... under the axis and the question
names the letter; the vertical layout depends only on the options (not on the bar count of a chart), so
every chart of a dataset has the same axis.

Render variation, drawn per chart from the chart's own random stream, so that no two charts of a dataset
look alike even at the same value (a value of 0 draws no bar, so the background varies too): a near-white
background tint, the bar colour (any hue, from a continuous range, contrasting with that background by
>= MIN_CONTRAST levels in some channel and with the black ink by >= INK_CONTRAST), the bar width and each
bar's position within its slot, and, when asked (`noise` > 0), Gaussian pixel noise. The axis, ticks and
labels are the same black pixels on every chart. `unseen_values` picks values to hold out of training
for an unseen-values split.
"""

from __future__ import annotations

import colorsys
import random
from fractions import Fraction
from functools import lru_cache

import numpy as np
from PIL import Image

from .dataset import MAX_SIDE, digit_places, pick_unseen

KIND = "bars_axis"
INK = (0, 0, 0)  # axis, ticks and labels
MIN_CONTRAST = 152  # a bar colour's largest channel difference from the background, at least
INK_CONTRAST = 64  # ... and from the ink, so no bar pixel is taken for the axis
MAX_NOISE = 32.0  # pixel noise std (0..255 levels) the axis stays readable under
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


def bar_columns(geometry: dict, max_bars: int, style: dict) -> list[tuple[int, int]]:
    """[(first column, width)] of each bar of a chart: equal slots across the plot, one per bar; the width
    (`style["width"]` in [0, 1) picks it among the widths the slot allows, shared by the chart's bars) and
    each bar's place in its slot (`style["x"]`, one number in [0, 1) per bar) as the chart drew them.
    A bar keeps a pixel of space from its slot's edges when the slot has room, so bars never touch."""
    count = len(style["x"])
    left = geometry["axis_x"] + 1
    slot = (geometry["plot_right"] - left) // max(count, 1)
    narrowest = max(geometry["scale"] * 3 if max_bars > 1 else 1, slot * 2 // 5)
    widest = max(narrowest, min(slot * 4 // 5, slot - 2))
    width = narrowest + min(widest - narrowest, int(style["width"] * (widest - narrowest + 1)))
    free = slot - width
    margin = 1 if free >= 2 else 0
    out = []
    for k, at in enumerate(style["x"]):
        room = free - 2 * margin
        out.append((left + k * slot + margin + min(room, int(at * (room + 1))), width))
    return out


def background_color(rng: random.Random) -> list[int]:
    """A near-white RGB background: any hue, saturation 0-0.12, value 0.9-1."""
    return [round(255 * c) for c in colorsys.hsv_to_rgb(rng.random(), rng.uniform(0, 0.12), rng.uniform(0.9, 1.0))]


def bar_color(rng: random.Random, background) -> list[int]:
    """An RGB bar colour of any hue, saturation 0.3-1 and value 0.35-0.95, redrawn until it contrasts with
    `background` by >= MIN_CONTRAST and with the ink by >= INK_CONTRAST levels in some channel."""
    while True:
        hsv = rng.random(), rng.uniform(0.3, 1.0), rng.uniform(0.35, 0.95)
        rgb = [round(255 * c) for c in colorsys.hsv_to_rgb(*hsv)]
        if (max(abs(c - b) for c, b in zip(rgb, background)) >= MIN_CONTRAST
                and max(abs(c - i) for c, i in zip(rgb, INK)) >= INK_CONTRAST):
            return rgb


def value_text(units: int, places: int) -> str:
    """A value given in units of 10**-places as its answer text: value_text(473, 1) -> "47.3"."""
    one = 10 ** places
    return f"{units // one}.{units % one:0{places}d}" if places else str(units)


@lru_cache(maxsize=16)
def unseen_values(axis_max: int, places: int, fraction: float, seed: int = 0) -> tuple[int, ...]:
    """The values (in units of 10**-places, of 0 .. axis_max - 10**-places) held out of training by an
    unseen-values split: `fraction` of them, drawn with `seed`, such that every digit still occurs at every
    place among the values left (47 held out while 37, 57 and 41..46 are not). Pure in its arguments."""
    layout((MAX_SIDE, MAX_SIDE), axis_max, places, 1)  # the option checks; no larger axis can be rendered
    units = range(axis_max * 10 ** places)
    return tuple(pick_unseen(units, lambda u: digit_places(value_text(u, places)), fraction, seed))


def make_bar_chart(rng: random.Random, *, axis_max: int = 100, places: int = 0, bars=(1, 1), values=None,
                   noise: float = 0.0) -> dict:
    """Random bar values (JSON-able; exact decimal strings with `places` decimals) and render variation
    (background, colour, width, positions; pixel noise of std `noise` when > 0). `values`: the value units bars may
    take (a sequence, e.g. the seen or the unseen ones); None for all of 0 .. axis_max * 10**places - 1."""
    lo, hi = bars
    if not 1 <= lo <= hi <= len(LETTERS):
        raise ValueError(f"bars per chart must be (lowest, highest) within 1..{len(LETTERS)}, got {bars!r}")
    if isinstance(noise, bool) or not isinstance(noise, (int, float)) or not 0 <= noise <= MAX_NOISE:
        raise ValueError(f"bar_noise must be a number in 0..{MAX_NOISE:g}, got {noise!r}")
    count = rng.randint(lo, hi)
    if values is None:
        counts = [rng.randrange(axis_max * 10 ** places) for _ in range(count)]
    else:
        counts = [values[rng.randrange(len(values))] for _ in range(count)]
    background = background_color(rng)
    style = {"background": background, "color": bar_color(rng, background), "width": rng.random(),
             "x": [rng.random() for _ in range(count)]}
    noise_seed = rng.getrandbits(32)  # drawn either way, so noise changes nothing else
    if noise:
        style.update(noise=float(noise), noise_seed=noise_seed)
    return {"kind": KIND, "value_kind": "decimal" if places else "integer", "topic": "bars", "title": "",
            "x_label": "Bar", "x_plural": "bars", "y_label": "Value", "categories": list(LETTERS[:count]),
            "series": [{"name": None, "values": [value_text(n, places) for n in counts]}], "places": places,
            "axis_max": axis_max, "max_bars": hi, "style": style}


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
def _ink(size: tuple[int, int], axis_max: int, places: int, max_bars: int) -> np.ndarray:
    """Indices into the flat [H * W * 3] image of every channel of the axes, ticks and tick labels."""
    width, height = size
    g = layout(size, axis_max, places, max_bars)
    s, ax, base = g["scale"], g["axis_x"], g["base"]
    ink = np.zeros((height, width), bool)
    top = min(g["tick_rows"].values())
    ink[top:base + 1, ax] = True  # y axis
    ink[base, ax:g["plot_right"]] = True  # x axis
    for value, row in g["tick_rows"].items():
        ink[row, ax - 2 * s:ax] = True
        mask = _text(str(value), s)
        r0, c0 = row - 5 * s // 2, ax - 3 * s - mask.shape[1]
        ink[r0:r0 + mask.shape[0], c0:c0 + mask.shape[1]] |= mask
    pixels = np.flatnonzero(ink) * 3
    index = np.concatenate([pixels, pixels + 1, pixels + 2])
    index.flags.writeable = False
    return index


def _rows(color, width: int) -> np.ndarray:
    """[1, width, 3] uint8 run of one colour (filling from a contiguous row is much faster in numpy than
    broadcasting a 3-vector)."""
    return np.frombuffer(bytes(color) * width, np.uint8).reshape(1, width, 3)


def render_bar_chart(chart: dict, size=(56, 56)) -> Image.Image:
    """The chart as an RGB image of `size` = (width, height)."""
    size = tuple(size)
    axis_max, places, max_bars, style = chart["axis_max"], chart["places"], chart["max_bars"], chart["style"]
    values = chart["series"][0]["values"]
    g = layout(size, axis_max, places, max_bars)
    s, base, plot_height = g["scale"], g["base"], g["plot_height"]
    color, back = style["color"], style["background"]
    img = _rows(back, size[0] * size[1]).reshape(size[1], size[0], 3).copy()
    img.reshape(-1)[_ink(size, axis_max, places, max_bars)] = 0  # INK
    for k, ((x, w), text) in enumerate(zip(bar_columns(g, max_bars, style), values)):
        h = Fraction(text) * plot_height / axis_max
        full = h.numerator // h.denominator
        img[base - full:base, x:x + w] = _rows(color, w)
        cover = h - full
        if cover:  # the partial top row: each channel rounded half up to the nearest level
            num, den = cover.numerator, cover.denominator
            shade = [(2 * (b * den + (c - b) * num) + den) // (2 * den) for c, b in zip(color, back)]
            img[base - full - 1, x:x + w] = _rows(shade, w)[0]
        if max_bars > 1:  # the bar's letter, centred under it
            mask = _glyph(LETTERS[k], s)
            r0, c0 = base + 2 * s, x + (w - 3 * s) // 2
            img[r0:r0 + mask.shape[0], c0:c0 + mask.shape[1]][mask] = INK
    if style.get("noise"):
        noise = np.random.default_rng(style["noise_seed"]).normal(0.0, style["noise"], img.shape)
        img = np.clip(np.rint(img + noise), 0, 255).astype(np.uint8)
    return Image.fromarray(img, "RGB")
