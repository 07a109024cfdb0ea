"""Write clock datasets: a Hugging Face imagefolder per split, in parallel, atomically, deterministically.

Layout of `out/`:
    generation.json                  the arguments that made the dataset (seed, size, styles, ...)
    {split}/metadata.jsonl           one row per image: file_name, question, answer, hour, minute, second,
                                     index, render_seed and every ClockStyle attribute
    {split}/{index // 1000:04d}/{index:08d}.png

Image `index` (0..num-1) gets its own seed from (seed, index) alone, so the bytes do not depend on the
worker count or on interruptions. Splits take contiguous index blocks in the order given. The dataset is
built in `.{out}.partial` next to `out` and renamed when complete; `resume=True` continues a partial
folder (rows of finished images are kept in its progress.jsonl). `build_dataset` is that machinery for
any item-by-item dataset (the arithmetic writer uses it too); `encode_png` is the fast PNG encoder, and
`sigterm_as_interrupt` makes SIGTERM end a command the way Ctrl-C does.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import shutil
import signal
import struct
import sys
import threading
import zlib
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path

import numpy as np

from .clocks import ClockStyle, font_names, plain_style, render_clock, style_for_seed, system_fonts

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


def parse_splits(text: str) -> dict[str, float]:
    """"train=0.9,test=0.1" -> {"train": 0.9, "test": 0.1} (fractions > 0 summing to 1)."""
    splits = {}
    for part in text.split(","):
        name, _, frac = part.partition("=")
        name = name.strip()
        if not re.fullmatch(r"[A-Za-z0-9_-]+", name) or name in splits:
            raise ValueError(f"splits: bad or repeated split name {name!r} in {text!r}")
        try:
            splits[name] = float(frac)
        except ValueError:
            raise ValueError(f"splits: {part!r} is not name=fraction") from None
        if not splits[name] > 0:
            raise ValueError(f"splits: the fraction of {name!r} must be > 0")
    if abs(sum(splits.values()) - 1) > 1e-6:
        raise ValueError(f"splits: fractions must sum to 1, got {sum(splits.values())} in {text!r}")
    return splits


def split_counts(num: int, splits: dict[str, float]) -> dict[str, int]:
    """Image counts per split by largest remainder (they sum to num)."""
    raw = {k: num * v for k, v in splits.items()}
    counts = {k: int(v) for k, v in raw.items()}
    for k in sorted(raw, key=lambda k: (counts[k] - raw[k], list(raw).index(k)))[: num - sum(counts.values())]:
        counts[k] += 1
    return counts


# -------------------------------------------------------------------------------------------- items

def _item_seed(seed: int, index: int) -> int:
    return int.from_bytes(hashlib.sha256(f"clocks:{seed}:{index}".encode()).digest()[:8], "little") >> 1


def split_bounds(num: int, splits: dict[str, float], noun: str = "item") -> list[tuple[int, int, str]]:
    """Contiguous index blocks (start, stop, name) per split, in the order given; ValueError when a split
    would be empty."""
    counts = split_counts(num, splits)
    empty = [name for name, n in counts.items() if n == 0]
    if empty:
        raise ValueError(f"splits: {', '.join(empty)} would get no {noun} of {num}; raise num")
    bounds, start = [], 0
    for name, n in counts.items():
        bounds.append((start, start + n, name))
        start += n
    return bounds


class _Plan:
    """Everything that decides the bytes of a clock dataset, and the recipe for one image from it.

    The dataset builder (`build_dataset`) drives any plan with this interface: `cfg` (JSON-ready, saved as
    generation.json), `name` (the command), `noun` and `unit` (messages, progress bar), `chunk` (items per
    worker task), `render(index, root) -> progress line` (JSON with "index"),
    `is_done(row, root)` (is a logged item still intact on disk) and `finish(root, done)`.
    """

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

    def _force(self, key, value, why):
        if self.style.get(key, value) != value:
            raise ValueError(f"style {key}={self.style[key]!r} conflicts with the answer format: {why}")
        self.style[key] = value

    def split_of(self, index: int) -> str:
        for lo, hi, name in self.bounds:
            if lo <= index < hi:
                return name
        raise IndexError(index)

    def item(self, index: int) -> tuple[dict, ClockStyle]:
        """(metadata row, style) of image `index`; cheap (no drawing)."""
        cfg = self.cfg
        seed = _item_seed(cfg["seed"], index)
        rng = random.Random(seed)
        if self.times is None:
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
        else:
            style = style_for_seed(seed, self.style, self.fonts)
        row = {"file_name": f"{index // SHARD:04d}/{index:08d}.png", "question": question,
               "answer": format_answer(hour, minute, second, cfg["answer_format"]),
               "hour": hour, "minute": minute, "second": second, "index": index, "render_seed": seed,
               **style.to_dict()}
        return row, style

    def render(self, index: int, root: Path) -> str:
        return _render_item(self, index, root)

    def is_done(self, row: dict, root: Path) -> bool:
        return (root / self.split_of(row["index"]) / row["file_name"]).is_file()

    def finish(self, root: Path, done: dict[int, str]) -> None:
        """Write each split's metadata.jsonl, rows in index order."""
        for lo, hi, name in self.bounds:
            (root / name).mkdir(exist_ok=True)
            with open(root / name / "metadata.jsonl", "w", encoding="utf-8") as f:
                f.writelines(done[i] + "\n" for i in range(lo, hi))


def _render_item(plan: _Plan, index: int, root: Path) -> str:
    """Draw image `index`, write it (atomically) under root/split/, return its metadata line."""
    row, style = plan.item(index)
    img = render_clock(row["hour"], row["minute"], row["second"], size=plan.cfg["size"], style=style,
                       seed=row["render_seed"])
    path = root / plan.split_of(index) / row["file_name"]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(encode_png(img))
    os.replace(tmp, path)
    return json.dumps(row)


# PIL modes whose conversion to RGB or L loses nothing (palette lookup, 1-bit -> 0/255) or is defined
# by the mode itself (YCbCr: the JPEG/JFIF transform). Alpha, CMYK (needs a colour profile), LAB, HSV,
# 16/32-bit and float modes are refused rather than guessed.
_CONVERTIBLE = {"1": "L", "P": "RGB", "YCbCr": "RGB"}


def encode_png(img) -> bytes:
    """PNG bytes of an image: the 'Up' filter on every row and zlib's RLE strategy.

    RGB and L images are written as they are; 1-bit, opaque palette (P) and YCbCr images are converted
    first (to L, RGB, RGB: the same pixels as PIL's `convert`); any other mode (alpha channels, P with a
    transparent index, CMYK, LAB, HSV, I;16, I, F, ...) is a ValueError naming it.
    About twice as fast as Pillow's encoder (which tries every filter on every row) at a similar size;
    lossless (decoding gives the same pixels) and deterministic.
    """
    mode = getattr(img, "mode", None)
    if mode in _CONVERTIBLE and not (mode == "P" and "transparency" in img.info):
        img = img.convert(_CONVERTIBLE[mode])
    elif mode not in ("RGB", "L"):
        what = "a palette with a transparent index" if mode == "P" else f"mode {mode}"
        raise ValueError(f"encode_png writes RGB or L images (1, P and YCbCr are converted); got {what}: "
                         "convert it yourself (e.g. flatten alpha onto a background) first")
    a = np.asarray(img)
    if a.dtype != np.uint8 or a.ndim not in (2, 3) or (a.ndim == 3 and a.shape[2] != 3):
        raise ValueError(f"encode_png takes 8-bit RGB or L images, got mode {img.mode}")
    h, w = a.shape[:2]
    rows = a.reshape(h, -1)
    filtered = np.empty((h, rows.shape[1] + 1), np.uint8)
    filtered[:, 0] = 2  # filter type Up: each byte minus the byte above (mod 256)
    filtered[0, 1:] = rows[0]
    np.subtract(rows[1:], rows[:-1], out=filtered[1:, 1:])
    z = zlib.compressobj(6, zlib.DEFLATED, 15, 9, zlib.Z_RLE)
    data = z.compress(filtered.tobytes()) + z.flush()

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    color_type = 2 if a.ndim == 3 else 0
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, color_type, 0, 0, 0))
            + chunk(b"IDAT", data) + chunk(b"IEND", b""))


# ---------------------------------------------------------------------------------- interruptions

class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main process so that a run ends the way Ctrl-C ends it."""


@contextmanager
def sigterm_as_interrupt():
    """While inside, SIGTERM raises `Terminated` (a KeyboardInterrupt) in the main thread, so worker pools
    are shut down and partial output is closed cleanly; a second SIGTERM during that clean-up is ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def interrupt_status(error: KeyboardInterrupt) -> int:
    """Exit status of a command stopped by a signal: 128 + SIGTERM (143) or 128 + SIGINT (130)."""
    return 128 + (signal.SIGTERM if isinstance(error, Terminated) else signal.SIGINT)


def ignore_sigint() -> None:
    """Pool worker initialiser: Ctrl-C reaches the whole process group; only the parent handles it (it
    terminates the pool), so workers print no KeyboardInterrupt tracebacks."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


# ------------------------------------------------------------------------------------------- writer

_WORKER_PLAN = None


def _worker_init(plan_class, cfg: dict) -> None:
    global _WORKER_PLAN
    ignore_sigint()
    _WORKER_PLAN = plan_class(cfg)


def _worker_run(task: tuple[str, list[int]]) -> list[str]:
    root, indices = task
    return [_WORKER_PLAN.render(i, Path(root)) for i in indices]


def build_dataset(out, plan, *, workers: int = 1, resume: bool = False, overwrite: bool = False,
                  progress: bool = True) -> Path:
    """Build the dataset `plan` describes at `out`: in `.{out}.partial`, item by item (in `workers`
    processes), each finished item logged in progress.jsonl so `resume=True` continues an interrupted
    run; then `plan.finish` and a rename. Refuses an existing `out` unless `overwrite` (the old one is
    replaced only once the new one is complete). Returns `out`."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
    num = plan.cfg["num"]
    out = Path(out)
    tmp = out.parent / f".{out.name}.partial"
    if out.exists() and not overwrite:
        raise FileExistsError(f"{out} exists; choose another --out or pass --overwrite")
    done = _prepare(tmp, plan, resume)
    todo = [i for i in range(num) if i not in done]

    from tqdm.auto import tqdm

    with open(tmp / "progress.jsonl", "a", encoding="utf-8") as log, \
            tqdm(total=num, initial=num - len(todo), desc=f"{plan.name} -> {out.name}", unit=plan.unit,
                 disable=not progress, smoothing=0.05) as bar:
        try:
            if workers == 1:
                for i in todo:
                    done[i] = plan.render(i, tmp)
                    log.write(done[i] + "\n")
                    bar.update(1)
            else:
                import multiprocessing as mp

                chunk = max(1, min(plan.chunk, len(todo) // (workers * 8)))
                tasks = [(str(tmp), todo[k:k + chunk]) for k in range(0, len(todo), chunk)]
                with mp.get_context("spawn").Pool(workers, _worker_init, (type(plan), plan.cfg)) as pool:
                    for (_, indices), lines in zip(tasks, pool.imap(_worker_run, tasks)):
                        for i, line in zip(indices, lines):
                            done[i] = line
                            log.write(line + "\n")
                        log.flush()
                        bar.update(len(lines))
        except BaseException:
            bar.close()
            print(f"data-synth {plan.name}: interrupted with {len(done)} of {num} {plan.noun} done; the partial "
                  f"dataset is in {tmp}; rerun with --resume to finish it", file=sys.stderr)
            raise

    plan.finish(tmp, done)
    (tmp / "progress.jsonl").unlink()
    if out.exists():  # overwrite: swap in the new dataset, then delete the old one
        old = out.parent / f".{out.name}.old"
        shutil.rmtree(old, ignore_errors=True)
        os.replace(out, old)
        os.replace(tmp, out)
        shutil.rmtree(old)
    else:
        os.replace(tmp, out)
    return out


def _prepare(tmp: Path, plan, resume: bool) -> dict[int, str]:
    """Create (or, resuming, check) the partial folder; return {index: progress line} already done."""
    cfg = plan.cfg
    cfg_path = tmp / "generation.json"
    if tmp.exists() and not resume:
        raise FileExistsError(f"{tmp} holds an interrupted run; pass --resume to continue it, or delete it")
    if not tmp.exists():
        if resume:
            print(f"data-synth {plan.name}: nothing to resume at {tmp}; starting afresh", file=sys.stderr)
        tmp.mkdir(parents=True)
        cfg_path.write_text(json.dumps(cfg, indent=1) + "\n")
        return {}
    saved = json.loads(cfg_path.read_text())
    if saved != json.loads(json.dumps(cfg)):
        diff = sorted(k for k in set(saved) | set(cfg) if saved.get(k) != json.loads(json.dumps(cfg.get(k))))
        raise ValueError(f"cannot resume {tmp}: it was started with different arguments ({', '.join(diff)})")
    done = {}
    log = tmp / "progress.jsonl"
    if log.exists():
        for line in log.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
                index = row["index"]
                intact = 0 <= index < cfg["num"] and plan.is_done(row, tmp)
            except (ValueError, KeyError, TypeError):
                continue  # the line being written when the run stopped; that item is made again
            if intact:
                done[index] = line
        # rewrite the log without torn lines, so appends start on a fresh line
        log.write_text("".join(done[i] + "\n" for i in sorted(done)), encoding="utf-8")
    return done


def write_clock_dataset(out, num: int, seed: int = 0, *, size: int = 448,
                        splits: dict[str, float] | str = "train=0.9,test=0.1", answer_format: str = "h:mm",
                        with_seconds: bool = False, style: dict | None = None, plain: bool = False,
                        times=None, questions=None, system_font_pool: bool = False, workers: int = 1,
                        resume: bool = False, overwrite: bool = False, progress: bool = True) -> Path:
    """Render `num` clocks into an imagefolder dataset at `out`; returns `out`.

    splits: {"train": 0.9, "test": 0.1} or "train=0.9,test=0.1". answer_format: h:mm | hh:mm | 24h
    (24h turns on the AM/PM window), with_seconds adds ":SS" and the second hand. style: ClockStyle
    attributes fixed for every image (the rest drawn per image), or with plain=True changes to the plain
    style. times: None (uniform over 24 h) or (hour, minute, second|None, weight) tuples or a file for
    `read_times`. questions: phrasings, one drawn per image; "{format}" becomes e.g. "H:MM".
    Deterministic in (arguments, seed) whatever `workers`; ValueError on bad arguments.
    """
    cfg = _config(num, seed, size, splits, answer_format, with_seconds, style, plain, times, questions,
                  system_font_pool)
    plan = _Plan(cfg)
    plan.item(0)  # fail early on a style that cannot be drawn
    return build_dataset(out, plan, workers=workers, resume=resume, overwrite=overwrite, progress=progress)


def _config(num, seed, size, splits, answer_format, with_seconds, style, plain, times, questions,
            system_font_pool) -> dict:
    """The JSON-ready generation config (validated); equal configs give identical datasets."""
    for name, value, lo in (("num", num, 1), ("size", size, 64)):
        if isinstance(value, bool) or not isinstance(value, int) or value < lo:
            raise ValueError(f"{name} must be an integer >= {lo}, got {value!r}")
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
    fonts = list(font_names()) + (list(system_fonts()) if system_font_pool else [])
    return {"num": num, "seed": seed, "size": size, "splits": splits, "answer_format": answer_format,
            "with_seconds": bool(with_seconds), "style": style, "plain": bool(plain), "times": times,
            "questions": questions, "fonts": fonts}


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


def clocks_main(argv: list[str] | None = None) -> int:
    """`data-synth clocks --num N --seed S --out DIR [options]`."""
    from .cli import Parser  # one-line usage errors, --x_y for --x-y

    p = Parser(
        prog="data-synth clocks", epilog=_style_help(), formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Render an analog-clock dataset: a Hugging Face imagefolder per split (images + metadata.jsonl).")
    p.add_argument("--num", type=int, required=True, help="number of images (all splits)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="output folder (built in .OUT.partial, renamed when complete)")
    p.add_argument("--size", type=int, default=448, help="image side in px (default 448)")
    p.add_argument("--splits", default="train=0.9,test=0.1", help="name=fraction,... (default train=0.9,test=0.1)")
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
    p.add_argument("--system-fonts", action="store_true",
                   help="also draw numerals with the system's fonts (the dataset then depends on the machine)")
    p.add_argument("--workers", type=int, default=1, help="processes (default 1); output is the same for any")
    p.add_argument("--resume", action="store_true", help="continue an interrupted run with the same arguments")
    p.add_argument("--overwrite", action="store_true", help="replace OUT if it exists (after the new one is done)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = p.parse_args(argv)
    try:
        style = {}
        for item in args.style:
            key, sep, value = item.partition("=")
            if not sep:
                raise ValueError(f"--style {item!r}: expected KEY=VALUE")
            style[key.strip()] = _style_value(key.strip(), value.strip())
        out = write_clock_dataset(
            args.out, args.num, args.seed, size=args.size, splits=args.splits, answer_format=args.answer_format,
            with_seconds=args.with_seconds, style=style, plain=args.plain, times=args.times,
            questions=args.question, system_font_pool=args.system_fonts, workers=args.workers,
            resume=args.resume, overwrite=args.overwrite, progress=not args.no_progress)
    except (ValueError, FileExistsError) as e:
        print(f"data-synth clocks: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        return interrupt_status(e)
    print(f"wrote {args.num} clocks to {out}")
    return 0
