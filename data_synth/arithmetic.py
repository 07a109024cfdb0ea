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
never 0. At most MAX_DIGITS integer digits and MAX_PLACES decimals (places, div_places). Problem `index`
gets its own seed from (seed, index), so the bytes do not depend on the worker count; splits take
contiguous index blocks. Written through `data_synth.dataset.build_dataset`: atomic (built in
`.{out}.partial`, then renamed), resumable (`--resume`), `--overwrite` to replace an existing `out`.

Research options (both off by default; each problem is then redrawn from its own seed until it fits, so
the bytes still depend on (arguments, seed, index) alone):
    distinct          no problem is in two splits: every problem (operation and operands; a + b and b + a,
                      a * b and b * a count as one) belongs to one split by a seeded hash, its share of the
                      problems the split's fraction, and a split holds only its own problems.
    unseen_fraction   a seeded set of answers (`unseen_answers`: that fraction of every answer the
                      operations and digits can give, every digit still at every place in the rest) never
                      occurs in the named splits; problems with those answers, and only those, make up the
                      extra split `test_unseen` (`unseen_num` problems). Integer problems only (places 0,
                      exact division).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from functools import lru_cache
from pathlib import Path

from .args import Parser, bounded_int
from .dataset import (
    MAX_ITEMS,
    UNSEEN_SPLIT,
    JsonLinesPlan,
    add_build_args,
    add_dataset_args,
    add_splits_arg,
    add_unseen_args,
    build_dataset,
    check_fraction,
    check_int,
    check_operations,
    digit_places,
    item_seed,
    owner_split,
    parse_operations,
    parse_splits,
    pick_unseen,
    run_writer,
    split_bounds,
    unseen_settings,
)

OPERATIONS = ("add", "sub", "mul", "div")
SYMBOLS = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
MAX_DIGITS = 100  # integer digits of an operand
MAX_PLACES = 30  # decimals of operands (places) and of rounded quotients (div_places)
MAX_ANSWER_SPACE = 2_000_000  # candidate answers `unseen_answers` may enumerate (3 x 3 digit mul: 810,000)
MAX_DRAWS = 1_000_000  # redraws of one problem before its split is declared impossible to fill


def fixed(n: int, places: int) -> str:
    """The integer count `n` of 10**-places as text: fixed(-1230, 2) -> "-12.30", fixed(5, 2) -> "0.05"."""
    digits = str(abs(n)).rjust(places + 1, "0")
    text = f"{digits[:-places]}.{digits[-places:]}" if places else digits
    return "-" + text if n < 0 else text


def _round_half_up(num: int, den: int) -> int:
    """num / den rounded to the nearest integer, halves up (num >= 0, den > 0)."""
    q, r = divmod(num, den)
    return q + (2 * r >= den)


def _operand_bounds(digits) -> tuple[int, int]:
    """Smallest and largest integer operand with (lowest, highest) integer digits."""
    lo, hi = digits
    return (0 if lo == 1 else 10 ** (lo - 1)), 10 ** hi - 1


def possible_answers(operations, digits, negatives: bool = False) -> list[int]:
    """Every answer the integer problems of `operations` with `digits` ((lowest, highest) per operand) can
    have, sorted. ValueError when more than MAX_ANSWER_SPACE candidates would have to be enumerated."""
    (a_lo, a_hi), (b_lo, b_hi) = _operand_bounds(digits[0]), _operand_bounds(digits[1])
    divisor_lo = max(b_lo, 1)
    work = {"add": a_hi + b_hi - a_lo - b_lo + 1, "sub": a_hi + b_hi - a_lo - b_lo + 1,
            "mul": (a_hi - a_lo + 1) * (b_hi - b_lo + 1), "div": a_hi // divisor_lo}
    size = sum(work[op] for op in operations)
    if size > MAX_ANSWER_SPACE:
        raise ValueError(f"unseen_fraction: these operations and digits give up to {size:,} answers to choose "
                         f"from, more than {MAX_ANSWER_SPACE:,}; use fewer digits")
    answers = set()
    for op in operations:
        if op == "add":
            answers.update(range(a_lo + b_lo, a_hi + b_hi + 1))
        elif op == "sub" and negatives:
            answers.update(range(a_lo - b_hi, a_hi - b_lo + 1))
        elif op == "sub":  # the larger operand first: |a - b| over two intervals is an interval
            answers.update(range(max(0, b_lo - a_hi, a_lo - b_hi), max(a_hi - b_lo, b_hi - a_lo) + 1))
        elif op == "mul":
            for a in range(a_lo, a_hi + 1):
                answers.update(range(a * b_lo, a * b_hi + 1, a) if a else (0,))
        else:  # exact division: quotients q with a divisor b whose multiple b * q is a dividend
            answers.update(q for q in range(1, a_hi // divisor_lo + 1)
                           if max(divisor_lo, -(-a_lo // q)) <= min(b_hi, a_hi // q))
    return sorted(answers)


@lru_cache(maxsize=8)
def _unseen_answers(operations: tuple, digits: tuple, negatives: bool, fraction: float, seed: int) -> tuple:
    answers = possible_answers(operations, digits, negatives)
    return tuple(pick_unseen(answers, lambda v: digit_places(str(v)), fraction, seed))


def unseen_answers(operations, digits, negatives: bool, fraction: float, seed: int = 0) -> tuple[int, ...]:
    """The answers `unseen_fraction=fraction, unseen_seed=seed` holds out of the named splits: that fraction
    of `possible_answers(operations, digits, negatives)`, drawn with `seed` by `dataset.pick_unseen`, so
    that every digit still occurs at every place among the answers left. Sorted; pure in its arguments
    (digits as `write_arithmetic_dataset` keeps them: ((lowest_a, highest_a), (lowest_b, highest_b)))."""
    digits = tuple(tuple(int(v) for v in d) for d in digits)
    return _unseen_answers(tuple(operations), digits, bool(negatives), check_fraction(fraction), seed)


class _Plan(JsonLinesPlan):
    """The problems a config describes (the plan interface of `data_synth.dataset.build_partial`)."""

    name, noun, unit, chunk = "arithmetic", "problems", "problem", 2048

    def __init__(self, cfg: dict):
        self.cfg = cfg
        self.places = cfg["places"]
        self.scale = 10 ** self.places
        self.bounds = split_bounds(cfg["num"], cfg["splits"], "problem")
        self.total = cfg["num"]
        self.held = None  # the held-out answers, when there is an unseen split
        unseen = cfg["unseen"]
        if unseen is not None:
            self.held = frozenset(unseen_answers(cfg["operations"], cfg["digits"], cfg["negatives"],
                                                 unseen["fraction"], unseen["seed"]))
            self.bounds.append((cfg["num"], cfg["num"] + unseen["num"], UNSEEN_SPLIT))
            self.total += unseen["num"]

    def _range(self, digits: int) -> tuple[int, int]:
        """Smallest and largest operand (as counts of 10**-places) with `digits` integer digits."""
        low = 0 if digits == 1 else 10 ** (digits - 1)
        return low * self.scale, 10 ** digits * self.scale - 1

    def _operand(self, rng: random.Random, which: int, nonzero: bool = False) -> int:
        lo, hi = self.cfg["digits"][which]
        low, high = self._range(rng.randint(lo, hi))
        return rng.randint(max(low, int(nonzero)), high)

    def _draw(self, rng: random.Random) -> tuple[str, int, int, str, str]:
        """One problem from `rng`: (operation, a, b, answer, question suffix); a, b in counts of 10**-places."""
        cfg, places = self.cfg, self.places
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
        return op, a, b, answer, suffix

    def _fits(self, split: str, op: str, a: int, b: int, answer: str) -> bool:
        """May this problem be in `split`: its answer held out exactly when the split is the unseen one,
        and (distinct) the split owns it."""
        if self.held is not None and (int(answer) in self.held) != (split == UNSEEN_SPLIT):
            return False
        if self.cfg["distinct"] and split != UNSEEN_SPLIT:
            x, y = sorted((a, b)) if op in ("add", "mul") else (a, b)  # a + b and b + a: one problem
            return owner_split("arithmetic", self.cfg["seed"], f"{op}:{x}:{y}", self.cfg["splits"]) == split
        return True

    def problem(self, index: int) -> dict:
        """The record of problem `index` (cheap, deterministic in (cfg, index)): the first draw of its own
        random stream that fits its split."""
        rng = random.Random(item_seed("arithmetic", self.cfg["seed"], index))
        split = self.split_of(index)
        for _ in range(MAX_DRAWS):
            op, a, b, answer, suffix = self._draw(rng)
            if self._fits(split, op, a, b, answer):
                break
        else:
            raise ValueError(f"split {split!r}: no problem fits it in {MAX_DRAWS:,} draws; these operations and "
                             "digits give too few problems for distinct splits and held-out answers")
        operands = [fixed(a, self.places), fixed(b, self.places)]
        return {"id": f"{split}-{index:08d}", "question": f"What is {operands[0]} {SYMBOLS[op]} {operands[1]}{suffix}?",
                "answer": answer, "operation": op, "operands": operands, "split": split}




def _digit_range(value, which: str) -> list[int]:
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value, value)
    try:
        lo, hi = (int(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(f"digits of operand {which} must be N or (lowest, highest), got {value!r}") from None
    if not 1 <= lo <= hi:
        raise ValueError(f"digits of operand {which} must satisfy 1 <= lowest <= highest, got {lo}-{hi}")
    if hi > MAX_DIGITS:
        raise ValueError(f"digits of operand {which} must be at most {MAX_DIGITS}, got {hi}")
    return [lo, hi]


def _config(num, seed, splits, operations, digits, places, div_places, negatives, distinct, unseen_fraction,
            unseen_seed, unseen_num) -> dict:
    """The JSON-ready generation config (validated); equal configs give identical datasets."""
    check_int("num", num, 1, MAX_ITEMS)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an integer, got {seed!r}")
    splits = parse_splits(splits) if isinstance(splits, str) else dict(splits)
    parse_splits(",".join(f"{k}={v}" for k, v in splits.items()))  # same checks for a dict
    operations = check_operations(operations, OPERATIONS)
    if isinstance(digits, int) or (isinstance(digits, (tuple, list)) and len(digits) == 2
                                   and all(isinstance(d, int) for d in digits)):
        digits = [digits, digits]  # N or one (lowest, highest) for both operands
    if not isinstance(digits, (tuple, list)) or len(digits) != 2:
        raise ValueError(f"digits must be N, (lowest, highest) or one of those per operand; got {digits!r}")
    digits = [_digit_range(digits[0], "a"), _digit_range(digits[1], "b")]
    check_int("places", places, 0, MAX_PLACES)
    if div_places is not None:
        check_int("div_places", div_places, 0, MAX_PLACES)
    if "div" in operations and div_places is None and digits[1][1] > digits[0][1]:
        raise ValueError(f"exact division needs divisors no longer than dividends: operand b has up to "
                         f"{digits[1][1]} digits, operand a up to {digits[0][1]} (or set div_places to round)")
    if not isinstance(distinct, bool):
        raise ValueError(f"distinct must be True or False, got {distinct!r}")
    if check_fraction(unseen_fraction) > 0 and (places or ("div" in operations and div_places is not None)):
        raise ValueError("unseen_fraction holds whole-number answers out: it needs places 0 and exact division "
                         "(no div_places)")
    unseen = unseen_settings(unseen_fraction, unseen_seed, unseen_num, num, splits)
    if unseen:
        unseen["answers"] = len(unseen_answers(operations, digits, negatives, unseen_fraction, unseen_seed))
    return {"num": num, "seed": seed, "splits": splits, "operations": operations, "digits": digits,
            "places": places, "div_places": div_places, "negatives": bool(negatives), "distinct": distinct,
            "unseen": unseen}


def write_arithmetic_dataset(out, num: int, seed: int = 0, *, splits: dict[str, float] | str = "train=0.9,test=0.1",
                             operations=OPERATIONS, digits=((1, 3), (1, 3)), places: int = 0,
                             div_places: int | None = None, negatives: bool = False, distinct: bool = False,
                             unseen_fraction: float = 0.0, unseen_seed: int = 0, unseen_num: int | None = None,
                             workers: int = 1, resume: bool = False, overwrite: bool = False,
                             progress: bool = True) -> Path:
    """Write `num` problems as `out/{split}.jsonl` + `out/generation.json`; returns `out`.

    digits: integer digits per operand, ((lowest_a, highest_a), (lowest_b, highest_b)) (each range may be
    one N; 1..MAX_DIGITS), or one (lowest, highest) or N for both. places: decimals of every operand
    (0..MAX_PLACES). div_places: None for exact whole-number division, k (0..MAX_PLACES) to round quotients
    half up to k decimals. negatives: subtraction may give negative answers. distinct: no problem in two
    splits. unseen_fraction > 0: that fraction of the possible answers (`unseen_answers(operations, digits,
    negatives, unseen_fraction, unseen_seed)`) is kept out of every split and is the answer of every problem
    of an extra split `test_unseen` of `unseen_num` problems (default: as many as the smallest split).
    Deterministic in (arguments, seed) whatever `workers`; ValueError on bad arguments.
    """
    cfg = _config(num, seed, splits, operations, digits, places, div_places, negatives, distinct, unseen_fraction,
                  unseen_seed, unseen_num)
    plan = _Plan(cfg)
    for lo, _, _ in plan.bounds:  # a split no problem can fit fails here, before anything is written
        plan.problem(lo)
    return build_dataset(out, plan, workers=workers, resume=resume, overwrite=overwrite, progress=progress)


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
    p = Parser(
        prog="data-synth arithmetic",
        description="Arithmetic problems with exact answers: OUT/{split}.jsonl (id, question, answer, operation, "
                    "operands, split) and OUT/generation.json.")
    add_dataset_args(p, "problems")
    add_splits_arg(p)
    p.add_argument("--operations", default=",".join(OPERATIONS),
                   help=f"comma list of {','.join(OPERATIONS)} (default all)")
    p.add_argument("--digits", type=_digits_arg, default=[[1, 3], [1, 3]],
                   help=f"integer digits per operand: N, LO-HI (both operands) or A,B each N or LO-HI, each "
                        f"1..{MAX_DIGITS} (default 1-3)")
    p.add_argument("--places", type=bounded_int(0, MAX_PLACES), default=0,
                   help=f"decimal places of every operand, 0..{MAX_PLACES} (default 0)")
    p.add_argument("--div-places", type=bounded_int(0, MAX_PLACES), default=None,
                   help=f"round quotients half up to this many decimals, 0..{MAX_PLACES} (default: exact "
                        "whole-number division)")
    p.add_argument("--negatives", action="store_true", help="subtraction may have negative answers")
    p.add_argument("--distinct", action="store_true",
                   help="no problem in two splits (a + b and b + a count as one); each split draws only its own")
    p.add_argument("--unseen-fraction", type=float, default=0.0,
                   help=f"hold this fraction of the possible answers out of every split and write problems with "
                        f"them, and only them, into an extra split {UNSEEN_SPLIT} (every digit stays at every "
                        "place in training; whole numbers only)")
    add_unseen_args(p, "answers", "problems")
    add_build_args(p)
    args = p.parse_args(argv)

    def write():
        return write_arithmetic_dataset(
            args.out, args.num, args.seed, splits=args.splits,
            operations=parse_operations(args.operations), digits=args.digits,
            places=args.places, div_places=args.div_places, negatives=args.negatives, distinct=args.distinct,
            unseen_fraction=args.unseen_fraction, unseen_seed=args.unseen_seed, unseen_num=args.unseen_num,
            workers=args.workers, resume=args.resume, overwrite=args.overwrite, progress=not args.no_progress)

    status, out = run_writer("data-synth arithmetic", write)
    if status:
        return status
    unseen = json.loads((out / "generation.json").read_text())["unseen"]
    extra = f" and {unseen['num']} with held-out answers in {UNSEEN_SPLIT}" if unseen else ""
    print(f"wrote {args.num} arithmetic problems{extra} to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
