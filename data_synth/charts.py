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
- dvqa:    `{out}/images/*.png`, `{out}/qa/{split}_qa.json`
- always:  `{out}/charts_data/{split}.jsonl`, one line a chart: the data, the question arguments and
  answers, and where each question sits in the layout files, so every answer can be derived again.
Deterministic by (seed, split, index): the same arguments give the same bytes whatever `workers` is.
Index files are written last (atomically), so an interrupted run leaves no loadable half dataset.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import random
import sys
from decimal import Decimal
from pathlib import Path

from . import bars
from .writer import encode_png, ignore_sigint, interrupt_status

LAYOUTS = ("chartqa", "plotqa", "dvqa")
KINDS = ("vbar", "hbar", "grouped_bar", "line", "pie")  # the default mix, drawn with matplotlib
ALL_KINDS = (*KINDS, bars.KIND)
VALUE_KINDS = ("integer", "decimal", "percentage", "large")
QTYPES = ("value", "compare", "max", "min", "difference", "sum", "count")

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


def _make_one(job: tuple) -> dict:
    """Chart `index` of a dataset: data, questions, PNG written under out. Runs in worker processes."""
    out, layout, split, seed, index, size, per_chart, kinds, value_kinds, bar_options = job
    rng = random.Random(f"charts:{seed}:{split}:{index}")
    chart = make_chart(rng, kinds, value_kinds, dict(bar_options))
    chart["questions"] = make_questions(chart, rng, per_chart)
    chart["subset"] = rng.choice(["human", "augmented"])  # used by the ChartQA layout
    chart["index"] = index
    chart["image"] = _image_name(layout, split, index)
    path = Path(out) / chart["image"]
    path.parent.mkdir(parents=True, exist_ok=True)
    if chart["kind"] == bars.KIND:
        path.write_bytes(encode_png(bars.render_bar_chart(chart, size)))
    else:
        path.write_bytes(render_chart(chart, size))
    return chart


def _write_json(path: Path, obj, lines: bool = False) -> None:
    """Write JSON atomically (temporary file, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        if lines:
            for item in obj:
                f.write(json.dumps(item, ensure_ascii=False) + "\n")
        else:
            json.dump(obj, f, ensure_ascii=False)
    os.replace(tmp, path)


def _json_number(text: str):
    value = Decimal(text)
    return int(value) if value == value.to_integral_value() else float(text)


def write_chart_dataset(out, layout: str, num: int, seed: int = 0, split: str = "train", *, workers: int = 1,
                        size=(512, 400), questions_per_chart: int = 3, kinds=KINDS, value_kinds=VALUE_KINDS,
                        bar_axis_max: int = 100, bar_places: int = 0, bars_per_chart=1,
                        progress: bool = False) -> dict:
    """Render `num` charts with `questions_per_chart` questions each into `out` in `layout`.

    kinds: from ALL_KINDS (default the matplotlib kinds). The "bars_axis" kind takes bar_axis_max (values
    0 .. bar_axis_max - 10**-bar_places), bar_places (decimals of the values and answers) and
    bars_per_chart (N or (lowest, highest)); its images may be as small as the layout allows (56 px works
    for the defaults), the matplotlib kinds need >= 64 px. Returns {"root", "layout", "split", "charts",
    "questions", "data_file"}; `root` is what the matching reader takes (`read_chartqa(root, split)` etc.).
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if num < 1 or questions_per_chart < 1:
        raise ValueError(f"num and questions_per_chart must be >= 1, got {num} and {questions_per_chart}")
    bad = [k for k in kinds if k not in ALL_KINDS] + [v for v in value_kinds if v not in VALUE_KINDS]
    if bad or not kinds or not value_kinds:
        raise ValueError(f"unknown or empty kinds/value_kinds: {bad}; choose from {ALL_KINDS} and {VALUE_KINDS}")
    least = 64 if set(kinds) - {bars.KIND} else 16  # bars_axis: `bars.layout` says what fits
    if not (isinstance(size, (tuple, list)) and len(size) == 2 and all(isinstance(v, int) for v in size)
            and min(size) >= least):
        raise ValueError(f"size must be (width, height) of at least {least} px, got {size!r}")
    try:
        lo, hi = (bars_per_chart,) * 2 if isinstance(bars_per_chart, int) else (int(v) for v in bars_per_chart)
    except (TypeError, ValueError):
        lo = hi = 0
    if not 1 <= lo <= hi:
        raise ValueError(f"bars_per_chart must be N or (lowest, highest) with 1 <= lowest <= highest, got "
                         f"{bars_per_chart!r}")
    bar_options = (("axis_max", bar_axis_max), ("places", bar_places), ("bars", (lo, hi)))
    if bars.KIND in kinds:
        bars.layout(size, bar_axis_max, bar_places, hi)  # ValueError when the image cannot hold the axis
    out = Path(out)
    jobs = [(str(out), layout, split, seed, i, tuple(size), questions_per_chart, tuple(kinds), tuple(value_kinds),
             bar_options) for i in range(num)]
    from tqdm import tqdm

    bar = tqdm(total=num, desc=f"charts ({layout}, {split})", unit="chart", disable=not progress)
    charts = []
    try:
        if workers > 1:
            import multiprocessing

            chunk = max(1, min(16 if set(kinds) - {bars.KIND} else 256, num // (4 * workers)))
            with multiprocessing.get_context("spawn").Pool(workers, ignore_sigint) as pool:
                for chart in pool.imap(_make_one, jobs, chunksize=chunk):
                    charts.append(chart)
                    bar.update()
        else:
            for job in jobs:
                charts.append(_make_one(job))
                bar.update()
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM under `data-synth` (see writer.sigterm_as_interrupt)
        bar.close()
        print(f"data-synth charts: interrupted with {len(charts)} of {num} charts drawn; no index file was "
              f"written, so {out} holds no new loadable {split} split; run again to draw them all", file=sys.stderr)
        raise
    bar.close()

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
            table = out / split / "tables" / name.replace(".png", ".csv")
            table.parent.mkdir(parents=True, exist_ok=True)
            with open(table, "w", newline="", encoding="utf-8") as f:
                writer = csv.writer(f)
                writer.writerow([chart["x_label"], *[s["name"] or chart["y_label"] for s in chart["series"]]])
                for k, cat in enumerate(chart["categories"]):
                    writer.writerow([cat, *[s["values"][k] for s in chart["series"]]])

    data_file = out / "charts_data" / f"{split}.jsonl"
    _write_json(data_file, charts, lines=True)
    if layout == "chartqa":
        for subset, rows in records.items():
            _write_json(out / split / f"{split}_{subset}.json", rows)
    elif layout == "plotqa":
        _write_json(out / split / "qa_pairs_V2.json", {"qa_pairs": records})
    else:
        _write_json(out / "qa" / f"{split}_qa.json", records)
    return {"root": str(out), "layout": layout, "split": split, "charts": len(charts),
            "questions": sum(len(c["questions"]) for c in charts), "data_file": str(data_file)}


# ------------------------------------------------------------------------------------------------ CLI


def _size(text: str) -> tuple[int, int]:
    try:
        sides = [int(v) for v in text.lower().split("x")]
    except ValueError:
        sides = []
    if len(sides) not in (1, 2):
        raise argparse.ArgumentTypeError(f"size must look like 512x400 (or 56 for a square), got {text!r}")
    return sides[0], sides[-1]


def _count_range(text: str) -> tuple[int, int]:
    try:
        lo, _, hi = text.partition("-")
        return int(lo), int(hi or lo)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N or LO-HI, got {text!r}") from None


def _names(allowed):
    def parse(text: str) -> tuple[str, ...]:
        names = tuple(t.strip() for t in text.split(",") if t.strip())
        bad = [n for n in names if n not in allowed]
        if bad or not names:
            raise argparse.ArgumentTypeError(f"choose from {','.join(allowed)}; got {text!r}")
        return names
    return parse


def main(argv: list[str] | None = None) -> int:
    from .cli import Parser  # one-line usage errors, --x_y for --x-y

    p = Parser(prog="data-synth charts",
                                description="Render charts with known values in the ChartQA / PlotQA / DVQA layout.")
    p.add_argument("--layout", required=True, choices=LAYOUTS)
    p.add_argument("--num", type=int, required=True, help="number of charts")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="dataset root (what the reader takes)")
    p.add_argument("--split", default="train")
    p.add_argument("--workers", type=int, default=1, help="processes (output is identical for any value)")
    p.add_argument("--questions-per-chart", type=int, default=3)
    p.add_argument("--size", type=_size, default=(512, 400),
                   help="WIDTHxHEIGHT in pixels, or one number for a square (default 512x400)")
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
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    try:
        info = write_chart_dataset(args.out, args.layout, args.num, args.seed, args.split, workers=args.workers,
                                   size=args.size, questions_per_chart=args.questions_per_chart, kinds=args.kinds,
                                   value_kinds=args.value_kinds, bar_axis_max=args.bar_axis_max,
                                   bar_places=args.bar_places, bars_per_chart=args.bars,
                                   progress=not args.no_progress)
    except ValueError as e:
        print(f"data-synth charts: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        return interrupt_status(e)
    print(f"wrote {info['charts']} charts, {info['questions']} questions ({info['layout']} layout, split "
          f"{info['split']}) to {info['root']}; data in {info['data_file']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
