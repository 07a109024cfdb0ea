"""read_itsabouttime on small CSVs in the published layout: crop geometry, hour 12, missing images, each
malformed row, and an end-to-end `vlm-smmd eval` with the tiny preset on rendered clocks."""

import csv
import io
import json

import numpy as np
import pytest
from PIL import Image

from vlm_smmd.data import DataError, read_itsabouttime
from vlm_smmd.data.itsabouttime import coverage_line, crop_box
from vlm_smmd.evaluation import score_prediction

HEADER = "img_id,file_name,bbox_gt,hour,minute,bbox_det\n"


def csv_row(img_id, file_name, hour, minute, det, gt=None):
    """One data line as the published files quote it (csv's minimal quoting)."""
    line = io.StringIO()
    gt = gt if gt is not None else [det]
    csv.writer(line, lineterminator="\n").writerow([img_id, file_name, json.dumps(gt), hour, minute, json.dumps(det)])
    return line.getvalue()


def coordinate_image(width, height):
    """Pixel (x, y) holds (x, y, 7): a crop's position can be read back from its pixels."""
    arr = np.zeros((height, width, 3), dtype=np.uint8)
    arr[..., 0] = np.arange(width)[None, :]
    arr[..., 1] = np.arange(height)[:, None]
    arr[..., 2] = 7
    return Image.fromarray(arr)


def write_set(root, rows, name="coco_final.csv", images=(), header=HEADER, size=(200, 160), folder=""):
    root.mkdir(parents=True, exist_ok=True)
    (root / name).write_text(header + "".join(rows), encoding="utf-8")
    for image in images:
        path = root / folder / image
        path.parent.mkdir(parents=True, exist_ok=True)
        coordinate_image(*size).save(path)
    return root


# ------------------------------------------------------------------------------------------ geometry

@pytest.mark.parametrize("box, size, expected", [
    # left = int(10 - 0.2*30) = 4, right = int(min(100, 40 + 0.2*50)) = 50, top = int(20 - 6) = 14,
    # bottom = int(min(80, 70 + 10)) = 80; side max(66, 46) // 2 = 33 about (27, 47) -> clipped
    ([10, 20, 30, 50], (100, 80), (0, 14, 60, 80)),
    # left 36, right int(60 + 2) = 62, top 36, bottom int(50 + 2) = 52; half 13 about (49, 44)
    ([40, 40, 20, 10], (200, 200), (36, 31, 62, 57)),
    # fractional box: left int(5.5 - 2.1) = 3, right int(16 + 2.4) = 18, top int(7.25 - 2.1) = 5,
    # bottom int(19.25 + 2.4) = 21; half max(16, 15) // 2 = 8 about (10, 13)
    ([5.5, 7.25, 10.5, 12.0], (64, 64), (2, 5, 18, 21)),
])
def test_crop_box_matches_a_hand_computation(box, size, expected):
    assert crop_box(box, *size) == expected


def test_loaded_image_is_that_crop_of_the_photo(tmp_path):
    root = write_set(tmp_path, [csv_row(1, "a.png", 3, 7, [40, 40, 20, 10])], images=["a.png"], size=(200, 200))
    (sample,) = read_itsabouttime(root)
    crop = np.asarray(sample.load_image())
    assert crop.shape == (57 - 31, 62 - 36, 3)
    assert (crop[0, 0, 0], crop[0, 0, 1]) == (36, 31) and (crop[-1, -1, 0], crop[-1, -1, 1]) == (61, 56)


def test_gt_option_takes_the_first_gt_box(tmp_path):
    row = csv_row(5, "a.png", 3, 7, det=[0, 0, 10, 10], gt=[[40, 40, 20, 10], [1, 1, 5, 5]])
    root = write_set(tmp_path, [row], images=["a.png"], size=(200, 200))
    (sample,) = read_itsabouttime(root, box="gt")
    assert sample.box == (40, 40, 20, 10) and sample.load_image().size == (26, 26)
    assert read_itsabouttime(root)[0].box == (0, 0, 10, 10)


# ---------------------------------------------------------------------------------------- the records

def test_rows_answers_hour_twelve_and_subsets(tmp_path):
    root = write_set(tmp_path, [csv_row(64, "a.png", 12, 50, [10, 10, 50, 50]),
                                csv_row(78, "b.png", 8, 0, [10, 10, 50, 50])], images=["a.png"])
    movies = '0,"My ""Film"" 3.07 p.m.png",3,7,"[10, 10, 50, 50]"\n'
    write_set(root, [movies], name="movies_final.csv", header="img_id,file_name,hour,minute,bbox_det\n",
              images=['My "Film" 3.07 p.m.png'], folder="images")
    (root / "b.png").unlink(missing_ok=True)
    samples = read_itsabouttime(root)
    assert [s.answer for s in samples] == ["12:50", "3:07"]
    assert [s.meta["subset"] for s in samples] == ["coco", "movies"]
    assert samples[0].meta["hour"] == 0 and samples[0].meta["minute"] == 50  # hour 12 as 0, as published
    assert samples[0].source == "itsabouttime" and samples[0].id == "coco/64"
    assert samples[1].image.endswith('images/My "Film" 3.07 p.m.png')  # found under DIR/images
    # 12 and 0 are the same hour on the dial; 11:59 is within a minute of 12:00 (published top_1)
    assert score_prediction("0:50", [samples[0].answer], "itsabouttime")["time_exact"] == 1.0
    assert score_prediction("12:51", ["12:50"], "itsabouttime")["within_1_min"] == 1.0
    cov = samples.coverage
    assert (cov["rows"], cov["present"], cov["missing"], cov["missing_examples"]) == (3, 2, 1, ["b.png"])
    assert coverage_line(cov).startswith("2 of 3 rows present; 1 images missing (e.g. b.png)")


def test_missing_images_are_counted_and_named_not_raised(tmp_path):
    rows = [csv_row(i, f"{i}.png", 3, 7, [1, 1, 5, 5]) for i in range(8)]
    root = write_set(tmp_path, rows, images=["3.png"])
    samples = read_itsabouttime(root)  # on_error="raise": a missing image is no error
    assert len(samples) == 1 and samples.coverage["missing"] == 7
    assert samples.coverage["missing_examples"] == ["0.png", "1.png", "2.png", "4.png", "5.png"]


@pytest.mark.parametrize("row, reason", [
    (csv_row(1, "a.png", 3, 7, [1, 2, 3]), "bbox_det \\[1, 2, 3\\] is not four numbers"),
    ('1,a.png,"[]",3,7,"[1, 2, 3, x]"\n', "bbox_det .* is not a JSON list"),
    (csv_row(1, "a.png", 3, 7, [1, 2, "3", 4]), "is not four numbers"),
    (csv_row(1, "a.png", 3, 7, [1, 2, 0, 4]), "non-positive width or height"),
    (csv_row(1, "a.png", 3, 7, [1, 2, 4, -1]), "non-positive width or height"),
    (csv_row(1, "a.png", 0, 7, [1, 2, 3, 4]), "hour 0 is outside 1..12"),
    (csv_row(1, "a.png", 13, 7, [1, 2, 3, 4]), "hour 13 is outside 1..12"),
    (csv_row(1, "a.png", 3, 60, [1, 2, 3, 4]), "minute 60 is outside 0..59"),
    (csv_row(1, "a.png", "three", 7, [1, 2, 3, 4]), "hour 'three' is not an integer"),
    (csv_row(1, " ", 3, 7, [1, 2, 3, 4]), "blank file_name"),
    (csv_row(1, "../a.png", 3, 7, [1, 2, 3, 4]), "leaves the dataset root"),
])
def test_each_malformed_row_names_file_and_line_or_is_skipped(tmp_path, row, reason):
    good = csv_row(9, "ok.png", 3, 7, [1, 1, 20, 20])
    root = write_set(tmp_path / "set", [good, row, good], images=["ok.png"])
    with pytest.raises(DataError, match=reason) as err:
        read_itsabouttime(root)
    assert f"{root / 'coco_final.csv'}:3" in str(err.value)  # file and line
    with pytest.warns(UserWarning, match="skipped 1 records"):
        samples = read_itsabouttime(root, on_error="skip")
    assert len(samples) == 2 and samples.skipped == 1
    assert samples.coverage["rows"] == 3 and "1 malformed rows skipped" in coverage_line(samples.coverage)


def test_layout_errors(tmp_path):
    with pytest.raises(DataError, match="holds none of coco_final.csv"):
        read_itsabouttime(tmp_path)
    root = write_set(tmp_path / "a", [csv_row(1, "a.png", 3, 7, [1, 1, 5, 5])], images=["a.png"])
    with pytest.raises(DataError, match="only the 'test' split"):
        read_itsabouttime(root, "train")
    write_set(tmp_path / "b", ['1,a.png,3,7\n'], header="img_id,file_name,hour,minute\n")
    with pytest.raises(DataError, match=r"coco_final.csv: not an It's About Time CSV: missing columns \['bbox_det'\]"):
        read_itsabouttime(tmp_path / "b")
    movies = write_set(tmp_path / "c", ['0,m.png,3,7,"[1, 1, 5, 5]"\n'], name="movies_final.csv",
                       header="img_id,file_name,hour,minute,bbox_det\n", images=["m.png"])
    with pytest.raises(DataError, match="box='gt' needs bbox_gt"):
        read_itsabouttime(movies, box="gt")
    with pytest.raises(ValueError, match="box must be one of det, gt"):
        read_itsabouttime(movies, box="first")


def test_box_outside_the_photo_fails_at_load_naming_the_record(tmp_path):
    root = write_set(tmp_path, [csv_row(1, "a.png", 3, 7, [500, 500, 10, 10])], images=["a.png"])
    (sample,) = read_itsabouttime(root)
    with pytest.raises(DataError, match="lies outside the 200x160 image.*coco/1"):
        sample.load_image()


# ------------------------------------------------------------------------------------------ end to end

@pytest.mark.slow
def test_eval_end_to_end_on_rendered_clocks(tmp_path, capsys):
    """Three rows; rendered clocks pasted into larger 'photos' at their boxes; one image left out."""
    from data_synth.clocks import render_clock
    from vlm_smmd.cli import main as cli

    root = tmp_path / "iat"
    root.mkdir()
    rows = []
    for i, (hour, minute, box) in enumerate([(12, 5, [20, 30, 64, 64]), (3, 40, [50, 10, 70, 60]),
                                             (9, 59, [0, 0, 40, 40])]):
        rows.append(csv_row(100 + i, f"{i:012d}.jpg", hour, minute, box))
        if i < 2:
            photo = Image.new("RGB", (160, 120), (90, 120, 90))
            photo.paste(render_clock(hour % 12, minute, size=64, seed=i), (box[0], box[1]))
            (root / "images").mkdir(exist_ok=True)
            photo.save(root / "images" / f"{i:012d}.jpg")
    (root / "coco_final.csv").write_text(HEADER + "".join(rows))
    out = tmp_path / "eval"
    assert cli(["eval", "--model", "tiny", "--data", f"itsabouttime:{root}", "--out", str(out),
                "--max-new-tokens", "3", "--batch-size", "2"]) == 0
    printed = capsys.readouterr().out
    assert "itsabouttime: 2 of 3 rows present; 1 images missing (e.g. 000000000002.jpg)" in printed
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["coverage"]["itsabouttime"]["present"] == 2 and metrics["coverage"]["itsabouttime"]["rows"] == 3
    test = metrics["sources"]["itsabouttime"]["test"]
    assert test["count"] == 2 and "within_1_min" in test and "minute_within_1" in test
    records = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert [r["target"] for r in records] == ["12:05", "3:40"]
    assert [r["meta"]["subset"] for r in records] == ["coco", "coco"]


def test_export_says_how_many_rows_are_present(tmp_path, capsys):
    """A harness task built from part of a published set says so, as eval does: its figures cover n of N rows."""
    from vlm_smmd.cli import main as cli

    rows = [csv_row(i, f"{i:012d}.jpg", 3, 20, [20, 20, 100, 100]) for i in range(3)]
    root = write_set(tmp_path / "iat", rows, images=[f"{i:012d}.jpg" for i in range(2)])
    assert cli(["export", "lmms-eval", "--data", f"itsabouttime:{root}", "--out", str(tmp_path / "task")]) == 0
    out = capsys.readouterr().out
    assert "2 records" in out and "instruction none" in out
    assert "itsabouttime: 2 of 3 rows present; 1 images missing (e.g. 000000000002.jpg)" in out
    marker = json.loads((tmp_path / "task" / "vlm_smmd_export.json").read_text())
    assert marker["coverage"]["present"] == 2 and marker["coverage"]["rows"] == 3
