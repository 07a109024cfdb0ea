"""Synthetic charts with known values, written in the ChartQA, PlotQA or DVQA layout.

Each chart is a bar (vertical, horizontal, grouped), line or pie chart drawn with matplotlib (Agg) from
random data held as exact decimals (integers, decimals, percentages, large values), with every value
printed on the chart. Questions (value retrieval, comparison, max/min, difference, sum, count) get answers
computed exactly from that data, formatted without float noise. One more kind, "bars_axis" (data_synth/
bars.py, not among the defaults), is chart reading without value labels: one or a few bars against a
numbered axis, small images (56-112 px), value questions only, answers with a fixed number of decimals.

Output of `write_chart_dataset(out, layout, num, seed, split)`:
- chartqa: `{out}/{split}/png/*.png`, `{split}_human.json` / `{split}_augmented.json` ({imgname, query,
  label}), `{split}/tables/*.csv` (the data, like the official tables/)
- plotqa:  `{out}/{split}/png/{i}.png`, `{out}/{split}/qa_pairs_V2.json` ({"qa_pairs": [...]}, numeric
  answers as JSON numbers)
- dvqa:    `{out}/images/synth_{split}_*.png` (a folder every split shares), `{out}/qa/{split}_qa.json`
- always:  `{out}/charts_data/{split}.jsonl`, one line a chart: the data, the question arguments and
  answers, and where each question sits in the layout files, so every answer can be derived again;
  `{out}/charts_data/{split}.generation.json`, the arguments (and any held-out values).
Deterministic by (seed, split, index): the same arguments give the same bytes whatever `workers` is.
One call writes one split through `data_synth.dataset.build_partial`: built in `{out}/.{split}.partial`
(resumable) and moved in when complete, images and tables before the index files; an existing split is
replaced only with `overwrite`, and nothing else in `out` is touched.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import random
import re
import sys
from decimal import Decimal
from pathlib import Path

from . import bars
from .args import Parser
from .dataset import (
    MAX_ITEMS,
    MAX_SIDE,
    build_partial,
    check_fraction,
    check_int,
    check_split_name,
    check_workers,
    encode_png,
    remove,
    run_writer,
    write_file,
)

LAYOUTS = ("chartqa", "plotqa", "dvqa")
KINDS = ("vbar", "hbar", "grouped_bar", "line", "pie")  # the default mix, drawn with matplotlib
ALL_KINDS = (*KINDS, bars.KIND)
VALUE_KINDS = ("integer", "decimal", "percentage", "large")
QTYPES = ("value", "compare", "max", "min", "difference", "sum", "count")
MAX_QUESTIONS = 100  # questions per chart

# question type -> (DVQA template_id, PlotQA template); count of categories is "structure"/"structural"
_TEMPLATES = {
    "value": ("data", "data_retrieval"),
    "compare": ("reasoning", "comparison"),
    "max": ("reasoning", "min_max"),
    "min": ("reasoning", "min_max"),
    "difference": ("reasoning", "arithmetic"),
    "sum": ("reasoning", "arithmetic"),
    "count": ("reasoning", "compound"),
}

_TOPICS = [
    ("countries", "Country", "countries", ["Brazil", "Canada", "Chile", "Denmark", "Egypt", "France", "Germany", "India",
                              "Japan", "Kenya", "Mexico", "Norway", "Peru", "Spain", "Turkey", "Vietnam"]),
    ("sectors", "Sector", "sectors", ["Agriculture", "Construction", "Education", "Energy", "Finance", "Health",
                           "Manufacturing", "Mining", "Retail", "Tourism", "Transport"]),
    ("products", "Product", "products", ["Laptops", "Phones", "Tablets", "Cameras", "Printers", "Monitors", "Speakers",
                             "Watches", "Headsets", "Routers"]),
    ("fruits", "Fruit", "fruits", ["Apples", "Bananas", "Cherries", "Grapes", "Lemons", "Mangoes", "Oranges", "Pears",
                         "Plums", "Kiwis"]),
]
_SERIES = [["Men", "Women"], ["Urban", "Rural"], ["Online", "In store"], ["Exports", "Imports"],
           ["Q1", "Q2", "Q3"], ["North", "South", "East"]]
_MEASURES = {
    "integer": ["Number of units", "Number of stores", "Count of projects"],
    "decimal": ["Average score", "Average price (USD)", "Index value"],
    "percentage": ["Share of respondents", "Market share", "Growth rate"],
    "large": ["Revenue (USD)", "Population", "Visitors per year"],
}
_PALETTES = [
    ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C"],
    ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"],
    ["#264653", "#2a9d8f", "#e9c46a", "#f4a261", "#e76f51", "#6d597a", "#b56576", "#355070"],
    ["#003f5c", "#58508d", "#bc5090", "#ff6361", "#ffa600", "#7a5195", "#ef5675", "#2f4b7c"],
]


# ------------------------------------------------------------------------------------------- numbers


def fmt(value: Decimal) -> str:
    """Exact decimal as plain text: no exponent, no trailing zeros after the point ("12.50" -> "12.5")."""
    text = format(value, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def display(value: Decimal, value_kind: str) -> str:
    """The value as printed on the chart: thousands separators for large values, % for percentages."""
    if value_kind == "large":
        return f"{int(value):,}"
    return fmt(value) + ("%" if value_kind == "percentage" else "")


def _distinct(rng: random.Random, n: int, low: int, high: int, places: int) -> list[Decimal]:
    """n distinct values k / 10**places, k drawn from [low, high)."""
    return [Decimal(k).scaleb(-places) for k in rng.sample(range(low, high), n)]


def _values(rng: random.Random, value_kind: str, n: int, pie: bool) -> list[Decimal]:
    if pie:  # shares of 100 (all distinct, all positive), in whole or tenth percent
        places = rng.choice([0, 1])
        whole = 100 * 10**places
        while True:
            cuts = sorted(rng.sample(range(1, whole), n - 1))
            parts = [b - a for a, b in zip([0, *cuts], [*cuts, whole])]
            if len(set(parts)) == n and min(parts) >= 2 * 10**places:
                return [Decimal(p).scaleb(-places) for p in parts]
    if value_kind == "integer":
        return _distinct(rng, n, 1, rng.choice([20, 50, 100, 500, 1000]) + 1, 0)
    if value_kind == "decimal":
        places = rng.choice([1, 2])
        return _distinct(rng, n, 1, rng.choice([10, 50, 100]) * 10**places, places)
    if value_kind == "percentage":
        places = rng.choice([0, 1])
        return _distinct(rng, n, 1, 100 * 10**places, places)
    low = 10 ** rng.choice([5, 6, 7])
    return _distinct(rng, n, low, 10 * low, 0)


def make_chart(rng: random.Random, kinds=KINDS, value_kinds=VALUE_KINDS, bar_options: dict | None = None) -> dict:
    """Random chart data (JSON-able; values as exact decimal strings) and drawing style. A "bars_axis"
    chart takes `bar_options` (`bars.make_bar_chart` keywords) and ignores `value_kinds`."""
    kind = rng.choice(list(kinds))
    if kind == bars.KIND:
        return bars.make_bar_chart(rng, **(bar_options or {}))
    value_kind = "percentage" if kind == "pie" else rng.choice(list(value_kinds))
    topic, x_label, plural, pool = rng.choice(_TOPICS)
    n = rng.randint(3, 6 if kind in ("pie", "grouped_bar") else 8)
    if kind == "line":
        start = rng.randint(1990, 2015)
        categories = [str(start + k) for k in range(n)]
        x_label, plural = "Year", "years"
    else:
        categories = rng.sample(pool, n)
    if kind == "grouped_bar" or (kind == "line" and rng.random() < 0.5):
        names = rng.choice(_SERIES)  # lines: two series, so value labels can go above / below
        names = names[: rng.randint(2, len(names) if kind == "grouped_bar" else 2)]
    else:
        names = [None]
    measure = rng.choice(_MEASURES[value_kind])
    series = [{"name": name, "values": [fmt(v) for v in _values(rng, value_kind, n, kind == "pie")]}
              for name in names]
    title = f"{measure} by {x_label.lower()}" if kind != "line" else f"{measure}, {categories[0]}-{categories[-1]}"
    return {"kind": kind, "value_kind": value_kind, "topic": topic, "title": title, "x_label": x_label,
            "x_plural": plural, "y_label": measure, "categories": categories, "series": series,
            "style": {"palette": rng.randrange(len(_PALETTES)), "grid": rng.random() < 0.5}}


# ------------------------------------------------------------------------------------------ questions


def chart_values(chart: dict) -> list[list[Decimal]]:
    """[S][N] exact values per series and category."""
    return [[Decimal(v) for v in s["values"]] for s in chart["series"]]


def answer(chart: dict, qtype: str, args: dict) -> tuple[str, bool]:
    """(answer text, numeric?) of a question, computed exactly from the chart data."""
    values = chart_values(chart)[args.get("series", 0)]
    cats = chart["categories"]
    if qtype == "value":  # a chart with "places" answers with exactly that many decimals
        value = values[args["category"]]
        return (f"{value:.{chart['places']}f}" if "places" in chart else fmt(value)), True
    if qtype == "compare":
        a, b = values[args["a"]], values[args["b"]]
        if args["form"] == "yesno":
            return ("Yes" if a > b else "No"), False
        return cats[args["a"] if a > b else args["b"]], False
    if qtype in ("max", "min"):
        pick = max if qtype == "max" else min
        best = pick(range(len(values)), key=lambda k: values[k])
        return (cats[best], False) if args["ask"] == "label" else (fmt(values[best]), True)
    if qtype == "difference":
        return fmt(abs(values[args["a"]] - values[args["b"]])), True
    if qtype == "sum":
        return fmt(sum((values[k] for k in args["categories"]), Decimal(0))), True
    if qtype == "count":
        if args["what"] == "categories":
            return str(len(cats)), True
        return str(sum(v > Decimal(args["threshold"]) for v in values)), True
    raise ValueError(f"unknown question type {qtype!r}")


def _of(chart: dict, si: int, ci: int) -> str:
    name = chart["series"][si]["name"]
    cat = chart["categories"][ci]
    return f"{name} in {cat}" if name else cat


def _question(chart: dict, qtype: str, rng: random.Random) -> tuple[str, dict]:
    """Text and arguments of one question of `qtype`."""
    n, s = len(chart["categories"]), len(chart["series"])
    si = rng.randrange(s)
    sname = chart["series"][si]["name"]
    within = f" for {sname}" if sname else ""
    noun = chart["x_label"].lower()
    pie = chart["kind"] == "pie"
    a, b = rng.sample(range(n), 2)
    if qtype == "value":
        ci = rng.randrange(n)
        text = (f"What percentage does {chart['categories'][ci]} account for?" if pie else
                rng.choice(["What is the value of {}?", "What value is shown for {}?"]).format(_of(chart, si, ci)))
        return text, {"series": si, "category": ci}
    if qtype == "compare":
        form = rng.choice(["yesno", "which"])
        if form == "yesno":
            text = f"Is the value of {_of(chart, si, a)} greater than the value of {_of(chart, si, b)}?"
        else:
            text = f"Which is greater{within}, {chart['categories'][a]} or {chart['categories'][b]}?"
        return text, {"series": si, "a": a, "b": b, "form": form}
    if qtype in ("max", "min"):
        word = "highest" if qtype == "max" else "lowest"
        ask = rng.choice(["label", "value"])
        text = (f"Which {noun} has the {word} value{within}?" if ask == "label" else
                f"What is the {word} value{within} in the chart?")
        return text, {"series": si, "ask": ask}
    if qtype == "difference":
        text = f"What is the difference between the values of {_of(chart, si, a)} and {_of(chart, si, b)}?"
        return text, {"series": si, "a": a, "b": b}
    if qtype == "sum":
        if pie or rng.random() < 0.5:
            text = f"What is the sum of the values of {_of(chart, si, a)} and {_of(chart, si, b)}?"
            return text, {"series": si, "categories": sorted([a, b])}
        return f"What is the total of all values{within}?", {"series": si, "categories": list(range(n))}
    if qtype == "count":
        if rng.random() < 0.4:
            text = {"pie": "How many slices does the pie chart have?", "line": "How many years does the chart cover?",
                    "grouped_bar": "How many groups of bars are there?"}.get(chart["kind"], "How many bars are there?")
            return text, {"what": "categories"}
        ordered = sorted(chart_values(chart)[si])
        j = rng.randrange(n - 1)
        threshold = fmt((ordered[j] + ordered[j + 1]) / 2)
        return f"How many {chart['x_plural']} have a value{within} greater than {threshold}?", {
            "what": "above", "series": si, "threshold": threshold}
    raise ValueError(f"unknown question type {qtype!r}")


def make_questions(chart: dict, rng: random.Random, count: int) -> list[dict]:
    """`count` questions of distinct types (types repeat only past len(QTYPES)); a "bars_axis" chart gets
    value questions about distinct bars, as many as it has bars when that is fewer than `count`."""
    if chart["kind"] == bars.KIND:
        return bars.bar_questions(chart, rng, count)
    qtypes = rng.sample(QTYPES, min(count, len(QTYPES))) + [rng.choice(QTYPES) for _ in range(count - len(QTYPES))]
    out = []
    for qtype in qtypes:
        text, args = _question(chart, qtype, rng)
        ans, numeric = answer(chart, qtype, args)
        dvqa, plotqa = _TEMPLATES[qtype]
        if qtype == "count" and args["what"] == "categories":
            dvqa, plotqa = "structure", "structural"
        out.append({"qtype": qtype, "args": args, "question": text, "answer": ans, "numeric": numeric,
                    "template_id": dvqa, "template": plotqa})
    return out


# -------------------------------------------------------------------------------------------- drawing


def _legend(ax, n: int) -> None:
    """Legend in a row above the plot, clear of the value labels."""
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=n, fontsize=8, frameon=False)


def render_chart(chart: dict, size=(512, 400)) -> bytes:
    """The chart as PNG bytes, `size` = (width, height) in pixels."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    width, height = size
    fig = Figure(figsize=(width / 100, height / 100), dpi=100)
    ax = fig.add_subplot()
    colors = _PALETTES[chart["style"]["palette"]]
    cats, kind, vk = chart["categories"], chart["kind"], chart["value_kind"]
    values = [[float(v) for v in s["values"]] for s in chart["series"]]
    labels = [[display(Decimal(v), vk) for v in s["values"]] for s in chart["series"]]
    small = 7 if len(cats) * len(values) > 12 or vk == "large" else 8
    x = list(range(len(cats)))
    if kind == "pie":
        texts = [f"{c}\n{t}" for c, t in zip(cats, labels[0])]
        ax.pie(values[0], labels=texts, colors=colors, startangle=90, counterclock=False,
               textprops={"fontsize": 8}, wedgeprops={"linewidth": 1, "edgecolor": "white"})
        ax.set_aspect("equal")
    elif kind in ("vbar", "hbar", "grouped_bar"):
        s = len(values)
        width_bar = 0.8 / s
        for k, (vals, texts) in enumerate(zip(values, labels)):
            pos = [p - 0.4 + width_bar * (k + 0.5) for p in x]
            color = colors[k] if s > 1 else colors[0]
            if kind == "hbar":
                bars = ax.barh(pos, vals, height=width_bar, color=color, label=chart["series"][k]["name"])
            else:
                bars = ax.bar(pos, vals, width=width_bar, color=color, label=chart["series"][k]["name"])
            # long labels on narrow grouped bars would overlap: turn them
            turn = kind == "grouped_bar" and max(map(len, texts)) > 4
            ax.bar_label(bars, labels=texts, padding=2, fontsize=small, rotation=90 if turn else 0)
        if kind == "hbar":
            ax.set_yticks(x, cats, fontsize=8)
            ax.invert_yaxis()
            ax.margins(x=0.2)
            ax.set_xlabel(chart["y_label"], fontsize=9)
        else:
            ax.set_xticks(x, cats, fontsize=8, rotation=30 if len(cats) > 5 else 0)
            ax.margins(y=0.3 if kind == "grouped_bar" else 0.15)
            ax.set_xlabel(chart["x_label"], fontsize=9)
            ax.set_ylabel(chart["y_label"], fontsize=9)
        if s > 1:
            _legend(ax, s)
    else:  # line
        for k, (vals, texts) in enumerate(zip(values, labels)):
            ax.plot(x, vals, marker="o", color=colors[k], label=chart["series"][k]["name"])
            for xi, yi, t in zip(x, vals, texts):
                # with two lines the lower point of each pair is labelled below it
                below = len(values) == 2 and yi < values[1 - k][xi]
                ax.annotate(t, (xi, yi), textcoords="offset points", xytext=(0, -12 if below else 6),
                            ha="center", va="bottom" if not below else "top", fontsize=small)
        ax.set_xticks(x, cats, fontsize=8)
        ax.margins(x=0.08, y=0.2)
        ax.set_xlabel(chart["x_label"], fontsize=9)
        ax.set_ylabel(chart["y_label"], fontsize=9)
        if len(values) > 1:
            _legend(ax, len(values))
    if kind != "pie":
        axis = ax.xaxis if kind == "hbar" else ax.yaxis
        if vk == "large":
            axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
        if chart["style"]["grid"]:
            ax.grid(axis="x" if kind == "hbar" else "y", alpha=0.3)
        ax.tick_params(labelsize=8)
    ax.set_title(chart["title"], fontsize=10, pad=20 if len(values) > 1 else 6)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


# --------------------------------------------------------------------------------------------- layout


def _image_name(layout: str, split: str, index: int) -> str:
    if layout == "chartqa":
        return f"{split}/png/synth_{split}_{index:06d}.png"
    if layout == "plotqa":
        return f"{split}/png/{index}.png"
    return f"images/synth_{split}_{index:08d}.png"


def _outputs(layout: str, split: str) -> tuple[list[str], list[str]]:
    """What a split consists of under the root: (folders it owns: images and tables, its index files).
    A DVQA split owns no folder: its images are the `images/synth_{split}_*.png` of the shared folder."""
    index = [f"charts_data/{split}.jsonl", f"charts_data/{split}.generation.json"]
    if layout == "chartqa":
        return [f"{split}/png", f"{split}/tables"], [f"{split}/{split}_human.json", f"{split}/{split}_augmented.json",
                                                     *index]
    if layout == "plotqa":
        return [f"{split}/png"], [f"{split}/qa_pairs_V2.json", *index]
    return [], [f"qa/{split}_qa.json", *index]


def _shared_images(root: Path, split: str) -> list[str]:
    """Names of the DVQA images of `split` in root/images (the folder every split shares)."""
    pattern = re.compile(rf"synth_{re.escape(split)}_\d{{8}}\.png")
    folder = root / "images"
    return sorted(n for n in os.listdir(folder) if pattern.fullmatch(n)) if folder.is_dir() else []


def _conflict(root: Path, layout: str, split: str, num: int) -> Path | None:
    """The first existing path that writing `split` would replace or shadow: an index file of the split
    (also one the reader would take instead, e.g. PlotQA's qa_pairs_V1.json, ChartQA's parquet files),
    or an image or table of the same name."""
    folders, index = _outputs(layout, split)
    others = {"chartqa": [*sorted((root / "data").glob(f"{split}-*.parquet")), *sorted(root.glob(f"{split}-*.parquet"))],
              "plotqa": [root / split / "qa_pairs_V1.json"], "dvqa": [root / f"{split}_qa.json"]}[layout]
    for path in [root / rel for rel in index] + others:
        if path.exists():
            return path
    def written(rel: str) -> bool:  # is rel the name of an image or table chart 0..num-1 gets
        found = re.search(r"(\d+)\.(png|csv)$", rel)
        if not found or int(found[1]) >= num:
            return False
        image = _image_name(layout, split, int(found[1]))
        return rel == image or (layout == "chartqa" and rel == f"{split}/tables/{Path(image).stem}.csv")

    for folder in folders + (["images"] if layout == "dvqa" else []):
        if (root / folder).is_dir():
            clash = sorted(n for n in os.listdir(root / folder) if written(f"{folder}/{n}"))
            if clash:
                return root / folder / clash[0]
    return None


def _move(src: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.replace(src, dest)


def _merge(src: Path, dest: Path) -> None:
    """Move folder `src` to `dest`, or its files into `dest` when that exists."""
    if not dest.exists():
        _move(src, dest)
        return
    for item in sorted(src.iterdir()):
        os.replace(item, dest / item.name)


def _install(partial: Path, root: Path, layout: str, split: str, overwrite: bool) -> None:
    """Move the complete split built in `partial` into `root`. With `overwrite` the earlier split goes
    first (its index files before its images, so it stops being loadable before it changes) and is
    deleted at the end; the new images and tables go in before the new index files."""
    folders, index = _outputs(layout, split)
    old = root / f".{split}.old"
    remove(old)
    if overwrite:
        for rel in index + folders:
            if (root / rel).exists():
                _move(root / rel, old / rel)
        for name in _shared_images(root, split) if layout == "dvqa" else []:
            _move(root / "images" / name, old / "images" / name)
    _move(partial / "generation.json", partial / "charts_data" / f"{split}.generation.json")
    for rel in folders + (["images"] if layout == "dvqa" else []):
        _merge(partial / rel, root / rel)
    for rel in index:
        _move(partial / rel, root / rel)
    remove(old)
    remove(partial)


def _write_json(path: Path, obj, lines: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        if lines:
            for item in obj:
                f.write(json.dumps(item, ensure_ascii=False) + "\n")
        else:
            json.dump(obj, f, ensure_ascii=False)


def _json_number(text: str):
    value = Decimal(text)
    return int(value) if value == value.to_integral_value() else float(text)


class _Plan:
    """One split of a chart dataset (the plan interface of `data_synth.dataset.build_partial`): chart
    `index` is drawn from its own stream, seeded by (seed, split, index)."""

    name, noun, unit = "charts", "charts", "chart"

    def __init__(self, cfg: dict):
        self.cfg = cfg
        self.total = cfg["num"]
        self.chunk = 16 if set(cfg["kinds"]) - {bars.KIND} else 256
        bar, unseen = cfg["bar"], cfg["unseen"]
        values = None
        if unseen is not None:
            held = bars.unseen_values(bar["axis_max"], bar["places"], unseen["fraction"], unseen["seed"])
            values = held if unseen["split_holds"] == "unseen" else sorted(
                set(range(bar["axis_max"] * 10 ** bar["places"])) - set(held))
        self.bar_options = {"axis_max": bar["axis_max"], "places": bar["places"], "bars": tuple(bar["bars"]),
                            "noise": bar["noise"], "values": values}
        self.questions = 0

    def chart(self, index: int) -> dict:
        """The data, questions and image name of chart `index` (no drawing)."""
        cfg = self.cfg
        rng = random.Random(f"charts:{cfg['seed']}:{cfg['split']}:{index}")
        chart = make_chart(rng, cfg["kinds"], cfg["value_kinds"], self.bar_options)
        chart["questions"] = make_questions(chart, rng, cfg["questions_per_chart"])
        chart["subset"] = rng.choice(["human", "augmented"])  # used by the ChartQA layout
        chart["index"] = index
        chart["image"] = _image_name(cfg["layout"], cfg["split"], index)
        return chart

    def render(self, index: int, root: Path) -> str:
        chart = self.chart(index)
        size = tuple(self.cfg["size"])
        data = (encode_png(bars.render_bar_chart(chart, size)) if chart["kind"] == bars.KIND
                else render_chart(chart, size))
        write_file(root / chart["image"], data)
        return json.dumps(chart, ensure_ascii=False)

    def is_done(self, row: dict, root: Path) -> bool:
        return (root / row["image"]).is_file()

    def finish(self, root: Path, done: dict[int, str]) -> None:
        """The layout's index files, the ChartQA tables and charts_data/{split}.jsonl, under root."""
        layout, split = self.cfg["layout"], self.cfg["split"]
        charts = [json.loads(done[i]) for i in range(self.total)]
        records = {"human": [], "augmented": []} if layout == "chartqa" else []
        for chart in charts:
            name = chart["image"].rsplit("/", 1)[-1]
            for q in chart["questions"]:
                if layout == "chartqa":
                    rows = records[chart["subset"]]
                    q["ref"] = {"subset": chart["subset"], "record": len(rows)}
                    rows.append({"imgname": name, "query": q["question"], "label": q["answer"]})
                elif layout == "plotqa":
                    q["ref"] = {"question_id": len(records)}
                    records.append({"image_index": chart["index"], "question_string": q["question"],
                                    "answer": _json_number(q["answer"]) if q["numeric"] else q["answer"],
                                    "answer_bbox": {}, "template": q["template"], "type": q["qtype"],
                                    "question_id": len(records)})
                else:
                    q["ref"] = {"question_id": len(records)}
                    records.append({"question_id": len(records), "image": name, "question": q["question"],
                                    "answer": q["answer"], "template_id": q["template_id"], "answer_bbox": []})
            if layout == "chartqa":
                table = root / split / "tables" / name.replace(".png", ".csv")
                table.parent.mkdir(parents=True, exist_ok=True)
                with open(table, "w", newline="", encoding="utf-8") as f:
                    writer = csv.writer(f)
                    writer.writerow([chart["x_label"], *[s["name"] or chart["y_label"] for s in chart["series"]]])
                    for k, cat in enumerate(chart["categories"]):
                        writer.writerow([cat, *[s["values"][k] for s in chart["series"]]])
        _write_json(root / "charts_data" / f"{split}.jsonl", charts, lines=True)
        if layout == "chartqa":
            for subset, rows in records.items():
                _write_json(root / split / f"{split}_{subset}.json", rows)
        elif layout == "plotqa":
            _write_json(root / split / "qa_pairs_V2.json", {"qa_pairs": records})
        else:
            _write_json(root / "qa" / f"{split}_qa.json", records)
        self.questions = sum(len(c["questions"]) for c in charts)


def _config(layout, num, seed, split, size, questions_per_chart, kinds, value_kinds, bar_axis_max, bar_places,
            bars_per_chart, bar_noise, unseen_fraction, unseen_seed, unseen_split) -> dict:
    """The JSON-ready generation config of one split (validated); equal configs give identical splits."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    check_int("num", num, 1, MAX_ITEMS)
    check_int("questions_per_chart", questions_per_chart, 1, MAX_QUESTIONS)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an integer, got {seed!r}")
    check_split_name(split)
    bad = [k for k in kinds if k not in ALL_KINDS] + [v for v in value_kinds if v not in VALUE_KINDS]
    if bad or not kinds or not value_kinds:
        raise ValueError(f"unknown or empty kinds/value_kinds: {bad}; choose from {ALL_KINDS} and {VALUE_KINDS}")
    least = 64 if set(kinds) - {bars.KIND} else 16  # bars_axis: `bars.layout` says what fits
    if not (isinstance(size, (tuple, list)) and len(size) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) and least <= v <= MAX_SIDE for v in size)):
        raise ValueError(f"size must be (width, height) of at least {least} px and at most {MAX_SIDE} px, "
                         f"got {size!r}")
    try:
        lo, hi = (bars_per_chart,) * 2 if isinstance(bars_per_chart, int) else (int(v) for v in bars_per_chart)
    except (TypeError, ValueError):
        lo = hi = 0
    if not 1 <= lo <= hi:
        raise ValueError(f"bars_per_chart must be N or (lowest, highest) with 1 <= lowest <= highest, got "
                         f"{bars_per_chart!r}")
    if bars.KIND in kinds:
        bars.layout(size, bar_axis_max, bar_places, hi)  # ValueError when the image cannot hold the axis
    if isinstance(bar_noise, bool) or not isinstance(bar_noise, (int, float)) or not 0 <= bar_noise <= bars.MAX_NOISE:
        raise ValueError(f"bar_noise must be a number in 0..{bars.MAX_NOISE:g}, got {bar_noise!r}")
    unseen = None
    if check_fraction(unseen_fraction) > 0:
        if set(kinds) != {bars.KIND}:
            raise ValueError(f"unseen_fraction holds values of the {bars.KIND} axis out; it needs kinds={bars.KIND} "
                             "alone")
        held = bars.unseen_values(bar_axis_max, bar_places, float(unseen_fraction), unseen_seed)
        unseen = {"fraction": float(unseen_fraction), "seed": unseen_seed,
                  "split_holds": "unseen" if unseen_split else "seen",
                  "values": [bars.value_text(u, bar_places) for u in held]}
    elif unseen_split:
        raise ValueError("unseen_split needs unseen_fraction > 0 (the fraction of values held out)")
    return {"layout": layout, "split": split, "num": num, "seed": seed, "size": list(size),
            "questions_per_chart": questions_per_chart, "kinds": list(kinds), "value_kinds": list(value_kinds),
            "bar": {"axis_max": bar_axis_max, "places": bar_places, "bars": [lo, hi], "noise": float(bar_noise)},
            "unseen": unseen}


def write_chart_dataset(out, layout: str, num: int, seed: int = 0, split: str = "train", *, workers: int = 1,
                        size=(512, 400), questions_per_chart: int = 3, kinds=KINDS, value_kinds=VALUE_KINDS,
                        bar_axis_max: int = 100, bar_places: int = 0, bars_per_chart=1, bar_noise: float = 0.0,
                        unseen_fraction: float = 0.0, unseen_seed: int = 0, unseen_split: bool = False,
                        resume: bool = False, overwrite: bool = False, progress: bool = False) -> dict:
    """Render `num` charts with `questions_per_chart` questions each as split `split` of `out` in `layout`.

    kinds: from ALL_KINDS (default the matplotlib kinds). The "bars_axis" kind takes bar_axis_max (values
    0 .. bar_axis_max - 10**-bar_places), bar_places (decimals of the values and answers), bars_per_chart
    (N or (lowest, highest)) and bar_noise (pixel noise std, 0..32 levels; default none); its images may
    be as small as the layout allows (56 px works for the defaults), the matplotlib kinds need >= 64 px;
    every side at most 4096 px. unseen_fraction > 0 (bars_axis alone) holds that fraction of the axis
    values out (`bars.unseen_values(bar_axis_max, bar_places, unseen_fraction, unseen_seed)`, the same for
    every split): the split holds only the other values, or with unseen_split=True only those.

    Other splits in `out` and files that are not this split's are never touched. The split is built in
    `out/.{split}.partial` and moved in when complete (`resume=True` continues an interrupted build);
    an existing split (its index files, or an image or table it would write) is refused unless
    `overwrite`, which replaces the earlier split (its png/ and tables/ folders, for DVQA its
    images/synth_{split}_*.png) only once the new one is complete. Returns {"root", "layout", "split",
    "charts", "questions", "data_file"}; `root` is what the matching reader takes (`read_chartqa(root,
    split)` etc.). Deterministic in (arguments, seed, split) whatever `workers`; ValueError on bad arguments.
    """
    cfg = _config(layout, num, seed, split, size, questions_per_chart, kinds, value_kinds, bar_axis_max, bar_places,
                  bars_per_chart, bar_noise, unseen_fraction, unseen_seed, unseen_split)
    check_workers(workers)
    plan = _Plan(cfg)
    root = Path(out)
    clash = None if overwrite else _conflict(root, layout, split, num)
    if clash is not None:
        raise FileExistsError(f"{clash} exists; choose another --out or pass --overwrite")
    partial = root / f".{split}.partial"
    build_partial(partial, plan, workers=workers, resume=resume, progress=progress, desc=f"charts ({layout}, {split})")
    _install(partial, root, layout, split, overwrite)
    return {"root": str(root), "layout": layout, "split": split, "charts": num, "questions": plan.questions,
            "data_file": str(root / "charts_data" / f"{split}.jsonl")}


# ------------------------------------------------------------------------------------------------ CLI


def _size(text: str) -> tuple[int, int]:
    try:
        sides = [int(v) for v in text.lower().split("x")]
    except ValueError:
        sides = []
    if len(sides) not in (1, 2):
        raise argparse.ArgumentTypeError(f"size must look like 512x400 (or 56 for a square), got {text!r}")
    if max(sides) > MAX_SIDE:
        raise argparse.ArgumentTypeError(f"each side must be at most {MAX_SIDE} px, got {text!r}")
    return sides[0], sides[-1]


def _count_range(text: str) -> tuple[int, int]:
    try:
        lo, _, hi = text.partition("-")
        return int(lo), int(hi or lo)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N or LO-HI, got {text!r}") from None


def _number(lo: float, hi: float, closed: bool = True):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        if not (lo <= value <= hi if closed else lo <= value < hi):
            raise argparse.ArgumentTypeError(f"expected a number in {lo:g}..{hi:g}{'' if closed else ' (excluded)'}, "
                                             f"got {text!r}")
        return value
    return parse


def _names(allowed):
    def parse(text: str) -> tuple[str, ...]:
        names = tuple(t.strip() for t in text.split(",") if t.strip())
        bad = [n for n in names if n not in allowed]
        if bad or not names:
            raise argparse.ArgumentTypeError(f"choose from {','.join(allowed)}; got {text!r}")
        return names
    return parse


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="data-synth charts",
               description="Render charts with known values in the ChartQA / PlotQA / DVQA layout, one split a run.")
    p.add_argument("--layout", required=True, choices=LAYOUTS)
    p.add_argument("--num", type=int, required=True, help="number of charts")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="dataset root (what the reader takes); other splits there are kept")
    p.add_argument("--split", default="train")
    p.add_argument("--workers", type=int, default=1, help="processes (output is identical for any value)")
    p.add_argument("--questions-per-chart", type=int, default=3, help=f"1..{MAX_QUESTIONS} (default 3)")
    p.add_argument("--size", type=_size, default=(512, 400),
                   help=f"WIDTHxHEIGHT in pixels, or one number for a square, each side at most {MAX_SIDE} "
                        "(default 512x400)")
    p.add_argument("--kinds", type=_names(ALL_KINDS), default=KINDS,
                   help=f"comma list of {','.join(ALL_KINDS)} (default: all but {bars.KIND})")
    p.add_argument("--value-kinds", type=_names(VALUE_KINDS), default=VALUE_KINDS,
                   help=f"comma list of {','.join(VALUE_KINDS)}")
    g = p.add_argument_group(f"{bars.KIND} (bars without value labels, read against a numbered axis)")
    g.add_argument("--bar-axis-max", type=int, default=100,
                   help="the axis runs 0..this; values 0 .. max - 10**-places (default 100: answers 0-99)")
    g.add_argument("--bar-places", type=int, default=0, help="decimals of values and answers: 0, 1 or 2 (default 0)")
    g.add_argument("--bars", type=_count_range, default=(1, 1),
                   help="bars per chart, N or LO-HI (default 1); several are labelled A, B, ...")
    g.add_argument("--bar-noise", type=_number(0, bars.MAX_NOISE), default=0.0,
                   help=f"std of pixel noise, 0..{bars.MAX_NOISE:g} levels of 255 (default 0: none)")
    g.add_argument("--unseen-fraction", type=_number(0, 1, closed=False), default=0.0,
                   help="hold this fraction of the axis values out (the same values for every split; every digit "
                        "stays at every place in the rest); this split holds the other values")
    g.add_argument("--unseen-seed", type=int, default=0, help="seed of the held-out values (default 0)")
    g.add_argument("--unseen-split", action="store_true",
                   help="this split holds only the held-out values (e.g. --split test_unseen)")
    p.add_argument("--resume", action="store_true", help="continue an interrupted run with the same arguments")
    p.add_argument("--overwrite", action="store_true",
                   help="replace this split if it exists (once the new one is complete)")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)

    def write():
        return write_chart_dataset(args.out, args.layout, args.num, args.seed, args.split, workers=args.workers,
                                   size=args.size, questions_per_chart=args.questions_per_chart, kinds=args.kinds,
                                   value_kinds=args.value_kinds, bar_axis_max=args.bar_axis_max,
                                   bar_places=args.bar_places, bars_per_chart=args.bars, bar_noise=args.bar_noise,
                                   unseen_fraction=args.unseen_fraction, unseen_seed=args.unseen_seed,
                                   unseen_split=args.unseen_split, resume=args.resume, overwrite=args.overwrite,
                                   progress=not args.no_progress)

    status, info = run_writer("data-synth charts", write)
    if status:
        return status
    print(f"wrote {info['charts']} charts, {info['questions']} questions ({info['layout']} layout, split "
          f"{info['split']}) to {info['root']}; data in {info['data_file']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
