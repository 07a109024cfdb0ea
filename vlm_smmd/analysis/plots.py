"""The report's PNG plots: per-place digit accuracy, |digit error|, confusion matrices, error distributions,
clock breakdowns, predicted vs true points and boxes, and training curves, one file each, several runs
overlaid."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from .clocks import GAP_BIN, WORST_GAP
from .digits import CLOCK_PLACES, place_name
from .formatting import CROWDED, new_figure, place_legend, save_figure, series_color
from .numbers import ABS_WITHIN
from .runinfo import curve_series


def _integer_axis(ax) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.yaxis.set_major_locator(MaxNLocator(integer=True))


def _grouped_bars(ax, labels: Sequence[str], series: Mapping[str, Sequence[float | None]],
                  chance: Mapping[str, Sequence[float | None]] | None = None, *, rotate: bool = True,
                  notes: Mapping[str, Sequence[str]] | None = None) -> None:
    """Bars per label and run; a None value is written "no data" (not drawn as 0); chance (per run) as a
    black dash over each bar; `notes` (per run and bar, e.g. "3/6") written above the bars."""
    width = 0.8 / max(1, len(series))
    chance_drawn = False
    for i, (run, values) in enumerate(series.items()):
        xs = [x + (i - (len(series) - 1) / 2) * width for x in range(len(labels))]
        ax.bar([x for x, v in zip(xs, values) if v is not None], [v for v in values if v is not None],
               width=width, label=run, color=series_color(i, len(series)))
        for x, v in zip(xs, values):
            if v is None:
                ax.text(x, 0.02, "no data", rotation=90, ha="center", va="bottom", fontsize=7, color="0.4",
                        transform=ax.get_xaxis_transform())
        for x, v, note in zip(xs, values, (notes or {}).get(run, ())):
            if v is not None:
                ax.text(x, v, note, ha="center", va="bottom", fontsize=6, color="0.25",
                        rotation=90 if len(series) > CROWDED else 0)  # side by side they would overlap
        for x, c in zip(xs, (chance or {}).get(run, ())):
            if c is not None:
                ax.hlines(c, x - width / 2, x + width / 2, colors="black", linestyles="--", linewidth=1.5,
                          label=None if chance_drawn else "chance")
                chance_drawn = True
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=30 if rotate else 0, ha="right" if rotate else "center")
    if ax.get_legend_handles_labels()[0]:
        place_legend(ax, len(series))


def place_order(tables: Iterable[Mapping[str, Mapping]]) -> list[str]:
    """The places of several per-place tables, most significant first (clock places in CLOCK_PLACES order,
    a table giving each place an "order" in that order)."""
    rank: dict[str, float] = {}
    for table in tables:
        for name, p in table.items():
            rank[name] = p["order"] if "order" in p else -p["place"] if "place" in p else CLOCK_PLACES.index(name)
    return sorted(rank, key=rank.get)


def safe_name(name: str) -> str:
    """`name` as part of a file name: runs of other characters than letters, digits, _ . - become "_"."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._") or "run"


def _confusion_plot(conf: Sequence[Sequence[int]], title: str, path: Path) -> None:
    fig, ax = new_figure(5.5, 5.0)
    rows = [[c / max(1, sum(row)) for c in row] for row in conf]
    im = ax.imshow(rows, cmap="Blues", vmin=0, vmax=1)
    for ti in range(10):
        for pi in range(10):
            if conf[ti][pi]:
                ax.text(pi, ti, str(conf[ti][pi]), ha="center", va="center", fontsize=7,
                        color="white" if rows[ti][pi] > 0.5 else "black")
    ax.set_xticks(range(10))
    ax.set_yticks(range(10))
    ax.set_xlabel("predicted digit")
    ax.set_ylabel("target digit")
    ax.set_title(title, fontsize=9, wrap=True)
    fig.colorbar(im, ax=ax, fraction=0.046)
    save_figure(fig, path)


def _digit_plots(parts: Mapping[str, Mapping], out: Path, prefix: str, what: str,
                 holding: str | None = None) -> dict[str, str]:
    """Per-place accuracy, |digit error| distribution and confusion matrices of numbers, clock readings or
    coordinates; `holding` as in the report's `_digit_tables`."""
    files: dict[str, str] = {}
    runs = [r for r, p in parts.items() if p["places"]]
    if not runs:
        return files
    # places where only predictions have digits ("extra") have no accuracy: the table lists them
    names = [nm for nm in place_order(parts[r]["places"] for r in runs)
             if any(parts[r]["places"].get(nm, {}).get("target_digits") for r in runs)]
    fig, ax = new_figure(max(7.0, 1.2 * len(names) + 2))
    _grouped_bars(ax, names, {r: [parts[r]["places"].get(nm, {}).get("accuracy") for nm in names] for r in runs},
                  {r: [parts[r]["chance"]["places"].get(nm) for nm in names] for r in runs},
                  notes={r: [f"{p['correct']}/{p['target_digits']}" if p else "" for p in
                             (parts[r]["places"].get(nm) for nm in names)] for r in runs})
    ax.set_ylim(0, 1.1 if len(runs) <= CROWDED else 1.3)  # room for the counts written upright above the bars
    ax.set_ylabel("accuracy (correct / target digits)")
    ax.set_title(f"{what}: accuracy per place (answers holding {holding or ('a time' if prefix else 'a number')})")
    save_figure(fig, out / f"{prefix}place_accuracy.png")
    files[f"{prefix}place_accuracy"] = f"{prefix}place_accuracy.png"

    with_digits = [r for r in runs if sum(parts[r]["digit_error_histogram"])]
    if with_digits:
        fig, ax = new_figure()
        _grouped_bars(ax, [str(d) for d in range(10)],
                      {r: [c / sum(parts[r]["digit_error_histogram"]) for c in parts[r]["digit_error_histogram"]]
                       for r in with_digits},
                      {r: parts[r]["chance"]["digit_error_fractions"] for r in with_digits}, rotate=False)
        ax.set_xlabel("|predicted digit - target digit|")
        ax.set_ylabel("fraction of aligned digits")
        ax.set_title(f"{what}: |digit error| distribution")
        save_figure(fig, out / f"{prefix}digit_error.png")
        files[f"{prefix}digit_error"] = f"{prefix}digit_error.png"
    for i, r in enumerate(parts):
        if sum(map(sum, parts[r]["confusion"])):
            name = f"{prefix}confusion_{i}_{safe_name(r)}.png"
            _confusion_plot(parts[r]["confusion"], f"{what} digit confusion, all places: {r} (row-normalised; counts)",
                            out / name)
            files[f"{prefix}confusion:{r}"] = name
    return files


def write_plots(analyses: Mapping[str, dict], out: Path) -> dict[str, str]:
    """Write the PNGs that have data into `out`; {plot name: file name}."""
    files: dict[str, str] = {}
    runs = list(analyses)
    numeric = {r: a["numeric"] for r, a in analyses.items()}
    if any(n["analysed"] for n in numeric.values()):
        files.update(_digit_plots(numeric, out, "", "Numbers"))
        with_data = [r for r in runs if numeric[r]["analysed"]]
        names = [place_name(p) for p in sorted({p["place"] for r in with_data
                                                for p in numeric[r]["places"].values()}, reverse=True)]
        fig, ax = new_figure()
        _grouped_bars(ax, names + ["none"], {r: [numeric[r]["first_wrong_place"].get(nm, 0) for nm in names]
                                             + [numeric[r]["all_digits_correct"]] for r in with_data})
        _integer_axis(ax)
        ax.set_ylabel("answers")
        ax.set_title("Place of the first wrong digit (most significant first; none = all right)")
        save_figure(fig, out / "first_wrong_place.png")
        files["first_wrong_place"] = "first_wrong_place.png"

        fig, ax = new_figure()
        labels = [f"±{k}" if k else "exact" for k in ABS_WITHIN]
        _grouped_bars(ax, labels, {r: [numeric[r]["within_abs_rate"][str(k)] for k in ABS_WITHIN] for r in with_data},
                      {r: [numeric[r]["chance"].get("within_abs", {}).get(str(k)) for k in ABS_WITHIN]
                       for r in with_data}, rotate=False)
        ax.set_ylim(0, 1.05)
        ax.set_xlabel("|prediction - target| at most")
        ax.set_ylabel("fraction of numeric answers")
        ax.set_title("Absolute error (answers holding no number count as misses)")
        save_figure(fig, out / "abs_within.png")
        files["abs_within"] = "abs_within.png"

        rel_runs = [r for r in with_data if numeric[r]["relative_error"]["values"]]
        if rel_runs:
            fig, ax = new_figure()
            for r in rel_runs:
                rel = numeric[r]["relative_error"]
                values, den = rel["values"], rel["nonzero_target_records"]
                ax.step([0.0] + values, [0.0] + [(i + 1) / den for i in range(len(values))], where="post", label=r)
            ax.set_xscale("symlog", linthresh=1e-3)
            ax.set_ylim(0, 1.02)
            ax.set_xlabel("relative error |p - t| / |t|")
            ax.set_ylabel("fraction of answers (non-zero target)")
            ax.set_title("Relative error CDF")
            ax.legend()
            save_figure(fig, out / "relative_error_cdf.png")
            files["relative_error_cdf"] = "relative_error_cdf.png"

    clock = {r: a["clock"] for r, a in analyses.items()}
    if any(c["records"] for c in clock.values()):
        files.update(_digit_plots({r: c for r, c in clock.items() if c["records"]}, out, "clock_", "Clock"))
        timed = [r for r in runs if clock[r]["gaps"]]
        if timed:
            fig, ax = new_figure()
            # 1-minute bins up to 10 minutes, where the near misses a value kernel is about fall, then GAP_BIN;
            # heights are per minute of gap, so bins of either width (and the GAP_BIN chance steps) compare
            edges = [*range(0, GAP_BIN), *range(GAP_BIN, int(WORST_GAP) + GAP_BIN, GAP_BIN)]
            widths = [b - a for a, b in zip(edges, edges[1:])]
            for r in timed:
                counts = [0] * len(widths)
                for gap in clock[r]["gaps"]:
                    counts[min(_bin_of(edges, gap), len(widths) - 1)] += 1
                ax.stairs([c / clock[r]["records"] / w for c, w in zip(counts, widths)], edges, linewidth=1.5,
                          label=r, color=series_color(runs.index(r), len(runs)))
            drawn = []
            coarse = list(range(0, int(WORST_GAP) + GAP_BIN, GAP_BIN))
            for r in timed:
                fractions = clock[r]["chance"].get("gap_bin_fractions")
                if fractions and fractions not in drawn:
                    ax.stairs([f / GAP_BIN for f in fractions], coarse, color="black", linestyle="--",
                              label=None if drawn else f"chance ({GAP_BIN}-minute bins)")
                    drawn.append(fractions)
            ax.set_yscale("log")
            ax.set_xscale("symlog", linthresh=GAP_BIN, linscale=1.5)  # 0-10 minutes linear, wide; then log
            ax.set_xlim(0, WORST_GAP)
            ax.set_xlabel("time gap on the 12-hour dial (minutes)")
            ax.set_ylabel("fraction of clock answers per minute of gap")
            ax.set_title(f"Clock time gap (1-minute bins to {GAP_BIN} min, then {GAP_BIN}; answers holding no time "
                         "not shown)", fontsize=10)
            place_legend(ax, len(timed))
            save_figure(fig, out / "clock_gap_hist.png")
            files["clock_gap_hist"] = "clock_gap_hist.png"

        cats = ("both_correct", "hour_only", "minute_only", "neither", "no_time", "swapped_hands")
        have = [r for r in runs if clock[r]["records"]]
        fig, ax = new_figure()
        _grouped_bars(ax, [c.replace("_", " ") for c in cats], {r: [clock[r]["rates"][c] for c in cats] for r in have},
                      {r: [clock[r]["chance"].get("rates", {}).get(c, 0.0 if c == "no_time" else None) for c in cats]
                       for r in have})
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("fraction of clock answers")
        ax.set_title("Hour vs minute correctness")
        save_figure(fig, out / "clock_breakdown.png")
        files["clock_breakdown"] = "clock_breakdown.png"

    grounding = {r: a.get("grounding") or {} for r, a in analyses.items()}
    for task in ("point", "box"):
        have = {r: g[f"{task}_digits"] for r, g in grounding.items() if g.get(f"{task}_digits")}
        if have:
            first = next(iter(have))
            chance = {"places": {}, "digit_error_fractions": [None] * 10,
                      **((grounding[first].get("chance") or {}).get(f"{task}_digits") or {})}
            files.update(_digit_plots({r: {**part, "chance": chance} for r, part in have.items()}, out,
                                      f"{task}_", f"{task.capitalize()} coordinates", f"a valid {task}"))
    if any(g.get("examples") for g in grounding.values()):
        if grounding_examples({r: g.get("examples") or [] for r, g in grounding.items()},
                              out / "grounding_examples.png"):
            files["grounding_examples"] = "grounding_examples.png"
    return files


def _example_frame(example: Mapping):
    """(image or None, (width, height) of the answer's coordinate frame, scale from answer units to that
    image's pixels). Absolute answers are pixels of the resized image; norm1000 answers are drawn on the
    image as stored, scaled by its size / 1000."""
    from PIL import Image

    rw, rh, w, h = example.get("frame") or (None,) * 4
    image = None
    if example.get("image"):
        try:
            with Image.open(example["image"]) as im:
                image = im.convert("RGB")
        except Exception:  # moved, deleted or unreadable since the evaluation: a blank frame, said in the title
            image = None
    if example.get("coords") == "norm1000":
        size = image.size if image is not None else (w, h) if w and h else (1000, 1000)
        return image, size, (size[0] / 1000, size[1] / 1000)
    size = (rw, rh) if rw and rh else (w, h) if w and h else image.size if image is not None else None
    if size is None:  # no size anywhere: a frame around what is drawn
        coords = [v for key in ("answer", "box", "prediction") for v in example.get(key) or []]
        size = (max(coords[0::2] + [1]) * 1.2, max(coords[1::2] + [1]) * 1.2)
    if image is not None and image.size != tuple(int(v) for v in size):
        image = image.resize((int(size[0]), int(size[1])))
    return image, size, (1.0, 1.0)


def _draw(ax, values, size, scale, colour: str, marker: str | None, label: str | None = None) -> None:
    """A point (marker), a box (rectangle), or no valid answer (a cross in the top-left corner)."""
    from matplotlib.patches import Rectangle

    if values is None:
        ax.plot([0.04 * size[0]], [0.06 * size[1]], "x", color=colour, markersize=10, mew=2, label=label)
    elif len(values) == 2:
        ax.plot([values[0] * scale[0]], [values[1] * scale[1]], marker, color=colour, markersize=9, mew=2,
                markerfacecolor="none", label=label)
    else:
        x1, y1, x2, y2 = (v * scale[i % 2] for i, v in enumerate(values))
        ax.add_patch(Rectangle((x1, y1), x2 - x1, y2 - y1, fill=False, edgecolor=colour, linewidth=2, label=label))


def grounding_examples(examples: Mapping[str, Sequence[Mapping]], path: Path) -> bool:
    """The first records of each run (by the first run's ids): the image with the target (green) and each
    run's answer (its colour; a cross at the corner when the answer gives no valid point or box)."""
    runs = list(examples)
    first = next((r for r in runs if examples[r]), None)
    if first is None:
        return False
    shown = examples[first]
    by_id = {r: {e["id"]: e for e in examples[r]} for r in runs}
    cols = min(4, len(shown) + 1)  # one slot more than examples: the legend's
    rows = (len(shown) + cols) // cols
    fig, axes = new_figure(3.0 * cols, 3.0 * rows + 0.4, ncols=cols, nrows=rows)
    axes = axes if isinstance(axes, list) else [axes]
    for ax, example in zip(axes, shown):
        image, size, scale = _example_frame(example)
        if image is not None:
            ax.imshow(image, extent=(0, size[0], size[1], 0))
        ax.set_xlim(0, size[0])
        ax.set_ylim(size[1], 0)

        if example["task"] == "point" and example.get("box"):
            _draw(ax, example["box"], size, scale, "limegreen", None)
        _draw(ax, example["answer"], size, scale, "limegreen", "o", "target")
        for i, r in enumerate(runs):
            e = by_id[r].get(example["id"])
            if e is not None:
                _draw(ax, e.get("prediction"), size, scale, series_color(i, len(runs)), "+", r)
        ax.set_title(f"{example['id']}" + ("" if image is not None else " (no image)"), fontsize=8)
        ax.tick_params(labelsize=6)
    for ax in axes[len(shown):]:
        ax.axis("off")
    handles = {label: h for ax in axes[:len(shown)] for h, label in zip(*ax.get_legend_handles_labels())}
    axes[len(shown)].legend(handles.values(), handles.keys(), loc="center", fontsize=9)
    fig.suptitle("Predicted vs true (green: target; axes in pixels of the image the answer's coordinates refer "
                 "to)", fontsize=10)
    save_figure(fig, path)
    return True


def _bin_of(edges: Sequence[float], value: float) -> int:
    """Index of the bin [edges[i], edges[i + 1]) holding `value` (the last bin for values past the edges)."""
    return max(0, sum(1 for e in edges[1:] if value >= e))


def training_curve(history: Sequence[Mapping], chance: Mapping[str, float | None], title: str, path: Path) -> bool:
    """Plot a trainer log history, one panel per kind of series with two or more points (a series logged
    once is written under the figure, not drawn as a lone dot); False (nothing written) without a line."""
    panels, once = {}, []
    for panel, series in curve_series(history).items():
        # a line needs two points: a series logged once (a run evaluated once) is said under the figure
        drawn = {key: points for key, points in series.items() if len(points) >= 2}
        once += [f"{key} {points[0][1]:.4g} at step {points[0][0]:g}" for key, points in series.items()
                 if len(points) == 1]
        if drawn:
            panels[panel] = drawn
    if not panels:
        return False
    fig, axes = new_figure(5.0 * len(panels), 3.8 + 0.3 * bool(once), ncols=len(panels))
    axes = axes if isinstance(axes, list) else [axes]
    for ax, (panel, series) in zip(axes, panels.items()):
        for key, points in series.items():
            xs, ys = zip(*points)
            flat = all(y == 0 for y in ys)
            ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, markersize=3,
                    label=key + (" (0 throughout)" if flat else ""))
            level = chance.get(key.removeprefix("eval_"))
            if level is not None:
                ax.axhline(level, color="black", linestyle="--", linewidth=1, label=f"chance: {key}")
        ax.set_xlabel("step")
        ax.set_title(panel)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    if once:
        # supxlabel, unlike fig.text, gets room from the tight layout, so the caption clears the axis labels
        caption = textwrap.fill("logged once: " + ", ".join(once), width=int(14 * 5.0 * len(panels)))
        fig.supxlabel(caption, fontsize=8)
    fig.suptitle(title)
    save_figure(fig, path)
    return True
