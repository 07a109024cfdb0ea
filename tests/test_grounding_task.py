"""Grounding as a task: parsing points and boxes, IoU and the per-answer scores against hand-computed cases,
the aggregate figures (eval metrics, analysis with chance, report) on planted predictions, and the reader on
datasets written by `data-synth grounding`."""

import json
import math
import os

import numpy as np
import pytest

from vlm_smmd.analysis import analyze_records, headline, record_kind, write_report
from vlm_smmd.cli import main as cli
from vlm_smmd.data import DataError
from vlm_smmd.data.tasks import TASKS, read
from vlm_smmd.evaluation import extract_answer, format_metrics_table, score_prediction, summarize
from vlm_smmd.metrics import (
    box_iou,
    corner_error,
    grounding_answer,
    grounding_scores,
    parse_grounding,
    point_in_box,
)

# ---------------------------------------------------------------------------------------------------------
# Parsing


@pytest.mark.parametrize("text, task, expected", [
    ('{"bbox_2d": [1, 2, 3, 4], "label": "red circle"}', "box", (1, 2, 3, 4)),
    ('  {"bbox_2d": [1.5, 2, 3, 4.25]}\n', "box", (1.5, 2, 3, 4.25)),
    ('[{"bbox_2d": [10, 20, 30, 40], "label": "red circle"}]', "box", (10, 20, 30, 40)),
    ('```json\n[\n\t{"bbox_2d": [10, 20, 30, 40], "label": "red circle"}\n]\n```', "box", (10, 20, 30, 40)),
    ('The red circle is at {"bbox_2d": [10, 20, 30, 40]}.', "box", (10, 20, 30, 40)),
    ('{"point_2d": [12, 7], "label": "blue square"}', "point", (12, 7)),
    ('[{"point_2d": [12, 7]}]', "point", (12, 7)),
    ("[1, 2, 3, 4]", "box", (1, 2, 3, 4)),
    ("[5, 6]", "point", (5, 6)),
    ("(10,20),(30,40)", "box", (10, 20, 30, 40)),
    ("red circle(10, 20), (30, 40)", "box", (10, 20, 30, 40)),
    ("<|object_ref_start|>red circle<|object_ref_end|><|box_start|>(10,20),(30,40)<|box_end|>", "box",
     (10, 20, 30, 40)),
    ("(5,6)", "point", (5, 6)),
    ("[3, 3, 3, 3]", "box", (3, 3, 3, 3)),  # a box without area is still a box
])
def test_parse_accepts_the_families_formats(text, task, expected):
    assert parse_grounding(text, task) == tuple(float(v) for v in expected)


@pytest.mark.parametrize("text, task", [
    ('{"bbox_2d": [1, 2, 3, 4]', "box"),  # truncated: closing brace missing
    ('{"bbox_2d": [1, 2, 3', "box"),
    ('{"bbox_2d": [1, 2, 3, 4], "label": "red', "box"),
    ('[{"bbox_2d": [1, 2, 3, 4]}, {"bbox_2d": [5, 6', "box"),
    ("(10,20),(30,", "box"),
    ("(10,20),(30,", "point"),
    ('{"bbox_2d": [1, 2, 3]}', "box"),  # wrong number of coordinates
    ('{"bbox_2d": [1, 2, 3, 4, 5]}', "box"),
    ('{"point_2d": [1, 2]}', "box"),  # the other task's key
    ('{"bbox_2d": [1, 2, 3, 4]}', "point"),
    ('{"bbox_2d": ["1", 2, 3, 4]}', "box"),  # strings and booleans are no numbers
    ('{"bbox_2d": [true, 2, 3, 4]}', "box"),
    ('{"bbox_2d": [NaN, 2, 3, 4]}', "box"),
    ('[{"bbox_2d": [1, 2, 3, 4]}, {"bbox_2d": [5, 6, 7, 8]}]', "box"),  # two objects: which one?
    ("[5, 6]", "box"),
    ("[1, 2, 3, 4]", "point"),
    ('{"bbox_2d": [30, 2, 10, 4]}', "box"),  # x2 < x1
    ('{"bbox_2d": [1, 40, 3, 4]}', "box"),  # y2 < y1
    ("[10, 20, 5, 30]", "box"),
    ("(30,40),(10,20)", "box"),
    ("", "box"),
    ("I cannot find it.", "point"),
    ("12", "point"),
    ("(1,2) and (3,4) and (5,6)", "point"),
])
def test_parse_refuses_malformed_partial_and_swapped_answers(text, task):
    assert parse_grounding(text, task) is None


def test_parse_rejects_an_unknown_task_and_reads_the_target_kind():
    with pytest.raises(ValueError, match="task"):
        parse_grounding("[1, 2]", "polygon")
    assert grounding_answer('{"point_2d": [4, 5], "label": "x"}') == ("point", (4.0, 5.0))
    assert grounding_answer('{"bbox_2d": [1, 2, 3, 4], "label": "x"}') == ("box", (1.0, 2.0, 3.0, 4.0))
    assert grounding_answer("[1, 2, 3, 4]") is None  # a bare list does not say what it is
    assert grounding_answer("12") is None and grounding_answer("3:07") is None


# ---------------------------------------------------------------------------------------------------------
# IoU, errors, per-answer scores


@pytest.mark.parametrize("a, b, iou", [
    ((0, 0, 10, 10), (0, 0, 10, 10), 1.0),
    ((0, 0, 10, 10), (5, 5, 15, 15), 25 / 175),
    ((0, 0, 10, 10), (0, 0, 5, 10), 0.5),
    ((0, 0, 10, 10), (2, 2, 4, 4), 4 / 100),
    ((0, 0, 10, 10), (10, 0, 20, 10), 0.0),  # touching edges share no area
    ((0, 0, 10, 10), (20, 20, 30, 30), 0.0),
    ((0, 0, 4, 2), (2, 0, 6, 2), 4 / 12),
    ((3, 3, 3, 3), (3, 3, 3, 3), 1.0),  # two equal boxes without area
    ((3, 3, 3, 3), (4, 4, 4, 4), 0.0),
])
def test_iou_against_hand_computed_cases(a, b, iou):
    assert box_iou(a, b) == pytest.approx(iou)
    assert box_iou(b, a) == pytest.approx(iou)


def test_corner_error_and_point_in_box():
    assert corner_error((0, 0, 10, 10), (3, 4, 10, 10)) == pytest.approx(2.5)
    assert corner_error((0, 0, 10, 10), (5, 5, 15, 15)) == pytest.approx(5 * math.sqrt(2))
    assert point_in_box((0, 10), (0, 0, 10, 10)) and point_in_box((5, 5), (0, 0, 10, 10))
    assert not point_in_box((10.5, 5), (0, 0, 10, 10)) and not point_in_box((5, -1), (0, 0, 10, 10))


def test_grounding_scores_of_one_answer():
    box = '{"bbox_2d": [0, 0, 10, 10], "label": "red circle"}'
    assert grounding_scores('{"bbox_2d": [5, 5, 15, 15]}', box) == pytest.approx(
        {"no_valid_answer": 0.0, "iou": 1 / 7, "iou_at_0.5": 0.0, "corner_error_px": 5 * math.sqrt(2)})
    assert grounding_scores("[0, 0, 10, 9]", box)["iou_at_0.5"] == 1.0
    assert grounding_scores('{"bbox_2d": [0, 0, 10', box) == {
        "no_valid_answer": 1.0, "iou": 0.0, "iou_at_0.5": 0.0, "corner_error_px": None}
    point = '{"point_2d": [5, 5], "label": "red circle"}'
    assert grounding_scores("[6, 8]", point, target_box=[0, 0, 10, 10]) == pytest.approx(
        {"no_valid_answer": 0.0, "point_in_box": 1.0, "centre_error_px": math.sqrt(10)})
    assert grounding_scores("[6, 8]", point)["point_in_box"] is None  # no box to fall in
    assert grounding_scores("nothing", point, target_box=[0, 0, 10, 10]) == {
        "no_valid_answer": 1.0, "point_in_box": 0.0, "centre_error_px": None}
    # the reader's meta wins over the text: task and geometry in the answer's coordinates
    assert grounding_scores("[1, 1]", "ignored", task="point", target_point=[1, 1], target_box=[0, 0, 2, 2]) == {
        "no_valid_answer": 0.0, "point_in_box": 1.0, "centre_error_px": 0.0}
    with pytest.raises(ValueError, match="no point_2d or bbox_2d"):
        grounding_scores("[1, 1]", "a red circle")


# ---------------------------------------------------------------------------------------------------------
# Aggregates on planted predictions

BOX_A, BOX_C = [0, 0, 10, 10], [20, 20, 30, 30]
# (id, task, target box, target point, prediction)
PLANTED = [
    ("a", "box", BOX_A, [5, 5], '{"bbox_2d": [0, 0, 10, 10], "label": "red circle"}'),  # IoU 1, corners 0
    ("b", "box", BOX_A, [5, 5], "[5, 5, 15, 15]"),  # IoU 1/7, corners 5 sqrt 2
    ("c", "box", BOX_C, [25, 25], "I do not know"),  # no valid answer
    ("d", "point", BOX_A, [5, 5], '{"point_2d": [6, 8]}'),  # inside, distance sqrt 10
    ("e", "point", BOX_C, [25, 25], '{"point_2d": [40, 25]}'),  # outside, distance 15
    ("f", "point", BOX_C, [25, 25], '{"point_2d": [25'),  # truncated: no valid answer
]


def planted_records():
    records = []
    for rid, task, box, point, raw in PLANTED:
        answer = json.dumps({"bbox_2d" if task == "box" else "point_2d": box if task == "box" else point,
                             "label": "red circle"})
        meta = {"task": task, "coords": "absolute", "target_box": box, "target_point": point, "split": "test"}
        prediction = extract_answer(raw, "grounding")
        records.append({"id": rid, "source": "grounding", "split": "test", "question": "Where?", "target": answer,
                        "targets": [answer], "prediction": prediction, "raw_output": raw, "meta": meta,
                        "scores": score_prediction(prediction, [answer], "grounding", meta)})
    return records


def test_extract_answer_keeps_the_whole_json():
    text = '```json\n[\n  {"bbox_2d": [1, 2, 3, 4], "label": "x"}\n]\n```\n'
    assert extract_answer(text, "grounding") == text.strip()


def test_eval_metrics_of_planted_predictions():
    metrics = summarize(planted_records())
    m = metrics["sources"]["grounding"]["test"]
    assert m["count"] == 6 and m["no_valid_answer"] == pytest.approx(2 / 6)
    assert m["iou"] == pytest.approx((1 + 1 / 7 + 0) / 3) and m["iou_at_0.5"] == pytest.approx(1 / 3)
    assert m["mean_corner_error_px"] == pytest.approx(5 * math.sqrt(2) / 2) and m["corner_error_px_n"] == 2
    assert m["point_in_box"] == pytest.approx(1 / 3)
    assert m["mean_centre_error_px"] == pytest.approx((math.sqrt(10) + 15) / 2) and m["centre_error_px_n"] == 2
    assert m["by"]["task"]["box"]["count"] == 3 and "point_in_box" not in m["by"]["task"]["box"]
    assert m["by"]["coords"]["absolute"]["count"] == 6
    table = format_metrics_table(metrics)
    assert "IoU" in table and "in box" in table and "no answer" in table


def test_analysis_of_planted_predictions_with_chance(tmp_path):
    records = planted_records()
    a = analyze_records(records)
    assert a["kinds"]["grounding"] == 6 and sum(a["kinds"].values()) == 6
    g = a["grounding"]
    assert (g["records"], g["box_records"], g["point_records"]) == (6, 3, 3)
    assert g["no_valid_answer"] == 2 and (g["no_valid_box"], g["no_valid_point"]) == (1, 1)
    assert g["iou_mean"] == pytest.approx((1 + 1 / 7) / 3) and g["iou_at_threshold"] == 1
    assert g["corner_error"] == pytest.approx({"analysed": 2, "mean": 5 * math.sqrt(2) / 2,
                                               "median": 5 * math.sqrt(2) / 2})
    assert (g["point_in_box"], g["point_in_box_records"]) == (1, 3)
    assert g["centre_error"]["mean"] == pytest.approx((math.sqrt(10) + 15) / 2)
    # chance, by hand: boxes a, b (equal) and c; points d and e, f (equal): each target against another's answer
    ch = g["chance"]
    assert ch["iou_mean"] == pytest.approx(2 / 6) and ch["iou_at_threshold_rate"] == pytest.approx(2 / 6)
    assert ch["corner_error_mean"] == pytest.approx(4 * 20 * math.sqrt(2) / 6)
    assert ch["point_in_box_rate"] == pytest.approx(2 / 6)
    assert ch["centre_error_mean"] == pytest.approx(4 * 20 * math.sqrt(2) / 6)
    assert ch["no_valid_answer_rate"] == 0.0 and "exact" in ch["method"]

    figs = {f.key: f for f in headline(a)}
    assert figs["iou"].n == 3 and figs["iou"].chance == pytest.approx(1 / 3)
    assert (figs["iou_at_0.5"].count, figs["iou_at_0.5"].n) == (1, 3)
    assert (figs["corner_error"].n, figs["corner_error"].total) == (2, 3) and figs["corner_error"].lower_is_better
    assert (figs["point_in_box"].count, figs["point_in_box"].n) == (1, 3)
    assert figs["centre_error"].chance == pytest.approx(40 * math.sqrt(2) / 3)
    assert (figs["no_valid_answer_rate"].count, figs["no_valid_answer_rate"].n) == (2, 6)

    report = write_report({"run": a}, tmp_path).read_text()
    assert "## Points and boxes" in report
    assert "| point in box | 1/3 (0.333) | 0.333 (best constant 0.667 at [20, 20]) |" in report
    assert "mean IoU (no valid box = 0)" in report

    # without the reader's meta the target text still says task and geometry; a point has no box then
    bare = [{k: v for k, v in r.items() if k != "meta"} for r in records]
    b = analyze_records(bare, chance=False)
    assert b["grounding"]["iou_mean"] == pytest.approx(g["iou_mean"]) and b["grounding"]["point_in_box_records"] == 0
    assert "point_in_box" not in {f.key for f in headline(b)}


def test_per_coordinate_errors_digits_and_their_chance():
    g = analyze_records(planted_records())["grounding"]
    points, boxes = g["point_digits"], g["box_digits"]
    # valid points: d (6, 8) for (5, 5) and e (40, 25) for (25, 25); f gives none
    assert (points["records"], points["analysed"]) == (3, 2)
    assert points["coordinates"]["x"] == {"analysed": 2, "exact": 0, "exact_rate": 0.0, "mean_abs_error": 8.0,
                                          "median_abs_error": 8.0}
    assert points["coordinates"]["y"] == pytest.approx({"analysed": 2, "exact": 1, "exact_rate": 0.5,
                                                        "mean_abs_error": 1.5, "median_abs_error": 1.5})
    acc = {place: (p["correct"], p["target_digits"]) for place, p in points["places"].items()}
    assert acc == {"x tens": (0, 1), "x units": (0, 2), "y tens": (1, 1), "y units": (1, 2)}
    assert list(points["places"]) == ["x tens", "x units", "y tens", "y units"]  # by coordinate, then place
    # 6 vs 5 (|1|), 4 vs 2, 0 vs 5, 8 vs 5; 2 vs 2 and 5 vs 5 right
    assert points["digit_error_histogram"][:6] == [2, 1, 1, 1, 0, 1] and points["confusion"][5][6] == 1
    # valid boxes: a exact; b [5, 5, 15, 15] for [0, 0, 10, 10]
    assert [boxes["coordinates"][c]["mean_abs_error"] for c in ("x1", "y1", "x2", "y2")] == [2.5] * 4
    assert boxes["places"]["x2 tens"]["correct"] == 2 and boxes["places"]["x2 units"]["correct"] == 1
    assert boxes["places"]["x1 units"]["correct"] == 1 and "x1 tens" not in boxes["places"]  # 0 and 5: units only
    # chance by hand: the points' x are 5, 25, 25: 2 of the 6 ordered pairs equal, 4 differ by 20
    ch = g["chance"]["point_digits"]
    assert ch["coordinates"]["x"] == pytest.approx({"exact_rate": 1 / 3, "mean_abs_error": 80 / 6})
    # units digits 5, 5, 5 always agree; tens: 25's 2 meets the other 25 (right) or 5 (no digit) of 2 others
    assert ch["places"]["x units"] == 1.0 and ch["places"]["x tens"] == pytest.approx(2 / 4)
    # best constant: [20, 20] lies in both C boxes; the geometric median of the target points is (25, 25)
    const = g["constant"]
    assert const["point_in_box_rate"] == pytest.approx(2 / 3) and const["point_in_box_answer"] == [20.0, 20.0]
    assert const["centre_error_answer"] == pytest.approx([25, 25], abs=1e-3)
    assert const["centre_error_mean"] == pytest.approx(20 * math.sqrt(2) / 3, abs=1e-3)
    figs = {f.key: f for f in headline(analyze_records(planted_records()))}
    assert figs["point_x_error"].value == 8.0 and figs["point_x_error"].chance == pytest.approx(80 / 6)
    assert (figs["digit_acc_y_units"].count, figs["digit_acc_y_units"].n) == (1, 2)
    assert figs["point_in_box"].constant == pytest.approx(2 / 3) and figs["point_in_box"].constant_answer == "[20, 20]"


def test_best_constant_point_against_a_search_of_every_pixel():
    import numpy as np

    from vlm_smmd.analysis.grounding import best_point, geometric_median

    rng = np.random.default_rng(0)
    for _ in range(20):
        x1, y1 = rng.integers(0, 30, (2, 25))
        boxes = [(a, b, a + w, b + h) for a, b, w, h in zip(x1, y1, *rng.integers(0, 12, (2, 25)))]
        (x, y), inside = best_point(boxes)
        depth = [[sum(a <= px <= c and b <= py <= d for a, b, c, d in boxes) for py in range(42)] for px in range(42)]
        assert inside == max(map(max, depth)) == sum(a <= x <= c and b <= y <= d for a, b, c, d in boxes)
        # scattered points, and clustered ones (copies of a few cells) whose median may be one of them
        cells = rng.integers(0, 8, (4, 2)) * 50.0
        for points in (rng.normal(0, 10, (15, 2)).tolist(), cells[rng.integers(0, 4, 9)].tolist()):
            m = geometric_median(points)
            grid = [(m[0] + dx / 10, m[1] + dy / 10) for dx in range(-20, 21) for dy in range(-20, 21)] + points
            sums = [sum(math.dist(q, p) for p in points) for q in grid]
            assert sums[840] <= min(sums) + 1e-6  # grid[840] is m itself
    # a start (the mean) on a data point that is not the median; a median that is a repeated point
    assert geometric_median([(0, 0), (10, 0), (10, 0), (10, 0), (-30, 0)]) == (10.0, 0.0)
    skew = [(0, 0), (20, 0), (20, 0), (20, 1), (-60, -1)]  # (20, 0)'s others pull 2.23 > its 2 copies: not it
    assert sum(math.dist(geometric_median(skew), p) for p in skew) < sum(math.dist((20, 0), p) for p in skew) - 0.01
    assert geometric_median([(50, 350)] * 4 + [(450, 50)] * 3 + [(250, 250)]) == (50.0, 350.0)


def test_examples_plot_draws_the_image_and_every_runs_answer(tmp_path):
    from PIL import Image

    records = planted_records()
    Image.new("RGB", (40, 40), (0, 0, 255)).save(tmp_path / "a.png")
    records[0]["image"] = str(tmp_path / "a.png")
    records[1]["image"] = str(tmp_path / "gone.png")  # moved since the evaluation: a blank frame
    report = write_report({"one": analyze_records(records), "two": analyze_records(records)}, tmp_path / "out")
    text = report.read_text()
    assert "![predicted vs true](grounding_examples.png)" in text
    assert "### Each coordinate of the point answers" in text and "### Each coordinate of the box answers" in text
    assert "| x | 8.000 (median 8.000); exact 0/2 | 8.000 (median 8.000); exact 0/2 | 13.333 | 0.333 |" in text
    for name in ("grounding_examples.png", "point_place_accuracy.png", "box_place_accuracy.png"):
        assert f"]({name})" in text
    pixels = np.asarray(Image.open(tmp_path / "out" / "grounding_examples.png").convert("RGB")).reshape(-1, 3)
    blue = ((pixels[:, 2] > 200) & (pixels[:, 0] < 40) & (pixels[:, 1] < 40)).sum()
    assert blue > 2000  # record a's image, drawn
    # an unreadable image file and a meta giving one side only still draw (blank frames)
    (tmp_path / "text.png").write_text("not an image")
    records[2]["image"] = str(tmp_path / "text.png")
    records[3]["meta"] = {**records[3]["meta"], "width": 40}
    assert write_report({"one": analyze_records(records)}, tmp_path / "odd").is_file()
    assert (tmp_path / "odd" / "grounding_examples.png").stat().st_size > 1000
    examples = analyze_records(records)["grounding"]["examples"]
    assert [e["id"] for e in examples] == ["a", "b", "c", "d", "e", "f"]
    assert examples[0]["image"] == str(tmp_path / "a.png") and examples[2]["prediction"] is None


def test_eval_records_name_the_image_file(tmp_path):
    from PIL import Image

    from vlm_smmd.data.sample import Sample
    from vlm_smmd.evaluation import _record

    answer = '{"point_2d": [1, 2], "label": "red square"}'
    on_disk = Sample(image="rel/x.png", question="Where?", answer=answer, source="grounding", id="1",
                     meta={"task": "point", "target_point": [1, 2], "target_box": [0, 0, 3, 3]})
    assert _record(on_disk, answer)["image"] == os.path.abspath("rel/x.png")
    in_memory = Sample(image=Image.new("RGB", (4, 4)), question="Where?", answer="3", source="chartqa", id="2")
    assert "image" not in _record(in_memory, "3")


def test_record_kinds_of_grounding_targets():
    r = {"id": "1", "source": "grounding", "targets": ["a red circle"], "prediction": ""}
    assert record_kind(r) == "grounding_bad_target"
    r = {"id": "1", "source": "elsewhere", "targets": ['{"bbox_2d": [1, 2, 3, 4]}'], "prediction": ""}
    assert record_kind(r) == "grounding"
    assert record_kind({"id": "1", "source": "chartqa", "targets": ["12"], "prediction": ""}) == "numeric"


def test_analyze_cli_reports_grounding(tmp_path):
    path = tmp_path / "predictions.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in planted_records()))
    assert cli(["analyze", str(path), "--out", str(tmp_path / "out")]) == 0
    report = (tmp_path / "out" / "report.md").read_text()
    assert "## Points and boxes" in report and "IoU >= 0.5" in report


# ---------------------------------------------------------------------------------------------------------
# Reader


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    from data_synth.grounding import write_grounding_dataset

    root = tmp_path_factory.mktemp("grounding")
    # a canvas smart_resize changes (300 x 200 -> 308 x 196), so answers are scaled
    write_grounding_dataset(root / "abs", 12, 0, width=300, height=200, splits="train=0.75,test=0.25",
                            progress=False)
    write_grounding_dataset(root / "n1000", 12, 1, width=300, height=200, coords="norm1000", splits="train=1",
                            progress=False)
    return root


@pytest.mark.parametrize("name", ["abs", "n1000"])
def test_reader_gives_answers_and_geometry_in_answer_coordinates(written, name):
    samples = read("grounding", written / name, "train")
    assert len(samples) >= 6 and samples.skipped == 0
    rows = [json.loads(line) for line in (written / name / "train" / "metadata.jsonl").read_text().splitlines()]
    for s, row in zip(samples, rows, strict=True):
        assert s.source == "grounding" and s.answer == row["answer"] and s.id == row["file_name"][5:-4]
        meta = s.meta
        assert meta["task"] in ("point", "box") and meta["coords"] == ("absolute" if name == "abs" else "norm1000")
        assert "question" not in meta and "answer" not in meta and meta["position"] == row["position"]
        own = meta["target_box"] if meta["task"] == "box" else meta["target_point"]
        assert own == meta["answer_coords"] == list(parse_grounding(s.answer, meta["task"]))
        assert point_in_box(meta["target_point"], meta["target_box"])
        sx, sy = (308 / 300, 196 / 200) if name == "abs" else (1000 / 300, 1000 / 200)
        x1, y1, x2, y2 = meta["target"]["box"]
        assert meta["target_box"] == [math.floor(x1 * sx), math.floor(y1 * sy), math.ceil(x2 * sx),
                                      math.ceil(y2 * sy)]
        scores = score_prediction(s.answer, [s.answer], "grounding", meta)
        assert scores["no_valid_answer"] == 0.0 and scores.get("iou", 1.0) == 1.0
        assert scores.get("point_in_box", 1.0) == 1.0
        assert s.load_image().size == (300, 200)
    assert TASKS["grounding"].metric == "grounding" and all(k in samples[0].meta for k in TASKS["grounding"].breakdowns)


def _copy(written, tmp_path):
    import shutil

    root = tmp_path / "g"
    shutil.copytree(written / "abs", root)
    return root, root / "train" / "metadata.jsonl"


def _set_line(meta_path, lineno, text):
    lines = meta_path.read_text().splitlines()
    lines[lineno - 1] = text
    meta_path.write_text("\n".join(lines) + "\n")
    return len(lines)


def test_reader_corrupt_line_names_file_and_line_or_is_skipped(written, tmp_path):
    root, meta_path = _copy(written, tmp_path)
    total = _set_line(meta_path, 3, '{"file_name": "0000/00000002.png", "question": "Where')
    with pytest.raises(DataError, match="malformed record") as err:
        read("grounding", root, "train")
    assert str(err.value).startswith(f"{meta_path}:3: ")
    with pytest.warns(UserWarning, match="skipped 1 records"):
        samples = read("grounding", root, "train", on_error="skip")
    assert len(samples) == total - 1 and samples.skipped == 1
    assert samples.skip_log.counts == {"malformed record": 1}


@pytest.mark.parametrize("change, reason", [
    (lambda r: r.update(task="polygon"), "'task'"),
    (lambda r: r.update(coords="pixels"), "'coords'"),
    (lambda r: r.update(resized_width=0), "'resized_width'"),
    (lambda r: r.pop("target"), "'target.box'"),
    (lambda r: r["target"].update(box=[10, 10, 5, 20]), "'target.box'"),
    (lambda r: r["target"].update(point=None), "'target.point'"),
    (lambda r: r.update(answer="somewhere on the left"), "'answer'"),
    (lambda r: r.update(answer_coords=[c + 1 for c in r["answer_coords"]]), "'answer'"),
    (lambda r: r["target"].update(box=[b + 3 for b in r["target"]["box"]],
                                  point=[p + 3 for p in r["target"]["point"]]), "'answer_coords'"),
    (lambda r: r.update(file_name="../../escape.png"), "leaves the dataset root"),
    (lambda r: r.update(file_name="/etc/passwd"), "leaves the dataset root"),
    (lambda r: r.update(file_name="0000/99999999.png"), "image missing"),
])
def test_reader_refuses_rows_that_do_not_fit(written, tmp_path, change, reason):
    root, meta_path = _copy(written, tmp_path)
    row = json.loads(meta_path.read_text().splitlines()[1])
    change(row)
    total = _set_line(meta_path, 2, json.dumps(row))
    with pytest.raises(DataError, match=reason) as err:
        read("grounding", root, "train")
    assert "metadata.jsonl:2" in str(err.value)
    with pytest.warns(UserWarning, match="skipped 1 records"):
        assert len(read("grounding", root, "train", on_error="skip")) == total - 1


def test_reader_names_the_splits_found(written):
    with pytest.raises(DataError, match=r"'val'.*test, train"):
        read("grounding", written / "abs", "val")
    with pytest.raises(ValueError, match="on_error"):
        read("grounding", written / "abs", "train", on_error="ignore")


def test_synthesize_grounding_renders_once(tmp_path, capsys):
    from vlm_smmd.config import ConfigError, DataArguments
    from vlm_smmd.training import synthesize_if_missing

    root = tmp_path / "grounding"
    args = DataArguments(data_root=str(root), dataset="grounding", synthesize="grounding", synthesize_num=8,
                         synthesize_options=json.dumps({"width": 112, "height": 84, "splits": "train=0.5,test=0.5",
                                                        "progress": False}))
    synthesize_if_missing(args)
    assert len(read("grounding", root, "train")) + len(read("grounding", root, "test")) == 8
    synthesize_if_missing(args)
    assert "reusing" in capsys.readouterr().out
    args.synthesize_seed = 3
    with pytest.raises(ConfigError, match="seed 0 there, 3 asked"):
        synthesize_if_missing(args)


def test_eval_and_compare_generate_enough_tokens_for_a_box_by_default(tmp_path, qwen_tokenizer):
    from vlm_smmd.commands import compare, evaluate

    box = '{"bbox_2d": [1197, 1175, 1279, 1257], "label": "dark red triangle"}'  # with the end of turn
    assert len(qwen_tokenizer(box)["input_ids"]) + 1 <= TASKS["grounding"].answer_tokens
    assert evaluate.parse(["--model", "m", "--data", f"grounding:{tmp_path}", "--out", str(tmp_path)]).max_new_tokens == 64
    long = json.dumps({"bbox_2d": [1197, 1175, 1279, 1257], "label": " ".join(["the tall man on the left"] * 8)})
    assert len(qwen_tokenizer(long)["input_ids"]) + 1 <= TASKS["refcoco"].answer_tokens  # a 40-word expression
    assert evaluate.parse(["--model", "m", "--data", f"chartqa:{tmp_path}", "--data", f"refcoco:{tmp_path}",
                           "--out", str(tmp_path)]).max_new_tokens == 128
    assert evaluate.parse(["--model", "m", "--data", f"chartqa:{tmp_path}", "--out", str(tmp_path)]).max_new_tokens == 16
    args = compare.parse(["configs/scratch_cpu_point.yaml", "--out", str(tmp_path / "c"), "--aux", "none"])
    assert args.max_new_tokens == 64
    args = compare.parse(["configs/scratch_cpu_point.yaml", "--out", str(tmp_path / "c"), "--aux", "none",
                          "--max-new-tokens", "40"])
    assert args.max_new_tokens == 40


def test_report_shows_the_image_side_only_for_synthetic_sets_it_sets(tmp_path):
    a = analyze_records(planted_records())
    for kind, shown in (("grounding", False), ("bars", True), ("clocks", True)):
        config = {"dataset": "grounding", "synthesize": kind, "synthesize_num": 100, "synthesize_size": 224}
        info = {"run": {"config": config, "log_history": None, "evaluation": None, "notes": []}}
        report = write_report({"run": a}, tmp_path / kind, run_info=info).read_text()
        section = report.split("## Runs")[1].split("<details>")[0]
        assert ("| synthesize_size | 224 |" in section) == shown and "| synthesize | " in section
