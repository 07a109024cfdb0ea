"""Templated math word problems with exact whole-number answers, in the spirit of SVAMP:
`data-synth word-problems --num N --seed S --out DIR`.

Layout of `out/`:
    generation.json      every argument that decides the problems
    {split}.jsonl        one problem a line: {"id", "question", "answer", "equation", "operands",
                         "distractors", "template", "operations", "split"}, e.g.
                         {"id": "train-00000003", "question": "Ivan has 11 jars with 14 marbles in each jar,
                         and 23 more marbles on the table. How many marbles does Ivan have in all?", "answer":
                         "177", "equation": "11 * 14 + 23", "operands": ["11", "14", "23"], "distractors": [],
                         "template": "bags_and_loose", "operations": ["mul", "add"], "split": "train"}

A problem is a template (`TEMPLATES`: a story of one or two operations of + - * and exact /, its equation
over letters) filled with numbers, two names, objects, containers and units. Every number in the question
is written in digits and is either an operand of the equation or a distractor: with probability
`distractor_rate` one sentence with a number that does not enter the answer is put among the story's
sentences. Numbers are drawn again until every number in the text is >= 2 and every step of the equation
(`operations`, in the order they are computed) gives a whole number >= 1, so the answer is re-derived by
evaluating `equation` (the equation with the numbers put in).

`operations` (e.g. add,sub) keeps only the templates whose every operation is listed: the same stories with
easier arithmetic.

Splits: no problem is in two splits. A problem is its template and operands; it belongs to one split by a
seeded hash (`dataset.owner_split`), and a split holds only its own, so a test problem is never a
training problem in other words. `unseen_fraction` holds a seeded set of templates out (`unseen_templates`:
every operation stays in some training template); they make up the extra split `test_unseen`, and only
they. Problem `index` gets its own seed from (seed, index), so the bytes depend on nothing else (not the
worker count); splits take contiguous index blocks. Written through `data_synth.dataset.build_dataset`:
atomic (built in `.{out}.partial`, then renamed), resumable, `--overwrite` to replace an existing `out`.
"""

from __future__ import annotations

import ast
import json
import random
import re
import string
import sys
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from .args import Parser
from .arithmetic import MAX_DRAWS
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
    item_seed,
    owner_split,
    parse_operations,
    parse_splits,
    pick_unseen,
    run_writer,
    split_bounds,
    unseen_settings,
)

OPERATIONS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div"}


@dataclass(frozen=True)
class Template:
    """A story with its equation. `numbers`: letter -> (lowest, highest), drawn uniformly, or an expression
    over letters listed before it (how exact divisions are made: "b * q"); letters the text does not use
    are helpers. `sentences`: the story, the question last; {a} etc. are numbers, the other fields fillers
    (`FILLERS`)."""

    id: str
    equation: str  # over the letters of `numbers`, e.g. "(a + b) / c"
    numbers: dict
    sentences: tuple[str, ...]

    @property
    def shown(self) -> set[str]:
        """The letters of `numbers` the text shows."""
        fields = {f for s in self.sentences for _, f, _, _ in string.Formatter().parse(s) if f}
        return fields & set(self.numbers)

    @property
    def operations(self) -> list[str]:
        """The equation's operations in the order they are computed: "(a + b) / c" -> ["add", "div"]."""
        return [name for name, _ in steps(self.equation, dict.fromkeys(self.numbers, 1))]


TEMPLATES = tuple(Template(*t) for t in (
    ("gain", "a + b", {"a": (2, 99), "b": (2, 99)},
     ("{A} has {a} {items}.", "{B} gives {A} {b} more {items}.", "How many {items} does {A} have now?")),
    ("more_than", "a + b", {"a": (2, 99), "b": (2, 60)},
     ("{A} has {a} {items}.", "{B} has {b} more {items} than {A}.", "How many {items} does {B} have?")),
    ("loss", "a - b", {"a": (10, 99), "b": (2, 98)},
     ("{A} had {a} {items}.", "{A} gave {b} {items} to {B}.", "How many {items} does {A} have left?")),
    ("fewer_than", "a - b", {"a": (10, 99), "b": (2, 60)},
     ("{A} has {a} {items}.", "{B} has {b} fewer {items} than {A}.", "How many {items} does {B} have?")),
    ("score_gap", "a - b", {"a": (10, 99), "b": (2, 98)},
     ("{A} scored {a} points in a game.", "{B} scored {b} points.",
      "How many more points did {A} score than {B}?")),
    ("groups", "a * b", {"a": (2, 20), "b": (2, 25)},
     ("There are {a} {boxes}.", "Each {box} holds {b} {items}.", "How many {items} are there in all?")),
    ("price", "a * b", {"a": (2, 50), "b": (2, 20)},
     ("One {item} costs {a} {money}.", "{A} buys {b} {items}.", "How many {money} does {A} spend?")),
    ("speed", "a * b", {"a": (10, 90), "b": (2, 12)},
     ("A {vehicle} travels {a} {distance} every hour.",
      "How many {distance} does the {vehicle} travel in {b} hours?")),
    ("share", "a / b", {"b": (2, 12), "q": (2, 15), "a": "b * q"},
     ("{A} shares {a} {items} equally among {b} friends.", "How many {items} does each friend get?")),
    ("daily_walk", "a / b", {"b": (2, 10), "q": (2, 30), "a": "b * q"},
     ("{A} walked {a} {distance} in {b} days, the same distance every day.",
      "How many {distance} did {A} walk each day?")),
    ("buy_then_give", "a + b - c", {"a": (5, 60), "b": (2, 40), "c": (2, 60)},
     ("{A} had {a} {items}.", "{A} bought {b} more {items} and then gave {c} {items} to {B}.",
      "How many {items} does {A} have now?")),
    ("three_days", "a + b + c", {"a": (2, 40), "b": (2, 40), "c": (2, 40)},
     ("{A} walked {a} {distance} on Monday, {b} {distance} on Tuesday and {c} {distance} on Wednesday.",
      "How many {distance} did {A} walk in all?")),
    ("spend_twice", "a - b - c", {"a": (20, 99), "b": (2, 40), "c": (2, 40)},
     ("{A} had {a} {money}.", "{A} spent {b} {money} on lunch and {c} {money} on a book.",
      "How many {money} does {A} have left?")),
    ("bags_and_loose", "a * b + c", {"a": (2, 12), "b": (2, 15), "c": (2, 30)},
     ("{A} has {a} {boxes} with {b} {items} in each {box}, and {c} more {items} on the table.",
      "How many {items} does {A} have in all?")),
    ("fill_and_use", "a * b - c", {"a": (2, 12), "b": (2, 15), "c": (2, 60)},
     ("Each {box} holds {b} {items}.", "{A} fills {a} {boxes} and then takes out {c} {items}.",
      "How many {items} are still in the {boxes}?")),
    ("sale", "(a - b) * c", {"a": (10, 60), "b": (2, 30), "c": (2, 12)},
     ("One {item} costs {a} {money}.", "During a sale one {item} costs {b} {money} less.",
      "How many {money} do {c} {items} cost during the sale?")),
    ("pool_and_split", "(a + b) / c", {"c": (2, 9), "q": (2, 12), "a": (2, 50), "b": "c * q - a"},
     ("{A} has {a} {items} and {B} has {b} {items}.",
      "{A} and {B} put their {items} together and split them equally into {c} {boxes}.",
      "How many {items} go into each {box}?")),
    ("bake_and_pack", "a * b / c", {"c": (2, 6), "q": (2, 8), "a": "c * q", "b": (2, 9)},
     ("{A} bakes {b} batches of {baked} with {a} {baked} in each batch.",
      "{A} packs all the {baked} equally into {c} {boxes}.", "How many {baked} are in each {box}?")),
))

# Distractor sentences: a number `d` that does not enter the answer ({others}: objects other than {items}).
DISTRACTORS = ("{B} has {d} {others}.", "{A} is {d} years old.", "{B} lives {d} {distance} away.",
               "There are {d} {others} on the shelf.")

FILLERS = {
    "names": ("Ava", "Liam", "Mia", "Noah", "Zoe", "Omar", "Priya", "Chen", "Lucia", "Kofi", "Hana", "Mateo",
              "Sara", "Ivan", "Amara", "Yuki", "Leo", "Nina", "Ravi", "Elena", "Tom", "Aisha", "Diego", "Ingrid"),
    "items": (("apple", "apples"), ("marble", "marbles"), ("sticker", "stickers"), ("pencil", "pencils"),
              ("book", "books"), ("shell", "shells"), ("card", "cards"), ("balloon", "balloons"),
              ("stamp", "stamps"), ("toy car", "toy cars"), ("orange", "oranges"), ("crayon", "crayons"),
              ("button", "buttons"), ("flower", "flowers")),
    "boxes": (("box", "boxes"), ("bag", "bags"), ("basket", "baskets"), ("jar", "jars"), ("crate", "crates"),
              ("tray", "trays")),
    "money": ("dollars", "euros", "pounds", "francs"),
    "distance": ("kilometers", "miles"),
    "vehicle": ("train", "bus", "car", "boat", "truck"),
    "baked": ("cookies", "muffins", "cupcakes", "rolls"),
}
DISTRACTOR_RATE = 0.4  # default share of problems with a distractor sentence
_LETTER = re.compile(r"\b[a-z]\b")


# ---------------------------------------------------------------------------------------------- equations

def steps(equation: str, values: dict) -> list[tuple[str, Fraction | None]]:
    """The steps of computing `equation` (+ - * / and parentheses over letters and integers) with the
    letters' `values`: [(operation, result)] in the order computed, the last result the equation's value;
    a division by zero gives None. steps("(a + b) / c", {"a": 2, "b": 4, "c": 3}) -> [("add", 6), ("div", 2)]."""
    out = []

    def walk(node) -> Fraction | None:
        if isinstance(node, ast.Name):
            return Fraction(values[node.id])
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            return Fraction(node.value)
        if not (isinstance(node, ast.BinOp) and type(node.op) in OPERATIONS):
            raise ValueError(f"equation {equation!r}: only + - * / and parentheses over letters and integers")
        left, right = walk(node.left), walk(node.right)
        name = OPERATIONS[type(node.op)]
        if left is None or right is None or (name == "div" and not right):
            result = None
        elif name == "add":
            result = left + right
        elif name == "sub":
            result = left - right
        else:
            result = left * right if name == "mul" else left / right
        out.append((name, result))
        return result

    walk(ast.parse(equation, mode="eval").body)
    return out


def templates_of(operations=None) -> list[Template]:
    """The templates whose every operation is one of `operations` (names of OPERATIONS; None: all), in
    TEMPLATES order; ValueError naming an unknown operation."""
    if operations is None:
        return list(TEMPLATES)
    names = set(check_operations(operations, tuple(OPERATIONS.values())))
    return [t for t in TEMPLATES if set(t.operations) <= names]


def unseen_templates(fraction: float, seed: int = 0, operations=None) -> list[str]:
    """The ids of the templates `unseen_fraction=fraction, unseen_seed=seed` holds out of the named splits:
    that fraction of the templates in use (`templates_of(operations)`), drawn with `seed` by
    `dataset.pick_unseen`, so that every operation still occurs in a template left in training. In
    TEMPLATES order; pure in its arguments."""
    held = pick_unseen(templates_of(operations), lambda t: set(t.operations), check_fraction(fraction), seed)
    return [t.id for t in held]


# -------------------------------------------------------------------------------------------- problems

class _Plan(JsonLinesPlan):
    """The problems a config describes (the plan interface of `data_synth.dataset.build_partial`)."""

    name, noun, unit, chunk = "word-problems", "problems", "problem", 1024

    def __init__(self, cfg: dict):
        self.cfg = cfg
        self.bounds = split_bounds(cfg["num"], cfg["splits"], "problem")
        self.total = cfg["num"]
        held = set(cfg["unseen"]["templates"]) if cfg["unseen"] else set()
        used = templates_of(cfg.get("operations"))
        self.pools = {False: [t for t in used if t.id not in held], True: [t for t in used if t.id in held]}
        if cfg["unseen"]:
            self.bounds.append((cfg["num"], cfg["num"] + cfg["unseen"]["num"], UNSEEN_SPLIT))
            self.total += cfg["unseen"]["num"]


    @staticmethod
    def _numbers(template: Template, rng: random.Random) -> tuple[dict, int, list[str]] | None:
        """Numbers for `template` from `rng`, with the answer and the operations; None when a shown number
        is below 2 or a step is no whole number >= 1 (the caller draws again)."""
        values = {}
        for letter, spec in template.numbers.items():  # helpers are sums and products: whole numbers
            values[letter] = rng.randint(*spec) if isinstance(spec, tuple) else int(steps(spec, values)[-1][1])
        if any(values[k] < 2 for k in template.shown):
            return None
        done = steps(template.equation, values)
        if any(r is None or r.denominator != 1 or r < 1 for _, r in done):
            return None
        return values, int(done[-1][1]), [name for name, _ in done]

    def problem(self, index: int) -> dict:
        """The record of problem `index` (cheap, deterministic in (cfg, index)): the first draw of its own
        random stream that its split owns."""
        cfg = self.cfg
        rng = random.Random(item_seed("word-problems", cfg["seed"], index))
        split = self.split_of(index)
        pool = self.pools[split == UNSEEN_SPLIT]
        for _ in range(MAX_DRAWS):
            template = rng.choice(pool)
            drawn = self._numbers(template, rng)
            if drawn is None:
                continue
            values, answer, operations = drawn
            operands = [str(values[k]) for k in _LETTER.findall(template.equation)]
            if split == UNSEEN_SPLIT or owner_split("word-problems", cfg["seed"],
                                                    f"{template.id}:{','.join(operands)}", cfg["splits"]) == split:
                break
        else:
            raise ValueError(f"split {split!r}: no problem fits it in {MAX_DRAWS:,} draws")
        names = rng.sample(FILLERS["names"], 2)
        (item, items), (_, others) = rng.sample(FILLERS["items"], 2)
        box, boxes = rng.choice(FILLERS["boxes"])
        fill = {"A": names[0], "B": names[1], "item": item, "items": items, "others": others, "box": box,
                "boxes": boxes, "money": rng.choice(FILLERS["money"]), "distance": rng.choice(FILLERS["distance"]),
                "vehicle": rng.choice(FILLERS["vehicle"]), "baked": rng.choice(FILLERS["baked"]),
                **{k: str(v) for k, v in values.items()}}
        sentences = [s.format(**fill) for s in template.sentences]
        distractors = []
        if rng.random() < cfg["distractor_rate"]:
            d = rng.randint(2, 99)
            distractors.append(str(d))
            where = rng.randint(0, len(sentences) - 1)  # anywhere before the question
            sentences.insert(where, rng.choice(DISTRACTORS).format(**fill, d=d))
        equation = _LETTER.sub(lambda m: str(values[m[0]]), template.equation)
        return {"id": f"{split}-{index:08d}", "question": " ".join(sentences), "answer": str(answer),
                "equation": equation, "operands": operands, "distractors": distractors, "template": template.id,
                "operations": operations, "split": split}



def _config(num, seed, splits, distractor_rate, unseen_fraction, unseen_seed, unseen_num, operations) -> dict:
    """The JSON-ready generation config (validated); equal configs give identical datasets."""
    check_int("num", num, 1, MAX_ITEMS)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an integer, got {seed!r}")
    splits = parse_splits(splits) if isinstance(splits, str) else dict(splits)
    parse_splits(",".join(f"{k}={v}" for k, v in splits.items()))  # same checks for a dict
    if isinstance(distractor_rate, bool) or not isinstance(distractor_rate, (int, float)) \
            or not 0 <= distractor_rate <= 1:
        raise ValueError(f"distractor_rate must be a number in [0, 1], got {distractor_rate!r}")
    if operations is not None:  # checked once, in canonical order: the same data whatever order was asked
        names = tuple(OPERATIONS.values())
        operations = sorted(check_operations(operations, names), key=names.index)
    unseen = unseen_settings(unseen_fraction, unseen_seed, unseen_num, num, splits)
    if unseen:
        unseen["templates"] = unseen_templates(unseen_fraction, unseen_seed, operations)
    cfg = {"num": num, "seed": seed, "splits": splits, "distractor_rate": float(distractor_rate), "unseen": unseen}
    if operations is not None:  # absent when every template is in use, as before the option existed
        cfg["operations"] = operations
    return cfg


def write_word_problem_dataset(out, num: int, seed: int = 0, *, splits: dict[str, float] | str = "train=0.9,test=0.1",
                               distractor_rate: float = DISTRACTOR_RATE, unseen_fraction: float = 0.0,
                               unseen_seed: int = 0, unseen_num: int | None = None, operations=None,
                               workers: int = 1, resume: bool = False, overwrite: bool = False,
                               progress: bool = True) -> Path:
    """Write `num` word problems as `out/{split}.jsonl` + `out/generation.json`; returns `out`.

    distractor_rate: the share of problems (0..1) with a distractor sentence. unseen_fraction > 0 holds
    that fraction of the templates (`unseen_templates(unseen_fraction, unseen_seed)`) out of every split
    and writes problems of those templates, and only those, into an extra split `test_unseen` of
    `unseen_num` problems (default: as many as the smallest split). No problem (template and operands) is
    in two splits. operations: only the templates whose every operation is in this list (e.g. ["add",
    "sub"]; None: all of them). Deterministic in (arguments, seed) whatever `workers`; ValueError on bad
    arguments.
    """
    cfg = _config(num, seed, splits, distractor_rate, unseen_fraction, unseen_seed, unseen_num, operations)
    plan = _Plan(cfg)
    for lo, _, _ in plan.bounds:  # a split no problem can fit fails here, before anything is written
        plan.problem(lo)
    return build_dataset(out, plan, workers=workers, resume=resume, overwrite=overwrite, progress=progress)


# ---------------------------------------------------------------------------------------------- CLI

def main(argv: list[str] | None = None) -> int:
    """`data-synth word-problems --num N --seed S --out DIR [options]`."""
    p = Parser(
        prog="data-synth word-problems",
        description="Templated math word problems with whole-number answers: OUT/{split}.jsonl (id, question, "
                    "answer, equation, operands, distractors, template, operations, split) and OUT/generation.json.")
    add_dataset_args(p, "problems")
    add_splits_arg(p)
    p.add_argument("--distractor-rate", type=float, default=DISTRACTOR_RATE,
                   help=f"share of problems with a sentence whose number does not enter the answer, 0..1 "
                        f"(default {DISTRACTOR_RATE})")
    p.add_argument("--unseen-fraction", type=float, default=0.0,
                   help=f"hold this fraction of the templates in use ({len(TEMPLATES)} without --operations) "
                        f"out of every split and write problems of them, and only them, into an extra split "
                        f"{UNSEEN_SPLIT} (every operation stays in training)")
    p.add_argument("--operations", default=None,
                   help="only the templates whose every operation is one of these, comma-separated from "
                        "add,sub,mul,div (default: all templates)")
    add_unseen_args(p, "templates", "problems")
    add_build_args(p)
    args = p.parse_args(argv)

    def write():
        return write_word_problem_dataset(
            args.out, args.num, args.seed, splits=args.splits, distractor_rate=args.distractor_rate,
            unseen_fraction=args.unseen_fraction, unseen_seed=args.unseen_seed, unseen_num=args.unseen_num,
            operations=parse_operations(args.operations) if args.operations is not None else None,
            workers=args.workers, resume=args.resume, overwrite=args.overwrite, progress=not args.no_progress)

    status, out = run_writer("data-synth word-problems", write)
    if status:
        return status
    unseen = json.loads((out / "generation.json").read_text())["unseen"]
    extra = f" and {unseen['num']} of held-out templates in {UNSEEN_SPLIT}" if unseen else ""
    print(f"wrote {args.num} word problems{extra} to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
