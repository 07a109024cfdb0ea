"""`data-synth clocks --robustness`: test_deformed and test_hands are written, readable by read_clocks, leave
the other splits' bytes alone, and every render lies outside the range the other splits were drawn from
(measured here from their metadata, independently of the writer's own measurement)."""

import json
import random

import pytest

from data_synth.clock_robustness import DEFORMATIONS, HAND_CHANGES, change_hands, deform, training_ranges
from data_synth.clocks import ClockStyle, plain_style, random_style
from data_synth.writer import clocks_main, write_clock_dataset
from tests.data_synth.test_clock_splits import RESEARCH, rows, tree
from vlm_smmd.data import read_clocks

SETTINGS = {"random": {}, "research": {"plain": True, "style": RESEARCH}}


@pytest.fixture(scope="module", params=sorted(SETTINGS))
def robust_set(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(request.param) / "clocks"
    write_clock_dataset(root, 40, seed=2, size=64, progress=False, robustness=True, robustness_num=16,
                        unseen_fraction=0.2, **SETTINGS[request.param])
    return request.param, root


def _others(root):
    return [r for split in ("train", "test", "test_unseen") for r in rows(root, split)]


def test_splits_are_written_and_read_by_read_clocks(robust_set):
    _, root = robust_set
    for split, kinds in (("test_deformed", DEFORMATIONS), ("test_hands", HAND_CHANGES)):
        samples = read_clocks(root, split)
        assert len(samples) == 16 and all(s.load_image().size == (64, 64) for s in samples)
        assert {s.meta["robustness"] for s in samples} == set(kinds)  # every kind occurs at this seed
        assert all(s.answer == f"{s.meta['hour'] % 12 or 12}:{s.meta['minute']:02d}" for s in samples)
    held = {(r["hour"] % 12, r["minute"]) for r in rows(root, "test_unseen")}
    assert not held & {(r["hour"] % 12, r["minute"]) for r in rows(root, "test_deformed") + rows(root, "test_hands")}


def test_deformed_dials_lie_beyond_every_other_split(robust_set):
    _, root = robust_set
    others = _others(root)
    squash = min(r["dial_squash"] for r in others)
    skew = max(abs(r["dial_skew"]) for r in others)
    warp = max(max(abs(r["perspective_x"]), abs(r["perspective_y"])) for r in others)
    for r in rows(root, "test_deformed"):
        if r["robustness"] == "squash":
            assert r["dial_squash"] < squash - 0.1
        elif r["robustness"] == "skew":
            assert abs(r["dial_skew"]) >= skew + 10
        else:
            assert max(abs(r["perspective_x"]), abs(r["perspective_y"])) >= max(0.2, warp + 0.05)


def test_changed_hands_lie_outside_every_other_split(robust_set):
    _, root = robust_set
    others = _others(root)
    assert all(r["hour_hand_length"] < r["minute_hand_length"] for r in others)
    tips = {r["hand_tip"] for r in others}
    for r in rows(root, "test_hands"):
        kind = r["robustness"]
        if kind == "equal_length":
            assert r["hour_hand_length"] == r["minute_hand_length"]
        elif kind == "new_tip":
            assert r["hand_tip"] not in tips
        for hand in ("hour_hand_width", "minute_hand_width"):
            if kind == "thin":
                assert r[hand] < min(o[hand] for o in others)
            elif kind == "thick":
                assert r[hand] > max(o[hand] for o in others)


def test_other_splits_keep_their_bytes(robust_set, tmp_path):
    setting, root = robust_set
    plain = write_clock_dataset(tmp_path / "plain", 40, seed=2, size=64, progress=False, unseen_fraction=0.2,
                                **SETTINGS[setting])
    with_robust = {k: v for k, v in tree(root).items()
                   if not k.startswith(("test_deformed/", "test_hands/", "generation.json"))}
    assert with_robust == {k: v for k, v in tree(plain).items() if k != "generation.json"}
    generation = json.loads((root / "generation.json").read_text())
    assert generation["robustness"]["num"] == 16 and "tips" in generation["robustness"]["training_ranges"]


def test_training_ranges_and_the_refusals():
    styles = [random_style(random.Random(k)) for k in range(50)]
    ranges = training_ranges(styles)
    assert ranges["hour_hand_width"] == [min(s.hour_hand_width for s in styles), max(s.hour_hand_width for s in styles)]
    assert ranges["length_ratio"] == max(s.hour_hand_length / s.minute_hand_length for s in styles)
    # a dataset already squashed to 0.6 leaves no room below it; one using both new tips leaves no new tip
    squashed = {**ranges, "dial_squash": [0.6, 1.0]}
    with pytest.raises(ValueError, match="already use dial_squash"):
        deform(plain_style(), squashed, random.Random(0), "squash")
    with pytest.raises(ValueError, match="already use the hand tips"):
        change_hands(plain_style(), {**ranges, "tips": ["arrow", "diamond", "plain"]}, random.Random(0), "new_tip")
    styled, kind = change_hands(plain_style(), ranges, random.Random(0), "equal_length")
    assert isinstance(styled, ClockStyle) and styled.validate() and kind == "equal_length"


def test_bad_robustness_arguments(tmp_path):
    with pytest.raises(ValueError, match="robustness_num needs robustness=True"):
        write_clock_dataset(tmp_path / "a", 4, robustness_num=3, progress=False)
    with pytest.raises(ValueError, match="'test_hands' is written by robustness"):
        write_clock_dataset(tmp_path / "b", 4, splits="train=0.5,test_hands=0.5", robustness=True, progress=False)
    with pytest.raises(ValueError, match="already use dial_squash"):  # refused before anything is drawn
        write_clock_dataset(tmp_path / "c", 20, style={"dial_squash": 0.6}, robustness=True, progress=False)
    assert not any(tmp_path.iterdir())


def test_cli_robustness(tmp_path, capsys):
    assert clocks_main(["--num", "6", "--seed", "0", "--size", "64", "--out", str(tmp_path / "c"), "--robustness",
                        "--robustness-num", "2", "--no-progress"]) == 0
    assert "wrote 6 clocks, 2 in each of test_deformed and test_hands" in capsys.readouterr().out
    assert len(rows(tmp_path / "c", "test_hands")) == 2
