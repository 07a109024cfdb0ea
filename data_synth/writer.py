"""Write clock datasets: a Hugging Face imagefolder per split, in parallel, atomically, deterministically.

Layout of `out/`:
    generation.json                  the arguments that made the dataset (seed, size, styles, unseen times, ...)
    {split}/metadata.jsonl           one row per image: file_name, question, answer, hour, minute, second,
                                     index, render_seed and every ClockStyle attribute
    {split}/{index // 1000:04d}/{index:08d}.png

Image `index` gets its own seed from (seed, index) alone, so the bytes do not depend on the worker count
or on interruptions. Splits take contiguous index blocks in the order given (`num` images), then the
`test_unseen` split when `unseen_fraction` holds dial times out of the others, then with `robustness` the
`test_deformed` and `test_hands` splits (`clock_robustness`: renders outside the others' range). Built with
`data_synth.dataset.build_dataset`: in `.{out}.partial` next to `out`, renamed when complete;
`resume=True` continues a partial folder.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
from dataclasses import fields
from pathlib import Path

import numpy as np

from . import clock_robustness
from .args import Parser, bounded_int
from .clocks import (
    ClockStyle,
    font_names,
    plain_style,
    render_clock,
    style_for_seed,
    system_fonts,
    vary_style,
)
from .dataset import (
    MAX_ITEMS,
    MAX_SIDE,
    UNSEEN_SPLIT,
    add_build_args,
    add_dataset_args,
    add_splits_arg,
    add_unseen_args,
    build_dataset,
    check_fraction,
    check_int,
    encode_png,
    item_seed,
    parse_splits,
    pick_unseen,
    run_writer,
    split_bounds,
    split_counts,
    split_of,
    unseen_settings,
    write_file,
    write_metadata,
)

ANSWER_FORMATS = ("h:mm", "hh:mm", "24h")
_FORMAT_TEXT = {"h:mm": "H:MM", "hh:mm": "HH:MM", "24h": "24-hour HH:MM"}
DEFAULT_QUESTIONS = (
    "What time does the clock show?",
    "What time is shown on this clock?",
    "Read the time on this analog clock.",
    "What time is it according to the clock?",
    "Tell me the time shown on the clock face.",
    "What time does the clock show? Answer in {format} format.",
)
SHARD = 1000  # images per sub-folder


# ------------------------------------------------------------------------------------------ answers

def format_answer(hour: int, minute: int, second: int | None = None, answer_format: str = "h:mm") -> str:
    """"3:07" (h:mm, 12-hour, 0 -> 12), "03:07" (hh:mm), "15:07" (24h); ":SS" appended when `second` given."""
    if answer_format == "h:mm":
        text = f"{hour % 12 or 12}:{minute:02d}"
    elif answer_format == "hh:mm":
        text = f"{hour % 12 or 12:02d}:{minute:02d}"
    elif answer_format == "24h":
        text = f"{hour:02d}:{minute:02d}"
    else:
        raise ValueError(f"answer_format must be one of {', '.join(ANSWER_FORMATS)}; got {answer_format!r}")
    return text if second is None else f"{text}:{second:02d}"


def read_times(path) -> list[tuple[int, int, int | None, float]]:
    """A time distribution file: one `H:MM[:SS] [weight]` per line (hour 0..23; weight default 1; '#'
    comments). Returns (hour, minute, second or None, weight) tuples; ValueError names file and line."""
    out = []
    for lineno, line in enumerate(Path(path).read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"(\d{1,2}):(\d{2})(?::(\d{2}))?(?:[\s,]+([0-9.eE+-]+))?", line)
        try:
            if not m:
                raise ValueError("expected H:MM[:SS] [weight]")
            h, mi = int(m[1]), int(m[2])
            s = None if m[3] is None else int(m[3])
            w = 1.0 if m[4] is None else float(m[4])
            if not (0 <= h <= 23 and 0 <= mi <= 59 and (s is None or 0 <= s <= 59)):
                raise ValueError("hour must be 0..23, minute and second 0..59")
            if not (w >= 0 and np.isfinite(w)):
                raise ValueError("weight must be a finite number >= 0")
        except ValueError as e:
            raise ValueError(f"{path}:{lineno}: bad time {line!r}: {e}") from None
        out.append((h, mi, s, w))
    if not out or sum(w for *_, w in out) <= 0:
        raise ValueError(f"{path}: no time with a positive weight")
    return out


# -------------------------------------------------------------------------------------- dial times

def dial_times() -> list[tuple[int, int]]:
    """The 720 (hour 0..11, minute) readings of a 12-hour dial."""
    return [(h, m) for h in range(12) for m in range(60)]


def unseen_times(fraction: float, seed: int = 0) -> list[tuple[int, int]]:
    """The dial times held out of training by `unseen_fraction=fraction, unseen_seed=seed`: a seeded fifth
    (say) of the 720, chosen so that every hour and every minute value is still shown in training (so
    every digit still occurs at every place of the training answers). A pure function of its arguments."""
    return pick_unseen(dial_times(), lambda t: (("hour", t[0]), ("minute", t[1])), fraction, seed)


# -------------------------------------------------------------------------------------------- items

class _Plan:
    """Everything that decides the bytes of a clock dataset, and the recipe for one image from it (the
    plan interface of `data_synth.dataset.build_partial`)."""

    name, noun, unit, chunk = "clocks", "images", "img", 64

    def __init__(self, cfg: dict):
        self.cfg = cfg
        self.style = dict(cfg["style"])
        if cfg["with_seconds"]:
            self._force("second_hand", True, "answers with seconds need the second hand")
        else:  # keeps the metadata truthful: no second hand is drawn without a second
            self._force("second_hand", False, "a second hand needs with_seconds")
        if cfg["answer_format"] == "24h":
            self._force("am_pm", True, "24-hour answers need the AM/PM window")
        self.fonts = tuple(cfg["fonts"])
        self.times = cfg["times"]
        if self.times is not None:
            self.cum = np.cumsum([w for *_, w in self.times]).tolist()
        self.bounds = split_bounds(cfg["num"], cfg["splits"], "image")
        self.total = cfg["num"]
        unseen = cfg["unseen"]
        if unseen is not None:  # seen times for the splits, the held-out ones for test_unseen
            held = {tuple(t) for t in unseen["times"]}
            self.pools = ([t for t in dial_times() if t not in held], sorted(held))
            self.bounds.append((cfg["num"], cfg["num"] + unseen["num"], UNSEEN_SPLIT))
            self.total += unseen["num"]
        robust = cfg.get("robustness")
        if robust is not None:  # after every other split: their indices, hence their bytes, stay as they were
            for split in clock_robustness.SPLITS:
                self.bounds.append((self.total, self.total + robust["num"], split))
                self.total += robust["num"]

    def training_ranges(self) -> dict:
        """`clock_robustness.training_ranges` over the styles of every image of the other splits."""
        return clock_robustness.training_ranges(self.item(i)[1] for i in range(self.total)
                                                if self.split_of(i) not in clock_robustness.SPLITS)

    def _force(self, key, value, why):
        if self.style.get(key, value) != value:
            raise ValueError(f"style {key}={self.style[key]!r} conflicts with the answer format: {why}")
        self.style[key] = value

    def split_of(self, index: int) -> str:
        return split_of(self.bounds, index)

    def item(self, index: int) -> tuple[dict, ClockStyle]:
        """(metadata row, style) of image `index`; cheap (no drawing)."""
        cfg = self.cfg
        seed = item_seed("clocks", cfg["seed"], index)
        rng = random.Random(seed)
        split = self.split_of(index)
        if cfg["unseen"] is not None:
            pool = self.pools[split == UNSEEN_SPLIT]
            h12, minute = pool[rng.randrange(len(pool))]
            hour = h12 + 12 * rng.randrange(2)
            second = rng.randrange(60) if cfg["with_seconds"] else None
        elif self.times is None:
            hour, minute = rng.randrange(24), rng.randrange(60)
            second = rng.randrange(60) if cfg["with_seconds"] else None
        else:
            hour, minute, second, _ = rng.choices(self.times, cum_weights=self.cum)[0]
            if cfg["with_seconds"] and second is None:
                second = rng.randrange(60)
        fmt = _FORMAT_TEXT[cfg["answer_format"]] + (":SS" if cfg["with_seconds"] else "")
        question = rng.choice(cfg["questions"]).replace("{format}", fmt)
        if cfg["plain"]:
            style = plain_style(**self.style)
            if cfg["variation"]:
                style = vary_style(style, seed)
        else:
            style = style_for_seed(seed, self.style, self.fonts)
        kind = None
        if split in clock_robustness.SPLITS:  # a test image's style, then one change beyond the other splits' range
            change = clock_robustness.deform if split == clock_robustness.DEFORMED else clock_robustness.change_hands
            style, kind = change(style, cfg["robustness"]["training_ranges"], random.Random(f"robust:{seed}"))
            style.validate()
        row = {"file_name": f"{index // SHARD:04d}/{index:08d}.png", "question": question,
               "answer": format_answer(hour, minute, second, cfg["answer_format"]),
               "hour": hour, "minute": minute, "second": second, "index": index, "render_seed": seed,
               **style.to_dict()}
        if kind is not None:
            row["robustness"] = kind
        return row, style

    def render(self, index: int, root: Path) -> str:
        return _render_item(self, index, root)

    def is_done(self, row: dict, root: Path) -> bool:
        return (root / self.split_of(row["index"]) / row["file_name"]).is_file()

    def finish(self, root: Path, done: dict[int, str]) -> None:
        write_metadata(root, self.bounds, done)


def _render_item(plan: _Plan, index: int, root: Path) -> str:
    """Draw image `index`, write it (atomically) under root/split/, return its metadata line."""
    row, style = plan.item(index)
    img = render_clock(row["hour"], row["minute"], row["second"], size=plan.cfg["size"], style=style,
                       seed=row["render_seed"])
    write_file(root / plan.split_of(index) / row["file_name"], encode_png(img))
    return json.dumps(row)


def write_clock_dataset(out, num: int, seed: int = 0, *, size: int = 448,
                        splits: dict[str, float] | str = "train=0.9,test=0.1", answer_format: str = "h:mm",
                        with_seconds: bool = False, style: dict | None = None, plain: bool = False,
                        variation: bool = True, unseen_fraction: float = 0.0, unseen_seed: int = 0,
                        unseen_num: int | None = None, times=None, questions=None, system_font_pool: bool = False,
                        robustness: bool = False, robustness_num: int | None = None, workers: int = 1, resume: bool = False, overwrite: bool = False, progress: bool = True) -> Path:
    """Render `num` clocks into an imagefolder dataset at `out`; returns `out`.

    splits: {"train": 0.9, "test": 0.1} or "train=0.9,test=0.1". size: 64..4096 px. answer_format: h:mm |
    hh:mm | 24h (24h turns on the AM/PM window), with_seconds adds ":SS" and the second hand. style:
    ClockStyle attributes fixed for every image (the rest drawn per image), or with plain=True changes to
    the plain style; with plain=True and variation=True (the default) each image's hand colours, widths
    and lengths and its face (size, border, ticks, cap, background colour) vary around that style
    (`clocks.vary_style`), so no two images are alike. unseen_fraction > 0 holds that fraction of the 720
    dial times out of every split (`unseen_times(unseen_fraction, unseen_seed)`) and writes them, and only
    them, into an extra split `test_unseen` of `unseen_num` images (default: as many as the smallest split).
    times: None (uniform over 24 h) or (hour, minute, second|None, weight) tuples or a file for
    `read_times`. questions: phrasings, one drawn per image; "{format}" becomes e.g. "H:MM". robustness:
    also write `test_deformed` and `test_hands`, `robustness_num` images each (default: as many as the
    smallest split), drawn as test images and then changed beyond the range the other splits' styles hold
    (`clock_robustness`; that range is kept in generation.json).
    Deterministic in (arguments, seed) whatever `workers`; ValueError on bad arguments.
    """
    cfg = _config(num, seed, size, splits, answer_format, with_seconds, style, plain, variation, unseen_fraction,
                  unseen_seed, unseen_num, times, questions, system_font_pool)
    if not isinstance(robustness, bool):
        raise ValueError(f"robustness must be True or False, got {robustness!r}")
    if robustness:
        if robustness_num is None:
            robustness_num = max(1, min(split_counts(num, cfg["splits"]).values()))  # 0: split_bounds refuses
        check_int("robustness_num", robustness_num, 1, MAX_ITEMS)
        for split in clock_robustness.SPLITS:
            if split in cfg["splits"]:
                raise ValueError(f"splits: {split!r} is written by robustness; name the others only")
        # the range is measured once, here, over the other splits' styles (cheap: no drawing)
        plan = _Plan(cfg)
        ranges = plan.training_ranges()
        clock_robustness.check_room(plan.item(0)[1], ranges)  # refuse now, not in a worker half way
        cfg["robustness"] = {"num": robustness_num, "training_ranges": ranges}
    elif robustness_num is not None:
        raise ValueError("robustness_num needs robustness=True")
    plan = _Plan(cfg)
    plan.item(0)  # fail early on a style that cannot be drawn
    return build_dataset(out, plan, workers=workers, resume=resume, overwrite=overwrite, progress=progress)


def _config(num, seed, size, splits, answer_format, with_seconds, style, plain, variation, unseen_fraction,
            unseen_seed, unseen_num, times, questions, system_font_pool) -> dict:
    """The JSON-ready generation config (validated); equal configs give identical datasets."""
    check_int("num", num, 1, MAX_ITEMS)
    check_int("size", size, 64, MAX_SIDE)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an integer, got {seed!r}")
    if answer_format not in ANSWER_FORMATS:
        raise ValueError(f"answer_format must be one of {', '.join(ANSWER_FORMATS)}; got {answer_format!r}")
    splits = parse_splits(splits) if isinstance(splits, str) else dict(splits)
    parse_splits(",".join(f"{k}={v}" for k, v in splits.items()))  # same checks for a dict
    style = {k: list(v) if isinstance(v, tuple) else v for k, v in (style or {}).items()}
    unknown = sorted(set(style) - {f.name for f in fields(ClockStyle)})
    if unknown:
        raise ValueError(f"unknown style attribute(s): {', '.join(unknown)}")
    if isinstance(times, (str, os.PathLike)):
        times = read_times(times)
    if times is not None:
        times = [[int(h), int(m), None if s is None else int(s), float(w)] for h, m, s, w in times]
        if not with_seconds and any(s is not None for _, _, s, _ in times):
            raise ValueError("times: entries with seconds need with_seconds=True")
        if not times or sum(w for *_, w in times) <= 0:
            raise ValueError("times: no time with a positive weight")
    questions = list(questions or DEFAULT_QUESTIONS)
    if not all(isinstance(q, str) and q.strip() for q in questions):
        raise ValueError("questions must be non-empty strings")
    if not isinstance(variation, bool):
        raise ValueError(f"variation must be True or False, got {variation!r}")
    if check_fraction(unseen_fraction) > 0 and times is not None:
        raise ValueError("unseen_fraction draws times uniformly from the dial; it cannot be combined with times")
    unseen = unseen_settings(unseen_fraction, unseen_seed, unseen_num, num, splits)
    if unseen:
        unseen["times"] = [list(t) for t in unseen_times(unseen_fraction, unseen_seed)]
    fonts = list(font_names()) + (list(system_fonts()) if system_font_pool else [])
    return {"num": num, "seed": seed, "size": size, "splits": splits, "answer_format": answer_format,
            "with_seconds": bool(with_seconds), "style": style, "plain": bool(plain), "variation": variation,
            "unseen": unseen, "times": times, "questions": questions, "fonts": fonts}


# ---------------------------------------------------------------------------------------------- CLI

def _style_value(key: str, text: str):
    types = {f.name: f.type for f in fields(ClockStyle)}
    if key not in types:
        raise ValueError(f"--style: unknown attribute {key!r} (known: {', '.join(types)})")
    kind = types[key]
    try:
        if kind == "Color":
            if text.startswith("#") and len(text) == 7:
                return [int(text[k:k + 2], 16) for k in (1, 3, 5)]
            parts = [int(p) for p in text.split(",")]
            if len(parts) != 3:
                raise ValueError
            return parts
        if kind == "bool":
            if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError
            return text.lower() in ("true", "1", "yes")
        if kind == "int":
            return int(text)
        if kind == "float":
            return float(text)
        return text
    except ValueError:
        raise ValueError(f"--style {key}={text!r}: expected {'#rrggbb or r,g,b' if kind == 'Color' else kind}") from None


def _style_help() -> str:
    parts = []
    for f in fields(ClockStyle):
        if f.type == "Color":
            what = "#rrggbb or r,g,b"
        elif "choices" in f.metadata:
            what = "|".join(f.metadata["choices"])
        elif "range" in f.metadata:
            what = "{}..{}".format(*f.metadata["range"])
        else:
            what = "true|false" if f.type == "bool" else f"font name or .ttf path ({', '.join(font_names())})"
        parts.append(f"  {f.name:<20} {what}")
    return "style attributes (--style KEY=VALUE; lengths and widths are fractions of the dial radius):\n" + \
        "\n".join(parts)


def _fraction(text: str) -> float:
    try:
        return check_fraction(float(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1), got {text!r}") from None


def clocks_main(argv: list[str] | None = None) -> int:
    """`data-synth clocks --num N --seed S --out DIR [options]`."""
    p = Parser(
        prog="data-synth clocks", epilog=_style_help(), formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Render an analog-clock dataset: a Hugging Face imagefolder per split (images + metadata.jsonl).")
    add_dataset_args(p, "images")
    p.add_argument("--size", type=bounded_int(64, MAX_SIDE), default=448,
                   help=f"image side in px, 64..{MAX_SIDE} (default 448)")
    add_splits_arg(p)
    p.add_argument("--answer-format", choices=ANSWER_FORMATS, default="h:mm",
                   help="h:mm = 3:07 (12-hour, default), hh:mm = 03:07, 24h = 15:07 (adds an AM/PM window)")
    p.add_argument("--with-seconds", action="store_true", help="draw a second hand and answer H:MM:SS")
    p.add_argument("--times", default=None,
                   help="time distribution file: lines 'H:MM[:SS] [weight]' (default uniform over 24 h)")
    p.add_argument("--question", action="append", default=None,
                   help="a question phrasing (repeatable; '{format}' becomes e.g. H:MM); default: built-in set")
    p.add_argument("--style", action="append", default=[], metavar="KEY=VALUE",
                   help="fix a ClockStyle attribute for every image, e.g. numerals=roman, face_color=#ffeecc "
                        "(repeatable)")
    p.add_argument("--plain", action="store_true", help="start from the plain style instead of random styles")
    p.add_argument("--no-variation", action="store_true",
                   help="with --plain, draw every image exactly in the style (by default hand colours, widths "
                        "and lengths, face size, border, ticks and background vary per image around it)")
    p.add_argument("--unseen-fraction", type=_fraction, default=0.0,
                   help=f"hold this fraction of the 720 dial times out of every split and write them into an "
                        f"extra split {UNSEEN_SPLIT} (every hour and minute value stays in training)")
    add_unseen_args(p, "times", "images")
    p.add_argument("--robustness", action="store_true",
                   help="also write test_deformed (dials squashed, skewed or warped beyond the other splits) and "
                        "test_hands (equal-length, new-tipped, very thin or thick hands) to score robustness")
    p.add_argument("--robustness-num", type=bounded_int(1, MAX_ITEMS), default=None,
                   help="images in each robustness split (default: as many as the smallest split)")
    p.add_argument("--system-fonts", action="store_true",
                   help="also draw numerals with the system's fonts (the dataset then depends on the machine)")
    add_build_args(p)
    args = p.parse_args(argv)

    def write():
        style = {}
        for item in args.style:
            key, sep, value = item.partition("=")
            if not sep:
                raise ValueError(f"--style {item!r}: expected KEY=VALUE")
            style[key.strip()] = _style_value(key.strip(), value.strip())
        return write_clock_dataset(
            args.out, args.num, args.seed, size=args.size, splits=args.splits, answer_format=args.answer_format,
            with_seconds=args.with_seconds, style=style, plain=args.plain, variation=not args.no_variation,
            unseen_fraction=args.unseen_fraction, unseen_seed=args.unseen_seed, unseen_num=args.unseen_num,
            times=args.times, questions=args.question, system_font_pool=args.system_fonts,
            robustness=args.robustness, robustness_num=args.robustness_num, workers=args.workers,
            resume=args.resume, overwrite=args.overwrite, progress=not args.no_progress)

    status, out = run_writer("data-synth clocks", write)
    if status:
        return status
    generation = json.loads((out / "generation.json").read_text())
    unseen, robust = generation["unseen"], generation.get("robustness")
    extra = f" and {unseen['num']} with held-out times in {UNSEEN_SPLIT}" if unseen else ""
    if robust:
        extra += f", {robust['num']} in each of {' and '.join(clock_robustness.SPLITS)}"
    print(f"wrote {args.num} clocks{extra} to {out}")
    return 0
