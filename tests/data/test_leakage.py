"""Leakage check: planted duplicates counted exactly, re-encodings equal, one changed pixel not."""

import numpy as np
import pytest
from PIL import Image, PngImagePlugin

from vlm_smmd.data import DataError, Sample
from vlm_smmd.data.leakage import check_leakage, pixel_hash


def chart(seed: int, size=(64, 48)) -> Image.Image:
    """A distinct small RGB image per seed."""
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, size=(size[1], size[0], 3), dtype=np.uint8), "RGB")


def save_png(img: Image.Image, path, *, level=6, text=None):
    info = PngImagePlugin.PngInfo()
    for k, v in (text or {}).items():
        info.add_text(k, v)
    img.save(path, format="PNG", compress_level=level, pnginfo=info)
    return path


def sample(image, answer, id, question="What value does the bar show?", source="bars"):
    return Sample(image=image, question=question, answer=answer, source=source, id=id)


# --------------------------------------------------------------------------------------------- pixel_hash

def test_pixel_hash_ignores_encoding_and_metadata(tmp_path):
    img = chart(1)
    a = save_png(img, tmp_path / "a.png", level=0)
    b = save_png(img, tmp_path / "b.png", level=9, text={"Software": "other", "Comment": "re-encoded"})
    img.save(tmp_path / "c.bmp")
    assert (tmp_path / "a.png").read_bytes() != (tmp_path / "b.png").read_bytes()
    h = pixel_hash(img)
    assert pixel_hash(a) == pixel_hash(b) == pixel_hash(tmp_path / "c.bmp") == pixel_hash(str(a)) == h
    assert pixel_hash(img.convert("RGBA")) == h  # opaque alpha: the model sees the same pixels
    assert len(h) == 64 and int(h, 16) >= 0


def test_pixel_hash_sees_one_pixel_and_the_shape():
    img = chart(2)
    changed = img.copy()
    r, g, b = changed.getpixel((10, 20))
    changed.putpixel((10, 20), (r, g, (b + 1) % 256))
    assert pixel_hash(changed) != pixel_hash(img)
    flat = bytes(range(256)) * 9  # the same bytes as a 24x32 and as a 32x24 image
    assert pixel_hash(Image.frombytes("RGB", (24, 32), flat)) != pixel_hash(Image.frombytes("RGB", (32, 24), flat))


def test_pixel_hash_canonical_mode():
    gray = Image.fromarray(np.arange(48 * 64, dtype=np.uint8).reshape(48, 64) % 251, "L")
    assert pixel_hash(gray) == pixel_hash(gray.convert("RGB"))
    transparent = Image.new("RGBA", (8, 8), (0, 0, 0, 0))  # composited on white, as load_image does
    assert pixel_hash(transparent) == pixel_hash(Image.new("RGB", (8, 8), (255, 255, 255)))


def test_pixel_hash_unreadable_path(tmp_path):
    (tmp_path / "bad.png").write_bytes(b"not a png")
    with pytest.raises(DataError, match="bad.png: unreadable image"):
        pixel_hash(tmp_path / "bad.png")


# ------------------------------------------------------------------------------------------ check_leakage

@pytest.fixture
def training(tmp_path):
    """20 training charts on disk, answers "0".."19"."""
    folder = tmp_path / "train"
    folder.mkdir()
    return [sample(save_png(chart(i), folder / f"{i}.png"), str(i), f"train-{i}") for i in range(20)]


def test_planted_duplicates_counted_exactly(tmp_path, training):
    folder = tmp_path / "test"
    folder.mkdir()
    one_pixel = chart(5)
    one_pixel.putpixel((0, 0), (0, 0, 0) if one_pixel.getpixel((0, 0)) != (0, 0, 0) else (1, 0, 0))
    evaluated = [
        sample(save_png(chart(3), folder / "a.png", level=9, text={"k": "v"}), "103", "t-reencoded"),
        sample(chart(7), " 7 ", "t-in-memory"),  # same pixels as train-7; answer "7" after strip
        sample(save_png(one_pixel, folder / "b.png"), "7.0", "t-one-pixel"),  # "7.0" is not "7"
        sample(chart(100), "19", "t-new"),
        sample(chart(3).convert("L").convert("RGB"), "200", "t-gray"),  # different pixels
        sample(chart(3), "300", "t-again"),  # a second test record with train-3's image
    ]
    report = check_leakage(evaluated, training)
    assert (report.images.k, report.images.n) == (3, 6)
    assert report.images.examples == ["t-reencoded", "t-in-memory", "t-again"]
    assert (report.answers.k, report.answers.n) == (2, 6) and report.answers.examples == ["t-in-memory", "t-new"]
    assert report.questions.n == 0 and report.training == 20 and not report.held_out
    assert report.lines() == [
        "test images also in training: 3 of 6 (e.g. t-reencoded, t-in-memory, t-again)",
        "test answers seen in training: 2 of 6 (e.g. t-in-memory, t-new)",
    ]
    assert check_leakage(evaluated, training, examples=1).images.examples == ["t-reencoded"]
    assert report.to_dict()["images"] == {"k": 3, "n": 6, "examples": ["t-reencoded", "t-in-memory", "t-again"]}


def test_held_out_set(training):
    evaluated = [sample(chart(50 + i), str(50 + i), f"t-{i}") for i in range(4)]
    report = check_leakage(evaluated, iter(training))  # a one-pass iterator is enough
    assert report.held_out and report.images.k == 0 and report.answers.k == 0 and report.training == 20
    assert report.lines() == ["test images also in training: 0 of 4", "test answers seen in training: 0 of 4"]


def test_text_tasks_compare_questions():
    text = dict(image=None, source="arithmetic")
    training = [Sample(question=f"What is {i} + {i}?", answer=str(2 * i), id=f"train-{i}", **text) for i in range(10)]
    training.append(sample(chart(0), " 101\n", "train-img", question="What is 100 + 1?"))
    evaluated = [
        Sample(question="  What is 3 + 3?\n", answer="6", id="t-0", **text),  # same question after strip
        Sample(question="What is 3 plus 3?", answer="6", id="t-1", **text),  # new wording, seen answer
        Sample(question="What is 100 + 1?", answer="101", id="t-2", **text),  # only an image record's question
        Sample(question="What is 4+4?", answer="8", id="t-3", **text),
    ]
    report = check_leakage(evaluated, training)
    assert (report.questions.k, report.questions.n, report.questions.examples) == (1, 4, ["t-0"])
    assert (report.answers.k, report.answers.examples) == (4, ["t-0", "t-1", "t-2"])  # t-2: " 101\n"
    assert report.images.n == 0 and not report.held_out
    assert report.lines() == ["test questions also in training: 1 of 4 (e.g. t-0)",
                              "test answers seen in training: 4 of 4 (e.g. t-0, t-1, t-2)"]


def test_training_images_of_another_size_are_not_decoded(tmp_path, training):
    """The hash covers the size, so a training image whose header gives another size cannot match and is
    not decoded; one of a matching size is, and an undecodable one is an error naming the record."""
    other = tmp_path / "other.png"
    save_png(chart(1, size=(30, 30)), other)
    other.write_bytes(other.read_bytes()[:-40])  # a truncated file: the header still reads
    same = tmp_path / "same.png"
    save_png(chart(2), same)
    same.write_bytes(same.read_bytes()[:-40])
    evaluated = [sample(chart(3), "3", "t-0")]
    report = check_leakage(evaluated, [sample(other, "1", "train-truncated-other-size"), *training])
    assert report.images.k == 1 and report.training == 21
    with pytest.raises(DataError, match="train-truncated"):
        check_leakage(evaluated, [sample(same, "1", "train-truncated"), *training])
    with pytest.raises(DataError, match="image missing.*train-missing"):
        check_leakage(evaluated, [sample(tmp_path / "nowhere.png", "1", "train-missing")])


def test_progress_only_when_asked(capsys, training):
    evaluated = [sample(chart(1), "1", "t-0")]
    check_leakage(evaluated, training)
    assert capsys.readouterr().err == ""
    check_leakage(evaluated, training, progress=True)
    err = capsys.readouterr().err
    assert "hashing evaluated records" in err and "hashing training records" in err and "20/20" in err


def test_an_unseen_split_is_judged_by_what_it_holds_out():
    def problem(i, template, answer):
        return Sample(image=None, question=f"problem {i}", answer=answer, source="word_problems", id=str(i),
                      meta={"template": template})

    training = [problem(i, f"t{i % 3}", str(i)) for i in range(6)]  # templates t0, t1, t2; answers 0..5
    # held-out templates whose answers recur in training: not a leak for a split that holds out templates
    unseen = [problem(10, "t7", "1"), problem(11, "t8", "2")]
    report = check_leakage(unseen, training, unseen_key="template")
    assert (report.answers.k, report.unseen.k, report.unseen.n) == (2, 0, 2)
    assert not report.leaks("test_unseen")
    assert report.lines()[-1] == "test templates seen in training: 0 of 2"
    # one seen template is a leak; judged by answers (no unseen_key), the recurring answers are one
    report = check_leakage([*unseen, problem(12, "t1", "99")], training, unseen_key="template")
    assert report.unseen.k == 1 and report.leaks("test_unseen") and not report.leaks("test")
    assert check_leakage(unseen, training).leaks("test_unseen")
