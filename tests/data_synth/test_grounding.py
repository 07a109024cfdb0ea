"""data-synth grounding: boxes and points that match the drawn pixels, the two coordinate conventions
(absolute after smart_resize, equal to qwen-vl-utils', and norm1000), splits that share no image, held-out
positions only in test_unseen, bytes independent of the worker count, atomic output and --resume, the CLI."""

import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import data_synth.grounding as gr
from data_synth.grounding import (
    COLOURS,
    box_coords,
    coord_scale,
    main,
    point_coords,
    smart_resize,
    unseen_cells,
    write_grounding_dataset,
)

QUIET = dict(progress=False)


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def rows(root: Path, split: str) -> list[dict]:
    return [json.loads(line) for line in (root / split / "metadata.jsonl").read_text().splitlines()]


def image(root: Path, split: str, row: dict) -> np.ndarray:
    return np.asarray(Image.open(root / split / row["file_name"]).convert("RGB"))


def pixel_box(img: np.ndarray, rgb) -> list[int]:
    """[x1, y1, x2, y2] (x2, y2 one past the last) of the pixels of exactly this colour."""
    ys, xs = np.nonzero(np.all(img == np.array(rgb, np.uint8), axis=2))
    assert len(xs), rgb
    return [int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1]


def refusal(*args) -> str:
    """The message of the ValueError smart_resize raises (cheaper than pytest.raises in a long loop)."""
    try:
        smart_resize(*args)
    except ValueError as e:
        return str(e)
    raise AssertionError(f"smart_resize{args} raised nothing")


def test_smart_resize_equals_qwen_vl_utils():
    qwen = pytest.importorskip("qwen_vl_utils")
    sides = sorted({*range(1, 120, 7), 27, 28, 29, 41, 42, 43, 55, 56, 57, 70, 80, 126, 144, 182, 200, 333, 448, 449,
                    1000, 1023, 2048, 3001, 4096, 5000, 8191})  # 70, 126, 182 (28) and 80, 144 (32): halves
    checked, grown, shrunk = 0, 0, 0
    for factor, limits in ((28, (None, None)), (32, (None, None)), (14, (None, None)), (28, (56 * 56, 28 * 28 * 1280)),
                           (32, (64 * 64, 512 * 512)), (28, (3136, 3136 * 4))):
        for h in sides:
            for w in sides:
                if max(h, w) / min(h, w) > 200:
                    assert refusal(h, w, factor, *limits).startswith("aspect ratio")
                    continue
                want = qwen.smart_resize(h, w, factor=factor, min_pixels=limits[0], max_pixels=limits[1])
                if 0 in want:  # qwen-vl-utils hands back a side of 0 here; we refuse it
                    assert "resizes to nothing" in refusal(h, w, factor, *limits)
                    continue
                assert smart_resize(h, w, factor, *limits) == want, (h, w, factor, limits)
                checked += 1
                grown += want[0] * want[1] > 2 * h * w
                shrunk += want[0] * want[1] < h * w / 2
    assert checked > 6000 and grown > 500 and shrunk > 200  # both the min_pixels and the max_pixels branch
    assert smart_resize(336, 448) == (336, 448)  # the default canvas is left as it is
    with pytest.raises(ValueError, match="exceeds"):
        smart_resize(100, 100, 28, 5000, 4000)


def test_coordinate_conventions_by_hand():
    one = coord_scale(448, 336, "absolute", (448, 336))
    assert point_coords([236.5, 155.5], one) == [237, 156] and point_coords([10.0, 3.0], one) == [10, 3]
    assert box_coords([212, 131, 261, 180], one) == [212, 131, 261, 180]
    assert smart_resize(50, 100) == (56, 112)
    grown = coord_scale(100, 50, "absolute", (112, 56))  # x and y scale 1.12
    assert box_coords([10, 10, 20, 20], grown) == [11, 11, 23, 23]  # 11.2 down, 22.4 up: outward
    assert point_coords([15, 15], grown) == [17, 17]  # 16.8
    assert point_coords([25, 25], grown) == [28, 28]  # exactly 28.0, no float noise
    norm = coord_scale(448, 336, "norm1000", (448, 336))
    assert box_coords([0, 0, 448, 336], norm) == [0, 0, 1000, 1000]
    assert box_coords([1, 1, 3, 3], norm) == [2, 2, 7, 9]  # 2.23, 2.98 down; 6.70, 8.93 up
    assert point_coords([224.0, 168.0], norm) == [500, 500] and point_coords([0.2240, 0.168], norm) == [1, 1]
    assert point_coords([1.12, 0], norm) == [3, 0]  # 2.5 rounds up
    with pytest.raises(ValueError, match="coords"):
        coord_scale(10, 10, "relative", (10, 10))


def test_boxes_and_points_match_the_drawn_pixels(tmp_path):
    out = write_grounding_dataset(tmp_path / "g", 60, seed=3, width=168, height=112, objects=(1, 5),
                                  object_size=(0.1, 0.3), clutter=6, splits="train=1", **QUIET)
    checked = 0
    for row in rows(out, "train"):
        img = image(out, "train", row)
        assert img.shape == (112, 168, 3)
        target, objects = row["target"], row["objects"]
        pairs = [(o["colour"], o["kind"]) for o in objects]
        assert pairs.count((target["colour"], target["kind"])) == 1  # the label names one object
        assert row["label"] == f"{target['colour']} {target['kind']}"
        assert {"kind": target["kind"], "colour": target["colour"], "rgb": target["rgb"], "box": target["box"]} in objects
        for obj in objects:  # an object whose shade no other object has: its pixels are exactly its box
            if sum(o["rgb"] == obj["rgb"] for o in objects) == 1:
                assert pixel_box(img, obj["rgb"]) == obj["box"], (row["index"], obj)
                checked += 1
        x1, y1, x2, y2 = target["box"]
        assert target["point"] == [(x1 + x2) / 2, (y1 + y2) / 2]
        px, py = (math.floor(v) for v in target["point"])
        assert list(img[py, px]) == target["rgb"]  # the point lies on the object
        # the default canvas needs no resize, so absolute answers are the original pixels
        key = "point_2d" if row["task"] == "point" else "bbox_2d"
        expected = [round(v + 1e-9) for v in target["point"]] if row["task"] == "point" else target["box"]
        assert json.loads(row["answer"]) == {key: expected, "label": row["label"]} and row["answer_coords"] == expected
        assert row["position"] == [math.floor(target["point"][0] * 5 / 168), math.floor(target["point"][1] * 5 / 112)]
        assert row["clutter"] == 6 and (row["resized_width"], row["resized_height"]) == (168, 112)
    assert checked > 120
    counts = [len(r["objects"]) for r in rows(out, "train")]
    assert set(counts) == {1, 2, 3, 4, 5}
    assert {r["task"] for r in rows(out, "train")} == {"point", "box"}
    assert len({r["target"]["kind"] for r in rows(out, "train")}) == 4


def test_plain_colours_and_white_background(tmp_path):
    out = write_grounding_dataset(tmp_path / "p", 12, seed=1, width=112, height=112, variation=False,
                                  objects=2, kinds=["square", "circle"], colours=["red", "blue"], task="box",
                                  splits="train=1", **QUIET)
    for row in rows(out, "train"):
        img = image(out, "train", row)
        assert list(img[0, 0]) == [255, 255, 255] or any(o["box"][:2] == [0, 0] for o in row["objects"])
        assert all(o["rgb"] == list(COLOURS[o["colour"]]) for o in row["objects"])
        assert {o["kind"] for o in row["objects"]} <= {"square", "circle"} and row["task"] == "box"
        colours = {tuple(c) for c in img.reshape(-1, 3)}
        assert colours == {(255, 255, 255), *(tuple(o["rgb"]) for o in row["objects"])}  # no anti-aliasing


@pytest.mark.parametrize("width, height", [(100, 70), (448, 336), (30, 200)])
def test_absolute_and_norm1000_answers_of_the_same_images(tmp_path, width, height):
    opts = dict(width=width, height=height, objects=(1, 3), object_size=(0.15, 0.3), grid=3, splits="train=1", **QUIET)
    absolute = write_grounding_dataset(tmp_path / "a", 20, seed=5, coords="absolute", **opts)
    norm = write_grounding_dataset(tmp_path / "n", 20, seed=5, coords="norm1000", **opts)
    rh, rw = smart_resize(height, width)
    assert {k: v for k, v in tree(absolute).items() if k.endswith(".png")} == \
        {k: v for k, v in tree(norm).items() if k.endswith(".png")}  # the convention changes the answers only
    for a, n in zip(rows(absolute, "train"), rows(norm, "train")):
        assert (a["resized_width"], a["resized_height"]) == (rw, rh) and a["target"] == n["target"]
        assert a["coords"] == "absolute" and n["coords"] == "norm1000"
        sx, sy = width / rw, height / rh  # back from the model's pixels to the image's
        if a["task"] == "box":
            x1, y1, x2, y2 = a["answer_coords"]
            back = [x1 * sx, y1 * sy, x2 * sx, y2 * sy]
            img = image(absolute, "train", a)
            ys, xs = np.nonzero(np.all(img == np.array(a["target"]["rgb"], np.uint8), axis=2))
            # the box scaled back covers every pixel of the object, and exceeds it by under one model pixel
            assert back[0] <= xs.min() and back[1] <= ys.min() and xs.max() + 1 <= back[2] and ys.max() + 1 <= back[3]
            t = a["target"]["box"]
            assert t[0] - back[0] < sx and t[1] - back[1] < sy and back[2] - t[2] < sx and back[3] - t[3] < sy
            assert n["answer_coords"] == [math.floor(t[0] * 1000 / width + 1e-9), math.floor(t[1] * 1000 / height + 1e-9),
                                          math.ceil(t[2] * 1000 / width - 1e-9), math.ceil(t[3] * 1000 / height - 1e-9)]
        else:
            x, y = a["target"]["point"]
            assert abs(a["answer_coords"][0] * sx - x) <= sx / 2 and abs(a["answer_coords"][1] * sy - y) <= sy / 2
            assert n["answer_coords"] == [math.floor(x * 1000 / width + 0.5 + 1e-9),
                                          math.floor(y * 1000 / height + 0.5 + 1e-9)]
        assert all(0 <= v <= 1000 for v in n["answer_coords"])


def pixels(path: Path) -> str:
    return hashlib.sha256(np.asarray(Image.open(path).convert("RGB")).tobytes()).hexdigest()


def test_no_image_is_in_two_splits(tmp_path):
    # 28 x 28, one 8 px object, exact colours: about 10,600 possible images, so 800 draws repeat some
    out = write_grounding_dataset(tmp_path / "s", 800, seed=2, width=28, height=28, objects=1, object_size=0.3,
                                  grid=1, variation=False, splits="train=0.5,test=0.5", **QUIET)
    hashes = {split: [pixels(out / split / r["file_name"]) for r in rows(out, split)] for split in ("train", "test")}
    assert not set(hashes["train"]) & set(hashes["test"])
    # the check has teeth: images do repeat within a split, which the split hash allows
    assert len(set(hashes["train"])) < len(hashes["train"]) and len(set(hashes["test"])) < len(hashes["test"])


@pytest.mark.parametrize("grid, fraction, seed", [(5, 0.2, 0), (5, 0.2, 1), (4, 0.25, 7), (8, 0.5, 3)])
def test_unseen_cells_keep_every_column_and_row_in_training(grid, fraction, seed):
    held = unseen_cells(grid, fraction, seed)
    assert len(held) == round(grid * grid * fraction) and len(set(held)) == len(held)
    left = set(gr.grid_cells(grid)) - set(held)
    assert {c for c, _ in left} == set(range(grid)) and {r for _, r in left} == set(range(grid))
    assert unseen_cells(grid, fraction, seed) == held and unseen_cells(grid, fraction, seed + 1) != held


def test_unseen_split_holds_the_held_out_positions_and_only_those(tmp_path):
    out = write_grounding_dataset(tmp_path / "u", 300, seed=4, width=140, height=84, objects=(1, 3),
                                  object_size=(0.15, 0.3), unseen_fraction=0.2, unseen_seed=9, unseen_num=100, **QUIET)
    held = {tuple(c) for c in unseen_cells(5, 0.2, 9)}
    split_rows = {split: rows(out, split) for split in ("train", "test", "test_unseen")}
    assert [len(r) for r in split_rows.values()] == [270, 30, 100]

    def cell(r):  # from the target's point, not the recorded position
        x, y = r["target"]["point"]
        return math.floor(x * 5 / 140), math.floor(y * 5 / 84)

    for split, held_there in (("train", False), ("test", False), ("test_unseen", True)):
        assert all((cell(r) in held) == held_there and tuple(r["position"]) == cell(r) for r in split_rows[split])
    assert {cell(r) for r in split_rows["test_unseen"]} == held  # every held-out cell is used
    assert len({cell(r) for r in split_rows["train"]}) == 25 - len(held)
    assert json.loads((out / "generation.json").read_text())["unseen"] == {
        "fraction": 0.2, "seed": 9, "num": 100, "cells": [list(c) for c in unseen_cells(5, 0.2, 9)]}


def test_cli(tmp_path, monkeypatch, capsys):
    from data_synth.cli import main as data_synth

    monkeypatch.chdir(tmp_path)
    assert data_synth(["grounding", "--num", "20", "--seed", "5", "--out", "ds", "--width", "100", "--height", "60",
                       "--coords", "norm1000", "--task", "point", "--objects", "2-3", "--object-size", "0.2-0.3",
                       "--kinds", "circle,triangle", "--unseen-fraction", "0.2", "--unseen-num", "4",
                       "--no-progress"]) == 0
    assert "wrote 20 grounding images and 4 with held-out positions in test_unseen to ds (norm1000" in \
        capsys.readouterr().out
    for split in ("train", "test", "test_unseen"):
        for row in rows(Path("ds"), split):
            assert row["task"] == "point" and row["coords"] == "norm1000" and 2 <= len(row["objects"]) <= 3
            assert {o["kind"] for o in row["objects"]} <= {"circle", "triangle"}
    for argv, message in ((["--objects", "0-2"], "objects must be in 1..12"),
                          (["--noise", "nan"], "noise must be a number in 0..100"),
                          (["--kinds", "square", "--colours", "red", "--objects", "3"], "distractors need")):
        assert main(["--num", "20", "--out", "bad", "--no-progress", *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith("data-synth grounding: ") and message in err, err
    for argv in (["--width", "20"], ["--objects", "a-b"], ["--coords", "pixels"]):
        with pytest.raises(SystemExit) as e:
            main(["--num", "5", "--out", "bad", *argv])
        assert e.value.code == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith("data-synth grounding: error:"), err
    assert not Path("bad").exists() and not list(Path().glob(".bad*"))
