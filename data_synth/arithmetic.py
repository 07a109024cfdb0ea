"""Arithmetic problems with exact answers: `data-synth arithmetic --num N --seed S --out DIR`.

Layout of `out/`:
    generation.json      every argument that decides the problems (a consumer checks it against its own)
    {split}.jsonl        one problem a line: {"id", "question", "answer", "operation", "operands", "split"}
                         e.g. {"id": "train-00000007", "question": "What is 123 * 45?", "answer": "5535",
                         "operation": "mul", "operands": ["123", "45"], "split": "train"}

Numbers are fixed-point: every operand has exactly `places` decimals ("12.30" when places=2); answers
are canonical strings with exactly the decimals the operation gives (add/sub: `places`, mul: 2*places,
div: 0, or `div_places` when rounding), "-12" for a negative, never an exponent or float noise. All
arithmetic is on integers (an operand is an integer count of 10**-places), never floats.

Operations (one drawn per problem, uniformly from `operations`):
    add, sub   a + b, a - b; without `negatives` the larger operand comes first (answers >= 0)
    mul        a * b
    div        `div_places=None` (default): exact, the dividend is the divisor times a whole quotient
               (>= 1) and the answer is that integer; `div_places=k`: dividend and divisor are drawn freely
               and the answer is a / b rounded half up to k decimals, which the question says.
`digits` gives each operand's count of integer digits as (lowest, highest); a count is drawn uniformly,
then the value uniformly among numbers with that many integer digits (1 digit includes 0). Divisors are
never 0. Problem `index` gets its own seed from (seed, index), so the bytes do not depend on the worker
count; splits take contiguous index blocks. Written through `writer.build_dataset`: atomic (built in
`.{out}.partial`, then renamed), resumable (`--resume`), `--overwrite` to replace an existing `out`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from pathlib import Path

from .writer import build_dataset, interrupt_status, parse_splits, split_bounds

OPERATIONS = ("add", "sub", "mul", "div")
SYMBOLS = {"add": "+", "sub": "-", "mul": "*", "div": "/"}


def fixed(n: int, places: int) -> str:
    """The integer count `n` of 10**-places as text: fixed(-1230, 2) -> "-12.30", fixed(5, 2) -> "0.05"."""
    digits = str(abs(n)).rjust(places + 1, "0")
    text = f"{digits[:-places]}.{digits[-places:]}" if places else digits
    return "-" + text if n < 0 else text


def _round_half_up(num: int, den: int) -> int:
    """num / den rounded to the nearest integer, halves up (num >= 0, den > 0)."""
    q, r = divmod(num, den)
    return q + (2 * r >= den)


class _Plan:
    """The problems a config describes; the item interface `writer.build_dataset` drives."""

    name, noun, unit, chunk = "arithmetic", "problems", "problem", 2048

    def __init__(self, cfg: dict):
        self.cfg = cfg
        self.places = cfg["places"]
        self.scale = 10 ** self.places
        self.bounds = split_bounds(cfg["num"], cfg["splits"], "problem")

    def _range(self, digits: int) -> tuple[int, int]:
        """Smallest and largest operand (as counts of 10**-places) with `digits` integer digits."""
        low = 0 if digits == 1 else 10 ** (digits - 1)
        return low * self.scale, 10 ** digits * self.scale - 1

    def _operand(self, rng: random.Random, which: int, nonzero: bool = False) -> int:
        lo, hi = self.cfg["digits"][which]
        low, high = self._range(rng.randint(lo, hi))
        return rng.randint(max(low, int(nonzero)), high)

    def problem(self, index: int) -> dict:
        """The record of problem `index` (cheap, deterministic in (cfg, index))."""
        cfg, places = self.cfg, self.places
        seed = int.from_bytes(hashlib.sha256(f"arithmetic:{cfg['seed']}:{index}".encode()).digest()[:8], "little")
        rng = random.Random(seed)
        op = rng.choice(cfg["operations"])
        suffix = ""
        if op == "div":
            b = self._operand(rng, 1, nonzero=True)
            if cfg["div_places"] is None:  # exact: a = b * q, q a whole number >= 1, a within its digit range
                options = []
                for digits in range(cfg["digits"][0][0], cfg["digits"][0][1] + 1):
                    low, high = self._range(digits)
                    q_lo, q_hi = max(1, -(-low // b)), high // b
                    if q_lo <= q_hi:
                        options.append((q_lo, q_hi))
                q_lo, q_hi = rng.choice(options)  # never empty: the config check keeps divisors <= dividends
                quotient = rng.randint(q_lo, q_hi)
                a, answer = b * quotient, str(quotient)
            else:
                k = cfg["div_places"]
                a = self._operand(rng, 0)
                answer = fixed(_round_half_up(a * 10 ** k, b), k)  # a / b: the scales cancel
                suffix = (", rounded to the nearest whole number" if k == 0 else
                          f", rounded to {k} decimal place{'s' if k > 1 else ''}")
        else:
            a, b = self._operand(rng, 0), self._operand(rng, 1)
            if op == "add":
                answer = fixed(a + b, places)
            elif op == "sub":
                if not cfg["negatives"] and a < b:
                    a, b = b, a
                answer = fixed(a - b, places)
            else:
                answer = fixed(a * b, 2 * places)
        operands = [fixed(a, places), fixed(b, places)]
        split = self.split_of(index)
        return {"id": f"{split}-{index:08d}", "question": f"What is {operands[0]} {SYMBOLS[op]} {operands[1]}{suffix}?",
                "answer": answer, "operation": op, "operands": operands, "split": split}

    def split_of(self, index: int) -> str:
        for lo, hi, name in self.bounds:
            if lo <= index < hi:
                return name
        raise IndexError(index)

    def render(self, index: int, root: Path) -> str:
        return json.dumps({"index": index, **self.problem(index)})

    def is_done(self, row: dict, root: Path) -> bool:
        return True  # a logged problem is complete in its line

    def finish(self, root: Path, done: dict[int, str]) -> None:
        """Write {split}.jsonl, problems in index order, without the progress log's index."""
        for lo, hi, name in self.bounds:
            with open(root / f"{name}.jsonl", "w", encoding="utf-8") as f:
                for i in range(lo, hi):
                    record = json.loads(done[i])
                    del record["index"]
                    f.write(json.dumps(record) + "\n")


def _digit_range(value, which: str) -> list[int]:
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value, value)
    try:
        lo, hi = (int(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(f"digits of operand {which} must be N or (lowest, highest), got {value!r}") from None
    if not 1 <= lo <= hi:
        raise ValueError(f"digits of operand {which} must satisfy 1 <= lowest <= highest, got {lo}-{hi}")
    return [lo, hi]


def _config(num, seed, splits, operations, digits, places, div_places, negatives) -> dict:
    """The JSON-ready generation config (validated); equal configs give identical datasets."""
    if isinstance(num, bool) or not isinstance(num, int) or num < 1:
        raise ValueError(f"num must be an integer >= 1, got {num!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an integer, got {seed!r}")
    splits = parse_splits(splits) if isinstance(splits, str) else dict(splits)
    parse_splits(",".join(f"{k}={v}" for k, v in splits.items()))  # same checks for a dict
    operations = [operations] if isinstance(operations, str) else list(operations)
    bad = [op for op in operations if op not in OPERATIONS]
    if bad or not operations or len(set(operations)) != len(operations):
        raise ValueError(f"operations must be distinct names from {', '.join(OPERATIONS)}; got {operations!r}")
    if isinstance(digits, int) or (isinstance(digits, (tuple, list)) and len(digits) == 2
                                   and all(isinstance(d, int) for d in digits)):
        digits = [digits, digits]  # N or one (lowest, highest) for both operands
    if not isinstance(digits, (tuple, list)) or len(digits) != 2:
        raise ValueError(f"digits must be N, (lowest, highest) or one of those per operand; got {digits!r}")
    digits = [_digit_range(digits[0], "a"), _digit_range(digits[1], "b")]
    for name, value in (("places", places), ("div_places", div_places)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
    if places is None:
        raise ValueError("places must be an integer >= 0, got None")
    if "div" in operations and div_places is None and digits[1][1] > digits[0][1]:
        raise ValueError(f"exact division needs divisors no longer than dividends: operand b has up to "
                         f"{digits[1][1]} digits, operand a up to {digits[0][1]} (or set div_places to round)")
    return {"num": num, "seed": seed, "splits": splits, "operations": operations, "digits": digits,
            "places": places, "div_places": div_places, "negatives": bool(negatives)}


def write_arithmetic_dataset(out, num: int, seed: int = 0, *, splits: dict[str, float] | str = "train=0.9,test=0.1",
                             operations=OPERATIONS, digits=((1, 3), (1, 3)), places: int = 0,
                             div_places: int | None = None, negatives: bool = False, workers: int = 1,
                             resume: bool = False, overwrite: bool = False, progress: bool = True) -> Path:
    """Write `num` problems as `out/{split}.jsonl` + `out/generation.json`; returns `out`.

    digits: integer digits per operand, ((lowest_a, highest_a), (lowest_b, highest_b)) (each range may be
    one N), or one (lowest, highest) or N for both. places: decimals of every operand. div_places: None for exact whole-number division, k to
    round quotients half up to k decimals. negatives: subtraction may give negative answers.
    Deterministic in (arguments, seed) whatever `workers`; ValueError on bad arguments.
    """
    cfg = _config(num, seed, splits, operations, digits, places, div_places, negatives)
    return build_dataset(out, _Plan(cfg), workers=workers, resume=resume, overwrite=overwrite, progress=progress)


# ---------------------------------------------------------------------------------------------- CLI

def _digits_arg(text: str) -> list[list[int]]:
    """"3" -> both operands 3 digits; "1-3" -> both 1..3; "1-3,2" -> a 1..3, b 2."""
    parts = text.split(",")
    try:
        ranges = [[int(v) for v in part.split("-", 1)] for part in parts]
    except ValueError:
        raise argparse.ArgumentTypeError(f"digits must look like 3, 1-3 or 1-3,2; got {text!r}") from None
    if len(ranges) not in (1, 2):
        raise argparse.ArgumentTypeError(f"digits: one range for both operands or one each; got {text!r}")
    ranges = [r * 2 if len(r) == 1 else r for r in ranges]
    return ranges * 2 if len(ranges) == 1 else ranges


def main(argv: list[str] | None = None) -> int:
    """`data-synth arithmetic --num N --seed S --out DIR [options]`."""
    from .cli import Parser  # one-line usage errors, --x_y for --x-y

    p = Parser(
        prog="data-synth arithmetic",
        description="Arithmetic problems with exact answers: OUT/{split}.jsonl (id, question, answer, operation, "
                    "operands, split) and OUT/generation.json.")
    p.add_argument("--num", type=int, required=True, help="number of problems (all splits)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="output folder (built in .OUT.partial, renamed when complete)")
    p.add_argument("--splits", default="train=0.9,test=0.1", help="name=fraction,... (default train=0.9,test=0.1)")
    p.add_argument("--operations", default=",".join(OPERATIONS),
                   help=f"comma list of {','.join(OPERATIONS)} (default all)")
    p.add_argument("--digits", type=_digits_arg, default=[[1, 3], [1, 3]],
                   help="integer digits per operand: N, LO-HI (both operands) or A,B each N or LO-HI (default 1-3)")
    p.add_argument("--places", type=int, default=0, help="decimal places of every operand (default 0)")
    p.add_argument("--div-places", type=int, default=None,
                   help="round quotients half up to this many decimals (default: exact whole-number division)")
    p.add_argument("--negatives", action="store_true", help="subtraction may have negative answers")
    p.add_argument("--workers", type=int, default=1, help="processes (default 1); output is the same for any")
    p.add_argument("--resume", action="store_true", help="continue an interrupted run with the same arguments")
    p.add_argument("--overwrite", action="store_true", help="replace OUT if it exists (after the new one is done)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = p.parse_args(argv)
    try:
        out = write_arithmetic_dataset(
            args.out, args.num, args.seed, splits=args.splits,
            operations=[op.strip() for op in args.operations.split(",") if op.strip()], digits=args.digits,
            places=args.places, div_places=args.div_places, negatives=args.negatives, workers=args.workers,
            resume=args.resume, overwrite=args.overwrite, progress=not args.no_progress)
    except (ValueError, FileExistsError) as e:
        print(f"data-synth arithmetic: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        return interrupt_status(e)
    print(f"wrote {args.num} arithmetic problems to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
