"""Grounding questions with exact answers: images of simple coloured shapes, and a question asking for the
centre point or the bounding box of one named object: `data-synth grounding --num N --seed S --out DIR`.

Layout of `out/` (a Hugging Face imagefolder per split, as for clocks):
    generation.json                  every argument that decides the images (and the held-out cells)
    {split}/metadata.jsonl           one row per image (below)
    {split}/{index // 1000:04d}/{index:08d}.png

A row, e.g. (wrapped here; `data-synth grounding --num 20 --seed 0`, image 1):
    {"file_name": "0000/00000001.png", "question": "Where is the red triangle? Answer with its bounding box
     in JSON format.", "answer": "{\"bbox_2d\": [197, 175, 279, 257], \"label\": \"red triangle\"}",
     "task": "box", "coords": "absolute", "label": "red triangle", "answer_coords": [197, 175, 279, 257],
     "target": {"kind": "triangle", "colour": "red", "rgb": [207, 38, 27], "box": [197, 175, 279, 257],
     "point": [238.0, 216.0]}, "position": [2, 3], "objects": [{"kind": "triangle", "colour": "red", "rgb":
     [207, 38, 27], "box": [197, 175, 279, 257]}, {"kind": "triangle", "colour": "purple", ...}, {"kind":
     "diamond", "colour": "red", ...}], "width": 448, "height": 336, "resized_width": 448, "resized_height":
     336, "background": [241, 241, 248], "clutter": 0, "index": 1, "render_seed": 7220927070045296899,
     "split": "train"}
    (`objects` lists every object, the target first.)

Geometry. Coordinates are continuous image coordinates with the origin at the top-left corner: an object
whose pixels are columns x1..x2-1 and rows y1..y2-1 has the box [x1, y1, x2, y2] (`target.box`, read
from the drawn pixels themselves, so it is exact) and the point [(x1 + x2) / 2, (y1 + y2) / 2], the
centre of its box (`target.point`; inside every kind of shape drawn here). Shapes are drawn without
anti-aliasing: every pixel of an object has exactly its `rgb`, and objects never overlap (at least `GAP`
px apart), so each object's pixels are all visible. The answer gives them in one of two conventions:
    absolute   pixels of the image as the model sees it (Qwen2-VL, Qwen2.5-VL): the processor resizes the
               image with qwen-vl-utils' `smart_resize` (`factor`, `min_pixels`, `max_pixels`) to
               `resized_width` x `resized_height`, and coordinates are scaled by resized / original. The
               default canvas (448 x 336, multiples of 28) is left as it is, so the scale is 1.
    norm1000   0..1000 across the image (Qwen3-VL): x * 1000 / width, y * 1000 / height.
Points round to the nearest integer (halves up); box corners round outward (x1, y1 down, x2, y2 up), so a
box scaled back to the image still covers every pixel of its object. `answer_coords` holds the integers
of the answer, `target` the exact geometry in the original image's pixels, so metrics need not parse text.

What the label names is unambiguous: no other object in the image has the target's colour and kind.
Distractors (`objects` = (lowest, highest) objects in all, drawn per image) have any other pair and may
share the target's colour or its kind. `clutter` grey lines lie under the objects; `noise` adds Gaussian
noise of that std (0..255 scale) to the finished image. With `variation` (the default) the background is
a random light tint and each object's colour varies a little around its named colour (`COLOURS`);
without it the background is white and colours are exact.

Splits: no image is in two splits. An image is its scene (background, clutter, objects: kind, colour,
size and place); it belongs to one split by a seeded hash of the scene (`dataset.owner_split`), and a
split holds only its own, so a test image is never a training image, whatever the question. Position:
the grid cell [col, row] of the target's centre point on a `grid` x `grid` division of the image (col =
floor(x * grid / width)); the target's cell is drawn uniformly, then its place within the cell.
`unseen_fraction` holds a seeded set of cells out (`unseen_cells`: every column and row still occurs in
training): no target of the named splits has its centre in one, and the extra split `test_unseen` holds
targets in them, and only there (distractors may lie anywhere; only target coordinates are held out).
Image `index` gets its own seed from (seed, index), so the bytes depend on nothing else (not the worker
count); splits take contiguous index blocks. Written through `data_synth.dataset.build_dataset`: atomic
(built in `.{out}.partial`, then renamed), resumable (`--resume`), `--overwrite` to replace `out`.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from fractions import Fraction
from functools import lru_cache
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from .args import Parser, bounded_int
from .dataset import (
    MAX_ITEMS,
    MAX_SIDE,
    UNSEEN_SPLIT,
    add_build_args,
    add_dataset_args,
    add_splits_arg,
    add_unseen_args,
    build_dataset,
    check_fraction,
    check_int,
    encode_png,
    item_seed,
    owner_split,
    parse_splits,
    pick_unseen,
    run_writer,
    split_bounds,
    split_of,
    unseen_settings,
    write_file,
    write_metadata,
)
from .grounding_format import COORDS, box_coords, coord_scale, format_answer, point_coords, smart_resize

KINDS = ("square", "circle", "triangle", "diamond")
# named colours, saturated and far apart, so none is mistaken for another, the light background or the grey clutter
COLOURS = {"red": (215, 38, 38), "green": (34, 150, 52), "blue": (36, 78, 216), "yellow": (236, 196, 24),
           "orange": (240, 128, 24), "purple": (130, 52, 180)}
TASKS = ("point", "box")
QUESTIONS = {
    "point": ("Point to the {label} in the image and output its coordinates in JSON format.",
              "Give the centre point of the {label} as JSON with point_2d and label.",
              "Where is the centre of the {label}? Answer with a point in JSON format."),
    "box": ("Locate the {label} in the image and output its bbox coordinates in JSON format.",
            "Give the bounding box of the {label} as JSON with bbox_2d and label.",
            "Where is the {label}? Answer with its bounding box in JSON format."),
}
GAP = 2  # px kept free between two objects
MIN_OBJECT = 4  # px: the smallest object side
MAX_OBJECTS = 12
MAX_CLUTTER = 100
MAX_GRID = 20
MAX_DRAWS = 10_000  # scene draws for one image before its split is declared impossible to fill
PLACE_TRIES = 100  # places tried for one distractor before the scene is drawn again
SHARD = 1000  # images per sub-folder


def cell_of(point, width: int, height: int, grid: int) -> tuple[int, int]:
    """The grid cell (col, row) of a point [x, y] (original pixels) on a grid x grid division of the image."""
    x, y = (Fraction(v) for v in point)
    return math.floor(x * grid / width), math.floor(y * grid / height)


def grid_cells(grid: int) -> list[tuple[int, int]]:
    return [(col, row) for col in range(grid) for row in range(grid)]


def unseen_cells(grid: int, fraction: float, seed: int = 0) -> list[tuple[int, int]]:
    """The target cells (col, row) held out of training by `unseen_fraction=fraction, unseen_seed=seed`:
    that fraction of the grid x grid cells, drawn by `dataset.pick_unseen` so that every column and every
    row still has a training cell. A pure function of its arguments."""
    return pick_unseen(grid_cells(grid), lambda c: (("col", c[0]), ("row", c[1])), check_fraction(fraction), seed)


# ------------------------------------------------------------------------------------------- shapes

@lru_cache(maxsize=1024)
def shape_mask(kind: str, side: int) -> tuple[Image.Image, tuple[int, int, int, int]]:
    """(mask, box): the shape drawn (255 on 0, no anti-aliasing) in a side x side square, cropped to its
    pixels, and where those pixels lie in the square (x1, y1, x2, y2; x2, y2 one past the last)."""
    mask = Image.new("L", (side, side), 0)
    draw = ImageDraw.Draw(mask)
    e = side - 1
    if kind == "square":
        draw.rectangle((0, 0, e, e), fill=255)
    elif kind == "circle":
        draw.ellipse((0, 0, e, e), fill=255)
    elif kind == "triangle":  # apex up
        draw.polygon([(e / 2, 0), (e, e), (0, e)], fill=255)
    elif kind == "diamond":
        draw.polygon([(e / 2, 0), (e, e / 2), (e / 2, e), (0, e / 2)], fill=255)
    else:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}; got {kind!r}")
    box = mask.getbbox()
    return mask.crop(box), box


def _starts(cell: int, cells: int, length: int, lo: int, hi: int) -> tuple[int, int]:
    """Range (first, last) of integer starts t of a shape spanning [t + lo, t + hi) that keep it inside
    0..length and put its centre t + (lo + hi) / 2 in cell `cell` of `cells` equal cells; first > last when
    none does. Integer arithmetic: the centre is in the cell when cell * length <= centre * cells <
    (cell + 1) * length."""
    mid2 = lo + hi  # twice the centre's offset from t
    first = max(-lo, -(-(2 * cell * length - mid2 * cells) // (2 * cells)))
    last = min(length - hi, -(-(2 * (cell + 1) * length - mid2 * cells) // (2 * cells)) - 1)
    return first, last


# -------------------------------------------------------------------------------------------- items

class _Plan:
    """Everything that decides the bytes of a grounding dataset, and the recipe for one image from it (the
    plan interface of `data_synth.dataset.build_partial`)."""

    name, noun, unit, chunk = "grounding", "images", "img", 64

    def __init__(self, cfg: dict):
        self.cfg = cfg
        self.size = (cfg["width"], cfg["height"])
        self.scale = coord_scale(cfg["width"], cfg["height"], cfg["coords"], cfg["resized"])
        side = min(self.size)
        self.sides = (round(cfg["object_size"][0] * side), round(cfg["object_size"][1] * side))
        self.pairs = [(k, c) for k in cfg["kinds"] for c in cfg["colours"]]
        self.bounds = split_bounds(cfg["num"], cfg["splits"], "image")
        self.total = cfg["num"]
        held = {tuple(c) for c in cfg["unseen"]["cells"]} if cfg["unseen"] else set()
        cells = grid_cells(cfg["grid"])
        self.pools = {False: [c for c in cells if c not in held], True: [c for c in cells if c in held]}
        if cfg["unseen"]:
            self.bounds.append((cfg["num"], cfg["num"] + cfg["unseen"]["num"], UNSEEN_SPLIT))
            self.total += cfg["unseen"]["num"]

    def split_of(self, index: int) -> str:
        return split_of(self.bounds, index)

    def _colour(self, rng: random.Random, name: str) -> list[int]:
        base = COLOURS[name]
        if not self.cfg["variation"]:
            return list(base)
        return [min(255, max(0, c + rng.randint(-12, 12))) for c in base]

    def _scene(self, rng: random.Random, pool: list) -> dict | None:
        """A scene drawn from `rng` with its target's centre in a cell of `pool`; None when a distractor
        found no free place (the caller draws again). The image is a function of the scene alone."""
        cfg = self.cfg
        (width, height), grid = self.size, cfg["grid"]
        count = rng.randint(*cfg["objects"])
        kind, colour = rng.choice(self.pairs)
        side = rng.randint(*self.sides)
        col, row = rng.choice(pool)
        _, (lx1, ly1, lx2, ly2) = shape_mask(kind, side)
        xs, ys = _starts(col, grid, width, lx1, lx2), _starts(row, grid, height, ly1, ly2)
        if xs[0] > xs[1] or ys[0] > ys[1]:
            return None  # not for the sizes _config admits; kept as a redraw rather than a wrong cell
        objects = [{"kind": kind, "colour": colour, "rgb": self._colour(rng, colour), "side": side,
                    "x": rng.randint(*xs), "y": rng.randint(*ys)}]
        others = [p for p in self.pairs if p != (kind, colour)]
        boxes = [_box(objects[0])]
        for _ in range(count - 1):
            kind, colour = rng.choice(others)
            side = rng.randint(*self.sides)
            _, (lx1, ly1, lx2, ly2) = shape_mask(kind, side)
            for _ in range(PLACE_TRIES):
                x, y = rng.randint(-lx1, width - lx2), rng.randint(-ly1, height - ly2)
                box = (x + lx1, y + ly1, x + lx2, y + ly2)
                if all(box[2] + GAP <= b[0] or b[2] + GAP <= box[0] or box[3] + GAP <= b[1] or b[3] + GAP <= box[1]
                       for b in boxes):
                    break
            else:
                return None
            boxes.append(box)
            objects.append({"kind": kind, "colour": colour, "rgb": self._colour(rng, colour), "side": side,
                            "x": x, "y": y})
        if cfg["variation"]:  # a light, barely tinted background
            base = rng.randint(228, 250)
            background = [min(255, base + rng.randint(-6, 5)) for _ in range(3)]
        else:
            background = [255, 255, 255]
        clutter = [[rng.randrange(width), rng.randrange(height), rng.randrange(width), rng.randrange(height),
                    rng.randint(1, 2), rng.randint(90, 170)] for _ in range(cfg["clutter"])]
        noise_seed = rng.getrandbits(32) if cfg["noise"] > 0 else None
        return {"background": background, "clutter": clutter, "objects": objects, "noise_seed": noise_seed}

    def item(self, index: int) -> tuple[dict, dict]:
        """(metadata row, scene) of image `index`; cheap (no drawing), deterministic in (cfg, index): the
        first scene of its own random stream that its split owns."""
        cfg = self.cfg
        seed = item_seed("grounding", cfg["seed"], index)
        rng = random.Random(seed)
        split = self.split_of(index)
        pool = self.pools[split == UNSEEN_SPLIT]
        for _ in range(MAX_DRAWS):
            scene = self._scene(rng, pool)
            if scene is None:
                continue
            key = json.dumps(scene, sort_keys=True, separators=(",", ":"))
            if split == UNSEEN_SPLIT or owner_split("grounding", cfg["seed"], key, cfg["splits"]) == split:
                break
        else:
            raise ValueError(f"split {split!r}: no image fits it in {MAX_DRAWS:,} draws; allow fewer or smaller "
                             "objects, or a larger canvas")
        target = scene["objects"][0]
        box = list(_box(target))
        point = [(box[0] + box[2]) / 2, (box[1] + box[3]) / 2]
        label = f"{target['colour']} {target['kind']}"
        task = rng.choice(TASKS) if cfg["task"] == "both" else cfg["task"]
        values = point_coords(point, self.scale) if task == "point" else box_coords(box, self.scale)
        row = {"file_name": f"{index // SHARD:04d}/{index:08d}.png",
               "question": rng.choice(QUESTIONS[task]).format(label=label),
               "answer": format_answer(task, values, label), "task": task, "coords": cfg["coords"],
               "label": label, "answer_coords": values,
               "target": {"kind": target["kind"], "colour": target["colour"], "rgb": target["rgb"], "box": box,
                          "point": point},
               "position": list(cell_of(point, *self.size, cfg["grid"])),
               "objects": [{"kind": o["kind"], "colour": o["colour"], "rgb": o["rgb"], "box": list(_box(o))}
                           for o in scene["objects"]],
               "width": cfg["width"], "height": cfg["height"], "resized_width": cfg["resized"][0],
               "resized_height": cfg["resized"][1], "background": scene["background"],
               "clutter": len(scene["clutter"]), "index": index, "render_seed": seed, "split": split}
        return row, scene

    def render(self, index: int, root: Path) -> str:
        """Draw image `index`, write it (atomically) under root/split/, return its metadata line."""
        row, scene = self.item(index)
        img = draw_scene(scene, *self.size, self.cfg["noise"])
        write_file(root / self.split_of(index) / row["file_name"], encode_png(img))
        return json.dumps(row)

    def is_done(self, row: dict, root: Path) -> bool:
        return (root / self.split_of(row["index"]) / row["file_name"]).is_file()

    def finish(self, root: Path, done: dict[int, str]) -> None:
        write_metadata(root, self.bounds, done)


def _box(obj: dict) -> tuple[int, int, int, int]:
    """The pixel box of a placed object of a scene (its shape's box moved to the object's place)."""
    _, (lx1, ly1, lx2, ly2) = shape_mask(obj["kind"], obj["side"])
    return obj["x"] + lx1, obj["y"] + ly1, obj["x"] + lx2, obj["y"] + ly2


def draw_scene(scene: dict, width: int, height: int, noise: float = 0.0) -> Image.Image:
    """The RGB image of a scene: background, clutter lines, then the objects, then the noise."""
    img = Image.new("RGB", (width, height), tuple(scene["background"]))
    draw = ImageDraw.Draw(img)
    for x1, y1, x2, y2, line_width, grey in scene["clutter"]:
        draw.line((x1, y1, x2, y2), fill=(grey, grey, grey), width=line_width)
    for obj in scene["objects"]:
        mask, _ = shape_mask(obj["kind"], obj["side"])
        x1, y1, _, _ = _box(obj)
        img.paste(tuple(obj["rgb"]), (x1, y1, x1 + mask.width, y1 + mask.height), mask)
    if noise > 0:
        arr = np.asarray(img, dtype=np.float32)
        arr = arr + np.random.default_rng(scene["noise_seed"]).standard_normal(arr.shape, dtype=np.float32) * noise
        img = Image.fromarray(np.clip(arr + 0.5, 0, 255).astype(np.uint8), "RGB")
    return img


# ------------------------------------------------------------------------------------------- config

def _pair(value, name: str, kind: type) -> list:
    """(lowest, highest) from a number or a pair."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = (value, value)
    try:
        lo, hi = value
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number or (lowest, highest), got {value!r}") from None
    for v in (lo, hi):
        if isinstance(v, bool) or not isinstance(v, (int, float) if kind is float else int):
            raise ValueError(f"{name} must be {'numbers' if kind is float else 'integers'}, got {value!r}")
    if not lo <= hi:
        raise ValueError(f"{name} must have lowest <= highest, got {lo}-{hi}")
    return [kind(lo), kind(hi)]


def _names(value, known, what: str) -> list[str]:
    names = list(known) if value is None else [value] if isinstance(value, str) else list(value)
    if not names or len(set(names)) != len(names) or not set(names) <= set(known):
        raise ValueError(f"{what} must be distinct names from {', '.join(known)}; got {value!r}")
    return [n for n in known if n in names]  # in the order of `known`, so equal choices give equal configs


def _config(num, seed, width, height, splits, task, coords, factor, min_pixels, max_pixels, objects, object_size,
            kinds, colours, grid, clutter, noise, variation, unseen_fraction, unseen_seed, unseen_num) -> dict:
    """The JSON-ready generation config (validated); equal configs give identical datasets."""
    check_int("num", num, 1, MAX_ITEMS)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an integer, got {seed!r}")
    check_int("width", width, 28, MAX_SIDE)
    check_int("height", height, 28, MAX_SIDE)
    splits = parse_splits(splits) if isinstance(splits, str) else dict(splits)
    parse_splits(",".join(f"{k}={v}" for k, v in splits.items()))  # same checks for a dict
    if task not in (*TASKS, "both"):
        raise ValueError(f"task must be point, box or both; got {task!r}")
    if coords not in COORDS:
        raise ValueError(f"coords must be one of {', '.join(COORDS)}; got {coords!r}")
    resized_h, resized_w = smart_resize(height, width, factor, min_pixels, max_pixels)
    objects = _pair(objects, "objects", int)
    if not 1 <= objects[0] <= objects[1] <= MAX_OBJECTS:
        raise ValueError(f"objects must be in 1..{MAX_OBJECTS}, got {objects[0]}-{objects[1]}")
    object_size = _pair(object_size, "object_size", float)
    if not 0 < object_size[0] <= object_size[1] < 1:
        raise ValueError(f"object_size must be fractions of the shorter side in (0, 1), got {object_size}")
    kinds, colours = _names(kinds, KINDS, "kinds"), _names(colours, COLOURS, "colours")
    if objects[1] > 1 and len(kinds) * len(colours) < 2:
        raise ValueError("distractors need a second colour or kind: give more kinds or colours, or objects 1")
    check_int("grid", grid, 1, MAX_GRID)
    check_int("clutter", clutter, 0, MAX_CLUTTER)
    if isinstance(noise, bool) or not isinstance(noise, (int, float)) or not 0 <= noise <= 100:
        raise ValueError(f"noise must be a number in 0..100, got {noise!r}")
    if not isinstance(variation, bool):
        raise ValueError(f"variation must be True or False, got {variation!r}")
    side = min(width, height)
    small, large = round(object_size[0] * side), round(object_size[1] * side)
    if small < MIN_OBJECT:
        raise ValueError(f"object_size {object_size[0]} of {side} px gives objects under {MIN_OBJECT} px; "
                         "raise it or the canvas")
    # the largest object (its full square) must reach the outermost cells, then every smaller one does too
    for length in (width, height):
        for cell in (0, grid - 1):
            first, last = _starts(cell, grid, length, 0, large)
            if first > last:
                raise ValueError(f"object_size {object_size[1]} ({large} px) is too large for a grid of {grid}: "
                                 f"its centre cannot reach the edge cells of a {length} px side")
    if objects[1] * (large + GAP) ** 2 > width * height / 2:
        raise ValueError(f"{objects[1]} objects of up to {large} px do not fit a {width} x {height} canvas "
                         "comfortably; allow fewer or smaller objects")
    unseen = unseen_settings(unseen_fraction, unseen_seed, unseen_num, num, splits)
    if unseen:
        unseen["cells"] = [list(c) for c in unseen_cells(grid, unseen_fraction, unseen_seed)]
    return {"num": num, "seed": seed, "width": width, "height": height, "splits": splits, "task": task,
            "coords": coords, "factor": factor, "min_pixels": min_pixels, "max_pixels": max_pixels,
            "resized": [resized_w, resized_h], "objects": objects, "object_size": object_size, "kinds": kinds,
            "colours": colours, "grid": grid, "clutter": clutter, "noise": float(noise), "variation": variation,
            "unseen": unseen}


def write_grounding_dataset(out, num: int, seed: int = 0, *, width: int = 448, height: int = 336,
                            splits: dict[str, float] | str = "train=0.9,test=0.1", task: str = "both",
                            coords: str = "absolute", factor: int = 28, min_pixels: int | None = None,
                            max_pixels: int | None = None, objects=(1, 4), object_size=(0.1, 0.25),
                            kinds=None, colours=None, grid: int = 5, clutter: int = 0, noise: float = 0.0,
                            variation: bool = True, unseen_fraction: float = 0.0, unseen_seed: int = 0,
                            unseen_num: int | None = None, workers: int = 1, resume: bool = False,
                            overwrite: bool = False, progress: bool = True) -> Path:
    """Render `num` grounding images into an imagefolder dataset at `out`; returns `out`.

    width, height: the canvas (28..4096 px). task: point | box | both (one drawn per image). coords:
    absolute (pixels after `smart_resize(height, width, factor, min_pixels, max_pixels)`) | norm1000.
    objects: count per image, N or (lowest, highest), the target included. object_size: object side as a
    fraction of the shorter canvas side, a number or (lowest, highest). kinds, colours: subsets of KINDS
    and COLOURS (default all). grid: cells per side for positions. clutter: grey lines per image. noise:
    std of Gaussian noise (0..100). variation: tinted backgrounds and varied shades (False: white, exact).
    unseen_fraction > 0 holds that fraction of the grid cells (`unseen_cells(grid, unseen_fraction,
    unseen_seed)`) out of every split for the target's centre and writes targets there, and only there,
    into an extra split `test_unseen` of `unseen_num` images (default: as many as the smallest split).
    No image is in two splits. Deterministic in (arguments, seed) whatever `workers`; ValueError on bad
    arguments, before anything is written.
    """
    cfg = _config(num, seed, width, height, splits, task, coords, factor, min_pixels, max_pixels, objects,
                  object_size, kinds, colours, grid, clutter, noise, variation, unseen_fraction, unseen_seed,
                  unseen_num)
    plan = _Plan(cfg)
    for lo, _, _ in plan.bounds:  # a split no image can fit fails here, before anything is written
        plan.item(lo)
    return build_dataset(out, plan, workers=workers, resume=resume, overwrite=overwrite, progress=progress)


# ---------------------------------------------------------------------------------------------- CLI

def _range_arg(kind: type):
    """An argparse `type`: N or LO-HI as [lo, hi] of `kind`."""
    def parse(text: str) -> list:
        lo, sep, hi = text.partition("-")
        try:
            return [kind(lo), kind(hi if sep else lo)]
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected N or LO-HI, got {text!r}") from None
    return parse


def _list_arg(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def main(argv: list[str] | None = None) -> int:
    """`data-synth grounding --num N --seed S --out DIR [options]`."""
    p = Parser(
        prog="data-synth grounding",
        description="Images of coloured shapes with a question asking for the point or box of one named object; "
                    "answers as Qwen VL grounding JSON. A Hugging Face imagefolder per split (images + "
                    "metadata.jsonl) and OUT/generation.json.")
    add_dataset_args(p, "images")
    p.add_argument("--width", type=bounded_int(28, MAX_SIDE), default=448, help="canvas width in px (default 448)")
    p.add_argument("--height", type=bounded_int(28, MAX_SIDE), default=336, help="canvas height in px (default 336)")
    add_splits_arg(p)
    p.add_argument("--task", choices=(*TASKS, "both"), default="both",
                   help="ask for the centre point, the bounding box, or either drawn per image (default both)")
    p.add_argument("--coords", choices=COORDS, default="absolute",
                   help="absolute: pixels of the image as resized by smart_resize (Qwen2/2.5-VL, default); "
                        "norm1000: 0..1000 across the image (Qwen3-VL)")
    p.add_argument("--factor", type=bounded_int(1, 1024), default=28,
                   help="smart_resize factor, patch x merge (default 28; Qwen3-VL 32)")
    p.add_argument("--min-pixels", type=bounded_int(1, 2 ** 40), default=None,
                   help="smart_resize min_pixels (default 4 * factor^2)")
    p.add_argument("--max-pixels", type=bounded_int(1, 2 ** 40), default=None,
                   help="smart_resize max_pixels (default 16384 * factor^2)")
    p.add_argument("--objects", type=_range_arg(int), default=[1, 4],
                   help=f"objects per image, target included: N or LO-HI, at most {MAX_OBJECTS} (default 1-4)")
    p.add_argument("--object-size", type=_range_arg(float), default=[0.1, 0.25],
                   help="object side as a fraction of the shorter canvas side: F or LO-HI (default 0.1-0.25)")
    p.add_argument("--kinds", type=_list_arg, default=None, help=f"shape kinds, of {','.join(KINDS)} (default all)")
    p.add_argument("--colours", type=_list_arg, default=None,
                   help=f"named colours, of {','.join(COLOURS)} (default all)")
    p.add_argument("--grid", type=bounded_int(1, MAX_GRID), default=5,
                   help="cells per side of the position grid (default 5)")
    p.add_argument("--clutter", type=bounded_int(0, MAX_CLUTTER), default=0,
                   help="grey lines under the objects per image (default 0)")
    p.add_argument("--noise", type=float, default=0.0, help="std of Gaussian pixel noise, 0..100 (default 0)")
    p.add_argument("--no-variation", action="store_true",
                   help="white background and exact named colours (by default both vary a little per image)")
    p.add_argument("--unseen-fraction", type=float, default=0.0,
                   help=f"hold this fraction of the grid cells out of every split for the target's centre and "
                        f"write targets there, and only there, into an extra split {UNSEEN_SPLIT} (every column "
                        "and row stays in training)")
    add_unseen_args(p, "cells", "images")
    add_build_args(p)
    args = p.parse_args(argv)

    def write():
        return write_grounding_dataset(
            args.out, args.num, args.seed, width=args.width, height=args.height, splits=args.splits,
            task=args.task, coords=args.coords, factor=args.factor, min_pixels=args.min_pixels,
            max_pixels=args.max_pixels, objects=args.objects, object_size=args.object_size, kinds=args.kinds,
            colours=args.colours, grid=args.grid, clutter=args.clutter, noise=args.noise,
            variation=not args.no_variation, unseen_fraction=args.unseen_fraction, unseen_seed=args.unseen_seed,
            unseen_num=args.unseen_num, workers=args.workers, resume=args.resume, overwrite=args.overwrite,
            progress=not args.no_progress)

    status, out = run_writer("data-synth grounding", write)
    if status:
        return status
    cfg = json.loads((out / "generation.json").read_text())
    extra = f" and {cfg['unseen']['num']} with held-out positions in {UNSEEN_SPLIT}" if cfg["unseen"] else ""
    print(f"wrote {args.num} grounding images{extra} to {out} ({cfg['coords']} coordinates, "
          f"{cfg['width']}x{cfg['height']} seen as {cfg['resized'][0]}x{cfg['resized'][1]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
