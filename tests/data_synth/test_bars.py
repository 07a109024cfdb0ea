"""The "bars_axis" chart kind: every answer read back from the rendered pixels (axis found in the image,
bar tops measured, the axis mapping inverted), the ChartQA layout read unchanged, worker independence,
options and refusals, the CLI, and SIGTERM during a pooled chart run."""

import json
import random
import re
from fractions import Fraction

import numpy as np
import pytest
from PIL import Image

from data_synth import bars
from data_synth.charts import answer, main, write_chart_dataset
from tests.data_synth.signals import terminate_when

WHITE = np.array([255, 255, 255])


def read_values(img: Image.Image, axis_max: int, count: int, labelled: bool, colour) -> list[Fraction]:
    """Each bar's value, left to right, measured from the pixels alone (given the axis top's number and the
    bar colour: a bar lower than one pixel has no pixel of its full colour)."""
    a = np.asarray(img).astype(int)
    ink = (a == 0).all(axis=2)
    axis_x = int(ink.sum(axis=0).argmax())  # the y axis: the column with the most ink
    base = int(ink.sum(axis=1).argmax())  # the x axis: the row with the most ink
    tick_rows = [r for r in range(base + 1) if ink[r, axis_x - 1]]
    top = min(tick_rows)
    px_per_value = Fraction(base - top, axis_max)
    plot = a[:base, axis_x + 1:]
    is_bar = ~((plot == WHITE).all(axis=2) | (plot == 0).all(axis=2))
    if not is_bar.any():
        return [Fraction(0)] * count
    colour = np.array(colour)
    channel = int(np.abs(colour - WHITE).argmax())

    def height(col: int) -> Fraction:
        full = 0
        while (a[base - 1 - full, col] == colour).all():
            full += 1
        top_pixel = a[base - 1 - full, col]
        if (top_pixel == WHITE).all():
            return Fraction(full)
        cover = Fraction(int(top_pixel[channel]) - 255, int(colour[channel]) - 255)
        assert 0 < cover < 1
        for c in range(3):  # the partial row is the same blend in every channel (to rounding)
            assert abs(255 + (int(colour[c]) - 255) * cover - top_pixel[c]) <= 1
        return full + cover

    if labelled:  # letters under the x axis: runs of inked columns right of the y axis, one per bar
        inked = ink[base + 1:, :].any(axis=0)
        inked[:axis_x + 1] = False
        runs, start = [], None
        for col in range(len(inked) + 1):
            on = col < len(inked) and inked[col]
            if on and start is None:
                start = col
            if not on and start is not None:
                runs.append((start, col))
                start = None
        assert len(runs) == count
        columns = [(lo + hi - 1) // 2 for lo, hi in runs]
        return [height(c) / px_per_value for c in columns]
    assert count == 1
    columns = np.nonzero(is_bar.any(axis=0))[0] + axis_x + 1
    heights = {height(int(c)) for c in columns}
    assert len(heights) == 1  # a flat top
    return [heights.pop() / px_per_value]


CASES = [
    ((56, 56), {}), ((64, 64), {}), ((112, 112), {}), ((56, 56), {"places": 1}),
    ((64, 64), {"axis_max": 1000}), ((112, 112), {"bars": (2, 4)}), ((56, 56), {"bars": (1, 3), "places": 1}),
    ((512, 400), {"axis_max": 1000, "bars": (1, 5)}), ((80, 60), {"axis_max": 20, "places": 2}),
]


@pytest.mark.parametrize("size, options", CASES)
def test_every_answer_read_back_from_the_pixels(size, options):
    places = options.get("places", 0)
    axis_max = options.get("axis_max", 100)
    unit = Fraction(1, 10 ** places)
    answers = []
    for seed in range(150):
        rng = random.Random(f"pixels:{seed}")
        chart = bars.make_bar_chart(rng, **options)
        questions = bars.bar_questions(chart, rng, 10)
        img = bars.render_bar_chart(chart, size)
        assert img.size == size and img.mode == "RGB"
        count = len(chart["categories"])
        measured = read_values(img, axis_max, count, options.get("bars", (1, 1))[1] > 1, chart["style"]["color"])
        assert len(questions) == count  # every bar asked once
        for q in questions:
            text = q["answer"]
            assert re.fullmatch(rf"\d+\.\d{{{places}}}" if places else r"\d+", text), text
            value = measured[q["args"]["category"]]
            assert abs(value - Fraction(text)) < unit / 4, (seed, chart, q, float(value))
            assert answer(chart, "value", q["args"]) == (text, True)  # the charts module agrees
            answers.append(Fraction(text))
    # the values span the range
    assert min(answers) < axis_max / 10 and max(answers) > axis_max * 9 / 10
    assert all(0 <= v < axis_max for v in answers)


def test_one_pixel_per_unit_where_the_image_has_room():
    """At 112 px an axis to 100 gets a whole number of px per unit: no shaded (partial) rows."""
    g = bars.layout((112, 112), 100, 0, 1)
    assert g["plot_height"] % 100 == 0 and g["plot_height"] >= 100
    for seed in range(30):
        chart = bars.make_bar_chart(random.Random(seed))
        a = np.asarray(bars.render_bar_chart(chart, (112, 112))).reshape(-1, 3)
        colours = {tuple(c) for c in np.unique(a, axis=0)}
        assert colours <= {(255, 255, 255), (0, 0, 0), tuple(chart["style"]["color"])}


def test_questions_name_the_bar_when_there_are_several():
    rng = random.Random(0)
    one = bars.make_bar_chart(rng)
    assert [q["question"] for q in bars.bar_questions(one, rng, 3)] == ["What is the value of the bar?"]
    many = bars.make_bar_chart(random.Random(3), bars=(4, 4))
    asked = bars.bar_questions(many, random.Random(1), 2)
    assert len(asked) == 2 and len({q["args"]["category"] for q in asked}) == 2
    for q in asked:
        assert q["question"] == f"What is the value of bar {many['categories'][q['args']['category']]}?"


@pytest.mark.parametrize("size, options, match", [
    ((56, 56), {"axis_max": 10000}, "cannot resolve"), ((56, 56), {"places": 2}, "cannot resolve"),
    ((24, 24), {}, "no room"), ((56, 56), {"bars": (1, 10)}, "no room"), ((56, 56), {"places": 3}, "bar_places"),
    ((56, 56), {"axis_max": 0}, "bar_axis_max"), ((56, 56), {"bars": (2, 1)}, "bars_per_chart"),
    ((56, 56), {"bars": (0, 2)}, "bars_per_chart"), ((56, 56), {"bars": (1, 11)}, "bars per chart"),
])
def test_bad_options_are_refused(tmp_path, size, options, match):
    kwargs = {"bar_axis_max": options.get("axis_max", 100), "bar_places": options.get("places", 0),
              "bars_per_chart": options.get("bars", 1)}
    with pytest.raises(ValueError, match=match):
        write_chart_dataset(tmp_path / "x", "chartqa", 2, size=size, kinds=("bars_axis",), **kwargs)
    assert not (tmp_path / "x").exists()


def test_small_images_are_only_for_bars(tmp_path):
    with pytest.raises(ValueError, match="64 px"):
        write_chart_dataset(tmp_path, "chartqa", 1, size=(56, 56), kinds=("bars_axis", "vbar"))


def test_chartqa_layout_reads_unchanged_and_does_not_depend_on_workers(tmp_path):
    from vlm_smmd.data import read_chartqa

    opts = dict(size=(56, 56), kinds=("bars_axis",), bars_per_chart=(1, 3), bar_places=1)
    info = write_chart_dataset(tmp_path / "a", "chartqa", 40, seed=3, split="train", **opts)
    write_chart_dataset(tmp_path / "b", "chartqa", 40, seed=3, split="train", workers=2, **opts)
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(tmp_path / "b") for p in (tmp_path / "b").rglob("*") if p.is_file())
    for rel in files:
        assert (tmp_path / "a" / rel).read_bytes() == (tmp_path / "b" / rel).read_bytes(), rel

    stored = [json.loads(line) for line in open(info["data_file"])]
    assert info["questions"] == sum(len(c["categories"]) for c in stored)
    by_ref = {}
    for chart in stored:
        for q in chart["questions"]:
            by_ref[(chart["image"].rsplit("/", 1)[1], q["question"])] = q["answer"]
        img = Image.open(tmp_path / "a" / chart["image"])
        measured = read_values(img, 100, len(chart["categories"]), True, chart["style"]["color"])
        assert [round(10 * v) for v in measured] == [round(10 * Fraction(v)) for v in chart["series"][0]["values"]]
    samples = read_chartqa(tmp_path / "a", "train")
    assert len(samples) == info["questions"]
    for sample in samples:
        assert by_ref[(sample.meta["imgname"], sample.question)] == sample.answer
        assert re.fullmatch(r"\d+\.\d", sample.answer)
        assert sample.load_image().size == (56, 56)
    other = write_chart_dataset(tmp_path / "c", "chartqa", 40, seed=4, split="train", **opts)
    assert open(other["data_file"]).read() != open(info["data_file"]).read()


def test_cli(tmp_path, capsys):
    out = tmp_path / "cli"
    assert main(["--layout", "chartqa", "--kinds", "bars_axis", "--num", "5", "--size", "64", "--bars", "2-3",
                 "--bar-axis-max", "1000", "--out", str(out), "--split", "test", "--no-progress"]) == 0
    assert "wrote 5 charts" in capsys.readouterr().out
    for line in open(out / "charts_data" / "test.jsonl"):
        chart = json.loads(line)
        assert chart["kind"] == "bars_axis" and chart["axis_max"] == 1000 and 2 <= len(chart["categories"]) <= 3
        img = Image.open(out / chart["image"])
        assert img.size == (64, 64)
        values = read_values(img, 1000, len(chart["categories"]), True, chart["style"]["color"])
        assert [round(v) for v in values] == [int(v) for v in chart["series"][0]["values"]]
    assert main(["--layout", "chartqa", "--kinds", "bars_axis", "--num", "5", "--size", "56",
                 "--bar-axis-max", "10000", "--out", str(tmp_path / "bad"), "--no-progress"]) == 2
    assert "cannot resolve" in capsys.readouterr().err


def test_sigterm_during_a_pooled_chart_run_ends_cleanly(tmp_path):
    png = tmp_path / "ds" / "train" / "png"
    args = ["charts", "--layout", "chartqa", "--num", "400", "--size", "320x240", "--out", "ds", "--workers", "2",
            "--no-progress"]
    status, err = terminate_when(args, tmp_path, lambda: png.is_dir() and len(list(png.iterdir())) >= 4)
    assert status == 143 and "Traceback" not in err and "leaked" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and re.fullmatch(r"data-synth charts: interrupted with \d+ of 400 charts drawn; no index "
                                            r"file was written, so ds holds no new loadable train split; run "
                                            r"again to draw them all", lines[0]), err
    assert not (tmp_path / "ds" / "train" / "train_human.json").exists()
    assert not (tmp_path / "ds" / "charts_data").exists()
