"""Is an evaluated set really held out? Its images, answers and (text tasks) questions against a training set.

An image is compared by `pixel_hash`: the decoded pixels as the model receives them (RGB, transparency
composited on white, as `Sample.load_image` gives them), so a re-encoded or re-saved copy of a training
image counts as the same image and a one-pixel change does not. Answers and questions are compared as
their text after `strip()`, nothing more (no case folding, no number parsing: "7" and "7.0" differ).
The training set is streamed once and never held: only the evaluated set's hashes and texts are kept.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

from PIL import Image

from .sample import Sample, decode_image, pixel_limit, to_rgb

EXAMPLES = 3  # evaluated ids quoted per overlap line


def _canonical(image: Image.Image) -> Image.Image:
    return image if image.mode == "RGB" else to_rgb(image)


def pixel_hash(image) -> str:
    """SHA-256 hex digest of an image's decoded pixels: mode, size and raw bytes after conversion to RGB
    (alpha composited on white). `image`: a PIL image or a path; file format, compression and metadata
    do not change it. An unreadable path raises DataError naming it."""
    if not isinstance(image, Image.Image):
        image = decode_image(image, image)
    rgb = _canonical(image)
    digest = hashlib.sha256(f"{rgb.mode} {rgb.width}x{rgb.height}\n".encode())
    digest.update(rgb.tobytes())
    return digest.hexdigest()


def _sample_hash(sample: Sample) -> str:
    return pixel_hash(sample.load_image())  # load_image's errors name the file and the record


def _image_size(sample: Sample) -> tuple[int, int] | None:
    """Width and height from the header alone; None when it cannot be read (decoding then raises the
    DataError that names the record)."""
    if isinstance(sample.image, Image.Image):
        return sample.image.size
    try:
        with pixel_limit(), Image.open(sample.image) as img:
            return img.size
    except Exception:  # Pillow raises many types for bad files
        return None


@dataclass
class Overlap:
    """k of the n evaluated records whose image / answer / question also occurs in the training set;
    `examples`: the ids of the first few of them, in evaluated order."""

    k: int = 0
    n: int = 0
    examples: list[str] = field(default_factory=list)

    def line(self, what: str) -> str:
        text = f"{what}: {self.k} of {self.n}"
        return text + (f" (e.g. {', '.join(self.examples)})" if self.examples else "")


@dataclass
class LeakageReport:
    """What an evaluated set shares with a training set. `images` counts records with an image (n: those
    records), `questions` text-only records (image None) whose question text is a training question of a
    text-only record, `answers` every record. `training`: training records read."""

    images: Overlap
    answers: Overlap
    questions: Overlap
    training: int
    # what an unseen split holds out, when it is not the answers: a meta key (word problems: "template")
    # and how many evaluated records have a value of it that training has
    unseen_key: str | None = None
    unseen: Overlap | None = None

    @property
    def held_out(self) -> bool:
        """No evaluated image and no text-only question occurs in training (shared answers are allowed:
        only an unseen-values split promises none)."""
        return self.images.k == 0 and self.questions.k == 0

    def leaks(self, split: str) -> bool:
        """Whether a split presented as held out is not: it shares an image or a text question with training,
        or, for an unseen split (its name holds "unseen"), what it holds out: an answer, or the value of
        `unseen_key` (a template)."""
        held_out = self.answers if self.unseen is None else self.unseen
        return not self.held_out or ("unseen" in split and held_out.k > 0)

    def lines(self) -> list[str]:
        """One line per check that applies, e.g. "test images also in training: 3 of 500 (e.g. ...)"."""
        out = []
        if self.images.n:
            out.append(self.images.line("test images also in training"))
        if self.questions.n:
            out.append(self.questions.line("test questions also in training"))
        out.append(self.answers.line("test answers seen in training"))
        if self.unseen is not None:
            out.append(self.unseen.line(f"test {self.unseen_key}s seen in training"))
        return out

    def to_dict(self) -> dict:
        """JSON-ready: {"images": {"k", "n", "examples"}, "answers": ..., "questions": ..., "training": int}."""
        return asdict(self)


def _bar(items, desc: str, progress: bool):
    from tqdm import tqdm

    return tqdm(items, desc=desc, unit="rec", disable=not progress,
                total=len(items) if hasattr(items, "__len__") else None)


def check_leakage(evaluated: Iterable[Sample], training: Iterable[Sample], *, examples: int = EXAMPLES,
                  progress: bool = False, unseen_key: str | None = None) -> LeakageReport:
    """Count the evaluated records whose image (decoded-pixel hash), answer text or, for text-only records,
    question text also occurs among the training records.

    Both are iterated once, the evaluated set first. Memory grows with the evaluated set only: training
    images are hashed one at a time, and those whose size matches no evaluated image are not decoded (the
    hash covers the size, so they cannot match). Unreadable images raise DataError naming file and record.
    `progress` shows a tqdm bar per pass. `unseen_key`: a meta key an unseen split holds out instead of the
    answers (word problems: "template"); its overlap is counted too.
    """
    ids: list[str] = []
    by_unseen: dict[str, list[int]] = {}
    by_hash: dict[str, list[int]] = {}
    by_answer: dict[str, list[int]] = {}
    by_question: dict[str, list[int]] = {}
    sizes: set[tuple[int, int]] = set()
    for i, sample in enumerate(_bar(evaluated, "hashing evaluated records", progress)):
        ids.append(sample.id)
        by_answer.setdefault(sample.answer.strip(), []).append(i)
        if unseen_key is not None:
            by_unseen.setdefault(str(sample.meta.get(unseen_key)), []).append(i)
        if sample.image is None:
            by_question.setdefault(sample.question.strip(), []).append(i)
        else:
            image = sample.load_image()
            sizes.add(image.size)
            by_hash.setdefault(pixel_hash(image), []).append(i)

    hit_image, hit_answer, hit_question, hit_unseen = set(), set(), set(), set()
    n_training = 0
    for sample in _bar(training, "hashing training records", progress):
        n_training += 1
        hit_answer.update(by_answer.pop(sample.answer.strip(), ()))
        if unseen_key is not None:
            hit_unseen.update(by_unseen.pop(str(sample.meta.get(unseen_key)), ()))
        if sample.image is None:
            hit_question.update(by_question.pop(sample.question.strip(), ()))
        elif by_hash:
            size = _image_size(sample)
            if size is None or size in sizes:
                hit_image.update(by_hash.pop(_sample_hash(sample), ()))

    def overlap(hits: set[int], n: int) -> Overlap:
        return Overlap(k=len(hits), n=n, examples=[ids[i] for i in sorted(hits)[:examples]])

    n_images = sum(len(v) for v in by_hash.values()) + len(hit_image)
    n_questions = sum(len(v) for v in by_question.values()) + len(hit_question)
    return LeakageReport(images=overlap(hit_image, n_images), answers=overlap(hit_answer, len(ids)),
                         questions=overlap(hit_question, n_questions), training=n_training, unseen_key=unseen_key,
                         unseen=None if unseen_key is None else overlap(hit_unseen, len(ids)))
