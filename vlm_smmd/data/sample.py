"""Sample: the one record every data source yields."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image, UnidentifiedImageError


class DataError(ValueError):
    """A record that cannot be used; the message names the file and the record."""


@dataclass
class Sample:
    """One image-question-answer record, or a text-only question-answer record.

    `image` is a PIL image, a path (opened lazily by `load_image`), or None for a text-only sample (GSM8K,
    SVAMP, DeepMind Mathematics, synthetic arithmetic); `answer` is the training target (for sources with
    several accepted labels the first, all of them in `meta["answers"]`; for the text sources the exact
    final number is also in `meta["final_answer"]`, which scoring uses whatever the target).
    """

    image: Any
    question: str
    answer: str
    source: str
    id: str
    meta: dict = field(default_factory=dict)

    def load_image(self) -> Image.Image:
        """The image as RGB (transparent pixels composited on white); DataError naming file and record,
        and for a text-only sample (`image` None)."""
        if self.image is None:
            raise DataError(f"record {self.id!r} of {self.source} is text-only (image=None): it has no image to load")
        if isinstance(self.image, Image.Image):
            return to_rgb(self.image)
        path = Path(self.image)
        try:
            with Image.open(path) as img:
                img.load()
                return to_rgb(img)
        except FileNotFoundError:
            raise DataError(f"{path}: image missing (record {self.id!r} of {self.source})") from None
        except (UnidentifiedImageError, OSError, SyntaxError) as e:
            raise DataError(f"{path}: unreadable image (record {self.id!r} of {self.source}): {e}") from None


def to_rgb(img: Image.Image) -> Image.Image:
    """RGB copy; images with alpha are composited on white (PlotQA PNGs are RGBA)."""
    if img.mode in ("RGBA", "LA") or (img.mode == "P" and "transparency" in img.info):
        rgba = img.convert("RGBA")
        canvas = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(canvas, rgba).convert("RGB")
    return img.convert("RGB") if img.mode != "RGB" else img.copy()


def resolve_in_root(root, relative: str, *, record: str, source: str) -> Path:
    """`root/relative`, refusing absolute paths and paths that leave `root` (DataError names both)."""
    root = Path(root)
    rel = Path(str(relative))
    if rel.is_absolute() or ".." in rel.parts:
        raise DataError(f"{relative}: image path leaves the dataset root {root} (record {record!r} of {source})")
    path = root / rel
    if not path.resolve().is_relative_to(root.resolve()):
        raise DataError(f"{relative}: image path leaves the dataset root {root} (record {record!r} of {source})")
    return path


class SkipLog:
    """Counts records skipped under on_error="skip", by reason, and reports them once."""

    def __init__(self, source: str):
        self.source = source
        self.counts: dict[str, int] = {}
        self.examples: list[str] = []

    def add(self, error: Exception) -> None:
        reason = type(error).__name__ if not isinstance(error, DataError) else _reason(str(error))
        self.counts[reason] = self.counts.get(reason, 0) + 1
        if len(self.examples) < 5:
            self.examples.append(str(error))

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def summary(self) -> str:
        if not self.total:
            return f"{self.source}: no records skipped"
        parts = ", ".join(f"{n} {reason}" for reason, n in sorted(self.counts.items()))
        return f"{self.source}: skipped {self.total} records ({parts}); e.g. {self.examples[0]}"

    def report(self) -> None:
        if self.total:
            import warnings

            warnings.warn(self.summary(), stacklevel=3)


def _reason(message: str) -> str:
    for reason in ("image missing", "unreadable image", "leaves the dataset root", "malformed record",
                   "non-numeric answer", "too long"):
        if reason in message:
            return reason
    return "invalid record"


def check_on_error(on_error: str) -> None:
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
