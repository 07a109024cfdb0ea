"""Clock datasets held out by construction: per-image variation of the plain style (hands kept apart and
readable), no test image equal to a training image, and the unseen-times split (`test_unseen`) whose
dial times never occur in the other splits while every hour and minute still does."""

import hashlib
import json
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import data_synth.writer as writer
from data_synth.clocks import plain_style, render_clock, vary_style
from data_synth.dataset import digit_places
from data_synth.writer import clocks_main, dial_times, unseen_times, write_clock_dataset
from tests.data_synth.test_clocks import angle_diff, expected_angles, read_hand

# the research setting's style (configs/scratch_cpu_clock.yaml): no numerals, a wide red hour hand, a
# narrow blue minute hand
RESEARCH = {"numerals": "none", "hour_hand_color": [220, 0, 0], "hour_hand_width": 0.12,
            "minute_hand_color": [0, 0, 220], "minute_hand_width": 0.07}
SMALL = dict(size=64, progress=False, plain=True, style=RESEARCH)
VARIED = {"hour_hand_color", "minute_hand_color", "hour_hand_width", "minute_hand_width", "hour_hand_length",
          "minute_hand_length", "face_radius", "border_width", "tick_length", "tick_width", "center_cap",
          "background_color"}


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def rows(root: Path, split: str) -> list[dict]:
    return [json.loads(line) for line in (root / split / "metadata.jsonl").read_text().splitlines()]


def pixels(path) -> str:
    return hashlib.sha256(np.asarray(Image.open(path).convert("RGB")).tobytes()).hexdigest()


def channel_gap(a, b) -> int:
    return max(abs(x - y) for x, y in zip(a, b))


@pytest.mark.parametrize("changes", [RESEARCH, {}, {"hour_hand_color": (90, 0, 0), "minute_hand_color": (0, 0, 0)},
                                     {"hour_hand_width": 0.04, "minute_hand_width": 0.04}])
def test_variation_keeps_the_hands_apart(changes):
    style = plain_style(**changes)
    gap = channel_gap(style.hour_hand_color, style.minute_hand_color)
    seen = {name: set() for name in VARIED}
    for seed in range(1000):
        varied = vary_style(style, seed)
        assert varied.validate() is varied and varied is not style and style == plain_style(**changes)
        assert varied.hour_hand_length < varied.minute_hand_length
        if style.hour_hand_width > style.minute_hand_width:
            assert varied.hour_hand_width > varied.minute_hand_width
        for hand in ("hour_hand_color", "minute_hand_color"):
            assert channel_gap(getattr(varied, hand), getattr(style, hand)) <= min(40, gap // 3 if gap else 40)
        if gap:
            assert channel_gap(varied.hour_hand_color, varied.minute_hand_color) >= gap / 3
        else:
            assert varied.hour_hand_color == varied.minute_hand_color
        assert 0.88 * style.face_radius - 1e-3 <= varied.face_radius <= style.face_radius
        for name in VARIED:
            seen[name].add(getattr(varied, name))
        for f in fields(style):
            if f.name not in VARIED:
                assert getattr(varied, f.name) == getattr(style, f.name), f.name
    for name in VARIED - ({"border_width", "center_cap"} if not style.border_width else set()):
        assert len(seen[name]) > 5, name  # each really varies (rounded to 3 decimals)


def test_varied_research_clocks_still_read_back_within_2_degrees():
    style = plain_style(**{**RESEARCH, "hour_hand_color": (220, 0, 0), "minute_hand_color": (0, 0, 220)})
    for seed, (h, m) in enumerate([(3, 0), (10, 10), (6, 45), (1, 23), (8, 2), (11, 37), (0, 50), (4, 30)]):
        varied = vary_style(style, seed)
        radius = varied.face_radius * 256 / 2 * (1 - varied.border_width)
        img = render_clock(h, m, size=256, style=varied, seed=seed)
        hour, minute, _ = expected_angles(h, m, None)
        got_hour = read_hand(img, varied.hour_hand_color, 0.25 * radius, 0.9 * varied.hour_hand_length * radius)
        got_minute = read_hand(img, varied.minute_hand_color, 0.6 * radius, 0.9 * varied.minute_hand_length * radius)
        assert angle_diff(got_hour, hour) <= 2.0 and angle_diff(got_minute, minute) <= 2.0, (seed, h, m)


def test_distinct_seeds_give_distinct_images_at_the_same_time():
    style = plain_style(**RESEARCH)
    images = {render_clock(3, 7, size=64, style=vary_style(style, seed), seed=seed).tobytes() for seed in range(200)}
    assert len(images) == 200


def test_no_test_image_equals_a_training_image(tmp_path):
    out = write_clock_dataset(tmp_path / "v", 900, seed=0, splits="train=0.8,test=0.2", **SMALL)
    hashes = {split: [pixels(out / split / r["file_name"]) for r in rows(out, split)] for split in ("train", "test")}
    assert not set(hashes["train"]) & set(hashes["test"])
    assert len(set(hashes["train"]) | set(hashes["test"])) == 900  # no two images alike at all
    # without the variation the same setting repeats images: 900 clocks, 720 dial readings
    fixed = write_clock_dataset(tmp_path / "f", 900, seed=0, splits="train=0.8,test=0.2", variation=False, **SMALL)
    train = {pixels(fixed / "train" / r["file_name"]) for r in rows(fixed, "train")}
    assert any(pixels(fixed / "test" / r["file_name"]) in train for r in rows(fixed, "test"))


@pytest.mark.parametrize("fraction, seed", [(0.2, 0), (0.2, 1), (0.2, 17), (0.5, 3)])
def test_unseen_times_keep_every_hour_and_minute_in_training(fraction, seed):
    held = unseen_times(fraction, seed)
    assert len(held) == round(720 * fraction) and len(set(held)) == len(held)
    left = set(dial_times()) - set(held)
    assert {h for h, _ in left} == set(range(12)) and {m for _, m in left} == set(range(60))
    assert unseen_times(fraction, seed) == held
    assert unseen_times(fraction, seed + 1) != held


def answer_places(answer: str) -> set:
    hour, minute = answer.split(":")
    return {("hour", p) for p in digit_places(hour)} | {("minute", p) for p in digit_places(minute)}


@pytest.mark.parametrize("answer_format", ["h:mm", "24h"])
def test_unseen_split_holds_the_held_out_times_and_only_those(tmp_path, answer_format):
    out = write_clock_dataset(tmp_path / "u", 1500, seed=2, splits="train=0.8,test=0.2", unseen_fraction=0.2,
                              unseen_seed=5, answer_format=answer_format, **SMALL)
    held = set(unseen_times(0.2, 5))
    split_rows = {split: rows(out, split) for split in ("train", "test", "test_unseen")}
    assert [len(r) for r in split_rows.values()] == [1200, 300, 300]  # test_unseen: as many as the smallest split
    for split, held_there in (("train", False), ("test", False), ("test_unseen", True)):
        assert all(((r["hour"] % 12, r["minute"]) in held) == held_there for r in split_rows[split]), split
    assert len({(r["hour"] % 12, r["minute"]) for r in split_rows["test_unseen"]}) > 100
    assert {r["index"] for r in split_rows["test_unseen"]} == set(range(1500, 1800))
    if answer_format == "h:mm":  # every digit still occurs at every place among the training answers
        everywhere = set().union(*(answer_places(writer.format_answer(h, m)) for h, m in dial_times()))
        assert set().union(*(answer_places(r["answer"]) for r in split_rows["train"])) == everywhere
    else:
        assert {r["hour"] for r in split_rows["test_unseen"]} & set(range(12, 24))  # both halves of the day
    generation = json.loads((out / "generation.json").read_text())
    assert generation["unseen"] == {"fraction": 0.2, "seed": 5, "num": 300, "times": [list(t) for t in sorted(held)]}
    assert generation["variation"] is True


def test_unseen_split_bytes_do_not_depend_on_workers_or_interruptions(tmp_path, monkeypatch):
    opts = dict(SMALL, unseen_fraction=0.25, unseen_seed=1, unseen_num=40)
    a = write_clock_dataset(tmp_path / "a", 80, seed=4, workers=1, **opts)
    b = write_clock_dataset(tmp_path / "b", 80, seed=4, workers=2, **opts)
    assert tree(a) == tree(b) and len(rows(a, "test_unseen")) == 40
    real = writer._render_item
    calls = []

    def failing(plan, index, root):
        if len(calls) == 90:
            raise KeyboardInterrupt
        calls.append(index)
        return real(plan, index, root)

    monkeypatch.setattr(writer, "_render_item", failing)
    with pytest.raises(KeyboardInterrupt):
        write_clock_dataset(tmp_path / "c", 80, seed=4, **opts)
    calls.clear()
    monkeypatch.setattr(writer, "_render_item", lambda plan, i, root: calls.append(i) or real(plan, i, root))
    write_clock_dataset(tmp_path / "c", 80, seed=4, resume=True, **opts)
    assert sorted(calls) == list(range(90, 120))
    assert tree(tmp_path / "c") == tree(a)


@pytest.mark.parametrize("kwargs, match", [
    (dict(unseen_fraction=0.2, times=[(3, 0, None, 1.0)]), "times"),
    (dict(unseen_fraction=0.2, splits="train=0.5,test_unseen=0.5"), "test_unseen"),
    (dict(unseen_num=5), "unseen_num needs unseen_fraction"), (dict(unseen_fraction=1.0), "unseen_fraction"),
    (dict(unseen_fraction=0.2, unseen_num=0), "unseen_num"), (dict(variation="yes"), "variation"),
    (dict(size=5000), "size must be an integer in 64..4096"),
])
def test_bad_unseen_and_variation_arguments(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        write_clock_dataset(tmp_path / "x", 10, **(dict(SMALL) | kwargs))
    assert not list(tmp_path.iterdir())


def test_cli_unseen_and_no_variation(tmp_path, capsys):
    out = tmp_path / "cli"
    assert clocks_main(["--num", "20", "--out", str(out), "--size", "64", "--plain", "--no-variation",
                        "--unseen-fraction", "0.2", "--unseen-seed", "3", "--unseen-num", "7", "--no-progress"]) == 0
    assert f"wrote 20 clocks and 7 with held-out times in test_unseen to {out}" in capsys.readouterr().out
    held = set(unseen_times(0.2, 3))
    assert all((r["hour"] % 12, r["minute"]) in held for r in rows(out, "test_unseen"))
    assert all(r["hour_hand_length"] == 0.5 and r["face_radius"] == 0.9 for r in rows(out, "train"))  # the plain style
