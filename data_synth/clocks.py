"""Analog clock faces with exact hand angles: `render_clock` and the `ClockStyle` it draws.

Angles are clockwise from 12 o'clock: hour (h % 12) * 30 + m / 2 (+ s / 120), minute m * 6 (+ s / 10),
second s * 6. The dial is drawn as exact geometry with PIL's ImageDraw at `supersample` times the output
size and box-reduced once; the dial rotation is added to every angle (no image resampling), so the hands
are exact. Texture fills, fonts, rendered numerals and the noise buffer are cached per process; the caches
never change the output, so a dataset's bytes do not depend on which process drew which image.

Randomness: `style_for_seed(seed)` draws the style; the pattern details (gradient direction, texture
variant, distractor lines, noise offset) come from a second stream of the same seed. Both are Python's
`random.Random` seeded by a string (SHA-512), stable across runs and platforms.
"""

from __future__ import annotations

import copy
import io
import math
import random
from dataclasses import dataclass, field, fields, replace
from functools import lru_cache
from importlib.util import find_spec
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter, ImageFont

Color = tuple[int, int, int]

FILLS = ("plain", "gradient", "noise", "texture")
ROMAN = ("XII", "I", "II", "III", "IV", "V", "VI", "VII", "VIII", "IX", "X", "XI")
PIL_DEFAULT_FONT = "pil-default"
# Fonts that ship with matplotlib (a dependency), so random styles are the same on every machine.
_MPL_FONT_NAMES = ("DejaVuSans", "DejaVuSans-Bold", "DejaVuSerif", "DejaVuSerif-Bold", "DejaVuSansMono",
                   "DejaVuSansMono-Bold", "DejaVuSans-Oblique", "DejaVuSerif-Italic", "STIXGeneral",
                   "STIXGeneralBol")


def _choices(*values):
    return {"choices": values}


def _range(lo, hi):
    return {"range": (lo, hi)}


@dataclass
class ClockStyle:
    """Every visual attribute of a clock. The defaults are the plain style (`ClockStyle()`).

    Lengths and widths are fractions of the dial radius (inside the border); `face_radius` is a fraction
    of half the image; `blur` is in output pixels, `noise` the std of additive noise on the 0..255 scale.
    """

    face_shape: str = field(default="round", metadata=_choices("round", "square", "rounded_square"))
    face_radius: float = field(default=0.9, metadata=_range(0.3, 1.0))
    face_fill: str = field(default="plain", metadata=_choices(*FILLS))
    face_color: Color = (255, 255, 255)
    face_color2: Color = (220, 220, 220)  # second colour of a gradient / noise / texture face
    background: str = field(default="plain", metadata=_choices(*FILLS))
    background_color: Color = (235, 235, 235)
    background_color2: Color = (200, 200, 200)
    border_width: float = field(default=0.03, metadata=_range(0.0, 0.3))
    border_color: Color = (0, 0, 0)
    ticks: str = field(default="12", metadata=_choices("none", "12", "60"))
    tick_length: float = field(default=0.1, metadata=_range(0.0, 0.5))  # hour ticks
    tick_width: float = field(default=0.025, metadata=_range(0.0, 0.2))
    minor_tick_length: float = field(default=0.04, metadata=_range(0.0, 0.5))  # minute ticks (ticks="60")
    minor_tick_width: float = field(default=0.008, metadata=_range(0.0, 0.2))
    tick_color: Color = (0, 0, 0)
    numerals: str = field(default="arabic", metadata=_choices("none", "arabic", "roman", "cardinal"))
    numeral_font: str = PIL_DEFAULT_FONT  # a name from `font_names()` or a path to a TrueType/OpenType file
    numeral_size: float = field(default=0.16, metadata=_range(0.03, 0.5))  # font size
    numeral_rotation: str = field(default="upright", metadata=_choices("upright", "radial"))
    numeral_color: Color = (0, 0, 0)
    hand_tip: str = field(default="plain", metadata=_choices("plain", "tapered", "arrow", "diamond"))
    hand_tail: float = field(default=0.0, metadata=_range(0.0, 0.5))  # counterweight tail behind the centre
    hour_hand_length: float = field(default=0.5, metadata=_range(0.1, 1.1))
    hour_hand_width: float = field(default=0.06, metadata=_range(0.005, 0.3))
    hour_hand_color: Color = (0, 0, 0)
    minute_hand_length: float = field(default=0.78, metadata=_range(0.1, 1.1))
    minute_hand_width: float = field(default=0.04, metadata=_range(0.005, 0.3))
    minute_hand_color: Color = (0, 0, 0)
    second_hand: bool = True  # drawn when a second is given
    second_hand_length: float = field(default=0.85, metadata=_range(0.1, 1.1))
    second_hand_width: float = field(default=0.012, metadata=_range(0.002, 0.2))
    second_hand_color: Color = (200, 0, 0)
    center_cap: float = field(default=0.04, metadata=_range(0.0, 0.3))  # radius; 0 = none
    center_cap_color: Color = (0, 0, 0)
    hand_shadow: float = field(default=0.0, metadata=_range(0.0, 0.2))  # shadow offset; 0 = none
    am_pm: bool = False  # an AM/PM window below the centre (makes 24-hour answers readable)
    dial_rotation: float = field(default=0.0, metadata=_range(-180.0, 180.0))  # degrees, clockwise
    perspective_x: float = field(default=0.0, metadata=_range(-0.3, 0.3))  # > 0: right side nearer
    perspective_y: float = field(default=0.0, metadata=_range(-0.3, 0.3))  # > 0: bottom side nearer
    # squash and skew are never drawn by random_style: `data-synth clocks --robustness` deforms dials with them
    dial_squash: float = field(default=1.0, metadata=_range(0.3, 1.0))  # the dial's width over its height
    dial_skew: float = field(default=0.0, metadata=_range(-45.0, 45.0))  # horizontal shear, degrees
    blur: float = field(default=0.0, metadata=_range(0.0, 10.0))
    noise: float = field(default=0.0, metadata=_range(0.0, 100.0))
    jpeg_quality: int = field(default=0, metadata=_range(0, 95))  # 0 = no JPEG round trip
    distractors: int = field(default=0, metadata=_range(0, 20))  # random lines over the image
    supersample: int = field(default=2, metadata=_range(1, 4))  # anti-aliasing factor

    def __post_init__(self):  # normalise types (ints for float attributes, lists for colours); no checks
        for name, kind, _ in _field_specs():
            value = getattr(self, name)
            if kind == "float" and type(value) is int:
                setattr(self, name, float(value))
            elif kind == "Color" and isinstance(value, list):
                setattr(self, name, tuple(value))

    def validate(self) -> ClockStyle:
        """Raise ValueError naming the first invalid attribute; return self."""
        for name, kind, spec in _field_specs():
            value = getattr(self, name)
            if kind == "Color":
                if (not isinstance(value, (tuple, list)) or len(value) != 3
                        or not all(type(c) is int and 0 <= c <= 255 for c in value)):
                    raise ValueError(f"style.{name} must be three integers in 0..255, got {value!r}")
            elif kind == "bool":
                if not isinstance(value, bool):
                    raise ValueError(f"style.{name} must be True or False, got {value!r}")
            elif "choices" in spec:
                if value not in spec["choices"]:
                    raise ValueError(f"style.{name} must be one of {', '.join(spec['choices'])}; got {value!r}")
            elif "range" in spec:
                lo, hi = spec["range"]
                ok = type(value) is int or (kind == "float" and type(value) is float)
                if not ok or not lo <= value <= hi:
                    what = "an integer" if kind == "int" else "a number"
                    raise ValueError(f"style.{name} must be {what} in {lo}..{hi}, got {value!r}")
        if self.hour_hand_length > self.minute_hand_length:  # equal lengths: told apart by position alone
            raise ValueError(f"style.hour_hand_length ({self.hour_hand_length}) must not be longer than "
                             f"style.minute_hand_length ({self.minute_hand_length}), or the hands are ambiguous")
        if 0 < self.jpeg_quality < 5:
            raise ValueError(f"style.jpeg_quality must be 0 (off) or in 5..95, got {self.jpeg_quality}")
        _font_path(self.numeral_font)  # raises for an unknown font
        return self

    def to_dict(self) -> dict:
        """Plain JSON-ready dict (colours as lists)."""
        out = {}
        for name in STYLE_FIELDS:
            value = getattr(self, name)
            out[name] = list(value) if isinstance(value, tuple) else value
        return out

    @classmethod
    def from_dict(cls, data: dict) -> ClockStyle:
        """From `to_dict()` output or a metadata row (unknown keys are an error; colours may be lists)."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"unknown style attribute(s): {', '.join(unknown)}")
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}).validate()


STYLE_FIELDS = tuple(f.name for f in fields(ClockStyle))
_RANGES = {f.name: f.metadata["range"] for f in fields(ClockStyle) if "range" in f.metadata}


@lru_cache(maxsize=1)
def _field_specs():
    return tuple((f.name, f.type, f.metadata) for f in fields(ClockStyle))


def plain_style(**changes) -> ClockStyle:
    """The plain style (white round face, 12 ticks, Arabic numerals, black hands), with `changes`."""
    changes = {k: tuple(v) if isinstance(v, list) else v for k, v in changes.items()}
    unknown = sorted(set(changes) - set(STYLE_FIELDS))
    if unknown:
        raise ValueError(f"unknown style attribute(s): {', '.join(unknown)}")
    return replace(ClockStyle(), **changes).validate()


# ---------------------------------------------------------------------------------------------- fonts

def font_names() -> tuple[str, ...]:
    """Fonts random styles draw from: PIL's bundled font and the TrueType fonts matplotlib ships."""
    return _builtin_fonts()


@lru_cache(maxsize=1)
def _builtin_fonts() -> tuple[str, ...]:
    spec = find_spec("matplotlib")
    names = [PIL_DEFAULT_FONT]
    if spec is not None and spec.origin:
        ttf = Path(spec.origin).parent / "mpl-data" / "fonts" / "ttf"
        names += [n for n in _MPL_FONT_NAMES if (ttf / f"{n}.ttf").is_file()]
    return tuple(names)


def system_fonts() -> tuple[str, ...]:
    """TrueType/OpenType files found in the usual system font folders (paths, sorted).

    Not in the default pool because they differ between machines; pass them to `random_style(fonts=...)`
    (or `data-synth clocks --system-fonts`) to widen the variety on one machine.
    """
    roots = [Path("/usr/share/fonts"), Path("/usr/local/share/fonts"), Path.home() / ".fonts",
             Path.home() / ".local/share/fonts", Path("/Library/Fonts"), Path("/System/Library/Fonts"),
             Path("C:/Windows/Fonts")]
    found = set()
    for root in roots:
        if root.is_dir():
            found.update(str(p) for p in root.rglob("*") if p.suffix.lower() in (".ttf", ".otf"))
    return tuple(sorted(found))


@lru_cache(maxsize=64)
def _font_path(name: str) -> str | None:
    """None for PIL's default font, else a file path; ValueError for an unknown name."""
    if name == PIL_DEFAULT_FONT:
        return None
    if name in _builtin_fonts():
        return str(Path(find_spec("matplotlib").origin).parent / "mpl-data" / "fonts" / "ttf" / f"{name}.ttf")
    if Path(name).suffix.lower() in (".ttf", ".otf", ".ttc") and Path(name).is_file():
        return name
    raise ValueError(f"style.numeral_font {name!r} is neither one of {', '.join(_builtin_fonts())} "
                     "nor an existing .ttf/.otf file")


@lru_cache(maxsize=256)
def _font(name: str, px: int) -> ImageFont.FreeTypeFont:
    path = _font_path(name)
    if path is None:
        try:
            return ImageFont.load_default(size=px)  # Pillow >= 10.1 with FreeType
        except (TypeError, ImportError):  # older Pillow: a scalable font from matplotlib instead
            path = _font_path(_builtin_fonts()[1]) if len(_builtin_fonts()) > 1 else None
            if path is None:
                raise ValueError("PIL's default font cannot be scaled here (Pillow < 10.1?) and matplotlib's "
                                 "fonts are missing; set style.numeral_font to a .ttf file") from None
    return ImageFont.truetype(path, px)


@lru_cache(maxsize=4096)
def _text_mask(font_name: str, px: int, text: str) -> Image.Image:
    """Text as an 'L' mask cropped to its ink."""
    font = _font(font_name, px)
    x0, y0, x1, y1 = font.getbbox(text)
    mask = Image.new("L", (max(1, x1 - x0), max(1, y1 - y0)), 0)
    ImageDraw.Draw(mask).text((-x0, -y0), text, font=font, fill=255)
    bbox = mask.getbbox()
    return mask.crop(bbox) if bbox else mask


# ------------------------------------------------------------------------------------------- sampling

def _pick(rng, options, weights):
    return rng.choices(options, weights)[0]


def _color(rng, light: bool, saturation=0.35) -> Color:
    """A colour of light (> ~0.8) or dark (< ~0.25) value; always three draws."""
    h, s, v = rng.random(), rng.random() * saturation, rng.random()
    v = 0.8 + 0.2 * v if light else 0.25 * v
    r, g, b = _hsv(h, s, v)
    return (r, g, b)


def _hsv(h, s, v) -> Color:
    i = int(h * 6) % 6
    f = h * 6 - int(h * 6)
    p, q, t = v * (1 - s), v * (1 - s * f), v * (1 - s * (1 - f))
    rgb = [(v, t, p), (q, v, p), (p, v, t), (p, q, v), (t, p, v), (v, p, q)][i]
    return tuple(int(round(c * 255)) for c in rgb)


def _near(rng, color: Color, spread: int) -> Color:
    """A colour near `color` (three draws)."""
    return tuple(min(255, max(0, c + rng.randint(-spread, spread))) for c in color)


def random_style(rng: random.Random, overrides: dict | None = None, fonts: tuple[str, ...] | None = None
                 ) -> ClockStyle:
    """A varied, readable style drawn from `rng`. `overrides` fix attributes; the others come from the same
    sequence of draws, so fixing one changes only those drawn relative to it (the hour hand is a fraction
    of the minute hand, the ink contrasts with the face colour, ...). `fonts` is the font pool (default
    `font_names()`). Raises ValueError for unknown or invalid attributes."""
    fixed = dict(overrides or {})
    unknown = sorted(set(fixed) - set(STYLE_FIELDS))
    if unknown:
        raise ValueError(f"unknown style attribute(s): {', '.join(unknown)}")
    fixed = {k: tuple(v) if isinstance(v, list) else v for k, v in fixed.items()}
    fonts = fonts or font_names()
    s: dict = {}

    def put(name, value):
        s[name] = fixed.get(name, value)
        return s[name]

    def maybe(p, draw):  # value with probability p, else 0; always two draws
        on, value = rng.random() < p, draw()
        return value if on else type(value)(0)

    r2 = lambda x: round(x, 3)  # noqa: E731  (short floats: the metadata is exact and compact)
    put("face_shape", _pick(rng, ("round", "square", "rounded_square"), (6, 1.5, 2.5)))
    put("face_fill", _pick(rng, FILLS, (5, 2, 1.5, 1.5)))
    put("background", _pick(rng, FILLS, (3.5, 2.5, 2, 2)))
    dark_face = rng.random() < 0.2
    face = put("face_color", _color(rng, light=not dark_face, saturation=0.3))
    put("face_color2", _near(rng, face, 40))
    bg_light = rng.random() < 0.5
    bg = put("background_color", _color(rng, light=bg_light, saturation=0.6))
    put("background_color2", _near(rng, bg, 70))
    dark_face = sum(face) < 3 * 128  # an overridden face colour decides the ink
    ink = _color(rng, light=dark_face, saturation=0.5)
    put("border_width", r2(maybe(0.8, lambda: rng.uniform(0.01, 0.08))))
    put("border_color", ink if rng.random() < 0.5 else _color(rng, light=dark_face, saturation=0.8))
    put("ticks", _pick(rng, ("none", "12", "60"), (1.5, 3, 5.5)))
    put("tick_length", r2(rng.uniform(0.06, 0.14)))
    put("tick_width", r2(rng.uniform(0.012, 0.035)))
    put("minor_tick_length", r2(rng.uniform(0.025, 0.06)))
    put("minor_tick_width", r2(rng.uniform(0.005, 0.012)))
    put("tick_color", ink)
    numerals = put("numerals", _pick(rng, ("none", "arabic", "roman", "cardinal"), (2, 4.5, 2, 1.5)))
    put("numeral_font", fonts[rng.randrange(len(fonts))])
    put("numeral_size", r2(rng.uniform(0.11, 0.19) if numerals != "roman" else rng.uniform(0.09, 0.15)))
    put("numeral_rotation", _pick(rng, ("upright", "radial"), (8, 2)))
    put("numeral_color", ink)
    put("hand_tip", _pick(rng, ("plain", "tapered", "arrow"), (4, 3.5, 2.5)))
    put("hand_tail", r2(maybe(0.4, lambda: rng.uniform(0.08, 0.22))))
    minute = rng.uniform(0.68, 0.9)
    if "hour_hand_length" in fixed and "minute_hand_length" not in fixed:  # keep a fixed hour hand shorter
        minute = max(minute, min(1.1, fixed["hour_hand_length"] + 0.1))
    minute = put("minute_hand_length", r2(minute))
    put("hour_hand_length", r2(minute * rng.uniform(0.55, 0.75)))
    put("hour_hand_width", r2(rng.uniform(0.04, 0.09)))
    put("minute_hand_width", r2(rng.uniform(0.025, 0.055)))
    hands_same = rng.random() < 0.75
    put("hour_hand_color", ink)
    put("minute_hand_color", ink if hands_same else _color(rng, light=dark_face, saturation=0.8))
    put("second_hand", rng.random() < 0.6)
    put("second_hand_length", r2(min(1.0, minute + rng.uniform(0.0, 0.1))))
    put("second_hand_width", r2(rng.uniform(0.008, 0.018)))
    put("second_hand_color", _hsv(rng.choice((0.0, 0.0, 0.02, 0.6, 0.3)), 0.9, 0.8) if rng.random() < 0.7
        else _color(rng, light=dark_face, saturation=0.9))
    put("center_cap", r2(maybe(0.7, lambda: rng.uniform(0.03, 0.08))))
    put("center_cap_color", ink if rng.random() < 0.7 else _color(rng, light=dark_face, saturation=0.9))
    put("hand_shadow", r2(maybe(0.35, lambda: rng.uniform(0.01, 0.03))))
    put("am_pm", rng.random() < 0.1)
    put("dial_rotation", round(maybe(0.5, lambda: rng.uniform(-8.0, 8.0)), 2))
    px, py = maybe(0.4, lambda: rng.uniform(-0.1, 0.1)), maybe(0.4, lambda: rng.uniform(-0.1, 0.1))
    px, py = put("perspective_x", r2(px)), put("perspective_y", r2(py))
    # keep the whole dial in view when the warp magnifies it or a square face is turned
    radius = rng.uniform(0.78, 0.95) if px == 0 and py == 0 else rng.uniform(0.72, 0.85)
    if s["face_shape"] != "round":
        turn = math.radians(abs(s["dial_rotation"]) % 90)
        radius = min(radius, 0.97 / (math.cos(turn) + math.sin(turn)))
    put("face_radius", r2(radius))
    put("blur", r2(maybe(0.25, lambda: rng.uniform(0.3, 1.2))))
    put("noise", r2(maybe(0.15, lambda: rng.uniform(2.0, 8.0))))
    put("jpeg_quality", maybe(0.2, lambda: rng.randint(25, 90)))
    put("distractors", maybe(0.25, lambda: rng.randint(1, 3)))
    put("supersample", _pick(rng, (1, 2), (1, 9)))
    s.update({k: v for k, v in fixed.items() if k not in s})  # fixed attributes that are never drawn
    return ClockStyle(**s).validate()


def style_for_seed(seed: int, overrides: dict | None = None, fonts: tuple[str, ...] | None = None
                   ) -> ClockStyle:
    """The style `render_clock(..., style=None, seed=seed)` draws."""
    return random_style(random.Random(f"style:{seed}"), overrides, fonts)


def vary_style(style: ClockStyle, seed: int) -> ClockStyle:
    """`style` varied for one image, drawn from `seed`: hand colours, widths and lengths, and the face's
    size, border, ticks, centre cap and background colour move around the style's values (face colour and
    fill, numerals, fonts, hand tips and the second hand stay as they are).

    The hands stay as distinguishable as the style made them: the hour hand stays shorter than the minute
    hand, the wider of the two stays the wider, two different hand colours each move by at most a third of
    their distance (so they stay at least a third apart) and equal colours move together.
    """
    rng = random.Random(f"vary:{seed}")

    def scaled(name, factor):  # the style's value times `factor`, kept in the attribute's range
        lo, hi = _RANGES[name]
        return round(min(hi, max(lo, getattr(style, name) * factor)), 3)

    def shifted(color, spread):
        return tuple(min(255, max(0, c + rng.randint(-spread, spread))) for c in color)

    def paired(name_a, name_b, lo, hi, common=1.0):  # two hands' values, never in the reverse order
        a, b = getattr(style, name_a), getattr(style, name_b)
        fa, fb = rng.uniform(lo, hi), rng.uniform(lo, hi)
        if a != b and (a - b) * (a * fa - b * fb) <= 0:
            fa, fb = fb, fa
        return scaled(name_a, common * fa), scaled(name_b, common * fb)

    hour_c, minute_c = style.hour_hand_color, style.minute_hand_color
    apart = max(abs(a - b) for a, b in zip(hour_c, minute_c))
    if apart == 0:
        hour_color = minute_color = shifted(hour_c, 40)
    else:
        hour_color, minute_color = shifted(hour_c, min(40, apart // 3)), shifted(minute_c, min(40, apart // 3))
    common = math.exp(rng.uniform(math.log(0.8), math.log(1.25)))
    widths = paired("hour_hand_width", "minute_hand_width", 0.9, 1.1, common)
    lengths = paired("hour_hand_length", "minute_hand_length", 0.92, 1.08)
    if lengths[0] >= lengths[1]:  # rounding made them equal: keep the style's lengths
        lengths = style.hour_hand_length, style.minute_hand_length
    varied = copy.copy(style)  # every value below is in its attribute's range: no validation needed
    for name, value in (
            ("hour_hand_color", hour_color), ("minute_hand_color", minute_color),
            ("hour_hand_width", widths[0]), ("minute_hand_width", widths[1]),
            ("hour_hand_length", lengths[0]), ("minute_hand_length", lengths[1]),
            ("face_radius", scaled("face_radius", rng.uniform(0.88, 1.0))),
            ("border_width", scaled("border_width", rng.uniform(0.6, 1.4))),
            ("tick_length", scaled("tick_length", rng.uniform(0.8, 1.2))),
            ("tick_width", scaled("tick_width", rng.uniform(0.8, 1.2))),
            ("center_cap", scaled("center_cap", rng.uniform(0.8, 1.25))),
            ("background_color", shifted(style.background_color, 30))):
        setattr(varied, name, value)
    return varied


# ------------------------------------------------------------------------------------------- geometry

def hand_angles(hour: int, minute: int, second: int | None = None) -> tuple[float, float, float | None]:
    """Clockwise degrees from 12 o'clock of the hour, minute and second hands (second None if absent)."""
    s = 0 if second is None else second
    return ((hour % 12) * 30 + minute * 0.5 + s / 120, minute * 6 + s / 10, None if second is None else s * 6.0)


def _check_int(name, value, lo, hi):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not lo <= value <= hi:
        raise ValueError(f"{name} must be an integer in {lo}..{hi}, got {value!r}")


def _rotated(cx, cy, angle, pts):
    """Points given as (along, across) in a frame whose 'along' axis points at clock `angle` degrees."""
    a = math.radians(angle)
    ux, uy = math.sin(a), -math.cos(a)
    vx, vy = -uy, ux
    return [(cx + p * ux + q * vx, cy + p * uy + q * vy) for p, q in pts]


def _shape_points(shape, cx, cy, half, rot):
    """Outline of a face of half-size `half` rotated by `rot` degrees (circles as 128-gons)."""
    if shape == "round":
        return [(cx + half * math.cos(2 * math.pi * k / 128), cy + half * math.sin(2 * math.pi * k / 128))
                for k in range(128)]
    if shape == "square":
        corners = [(-half, -half), (half, -half), (half, half), (-half, half)]
    else:  # rounded_square: quarter circles of radius half / 4 at the corners
        r = half / 4
        corners = []
        for (sx, sy), start in zip(((1, -1), (1, 1), (-1, 1), (-1, -1)), (-90, 0, 90, 180)):
            ox, oy = sx * (half - r), sy * (half - r)
            for k in range(9):
                t = math.radians(start + k * 90 / 8)
                corners.append((ox + r * math.cos(t), oy + r * math.sin(t)))
    c, s = math.cos(math.radians(rot)), math.sin(math.radians(rot))
    return [(cx + x * c - y * s, cy + x * s + y * c) for x, y in corners]


def _hand_polygon(cx, cy, angle, length, width, tail, tip):
    w = width / 2
    if tip == "tapered":
        pts = [(-tail, -w), (0, -w), (length, -w * 0.2), (length, w * 0.2), (0, w), (-tail, w)]
    elif tip == "diamond":  # a lozenge, widest a third of the way out
        pts = [(-tail, -w * 0.5), (length / 3, -w * 1.6), (length, 0), (length / 3, w * 1.6), (-tail, w * 0.5)]
    elif tip == "arrow":
        head = min(0.3 * length, 3.0 * width)
        pts = [(-tail, -w), (length - head, -w), (length - head, -2.2 * w), (length, 0),
               (length - head, 2.2 * w), (length - head, w), (-tail, w)]
    else:
        pts = [(-tail, -w), (length, -w), (length, w), (-tail, w)]
    return _rotated(cx, cy, angle, pts)


class _Canvas:
    """ImageDraw on the supersampled canvas, with every point mapped through the perspective warp.

    The warp is a homography that sends an inner quadrilateral of the canvas to the whole canvas
    (perspective_x > 0 shortens the right edge of that quadrilateral, so the right side looks nearer).
    Warping the geometry instead of the pixels keeps edges exact and costs nothing; textures are not warped.
    """

    def __init__(self, img: Image.Image, px: float, py: float, squash: float = 1.0, skew: float = 0.0):
        self.img, self.draw = img, ImageDraw.Draw(img)
        self.h = None
        # squash and skew, about the centre, before the warp: x -> c + squash (x - c) + tan(skew) (y - c)
        self.affine = None if squash == 1 and skew == 0 else (img.width / 2, squash, math.tan(math.radians(skew)))
        self.exact = not (px or py) and self.affine is None  # circles may be drawn as ellipses
        if px or py:
            w = img.width
            left, right, top, bottom = (w * max(v, 0) / 2 for v in (-px, px, -py, py))
            src = [(top, left), (w - top, right), (w - bottom, w - right), (bottom, w - left)]
            dst = [(0, 0), (w, 0), (w, w), (0, w)]
            a = []
            for (x, y), (u, v) in zip(src, dst):  # (x, y) -> (u, v)
                a.append([x, y, 1, 0, 0, 0, -u * x, -u * y])
                a.append([0, 0, 0, x, y, 1, -v * x, -v * y])
            self.h = np.linalg.solve(np.array(a, dtype=np.float64), np.array(dst, dtype=np.float64).reshape(8))

    def map(self, pts):
        if self.affine is not None:
            c, k, t = self.affine
            pts = [(c + k * (x - c) + t * (y - c), y) for x, y in pts]
        if self.h is None:
            return pts
        a, b, c, d, e, f, g, h = self.h.tolist()
        return [((a * x + b * y + c) / (g * x + h * y + 1), (d * x + e * y + f) / (g * x + h * y + 1))
                for x, y in pts]

    def polygon(self, pts, fill, draw=None):
        (draw or self.draw).polygon(self.map(pts), fill=fill)

    def circle(self, cx, cy, r, fill):
        if self.exact:
            self.draw.ellipse((cx - r, cy - r, cx + r, cy + r), fill=fill)
        else:
            n = 24 if r < 40 else 128
            self.polygon([(cx + r * math.cos(2 * math.pi * k / n), cy + r * math.sin(2 * math.pi * k / n))
                          for k in range(n)], fill)

    def shape(self, shape, cx, cy, half, rot, fill, draw=None):
        if shape == "round" and self.exact:
            (draw or self.draw).ellipse((cx - half, cy - half, cx + half, cy + half), fill=fill)
        else:
            self.polygon(_shape_points(shape, cx, cy, half, rot), fill, draw)

    def text(self, mask, cx, cy, angle, color):
        """Paste `color` through `mask` centred at (cx, cy), rotated clockwise by `angle` degrees."""
        if abs(angle) > 1e-9:
            mask = mask.rotate(-angle, resample=Image.Resampling.BILINEAR, expand=True)
        (cx, cy), = self.map([(cx, cy)])
        w, h = mask.size
        x, y = round(cx - w / 2), round(cy - h / 2)
        self.img.paste(color, (x, y, x + w, y + h), mask)


# -------------------------------------------------------------------------------------------- fills

_TEXTURES = ("wood", "brushed", "linen", "paper")


@lru_cache(maxsize=32)
def _pattern(kind: str, variant: int, size: int) -> Image.Image:
    """A square 'L' pattern of side 1.25 * size (noise: variants 0-3; texture: one of _TEXTURES), made once
    per process; fills are random crops of it."""
    rng = np.random.default_rng(1000 + 17 * variant + (0 if kind == "noise" else 7))
    n = 320
    yy, xx = np.mgrid[0:n, 0:n].astype(np.float32) / n

    def smooth(cells, sx=1.0, sy=1.0):  # value noise with `cells` random values per side, bicubic
        grid = rng.random((max(2, int(cells * sy)), max(2, int(cells * sx)))).astype(np.float32)
        return np.asarray(Image.fromarray(grid, "F").resize((n, n), Image.Resampling.BICUBIC))

    if kind == "noise":
        v = sum(smooth(c) / (1 + k) for k, c in enumerate((3, 6, 12, 24, 48)))
    elif _TEXTURES[variant] == "wood":
        cx, cy = rng.uniform(-0.5, 1.5), rng.uniform(-2.0, -1.0)
        d = np.hypot((xx - cx) * 1.0, (yy - cy) * 0.25) * 60 + smooth(6) * 4
        v = 0.6 * np.sin(d) ** 2 + 0.3 * smooth(40, 0.2, 1.0) + 0.1 * smooth(6)
    elif _TEXTURES[variant] == "brushed":
        v = smooth(200, 0.02, 1.0) + 0.5 * smooth(80, 0.05, 1.0) + 0.3 * smooth(5)
    elif _TEXTURES[variant] == "linen":
        v = (smooth(160, 1, 0.1) + smooth(160, 0.1, 1)) * 0.35 + smooth(8) * 0.3
    else:  # paper: soft mottling with fibres
        v = smooth(10) + 0.5 * smooth(30) + 0.35 * smooth(120, 0.5, 0.5)
    v = (v - v.min()) / max(1e-6, float(v.max() - v.min()))
    return Image.fromarray((v * 255).astype(np.uint8), "L").resize((size * 5 // 4,) * 2, Image.Resampling.BICUBIC)


def _colorize(mask: Image.Image, c1: Color, c2: Color) -> Image.Image:
    """RGB image interpolating c1 (mask 0) to c2 (mask 255), via a palette (one LUT pass)."""
    lut = bytearray(768)
    for i in range(256):
        for k in range(3):
            lut[3 * i + k] = (c1[k] * (255 - i) + c2[k] * i + 127) // 255
    pal = mask.copy()
    pal.putpalette(bytes(lut))
    return pal.convert("RGB")


def _fill(kind: str, c1: Color, c2: Color, size: int, rng: random.Random, box=None, scale: int = 1
          ) -> Image.Image:
    """RGB fill (plain, gradient, noise or texture between colours c1 and c2) of a square canvas of
    `size * scale` px, or of its `box` (x0, y0, x1, y1). Made at `size` px and enlarged by pixel
    repetition, so the supersampled canvas reduces back to exactly the `size`-px fill at a quarter of the cost."""
    big = size * scale
    x0, y0, x1, y1 = box or (0, 0, big, big)
    if kind == "plain":
        return Image.new("RGB", (x1 - x0, y1 - y0), c1)
    b0, b1 = (x0 // scale, y0 // scale), (-(-x1 // scale), -(-y1 // scale))  # the box at `size` px
    w, h = b1[0] - b0[0], b1[1] - b0[1]
    if kind == "gradient":
        n = 32
        yy, xx = np.mgrid[0:n, 0:n].astype(np.float32) / (n - 1) - 0.5
        if rng.random() < 0.7:  # linear at any angle
            a = math.radians(rng.uniform(0, 360))
            t = xx * math.cos(a) + yy * math.sin(a)
        else:  # radial from an off-centre point
            t = np.hypot(xx - rng.uniform(-0.4, 0.4), yy - rng.uniform(-0.4, 0.4))
        t = (t - t.min()) / max(1e-6, float(t.max() - t.min()))
        small = Image.fromarray((t * 255).astype(np.uint8), "L")
        k = size / n  # the whole canvas' gradient, restricted to the box
        mask = small.resize((w, h), Image.Resampling.BILINEAR,
                            box=(b0[0] / k, b0[1] / k, b1[0] / k, b1[1] / k))
    else:
        pattern = _pattern(kind, rng.randrange(4), size)
        dx, dy = rng.randrange(pattern.width - size + 1), rng.randrange(pattern.height - size + 1)
        mask = pattern.crop((b0[0] + dx, b0[1] + dy, b1[0] + dx, b1[1] + dy))
    img = _colorize(mask, c1, c2)
    if scale > 1:
        img = img.resize((w * scale, h * scale), Image.Resampling.NEAREST)
        ox, oy = x0 - b0[0] * scale, y0 - b0[1] * scale
        if (ox, oy, x1 - x0, y1 - y0) != (0, 0, w * scale, h * scale):
            img = img.crop((ox, oy, ox + x1 - x0, oy + y1 - y0))
    return img


@lru_cache(maxsize=1)
def _noise_buffer() -> np.ndarray:
    """A fixed buffer of standard normal noise (float32, 2**21 values), sliced per image."""
    return np.random.default_rng(20240601).standard_normal(1 << 21).astype(np.float32)


def _add_noise(img: Image.Image, std: float, rng: random.Random) -> Image.Image:
    arr = np.asarray(img, dtype=np.float32)
    buf = _noise_buffer()
    n = arr.size
    start = rng.randrange(len(buf))
    idx = np.arange(start, start + n) % len(buf) if start + n > len(buf) else slice(start, start + n)
    noisy = arr + buf[idx].reshape(arr.shape) * std
    return Image.fromarray(np.clip(noisy + 0.5, 0, 255).astype(np.uint8), "RGB")


# ----------------------------------------------------------------------------------------- renderer

def render_clock(hour: int, minute: int, second: int | None = None, *, size: int = 448,
                 style: ClockStyle | None = None, seed: int = 0) -> Image.Image:
    """An RGB `size` x `size` analog clock showing hour:minute[:second].

    hour 0..23 (a 12-hour dial; 13 and 1 look the same unless `style.am_pm`), minute and second 0..59;
    with `second` None the minute hand sits exactly on the minute and no second hand is drawn.
    `style` None draws one from `seed` (`style_for_seed`); `seed` also picks the pattern details.
    Raises ValueError naming the bad argument.
    """
    _check_int("hour", hour, 0, 23)
    _check_int("minute", minute, 0, 59)
    if second is not None:
        _check_int("second", second, 0, 59)
    _check_int("size", size, 64, 16384)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ValueError(f"seed must be an integer, got {seed!r}")
    if style is None:
        style = style_for_seed(seed)
    elif not isinstance(style, ClockStyle):
        raise ValueError(f"style must be a ClockStyle or None, got {type(style).__name__}")
    else:
        style.validate()
    rng = random.Random(f"draw:{seed}")
    st = style
    ss = st.supersample
    big = size * ss
    cx = cy = big / 2
    rot = st.dial_rotation

    img = _fill(st.background, st.background_color, st.background_color2, size, rng, scale=ss)
    cv = _Canvas(img, st.perspective_x, st.perspective_y, st.dial_squash, st.dial_skew)
    outer = st.face_radius * big / 2
    radius = outer * (1 - st.border_width)  # dial radius inside the border: the unit of all lengths
    if st.border_width > 0:
        cv.shape(st.face_shape, cx, cy, outer, rot, st.border_color)
    if st.face_fill == "plain":
        cv.shape(st.face_shape, cx, cy, radius, rot, st.face_color)
    else:  # the fill and a mask of the face over the face's bounding box only
        pts = cv.map(_shape_points(st.face_shape, cx, cy, radius, rot))
        x0, y0 = max(0, math.floor(min(x for x, _ in pts))), max(0, math.floor(min(y for _, y in pts)))
        x1, y1 = min(big, math.ceil(max(x for x, _ in pts)) + 1), min(big, math.ceil(max(y for _, y in pts)) + 1)
        face = _fill(st.face_fill, st.face_color, st.face_color2, size, rng, (x0, y0, x1, y1), ss)
        mask = Image.new("1", face.size, 0)  # a binary mask pastes fast; the reduce anti-aliases the edge
        ImageDraw.Draw(mask).polygon([(x - x0, y - y0) for x, y in pts], fill=1)
        img.paste(face, (x0, y0), mask)

    # ticks
    r_tick = radius * 0.96
    inner = r_tick
    if st.ticks != "none":
        n = int(st.ticks)
        for i in range(n):
            major = n == 12 or i % 5 == 0
            length = (st.tick_length if major else st.minor_tick_length) * radius
            width = (st.tick_width if major else st.minor_tick_width) * radius
            if length <= 0 or width <= 0:
                continue
            w = width / 2
            cv.polygon(_rotated(cx, cy, i * 360 / n + rot, [(r_tick - length, -w), (r_tick, -w), (r_tick, w),
                                                            (r_tick - length, w)]), st.tick_color)
        inner = r_tick - st.tick_length * radius
    # numerals: each label sits just inside the ticks, its extent along the radius measured from its mask
    if st.numerals != "none":
        px = max(4, round(st.numeral_size * radius))
        positions = (0, 3, 6, 9) if st.numerals == "cardinal" else range(12)
        for i in positions:
            text = ROMAN[i] if st.numerals == "roman" else str(i or 12)
            mask = _text_mask(st.numeral_font, px, text)
            w, h = mask.size
            angle = i * 30 + rot
            a = math.radians(i * 30)
            if st.numeral_rotation == "radial":
                extent, text_angle = h / 2, angle
            else:
                extent, text_angle = abs(math.sin(a)) * w / 2 + abs(math.cos(a)) * h / 2, rot
            (tx, ty), = _rotated(cx, cy, angle, [(inner - 0.04 * radius - extent, 0)])
            cv.text(mask, tx, ty, text_angle, st.numeral_color)
    if st.am_pm:
        mask = _text_mask(st.numeral_font, max(4, round(0.1 * radius)), "PM" if hour >= 12 else "AM")
        w, h = mask.size
        pad, line = 0.025 * radius, max(1.0, 0.012 * radius)
        (bx, by), = _rotated(cx, cy, 180 + rot, [(0.42 * radius, 0)])
        for grow, color in ((pad + line, st.tick_color), (pad, st.face_color)):  # frame, then window
            cv.polygon(_rotated(bx, by, rot, [(-h / 2 - grow, -w / 2 - grow), (h / 2 + grow, -w / 2 - grow),
                                              (h / 2 + grow, w / 2 + grow), (-h / 2 - grow, w / 2 + grow)]), color)
        cv.text(mask, bx, by, rot, st.numeral_color)

    # hands: shadows first, then hour, minute, second (with its counterweight), then the cap
    a_hour, a_min, a_sec = hand_angles(hour, minute, second)
    tail = st.hand_tail * radius
    hands = [(_hand_polygon(cx, cy, a_hour + rot, st.hour_hand_length * radius, st.hour_hand_width * radius,
                            tail * 0.8, st.hand_tip), st.hour_hand_color),
             (_hand_polygon(cx, cy, a_min + rot, st.minute_hand_length * radius, st.minute_hand_width * radius,
                            tail, st.hand_tip), st.minute_hand_color)]
    weight = None  # centre of the second hand's counterweight disc
    if a_sec is not None and st.second_hand:
        sec_tail = max(tail, 0.12 * radius) if st.hand_tail > 0 else 0.0
        hands.append((_hand_polygon(cx, cy, a_sec + rot, st.second_hand_length * radius,
                                    st.second_hand_width * radius, sec_tail, "plain"), st.second_hand_color))
        if sec_tail:
            weight = _rotated(cx, cy, a_sec + rot, [(-sec_tail, 0)])[0]
    if st.hand_shadow > 0:
        off = st.hand_shadow * radius
        shadow = ImageDraw.Draw(img, "RGBA")  # translucent fill blended onto the RGB canvas
        for poly, _ in hands:
            shadow.polygon([(x + off, y + off) for x, y in cv.map(poly)], fill=(0, 0, 0, 70))
    for poly, color in hands:
        cv.polygon(poly, color)
    if weight:
        cv.circle(*weight, max(2.0, 2.5 * st.second_hand_width * radius), st.second_hand_color)
    if st.center_cap > 0:
        cv.circle(cx, cy, st.center_cap * radius, st.center_cap_color)

    for _ in range(st.distractors):  # lines across the picture: scratches, reflections, cables
        over = ImageDraw.Draw(img, "RGBA")
        pts = [(rng.uniform(0, big), rng.uniform(0, big)) for _ in range(2)]
        color = (rng.randrange(256), rng.randrange(256), rng.randrange(256), rng.randrange(120, 256))
        over.line(pts, fill=color, width=max(1, round(rng.uniform(0.5, 3.0) * ss)))

    if ss > 1:
        img = img.reduce(ss)
    if st.blur > 0:
        img = img.filter(ImageFilter.BoxBlur(st.blur))  # defocus-like, and 3x cheaper than Gaussian
    if st.noise > 0:
        img = _add_noise(img, st.noise, rng)
    if st.jpeg_quality:
        buf = io.BytesIO()
        img.save(buf, "JPEG", quality=st.jpeg_quality)
        buf.seek(0)
        img = Image.open(buf).convert("RGB")
    return img
