"""RefCOCO reader on a tiny planted layout (COCO instances.json + refs JSON + PNGs): boxes through smart_resize
(absolute) and 0..1000 (norm1000) against hand-computed cases, the round trip back to original pixels,
path safety, counted skips, errors naming file and ref, and scoring under the grounding metrics."""

import json
import math
import pickle
import random
from fractions import Fraction

import pytest
from PIL import Image

from vlm_smmd.data import DataError
from vlm_smmd.data.refcoco import read_refcoco
from vlm_smmd.data.tasks import TASKS, read

SIZES = {1: (100, 50), 2: (640, 480), 3: (56, 56)}  # image id -> (width, height)


def _image(img_id: int, width: int, height: int, name: str | None = None) -> dict:
    return {"id": img_id, "file_name": name or f"COCO_train2014_{img_id:012d}.png", "width": width, "height": height}


def _ref(ref_id, ann_id, image_id, split, *sents) -> dict:
    return {"ref_id": ref_id, "ann_id": ann_id, "image_id": image_id, "split": split, "category_id": 1,
            "sentences": [{"sent": s, "sent_id": 100 * ref_id + k, "raw": s} for k, s in enumerate(sents)]}


def plant(root, images=None, annotations=None, refs=None, *, png=True, refs_name="refs(unc).json"):
    """Writes root/instances.json, root/refs_name and root/images/*.png; returns root."""
    images = images if images is not None else [_image(i, *wh) for i, wh in SIZES.items()]
    annotations = annotations if annotations is not None else [
        {"id": 11, "image_id": 1, "bbox": [10, 5, 30, 20], "category_id": 1},
        {"id": 12, "image_id": 2, "bbox": [100.5, 40.25, 200.0, 300.75], "category_id": 2},
        {"id": 13, "image_id": 3, "bbox": [0, 0, 56, 56], "category_id": 1}]
    refs = refs if refs is not None else [
        _ref(1, 11, 1, "train", "left dog", "dog on the left"), _ref(2, 12, 2, "train", "red car"),
        _ref(3, 13, 3, "val", "whole thing")]
    (root / "images").mkdir(parents=True, exist_ok=True)
    (root / "instances.json").write_text(json.dumps({
        "images": images, "annotations": annotations,
        "categories": [{"id": 1, "name": "dog"}, {"id": 2, "name": "car"}]}))
    (root / refs_name).write_text(json.dumps(refs))
    if png:
        for image in images:
            path = root / "images" / image["file_name"]
            if ".." not in image["file_name"] and not image["file_name"].startswith("/"):
                Image.new("RGB", (image["width"], image["height"]), (200, 10, 10)).save(path)
    return root


@pytest.fixture
def root(tmp_path):
    return plant(tmp_path / "refcoco")


def test_absolute_boxes_follow_smart_resize(root):
    from qwen_vl_utils import smart_resize

    samples = read_refcoco(root, "train")
    assert [s.id for s in samples] == ["1_0", "1_1", "2_0"] and samples.skipped == 0
    s = samples[0]
    # 100 x 50 rounds to 112 x 56 (multiples of 28): scale 1.12 both ways; box [10, 5, 40, 25] rounds outward
    assert (s.meta["resized_width"], s.meta["resized_height"]) == (112, 56)
    assert smart_resize(50, 100, factor=28, min_pixels=3136, max_pixels=12845056) == (56, 112)
    assert s.meta["target_box"] == s.meta["answer_coords"] == [11, 5, 45, 28]  # 11.2, 5.6, 44.8, 28
    assert s.meta["target_point"] == [28, 17]  # centre (25, 15) * 1.12 = (28, 16.8)
    assert json.loads(s.answer) == {"bbox_2d": [11, 5, 45, 28], "label": "left dog"}
    assert s.question == "Locate the left dog in the image and output its bbox coordinates in JSON format."
    assert s.source == "refcoco" and s.image == str(root / "images" / "COCO_train2014_000000000001.png")
    assert s.meta["target"]["box"] == [10, 5, 40, 25] and s.meta["category"] == "dog"
    assert (s.meta["task"], s.meta["coords"], s.meta["dataset"], s.meta["split"]) == ("box", "absolute", "refcoco",
                                                                                      "train")
    assert all(key in s.meta for key in TASKS["refcoco"].breakdowns)
    # 640 x 480 -> 644 x 476
    car = samples[2]
    assert (car.meta["resized_width"], car.meta["resized_height"]) == (644, 476)
    sx, sy = Fraction(644, 640), Fraction(476, 480)
    x1, y1, x2, y2 = (Fraction(v) for v in (100.5, 40.25, 300.5, 341.0))
    assert car.meta["target_box"] == [math.floor(x1 * sx), math.floor(y1 * sy), math.ceil(x2 * sx), math.ceil(y2 * sy)]


def test_max_pixels_shrinks_the_image_and_the_box(root):
    # 100 x 50 under max_pixels 3136: both sides scaled by sqrt(5000 / 3136) and floored to 28 -> 56 x 28 (0.56)
    s = read_refcoco(root, "train", min_pixels=784, max_pixels=3136)[0]
    assert (s.meta["resized_width"], s.meta["resized_height"]) == (56, 28)
    assert s.meta["target_box"] == [5, 2, 23, 14]  # 5.6, 2.8, 22.4, 14.0
    assert (s.meta["min_pixels"], s.meta["max_pixels"], s.meta["factor"]) == (784, 3136, 28)
    # through the task registry with reader options, as a config's reader_options pass them
    t = read("refcoco", root, "train", min_pixels=784, max_pixels=3136)[0]
    assert t.meta["target_box"] == s.meta["target_box"]


def test_norm1000(root):
    samples = read_refcoco(root, "train", coords="norm1000")
    s = samples[0]
    assert s.meta["target_box"] == [100, 100, 400, 500] and s.meta["target_point"] == [250, 300]
    assert "resized_width" not in s.meta and s.meta["coords"] == "norm1000"
    # car: [100.5, 40.25, 300.5, 341.0] on 640 x 480 -> 157.03, 83.85, 469.53, 710.42 rounded outward
    assert samples[2].meta["target_box"] == [157, 83, 470, 711]


@pytest.mark.parametrize("size, options", [((640, 480), {}), ((333, 517), {}), ((1000, 40), {}),
                                           ((1280, 960), {"min_pixels": 200704, "max_pixels": 1003520}),
                                           ((90, 70), {"min_pixels": 200704, "max_pixels": 1003520})])
def test_absolute_box_round_trips_within_one_resized_pixel(tmp_path, size, options):
    rng = random.Random(0)
    width, height = size
    annotations, refs = [], []
    for k in range(20):
        x, y = rng.uniform(0, width - 2), rng.uniform(0, height - 2)
        w, h = rng.uniform(0.5, width - x), rng.uniform(0.5, height - y)
        annotations.append({"id": k, "image_id": 1, "bbox": [x, y, w, h], "category_id": 1})
        refs.append(_ref(k, k, 1, "train", f"thing {k}"))
    root = plant(tmp_path / "r", [_image(1, width, height)], annotations, refs)
    samples = read_refcoco(root, "train", **options)
    assert len(samples) == 20
    from qwen_vl_utils import smart_resize  # what the collator resizes with

    limits = {"min_pixels": options.get("min_pixels", 3136), "max_pixels": options.get("max_pixels", 12845056)}
    assert smart_resize(height, width, factor=28, **limits) == (samples[0].meta["resized_height"],
                                                                 samples[0].meta["resized_width"])
    for s in samples:
        rw, rh = s.meta["resized_width"], s.meta["resized_height"]
        assert (rw, rh) != (width, height) or size == (1000, 40)  # the image really is resized
        x1, y1, x2, y2 = s.meta["target"]["box"]
        back = [v * width / rw if i % 2 == 0 else v * height / rh for i, v in enumerate(s.meta["target_box"])]
        px, py = width / rw, height / rh  # one resized pixel in original pixels
        assert all(abs(b - o) <= p + 1e-9 for b, o, p in zip(back, (x1, y1, x2, y2), (px, py, px, py)))
        assert back[0] <= x1 and back[1] <= y1 and back[2] >= x2 and back[3] >= y2  # rounded outward: covers
        assert 0 <= s.meta["target_box"][0] and s.meta["target_box"][2] <= rw and s.meta["target_box"][3] <= rh


def test_overshoot_up_to_one_pixel_is_clipped_and_more_refused(tmp_path):
    annotations = [{"id": 1, "image_id": 1, "bbox": [-0.5, 10, 100.9, 40.5]},  # 100.4 x 50.5 on 100 x 50
                   {"id": 2, "image_id": 1, "bbox": [10, 10, 92, 10]}]  # ends at 102
    root = plant(tmp_path / "r", [_image(1, 100, 50)], annotations,
                 [_ref(1, 1, 1, "train", "edge"), _ref(2, 2, 1, "train", "beyond")])
    with pytest.warns(UserWarning, match="skipped 1 records"):
        samples = read_refcoco(root, "train", on_error="skip", coords="norm1000")
    assert [s.id for s in samples] == ["1_0"]
    assert samples[0].meta["target"]["box"] == [0, 10, 100, 50] and samples[0].meta["target_box"] == [0, 200, 1000, 1000]
    assert "lies outside the 100x50 image" in samples.skip_log.examples[0]


def test_one_sample_per_ref_and_splits(root):
    assert [s.id for s in read_refcoco(root, "train", sentences="first")] == ["1_0", "2_0"]
    assert [s.meta["label"] for s in read_refcoco(root, "val")] == ["whole thing"]
    with pytest.raises(DataError, match=r"no refs of split 'test'.*splits found: train, val"):
        read_refcoco(root, "test")
    with pytest.raises(ValueError, match="coords must be one of"):
        read_refcoco(root, "train", coords="pixels")


@pytest.mark.parametrize("name", ["../outside.png", "/etc/hostname", "sub/../../outside.png"])
def test_image_path_leaving_the_image_folder_is_refused(tmp_path, name):
    (tmp_path / "outside.png").write_bytes(b"")
    root = plant(tmp_path / "refcoco", [_image(1, 100, 50, name)], [{"id": 11, "image_id": 1, "bbox": [1, 1, 5, 5]}],
                 [_ref(1, 11, 1, "train", "a")])
    with pytest.raises(DataError, match=r"leaves the dataset root.*ref_id 1"):
        read_refcoco(root, "train")
    with pytest.warns(UserWarning, match="skipped 1 records"):
        samples = read_refcoco(root, "train", on_error="skip")
    assert len(samples) == 0 and samples.skip_log.counts == {"leaves the dataset root": 1}


def bad_root(tmp_path):
    images = [_image(1, 100, 50), _image(2, 100, 50, "gone.png"), _image(3, 100, 50, "wrong_size.png")]
    annotations = [{"id": 11, "image_id": 1, "bbox": [10, 5, 30, 20]}, {"id": 12, "image_id": 2, "bbox": [1, 1, 5, 5]},
                   {"id": 13, "image_id": 1, "bbox": [10, 5, 0, 20]}, {"id": 14, "image_id": 1, "bbox": [10, 5, 5, -1]},
                   {"id": 15, "image_id": 3, "bbox": [1, 1, 5, 5]}]
    refs = [_ref(1, 11, 1, "train", "good"), _ref(2, 12, 2, "train", "no image", "still no image"),
            _ref(3, 13, 1, "train", "flat"), _ref(4, 14, 1, "train", "negative"),
            _ref(5, 99, 1, "train", "no annotation"), _ref(6, 11, 1, "train", "fine", "  "),
            _ref(7, 15, 3, "train", "wrong size")]
    root = plant(tmp_path / "refcoco", images, annotations, refs)
    (root / "images" / "gone.png").unlink()
    Image.new("RGB", (60, 50)).save(root / "images" / "wrong_size.png")
    return root


def test_bad_refs_are_skipped_and_counted_once(tmp_path):
    root = bad_root(tmp_path)
    with pytest.warns(UserWarning, match="refcoco: skipped 6 records"):
        samples = read_refcoco(root, "train", on_error="skip")
    assert [s.id for s in samples] == ["1_0", "6_0"]
    # a ref with two sentences and a missing image counts once; the blank sentence of ref 6 once
    assert samples.skip_log.counts == {"image missing": 1, "malformed record": 5}
    assert samples.skipped == 6


@pytest.mark.parametrize("ref_id, match", [
    (2, r"gone\.png: image missing \(record '.*refs\(unc\)\.json: ref 1 \(ref_id 2\)'"),
    (3, r"refs\(unc\)\.json: ref 1 \(ref_id 3\): malformed record \(annotation 13: degenerate box"),
    (4, r"ref_id 4\): malformed record \(annotation 14: degenerate box"),
    (5, r"refs\(unc\)\.json: ref 1 \(ref_id 5\): malformed record \(annotation 99 is not in instances\.json\)"),
    (6, r"ref_id 6\): malformed record \(sentence 1: 'sent' missing or blank\)"),
    (7, r"ref_id 7\): malformed record \(image .*wrong_size\.png is 60x50, instances\.json says 100x50\)"),
])
def test_raise_names_the_file_and_the_ref(tmp_path, ref_id, match):
    root = bad_root(tmp_path)
    refs = json.loads((root / "refs(unc).json").read_text())
    (root / "refs(unc).json").write_text(json.dumps([r for r in refs if r["ref_id"] in (1, ref_id)]))  # the bad ref is ref 1
    with pytest.raises(DataError, match=match) as info:
        read_refcoco(root, "train")
    assert "\n" not in str(info.value)


def test_missing_files_and_pickles(tmp_path):
    with pytest.raises(DataError, match=r"instances\.json: no such file"):
        read_refcoco(tmp_path, "train")
    root = plant(tmp_path / "refcoco")
    refs = json.loads((root / "refs(unc).json").read_text())
    (root / "refs(unc).json").unlink()
    with (root / "refs(unc).p").open("wb") as f:
        pickle.dump(refs, f)
    with pytest.raises(DataError, match=r"refs\(unc\)\.p: a pickle; convert it to JSON.*allow_pickle=True"):
        read_refcoco(root, "train")
    assert len(read_refcoco(root, "train", allow_pickle=True)) == 3  # opted in: a file the user trusts
    (root / "refs(umd).json").write_text(json.dumps(refs))
    (root / "refs(google).json").write_text(json.dumps(refs))
    with pytest.raises(DataError, match=r"several refs files.*name one with refs="):
        read_refcoco(root, "train")
    assert len(read_refcoco(root, "train", refs="refs(umd).json")) == 3
    with pytest.raises(DataError, match=r"train2014: no such image folder"):
        read_refcoco(root, "train", refs="refs(umd).json", image_dir="train2014")


def test_targets_score_one_under_the_grounding_metrics(root):
    from vlm_smmd.analysis import analyze_records
    from vlm_smmd.evaluation import _record, summarize

    samples = [*read_refcoco(root, "train"), *read_refcoco(root, "train", coords="norm1000")]
    records = [_record(s, s.answer) for s in samples]
    assert all(r["scores"]["iou"] == 1.0 and r["scores"]["no_valid_answer"] == 0.0 for r in records)
    m = summarize(records)["sources"]["refcoco"]["train"]
    assert m["iou"] == 1.0 and m["iou_at_0.5"] == 1.0 and m["count"] == 6
    assert set(m["by"]["category"]) == {"dog", "car"} and m["by"]["dataset"]["refcoco"]["count"] == 6
    g = analyze_records(json.loads(json.dumps(records)), chance=False)["grounding"]
    assert g["box_records"] == 6 and g["iou_mean"] == 1.0


def test_only_the_box_numbers_are_numeric_targets(tmp_path):
    # an expression with digits: the aux loss must see the four coordinates, not "2" of "2nd" or of bbox_2d
    root = plant(tmp_path / "r", refs=[_ref(1, 11, 1, "train", "guy 2nd from left")])
    (s,) = read_refcoco(root, "train")
    assert [s.answer[a:b] for a, b in s.numeric_spans] == ["11", "5", "45", "28"]
