"""Sample: the one record every data source yields; how an image becomes the RGB the model sees (`to_rgb`:
alpha on white, high bit depths scaled to 8 bits) and what an unusable one is (`decode_image`: missing,
over the pixel limit of `set_max_image_pixels`, unreadable: each a DataError naming file and record);
what a blank answer is (`is_blank`)."""

from __future__ import annotations

import re
import unicodedata
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image

# Pillow's limit on width x height as this process started (about 89.5 million pixels, 9459 x 9459).
PILLOW_MAX_IMAGE_PIXELS = Image.MAX_IMAGE_PIXELS
HIGH_BIT_MODES = ("I;16", "I;16L", "I;16B", "I;16N", "I", "F")  # greyscale modes `to_rgb` rescales to 8 bits


class DataError(ValueError):
    """A record that cannot be used; the message names the file and the record."""


def is_blank(text: str) -> bool:
    """True when `text` shows nothing: only whitespace and control or format characters (Unicode Cc, Cf:
    zero-width space U+200B, byte order mark U+FEFF, word joiner U+2060, soft hyphen...). Such an answer
    is refused like an empty one."""
    return all(c.isspace() or unicodedata.category(c) in ("Cc", "Cf") for c in text)


def set_max_image_pixels(limit: int | None) -> None:
    """The largest image, in width x height pixels, that loading accepts in this process; a larger one is
    a DataError 'image too large' naming file and record (skipped and counted under on_error="skip").

    None restores Pillow's default (`PILLOW_MAX_IMAGE_PIXELS`, 89,478,485); 0 removes the limit (a
    huge image may then exhaust memory). Sets `PIL.Image.MAX_IMAGE_PIXELS`, so it applies to every image
    Pillow opens in this process and in workers forked after the call. Pillow only warns between the
    limit and twice the limit; images opened here refuse everything above the limit.
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"max_image_pixels must be an integer >= 0 (0: no limit) or None (Pillow's default "
                         f"{PILLOW_MAX_IMAGE_PIXELS:,}), got {limit!r}")
    Image.MAX_IMAGE_PIXELS = PILLOW_MAX_IMAGE_PIXELS if limit is None else (limit or None)


@contextmanager
def pixel_limit():
    """Inside, Pillow's DecompressionBombWarning (an image over `Image.MAX_IMAGE_PIXELS`) is raised like its
    DecompressionBombError, so every image over the limit fails; `image_problem` describes both."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        yield


_BOMB_PIXELS = re.compile(r"\((\d+) pixels\)")


def image_problem(error: BaseException) -> str:
    """The reason an image failed to open or decode, for a DataError: 'image too large: ...' (over the
    pixel limit) or 'unreadable image: <type>: <message>'."""
    if isinstance(error, (Image.DecompressionBombError, Image.DecompressionBombWarning)):
        found = _BOMB_PIXELS.search(str(error))
        size = f"{int(found[1]):,} pixels" if found else str(error)
        limit = Image.MAX_IMAGE_PIXELS
        return (f"image too large: {size}, more than the limit of {limit:,} (raise it with max_image_pixels, "
                f"or 0 for no limit)")
    if isinstance(error, MemoryError):
        return "unreadable image: not enough memory to decode it"
    if isinstance(error, DataError):  # to_rgb's own refusal
        return f"unreadable image: {error}"
    return f"unreadable image: {type(error).__name__}: {error}"


def decode_image(source, name, record: str | None = None) -> Image.Image:
    """The image in `source` (a path or a binary file object) fully decoded, as `to_rgb` gives it.

    Every problem is a DataError '{name}: <reason> ({record}): <detail>': 'image missing', 'image too
    large' (over the pixel limit, `set_max_image_pixels`), 'unreadable image' (anything Pillow or `to_rgb`
    refuses).
    """
    where = f" ({record})" if record else ""
    try:
        with pixel_limit(), Image.open(source) as img:
            img.load()
            return to_rgb(img)
    except FileNotFoundError:
        raise DataError(f"{name}: image missing{where}") from None
    except Exception as e:  # Pillow raises many types for bad files (OSError, ValueError, SyntaxError, ...)
        reason, _, detail = image_problem(e).partition(": ")
        raise DataError(f"{name}: {reason}{where}: {detail}") from None


@dataclass
class Sample:
    """One image-question-answer record, or a text-only question-answer record.

    `image` is a PIL image, a path (opened lazily by `load_image`), or None for a text-only sample (GSM8K,
    SVAMP, DeepMind Mathematics, synthetic arithmetic); `answer` is the training target (for sources with
    several accepted labels the first, all of them in `meta["answers"]`; for the text sources the exact
    final number is also in `meta["final_answer"]`, which scoring uses whatever the target).

    `numeric_spans`: the character spans [start, end) of `answer` whose numeric tokens are numeric targets
    (the aux loss applies there only; cross-entropy still covers every answer token), e.g. the coordinates
    of a grounding answer and not the "2" of "bbox_2d". None (the default): every numeric token of the
    answer. Each span must start and end on token boundaries (the collator refuses it otherwise).
    """

    image: Any
    question: str
    answer: str
    source: str
    id: str
    meta: dict = field(default_factory=dict)
    numeric_spans: tuple[tuple[int, int], ...] | None = None

    def load_image(self) -> Image.Image:
        """The image as RGB (transparent pixels composited on white); DataError naming file and record,
        and for a text-only sample (`image` None)."""
        if self.image is None:
            raise DataError(f"record {self.id!r} of {self.source} is text-only (image=None): it has no image to load")
        record = f"record {self.id!r} of {self.source}"
        if isinstance(self.image, Image.Image):
            try:
                return to_rgb(self.image)
            except DataError as e:
                raise DataError(f"unreadable image ({record}): {e}") from None
        path = Path(self.image)
        return decode_image(path, path, record)


def to_rgb(img: Image.Image) -> Image.Image:
    """RGB copy; images with alpha are composited on white (PlotQA PNGs are RGBA).

    High-bit-depth greyscale (`HIGH_BIT_MODES`) is scaled to 8 bits first, where Pillow's own conversion
    clips every value above 255 to white:
    - I;16 (and I;16L, I;16B, I;16N), 16-bit: by the full 16-bit range, v * 255 / 65535 rounded to nearest
      (0 -> 0, 32896 -> 128, 65535 -> 255);
    - I (32-bit signed): the same 16-bit rule when every value lies in 0..65535 (older Pillow releases open
      16-bit greyscale PNGs as I), else the image's own range [min, max] stretched onto 0..255;
    - F (32-bit float): its own range [min, max] stretched onto 0..255.
    A stretched image with one value throughout keeps that value clipped to 0..255. NaN or infinite
    pixels raise DataError.
    """
    if img.mode in HIGH_BIT_MODES:
        img = _to_8_bits(img)
    if img.mode in ("RGBA", "LA") or (img.mode == "P" and "transparency" in img.info):
        rgba = img.convert("RGBA")
        canvas = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(canvas, rgba).convert("RGB")
    return img.convert("RGB") if img.mode != "RGB" else img.copy()


def _to_8_bits(img: Image.Image) -> Image.Image:
    """A high-bit-depth greyscale image as mode L (rules in `to_rgb`)."""
    import numpy as np

    values = np.asarray(img)
    if img.mode == "F":
        values = values.astype(np.float64)
        if not np.isfinite(values).all():
            raise DataError(f"{img.mode} image with NaN or infinite pixel values")
    else:
        values = values.astype(np.int64)
    low, high = (values.min(), values.max()) if values.size else (0, 0)
    if img.mode != "F" and low >= 0 and high <= 65535:
        scaled = (values * 255 + 32767) // 65535  # exact integer rounding to nearest (no ties exist)
    elif high > low:
        scaled = np.floor((values - low) * (255 / (high - low)) + 0.5)
    else:
        scaled = np.clip(np.floor(values + 0.5), 0, 255)
    return Image.fromarray(scaled.astype(np.uint8))


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
    for reason in ("image missing", "image too large", "unreadable image", "leaves the dataset root",
                   "malformed record", "non-numeric answer", "too long", "non-ASCII digits"):
        if reason in message:
            return reason
    return "invalid record"


def check_on_error(on_error: str) -> None:
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
