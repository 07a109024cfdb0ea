"""`data-synth gallery`: a labelled grid of varied clocks as one PNG, to see what the renderer draws."""

from __future__ import annotations

import math
import random
import sys
from pathlib import Path

from PIL import Image, ImageDraw

from .args import Parser
from .clocks import _font, font_names, render_clock, style_for_seed


def make_gallery(num: int = 16, seed: int = 0, size: int = 192, cols: int | None = None) -> Image.Image:
    """A labelled grid of `num` random clocks (a third of them with seconds); labels give the time."""
    if num < 1:
        raise ValueError(f"num must be >= 1, got {num}")
    cols = cols or math.ceil(math.sqrt(num))
    rows = math.ceil(num / cols)
    label_h = max(14, size // 8)
    font = _font(font_names()[min(1, len(font_names()) - 1)], max(10, size // 11))
    grid = Image.new("RGB", (cols * size, rows * (size + label_h)), (255, 255, 255))
    draw = ImageDraw.Draw(grid)
    for i in range(num):
        rng = random.Random(f"gallery:{seed}:{i}")
        hour, minute = rng.randrange(24), rng.randrange(60)
        second = rng.randrange(60) if i % 3 == 2 else None
        item_seed = rng.getrandbits(63)
        style = style_for_seed(item_seed, {"second_hand": True} if second is not None else None)
        x, y = (i % cols) * size, (i // cols) * (size + label_h)
        grid.paste(render_clock(hour, minute, second, size=size, style=style, seed=item_seed), (x, y))
        label = f"{hour % 12 or 12}:{minute:02d}" + (f":{second:02d}" if second is not None else "")
        if style.am_pm:
            label += " PM" if hour >= 12 else " AM"
        draw.text((x + size / 2, y + size + label_h / 2), label, font=font, fill=(0, 0, 0), anchor="mm")
    return grid


def gallery_main(argv: list[str] | None = None) -> int:
    """`data-synth gallery --out FILE.png [--num N] [--seed S] [--size PX] [--cols C]`."""
    p = Parser(prog="data-synth gallery", description="A labelled grid of varied clocks.")
    p.add_argument("--out", required=True, help="output PNG file")
    p.add_argument("--num", type=int, default=16, help="number of clocks (default 16)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--size", type=int, default=192, help="side of each clock in px (default 192)")
    p.add_argument("--cols", type=int, default=None, help="columns (default: a square-ish grid)")
    args = p.parse_args(argv)
    try:
        grid = make_gallery(args.num, args.seed, args.size, args.cols)
    except ValueError as e:
        print(f"data-synth gallery: {e}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    grid.save(out, optimize=True)
    print(f"wrote {out} ({args.num} clocks, {grid.width}x{grid.height})")
    return 0
