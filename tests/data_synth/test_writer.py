"""The dataset writer: determinism across workers, imagefolder + read_clocks loading, answers, atomic
writes and --resume (also after a real SIGTERM), the CLI, and the PNG encoder."""

import io
import json
import re
import signal
from datetime import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from data_synth.clocks import ClockStyle, render_clock
from data_synth.writer import clocks_main, encode_png, write_clock_dataset
from tests.data_synth.signals import logged_lines, terminate_when

SMALL = dict(size=64, progress=False)


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def rows(root: Path, split: str) -> list[dict]:
    return [json.loads(line) for line in (root / split / "metadata.jsonl").read_text().splitlines()]


def test_layout_counts_and_rerender_from_metadata(tmp_path):
    out = write_clock_dataset(tmp_path / "d", 10, seed=1, splits="train=0.7,test=0.3", **SMALL)
    train, test = rows(out, "train"), rows(out, "test")
    assert (len(train), len(test)) == (7, 3)
    assert [r["index"] for r in train + test] == list(range(10))
    assert not list(tmp_path.glob(".*partial*"))
    for split, row in [("train", train[2]), ("test", test[0])]:
        style = ClockStyle.from_dict({k: row[k] for k in ClockStyle.__dataclass_fields__})
        again = render_clock(row["hour"], row["minute"], row["second"], size=64, style=style, seed=row["render_seed"])
        stored = Image.open(out / split / row["file_name"])
        assert np.array_equal(np.asarray(stored), np.asarray(again))


def expected_answer(h, m, s, fmt):
    """Independent formatting through datetime.strftime."""
    t = time(h, m, s or 0)
    text = {"h:mm": t.strftime("%I:%M").lstrip("0"), "hh:mm": t.strftime("%I:%M"), "24h": t.strftime("%H:%M")}[fmt]
    return text + (t.strftime(":%S") if s is not None else "")


@pytest.mark.parametrize("fmt, seconds", [("h:mm", False), ("hh:mm", False), ("24h", True), ("h:mm", True)])
def test_answers_follow_the_format_and_the_drawn_time(tmp_path, fmt, seconds):
    out = write_clock_dataset(tmp_path / "f", 24, seed=7, answer_format=fmt, with_seconds=seconds,
                              splits={"train": 1.0}, **SMALL)
    for row in rows(out, "train"):
        assert (row["second"] is not None) == seconds
        assert row["answer"] == expected_answer(row["hour"], row["minute"], row["second"], fmt)
        assert row["second_hand"] == seconds  # never a second hand the answer does not read
        if fmt == "24h":
            assert row["am_pm"] is True
        if seconds:
            assert "{format}" not in row["question"]
    assert {r["hour"] for r in rows(out, "train")} & set(range(12, 24))  # hours over the whole day


def test_loads_with_datasets_imagefolder_and_read_clocks(tmp_path):
    datasets = pytest.importorskip("datasets")
    from vlm_smmd.data import read_clocks

    out = write_clock_dataset(tmp_path / "ds", 12, seed=5, splits="train=0.75,test=0.25", **SMALL)
    ds = datasets.load_dataset("imagefolder", data_dir=str(out), cache_dir=str(tmp_path / "cache"))
    assert set(ds) == {"train", "test"}
    for split, n in (("train", 9), ("test", 3)):
        meta = rows(out, split)
        assert ds[split].num_rows == n
        assert ds[split]["answer"] == [r["answer"] for r in meta]
        assert ds[split]["minute"] == [r["minute"] for r in meta]
        first = ds[split][0]
        assert np.array_equal(np.asarray(first["image"].convert("RGB")),
                              np.asarray(Image.open(out / split / meta[0]["file_name"])))
        samples = read_clocks(out, split)
        assert [s.answer for s in samples] == [r["answer"] for r in meta]
        assert samples[0].source == "clocks" and samples[0].meta["hour"] == meta[0]["hour"]
        assert samples[0].meta["face_shape"] == meta[0]["face_shape"]
        assert samples[0].load_image().size == (64, 64)


def test_time_distribution_file_and_question_phrasings(tmp_path):
    times = tmp_path / "times.txt"
    times.write_text("# two times\n3:00 1\n21:30, 3\n")
    out = write_clock_dataset(tmp_path / "t", 30, seed=2, times=times, splits={"train": 1.0},
                              questions=["Q1 {format}?", "Q2"], **SMALL)
    got = rows(out, "train")
    assert {(r["hour"], r["minute"]) for r in got} == {(3, 0), (21, 30)}
    assert {r["question"] for r in got} == {"Q1 H:MM?", "Q2"}
    bad = tmp_path / "bad.txt"
    bad.write_text("3:00\n25:00\n")
    with pytest.raises(ValueError, match=r"bad\.txt:2"):
        write_clock_dataset(tmp_path / "t2", 3, times=bad, **SMALL)


def test_cli_with_style_options(tmp_path, capsys):
    out = tmp_path / "cli"
    code = clocks_main(["--num", "6", "--seed", "9", "--out", str(out), "--size", "64", "--splits", "train=0.5,test=0.5",
                        "--answer-format", "24h", "--with-seconds", "--plain", "--style", "numerals=roman",
                        "--style", "face_color=#ffeecc", "--style", "blur=0.5", "--no-progress"])
    assert code == 0
    for row in rows(out, "train") + rows(out, "test"):
        assert row["numerals"] == "roman" and row["face_color"] == [255, 238, 204] and row["blur"] == 0.5
        assert row["face_shape"] == "round"  # plain style elsewhere
        assert len(row["answer"]) == 8
    assert clocks_main(["--num", "2", "--out", str(tmp_path / "bad"), "--style", "shade=3", "--no-progress"]) == 2
    assert "shade" in capsys.readouterr().err


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


# Large enough that the run is still going when the signal lands (about a second of rendering is left after
# the first 64 images), small enough that the resume and the reference stay cheap.
SIGNAL_NUM = 1000


@pytest.fixture(scope="module")
def signal_reference(tmp_path_factory):
    """The uninterrupted dataset both signal tests compare against (same arguments), rendered once."""
    return tree(write_clock_dataset(tmp_path_factory.mktemp("signal") / "ref", SIGNAL_NUM, seed=6, size=64,
                                    progress=False))


@pytest.mark.slow
@pytest.mark.parametrize("signum, group", [(signal.SIGTERM, False), (signal.SIGINT, True)], ids=["term", "ctrl-c"])
def test_signal_with_two_workers_ends_cleanly_and_resumes_to_the_same_bytes(tmp_path, in_tmp, signal_reference,
                                                                           signum, group):
    """SIGTERM or Ctrl-C to `data-synth clocks --workers 2` ends with one line, no worker tracebacks.
    SIGTERM goes to the main process alone (`kill PID`); Ctrl-C reaches the workers too."""
    num = SIGNAL_NUM
    args = ["clocks", "--num", str(num), "--seed", "6", "--size", "64", "--out", "ds", "--workers", "2",
            "--no-progress"]
    status, err = terminate_when(args, tmp_path, lambda: logged_lines(tmp_path / ".ds.partial" / "progress.jsonl") >= 64,
                                 signum=signum, group=group)
    assert status == 128 + signum  # as a shell reports a command ended by that signal
    assert "Traceback" not in err and "leaked" not in err and "Error" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and re.fullmatch(
        rf"data-synth clocks: interrupted with (\d+) of {num} images done; the partial dataset is in "
        r"\.ds\.partial; rerun with --resume to finish it", lines[0]), err
    assert 64 <= int(re.search(r"with (\d+)", lines[0])[1]) < num
    assert not (tmp_path / "ds").exists()
    assert clocks_main(args[1:] + ["--resume"]) == 0
    assert tree(tmp_path / "ds") == signal_reference


def test_encode_png_is_lossless():
    rng = np.random.default_rng(0)
    for arr in (rng.integers(0, 256, (37, 53, 3), dtype=np.uint8), rng.integers(0, 256, (20, 9), dtype=np.uint8),
                np.zeros((64, 64, 3), np.uint8)):
        img = Image.fromarray(arr)
        back = Image.open(io.BytesIO(encode_png(img)))
        assert back.mode == img.mode and np.array_equal(np.asarray(back), arr)


def test_encode_png_converts_palette_bilevel_and_ycbcr_like_pil():
    """A P-mode image is written as its palette colours, never as its indices taken for grey levels."""
    rng = np.random.default_rng(1)
    rgb = Image.fromarray(rng.integers(0, 256, (23, 31, 3), dtype=np.uint8))
    palette = rgb.quantize(colors=40)
    assert palette.mode == "P"
    indices = np.asarray(palette)
    cases = [(palette, "RGB"), (rgb.convert("1"), "L"), (rgb.convert("YCbCr"), "RGB")]
    for img, written in cases:
        back = Image.open(io.BytesIO(encode_png(img)))
        assert back.mode == written
        assert np.array_equal(np.asarray(back), np.asarray(img.convert(written))), img.mode
    # the palette colours themselves, looked up by hand, not the indices
    lut = np.array(palette.getpalette(), np.uint8).reshape(-1, 3)
    assert np.array_equal(np.asarray(Image.open(io.BytesIO(encode_png(palette)))), lut[indices])
    assert not np.array_equal(np.asarray(Image.open(io.BytesIO(encode_png(palette))).convert("L")), indices)


@pytest.mark.parametrize("mode", ["RGBA", "LA", "PA", "CMYK", "LAB", "HSV", "I;16", "I", "F", "P+transparency"])
def test_encode_png_refuses_modes_it_cannot_write_faithfully(mode):
    if mode == "P+transparency":
        img = Image.new("RGB", (4, 4), (10, 20, 30)).quantize(colors=4)
        img.info["transparency"] = 0
        match = "transparent"
    else:
        img = Image.new(mode, (4, 4))
        match = re.escape(mode)
    with pytest.raises(ValueError, match=match):
        encode_png(img)
