"""The grounding answer format, shared by the renderer (`data_synth.grounding`) and the readers that build
grounding targets from other data (`vlm_smmd.data.refcoco`): how an image is resized (qwen-vl-utils'
`smart_resize`), how original pixels map to the answer's coordinates, and the answer text. A leaf: it
imports no renderer, so a reader can use it without the drawing code.
"""

from __future__ import annotations

import json
import math
from fractions import Fraction

from .args import check_int

COORDS = ("absolute", "norm1000")  # pixels of the resized image | 0..1000 across the image
ANSWER_KEYS = {"point": "point_2d", "box": "bbox_2d"}  # task -> the JSON key of its coordinates
MAX_RATIO = 200  # the largest aspect ratio smart_resize accepts (as qwen-vl-utils)


# ------------------------------------------------------------------------------------------- resize

def smart_resize(height: int, width: int, factor: int = 28, min_pixels: int | None = None,
                 max_pixels: int | None = None) -> tuple[int, int]:
    """(height, width) the Qwen VL processors resize an image to, computed as qwen-vl-utils'
    `smart_resize` does (this package may not import it): each side rounded to a multiple of `factor`
    (Python's round: halves to even), then, when the area leaves [min_pixels, max_pixels], both sides
    scaled by one factor and floored (too large) or ceiled (too small) to multiples of `factor`. Defaults
    4 and 16384 patches of factor x factor px, as qwen-vl-utils. ValueError for an aspect ratio over 200,
    min_pixels > max_pixels, or a side that comes out 0."""
    check_int("height", height, 1, 2 ** 31)
    check_int("width", width, 1, 2 ** 31)
    check_int("factor", factor, 1, 2 ** 15)
    min_pixels = 4 * factor * factor if min_pixels is None else check_int("min_pixels", min_pixels, 1, 2 ** 62)
    max_pixels = 16384 * factor * factor if max_pixels is None else check_int("max_pixels", max_pixels, 1, 2 ** 62)
    if min_pixels > max_pixels:
        raise ValueError(f"min_pixels {min_pixels} exceeds max_pixels {max_pixels}")
    if max(height, width) / min(height, width) > MAX_RATIO:
        raise ValueError(f"aspect ratio {max(height, width) / min(height, width):g} is over {MAX_RATIO}")
    h = max(factor, round(height / factor) * factor)
    w = max(factor, round(width / factor) * factor)
    if h * w > max_pixels:
        shrink = math.sqrt(height * width / max_pixels)
        h, w = math.floor(height / shrink / factor) * factor, math.floor(width / shrink / factor) * factor
    elif h * w < min_pixels:
        grow = math.sqrt(min_pixels / (height * width))
        h, w = math.ceil(height * grow / factor) * factor, math.ceil(width * grow / factor) * factor
    if not (h and w):
        raise ValueError(f"a {width} x {height} image resizes to nothing under max_pixels {max_pixels}")
    return h, w


# -------------------------------------------------------------------------------------- coordinates

def coord_scale(width: int, height: int, coords: str, resized: tuple[int, int]) -> tuple[Fraction, Fraction]:
    """(x, y) factors from original pixels to the answer's convention: resized / original for `absolute`
    (`resized` = (resized_width, resized_height)), 1000 / side for `norm1000`. Exact fractions."""
    if coords == "absolute":
        return Fraction(resized[0], width), Fraction(resized[1], height)
    if coords == "norm1000":
        return Fraction(1000, width), Fraction(1000, height)
    raise ValueError(f"coords must be one of {', '.join(COORDS)}; got {coords!r}")


def point_coords(point, scale) -> list[int]:
    """A point [x, y] in original pixels as the answer's integers: scaled, rounded half up."""
    return [math.floor(Fraction(v) * s + Fraction(1, 2)) for v, s in zip(point, scale)]


def box_coords(box, scale) -> list[int]:
    """A box [x1, y1, x2, y2] in original pixels as the answer's integers: scaled, rounded outward."""
    sx, sy = scale
    x1, y1, x2, y2 = (Fraction(v) for v in box)
    return [math.floor(x1 * sx), math.floor(y1 * sy), math.ceil(x2 * sx), math.ceil(y2 * sy)]


def format_answer(task: str, values: list[int], label: str) -> str:
    """The answer text, as the Qwen VL families write grounding output: {"point_2d": [x, y], "label": ...}
    or {"bbox_2d": [x1, y1, x2, y2], "label": ...}."""
    key = ANSWER_KEYS[task]
    return json.dumps({key: values, "label": label})
