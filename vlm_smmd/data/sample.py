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
    """One image-question-answer record.

    `image` is a PIL image or a path (opened lazily by `load_image`); `answer` is the training target
    (for sources with several accepted labels the first, all of them in `meta["answers"]`).
    """

    image: Any
    question: str
    answer: str
    source: str
    id: str
    meta: dict = field(default_factory=dict)

    def load_image(self) -> Image.Image:
        """The image as RGB (transparent pixels composited on white); DataError naming file and record."""
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
