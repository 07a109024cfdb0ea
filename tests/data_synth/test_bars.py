"""The "bars_axis" chart kind: every answer read back from the rendered pixels (axis found in the image,
bar tops measured, the axis mapping inverted), the ChartQA layout read unchanged, worker independence,
options and refusals, the CLI, SIGTERM during a pooled chart run and its resume, and the render variation
that makes every chart of a dataset a different image."""

import colorsys
import hashlib
import json
import random
import re
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from data_synth import bars
from data_synth.charts import answer, main, write_chart_dataset
from tests.data_synth.signals import logged_lines, terminate_when


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def read_values(img: Image.Image, axis_max: int, count: int, labelled: bool, colour) -> list[Fraction]:
    """Each bar's value, left to right, measured from the pixels alone (given the axis top's number and the
    bar colour: a bar lower than one pixel has no pixel of its full colour; the background is the colour
    of the top right corner)."""
    a = np.asarray(img).astype(int)
    back = a[0, -1]
    ink = (a == 0).all(axis=2)
    axis_x = int(ink.sum(axis=0).argmax())  # the y axis: the column with the most ink
    base = int(ink.sum(axis=1).argmax())  # the x axis: the row with the most ink
    tick_rows = [r for r in range(base + 1) if ink[r, axis_x - 1]]
    top = min(tick_rows)
    px_per_value = Fraction(base - top, axis_max)
    plot = a[:base, axis_x + 1:]
    is_bar = ~((plot == back).all(axis=2) | (plot == 0).all(axis=2))
    if not is_bar.any():
        return [Fraction(0)] * count
    colour = np.array(colour)
    channel = int(np.abs(colour - back).argmax())

    def height(col: int) -> Fraction:
        full = 0
        while (a[base - 1 - full, col] == colour).all():
            full += 1
        top_pixel = a[base - 1 - full, col]
        if (top_pixel == back).all():
            return Fraction(full)
        cover = Fraction(int(top_pixel[channel] - back[channel]), int(colour[channel] - back[channel]))
        assert 0 < cover < 1
        for c in range(3):  # the partial row is the same blend in every channel (to rounding)
            assert abs(back[c] + (colour[c] - back[c]) * cover - top_pixel[c]) <= 1
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
        assert colours <= {tuple(chart["style"]["background"]), (0, 0, 0), tuple(chart["style"]["color"])}


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


@pytest.mark.slow
def test_sigterm_during_a_pooled_chart_run_ends_cleanly_and_resumes_to_the_same_bytes(tmp_path, monkeypatch):
    log = tmp_path / "ds" / ".train.partial" / "progress.jsonl"
    # 24 charts leave over half a second of rendering after the first one is logged, so the signal lands mid-run
    args = ["charts", "--layout", "chartqa", "--num", "24", "--size", "320x240", "--out", "ds", "--workers", "2",
            "--no-progress"]
    status, err = terminate_when(args, tmp_path, lambda: logged_lines(log) > 0)
    assert status == 143 and "Traceback" not in err and "leaked" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and re.fullmatch(r"data-synth charts: interrupted with \d+ of 24 charts done; the "
                                            r"partial dataset is in ds/\.train\.partial; rerun with --resume to "
                                            r"finish it", lines[0]), err
    assert sorted(p.name for p in (tmp_path / "ds").iterdir()) == [".train.partial"]  # nothing loadable yet
    monkeypatch.chdir(tmp_path)
    assert main(args[1:] + ["--resume"]) == 0
    out = tmp_path / "ds"
    assert not (out / ".train.partial").exists()
    write_chart_dataset(tmp_path / "ref", "chartqa", 24, size=(320, 240))
    assert tree(out) == tree(tmp_path / "ref")


# ------------------------------------------------------------------------- render variation per chart

def pixels(path) -> bytes:
    return hashlib.sha256(np.asarray(Image.open(path).convert("RGB")).tobytes()).hexdigest()


def test_no_two_charts_of_a_dataset_are_the_same_image(tmp_path):
    """2,000 charts over the values 0..99 (20 a value on average): every image differs from every other,
    so no test image is a training image."""
    opts = dict(kinds=("bars_axis",), size=(56, 56), questions_per_chart=1)
    write_chart_dataset(tmp_path, "chartqa", 1600, seed=0, split="train", **opts)
    write_chart_dataset(tmp_path, "chartqa", 400, seed=1, split="test", **opts)
    train = [pixels(p) for p in sorted((tmp_path / "train" / "png").glob("*.png"))]
    test = [pixels(p) for p in sorted((tmp_path / "test" / "png").glob("*.png"))]
    assert (len(train), len(test)) == (1600, 400)
    assert not set(train) & set(test)
    assert len(set(train) | set(test)) == 2000


def test_distinct_seeds_give_distinct_images_at_the_same_value():
    images = set()
    for seed in range(300):
        chart = bars.make_bar_chart(random.Random(seed), values=[47])
        img = bars.render_bar_chart(chart, (56, 56))
        assert chart["series"][0]["values"] == ["47"]
        [value] = read_values(img, 100, 1, False, chart["style"]["color"])
        assert abs(value - 47) < Fraction(1, 4)
        images.add(img.tobytes())
    assert len(images) == 300


def test_colours_meet_the_contrast_rule_over_a_continuous_range_of_hues():
    charts = [bars.make_bar_chart(random.Random(seed)) for seed in range(3000)]
    colours = [c["style"]["color"] for c in charts]
    for chart in charts:
        colour, back = chart["style"]["color"], chart["style"]["background"]
        assert max(abs(c - b) for c, b in zip(colour, back)) >= bars.MIN_CONTRAST, chart["style"]
        assert max(colour) >= bars.INK_CONTRAST and min(back) >= 0.9 * 0.88 * 255 - 1, chart["style"]
    hues = {int(colorsys.rgb_to_hsv(*(v / 255 for v in c))[0] * 12) for c in colours}
    assert hues == set(range(12))
    assert len({tuple(c) for c in colours}) > 2900  # not a palette
    assert len({tuple(c["style"]["background"]) for c in charts}) > 2500


@pytest.mark.parametrize("size, options", CASES)
def test_bars_vary_in_place_and_width_but_stay_apart_inside_the_plot(size, options):
    max_bars = options.get("bars", (1, 1))[1]
    g = bars.layout(size, options.get("axis_max", 100), options.get("places", 0), max_bars)
    places, widths = set(), set()
    for seed in range(200):
        chart = bars.make_bar_chart(random.Random(seed), **options)
        columns = bars.bar_columns(g, max_bars, chart["style"])
        assert len(columns) == len(chart["categories"])
        assert columns[0][0] > g["axis_x"] and columns[-1][0] + columns[-1][1] <= g["plot_right"]
        for (x, w), (x2, _) in zip(columns, columns[1:]):
            assert x + w < x2  # at least one background column between two bars
        if max_bars > 1:
            assert min(w for _, w in columns) >= 3 * g["scale"]  # room for the letter under it
        places.add(columns[0][0])
        widths.add(columns[0][1])
    assert len(places) > 3 and len(widths) > 3


def test_the_axis_is_the_same_on_every_chart():
    """Variation moves and colours the bars only: the ink (axis, ticks, labels) of single-bar charts is
    the same pixels on every chart."""
    inks = set()
    for seed in range(100):
        img = np.asarray(bars.render_bar_chart(bars.make_bar_chart(random.Random(seed)), (64, 64)))
        inks.add((img == 0).all(axis=2).tobytes())
    assert len(inks) == 1


def test_pixel_noise_is_optional_seeded_and_changes_nothing_else():
    clean = bars.make_bar_chart(random.Random(5))
    noisy = bars.make_bar_chart(random.Random(5), noise=6.0)
    assert noisy["series"] == clean["series"]
    assert noisy["style"] == {**clean["style"], "noise": 6.0, "noise_seed": noisy["style"]["noise_seed"]}
    a = np.asarray(bars.render_bar_chart(clean, (64, 64))).astype(int)
    b = np.asarray(bars.render_bar_chart(noisy, (64, 64))).astype(int)
    assert 1.5 < np.abs(b - a).mean() < 6.0  # about 0.8 std where nothing clips, half that on white
    assert np.array_equal(b, np.asarray(bars.render_bar_chart(noisy, (64, 64))))
    other = dict(noisy, style=dict(noisy["style"], noise_seed=noisy["style"]["noise_seed"] + 1))
    assert not np.array_equal(b, np.asarray(bars.render_bar_chart(other, (64, 64))))
    with pytest.raises(ValueError, match="bar_noise"):
        bars.make_bar_chart(random.Random(0), noise=40.0)


def test_unseen_values_are_a_pure_function_of_seed_and_range():
    held = bars.unseen_values(100, 0, 0.2, 0)
    assert held == bars.unseen_values.__wrapped__(100, 0, 0.2, 0)  # the cache changes nothing
    assert len(held) == 20 and held != bars.unseen_values(100, 0, 0.2, 1)
    assert len(bars.unseen_values(1000, 0, 0.2, 0)) == 200
    with pytest.raises(ValueError, match="cannot resolve"):
        bars.unseen_values(10 ** 6, 2, 0.2, 0)
