"""A comparison's results: per-run figures per evaluated split, their spread over seeds, paired tests
against the reference (and the contrasts asked for), tables and plots.

The page leads with the primary endpoint the config declared before the runs (`primary_metric` on
`primary_split`); every other figure is labelled exploratory. Paired by seed (same initialisation and data
order): the mean difference with its paired t-interval, the exact sign-flip p, and Holm's correction across
the comparisons of each figure (`statistics.compare_to_reference`); **bold** only where the corrected test
rejects at 0.05 and the t-interval excludes 0. Seeds used while developing the setting (`dev_seeds`) are shown and left out of every
aggregate and test.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from ..analysis.formatting import fmt, md_table, new_figure, place_legend, save_figure, series_color
from ..run_record import FILE_NAME as RUN_RECORD
from ..run_record import RunRecord, RunRecordError, base_line
from .curves import curve_section
from .statistics import compare_to_reference, interval_excludes_zero, spread
from .store import Status, read_json
from .variants import BASELINE, Variant

# figures plotted per group, in this order of preference (the first four the runs have)
PANEL_KEYS = ("exact_match", "mae", "within_2", "relaxed_accuracy", "hour_correct", "mean_time_gap_min",
              "minute_correct", "within_1_min", "within_5_min", "value_exact", "within_rel_0.01", "point_in_box", "centre_error",
              "iou", "iou_at_0.5")
ALPHA = 0.05


def run_metrics(analysis: Mapping) -> dict[str, float | int | None]:
    """The table's figures for one run on one split, keyed as in runs.csv: "records" and every
    `analysis.headline` figure (None: not applicable to this run)."""
    from ..analysis import headline

    return {"records": analysis["records"], **{f.key: f.value for f in headline(analysis)}}


def comparisons(groups: Sequence[str], contrasts: Sequence[tuple[str, str]] = (),
                reference: str = BASELINE) -> list[tuple[str, str]]:
    """(a, b) pairs tested as a - b: every group against `reference` (when it is a group), then the contrasts."""
    pairs = [(g, reference) for g in groups if g != reference] if reference in groups else []
    return pairs + [c for c in contrasts if c not in pairs]


def paired_tests(variants: Sequence[Variant], figures: Mapping[str, Mapping], keys: Sequence[str],
                 pairs: Sequence[tuple[str, str]], *, dev_seeds: Sequence[int] = ()) -> dict[str, dict]:
    """Per comparison "a vs b": {"a", "b", "seeds" (paired, dev seeds left out), "only_a", "only_b" (seeds
    one side finished and the other did not), "figures": {key: {"diffs": {seed: a - b}, **the row of
    `compare_to_reference`}}}, with Holm across the comparisons of each key. `figures`: run name -> figures
    of one split."""
    by_group: dict[str, dict[int, Mapping]] = {}
    for v in variants:
        runs = by_group.setdefault(v.group, {})
        if v.name in figures and v.seed not in dev_seeds:
            runs[v.seed] = figures[v.name]
    out = {}
    for a, b in pairs:
        runs_a, runs_b = by_group.get(a, {}), by_group.get(b, {})
        out[f"{a} vs {b}"] = {"a": a, "b": b, "seeds": sorted(runs_a.keys() & runs_b.keys()),
                              "only_a": sorted(runs_a.keys() - runs_b.keys()),
                              "only_b": sorted(runs_b.keys() - runs_a.keys()), "figures": {}}
    for key in keys:
        diffs = {}
        for name, c in out.items():
            runs_a, runs_b = by_group.get(c["a"], {}), by_group.get(c["b"], {})
            diffs[name] = {s: runs_a[s][key] - runs_b[s][key] for s in c["seeds"]
                           if runs_a[s].get(key) is not None and runs_b[s].get(key) is not None}
        rows = compare_to_reference({name: list(d.values()) for name, d in diffs.items()}, alpha=ALPHA)
        for name, row in rows.items():
            out[name]["figures"][key] = {"diffs": diffs[name], **row}
    return out


class Collected(NamedTuple):
    figures: dict  # split -> run name -> run_metrics
    pooled: dict  # split -> group -> records of every finished seed (dev seeds left out)
    columns: dict  # split -> [(key, label, lower is better)] in headline order, the union over runs
    reference: dict  # split -> (the analysis with chance of the first finished run, its name)
    notes: list
    pooled_seeds: dict  # split -> group -> the seeds whose records are in `pooled`


def collect(out: Path, variants: Sequence[Variant], status: Status, splits: Sequence[str],
            dev_seeds: Sequence[int] = ()) -> Collected:
    """Figures of the finished runs on every split, recomputed from each run's predictions.jsonl (so a table
    written after a figure was added covers earlier runs too; done.json's copy when the file cannot be
    read), records pooled per group, the columns, and chance from the first finished run's records."""
    from ..analysis import analyze_records, headline, load_predictions

    figures = {s: {} for s in splits}
    pooled = {s: {} for s in splits}
    pooled_seeds = {s: {} for s in splits}
    columns = {s: {} for s in splits}
    reference, reference_ids, notes = {}, {}, []
    from_done = {s: [] for s in splits}  # split -> [(run, why its predictions could not be read)]
    for v in variants:
        if status.variants.get(v.name, {}).get("status") != "done":
            continue
        run_dir = out / "runs" / v.name
        for split in splits:
            try:
                records = load_predictions(run_dir / split / "predictions.jsonl")
            except (OSError, ValueError) as e:
                saved = read_json(run_dir / "done.json")["figures"].get(split)
                if saved is not None:
                    figures[split][v.name] = saved
                from_done[split].append((v.name, e))
                continue
            analysis = analyze_records(records, chance=False)
            figures[split][v.name] = run_metrics(analysis)
            for f in headline(analysis):
                columns[split].setdefault(f.key, (f.key, f.label, f.lower_is_better))
            if v.seed not in dev_seeds:
                pooled[split].setdefault(v.group, []).extend(records)
                pooled_seeds[split].setdefault(v.group, []).append(v.seed)
            ids = sorted((r["source"], str(r["id"])) for r in records)
            if split not in reference:
                reference[split], reference_ids[split] = (analyze_records(records), v.name), ids
            elif ids != reference_ids[split]:
                notes.append(f"{v.name} was evaluated on other {split} records than {reference[split][1]}: its "
                             "chance level differs")
    for split, runs in from_done.items():  # one line per split: a copied comparison may lack every file
        if runs:
            names = ", ".join(name for name, _ in runs[:3]) + (f" and {len(runs) - 3} more" if len(runs) > 3 else "")
            notes.append(f"{len(runs)} run(s) ({split}): figures from done.json, predictions.jsonl not readable "
                         f"({names}; e.g. {runs[0][1]}); their records are not pooled into the per-digit analysis")
    return Collected(figures, pooled, {s: list(c.values()) for s, c in columns.items()}, reference, notes,
                     pooled_seeds)


def _seed_list(seeds: Sequence[int]) -> str:
    """Sorted seeds with runs of consecutive ones as ranges: 100-104, 107."""
    parts, run = [], []
    for s in sorted(seeds):
        if run and s != run[-1] + 1:
            parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
            run = []
        run.append(s)
    if run:
        parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ", ".join(parts)


def group_table(variants: Sequence[Variant], status: Status, figures: Mapping[str, Mapping],
                keys: Sequence[str], dev_seeds: Sequence[int] = ()) -> list[dict]:
    """One row per group: group, aux, kernel_mode, seeds, done, failed, status, and spread() per key over
    the finished seeds that are not development seeds."""
    rows = []
    for group in dict.fromkeys(v.group for v in variants):
        runs = [v for v in variants if v.group == group]
        states = [status.variants.get(v.name, {}).get("status", "pending") for v in runs]
        done = [v.name for v, s in zip(runs, states) if s == "done" and v.name in figures]
        counted = [v.name for v in runs if v.name in done and v.seed not in dev_seeds]
        failed = states.count("failed")
        state = ("ok" if len(done) == len(runs) else "failed" if failed == len(runs)
                 else f"{failed} failed" if failed else "incomplete")
        row = {"group": group, "aux": runs[0].aux, "kernel_mode": runs[0].kernel_mode,
               "seeds": len(runs), "done": len(counted), "failed": failed, "status": state}
        for key in keys:
            row[key] = spread([figures[n].get(key) for n in counted])
        rows.append(row)
    return rows


# ---------------------------------------------------------------------------------------------------------
# Text


def _p(value) -> str:
    return "–" if value is None else ("< 0.001" if value < 0.001 else f"{value:.3f}")


def _cell(s: dict, key: str, done: int) -> str:
    """mean ± std, with (n=k) when fewer seeds than the row's finished ones have the figure."""
    if s["mean"] is None:
        return "–"
    text = fmt(s["mean"], key) + ("" if s["std"] is None else f" ± {fmt(s['std'], key)}")
    return text + (f" (n={s['n']})" if s["n"] != done else "")


def _diff_cell(d: dict, key: str, pairs: int) -> str:
    """+0.012 [-0.004, +0.030], Holm p; bold when the Holm-corrected sign-flip test rejects and the interval
    excludes 0."""
    if d["mean"] is None:
        return "–"
    text = fmt(d["mean"], key, signed=True)
    if d["t_low"] is not None:
        text += f" [{fmt(d['t_low'], key, signed=True)}, {fmt(d['t_high'], key, signed=True)}]"
    if d["p_holm"] is not None:
        p = _p(d["p_holm"])
        text += f" p {p}" if p.startswith("<") else f" p={p}"
    if d["significant"]:
        text = f"**{text}**"
    return text + (f" (n={d['n']})" if d["n"] != pairs else "")


def _better(d: dict, lower_is_better: bool) -> str:
    """"better / worse / tied" seed counts of a's side of a comparison."""
    up, down = d["wins"], d["losses"]
    better, worse = (down, up) if lower_is_better else (up, down)
    return f"{better} / {worse} / {d['ties']}"


def _verdict(c: dict, d: dict, label: str, lower: bool) -> str:
    """One sentence a reader can trust about comparison `c` on one figure."""
    if d["n"] < 2:
        return f"{c['a']} vs {c['b']}: {d['n']} paired seed(s), nothing can be said."
    diff = (f"{fmt(d['mean'], signed=True)} [{fmt(d['t_low'], signed=True)}, {fmt(d['t_high'], signed=True)}] "
            f"over {d['n']} paired seeds (sign-flip p = {_p(d['p_signflip'])}, Holm p = {_p(d['p_holm'])})")
    if not d["significant"]:
        if interval_excludes_zero(d):  # per comparison: what it shows need not survive the correction
            return (f"{c['a']} vs {c['b']}: not established in {label}: {diff}; the interval excludes 0, but "
                    "the difference does not survive Holm's correction: a lead for fresh seeds, not a finding.")
        return f"{c['a']} vs {c['b']}: no detectable difference in {label}: {diff}."
    good = (d["mean"] < 0) == lower
    return f"{c['a']} vs {c['b']}: {c['a']} is {'better' if good else 'worse'} in {label}: {diff}."


def _leakage_section(leakage: Mapping, allow_overlap: bool) -> list[str]:
    md = ["## Held out?", ""]
    if not leakage:
        return md + ["Not checked (no training split to compare with).", ""]
    for split, report in leakage.items():
        md += [f"- `{split}`: " + "; ".join(report["lines"])]
    if allow_overlap and any(not r["held_out"] for r in leakage.values()):
        md += ["", "> **--allow-overlap**: some evaluated records also occur in training; the figures below do "
                   "not measure reading held-out data."]
    return md + [""]


def _primary_section(primary: Mapping, tests: Mapping, rows: Sequence[dict], cols: Mapping, plot: str | None,
                     dev_seeds: Sequence[int]) -> list[str]:
    metric, split = primary.get("metric"), primary.get("split")
    md = ["## Primary endpoint", ""]
    if not metric:
        return md + ["No primary endpoint was declared in the config (`primary_metric`, `primary_split`): every "
                     "figure below is exploratory.", ""]
    if metric not in cols:
        return md + [f"`{metric}` on `{split}` (declared in the config): no finished run has this figure yet.", ""]
    label, lower = cols[metric][1], cols[metric][2]
    md += [f"**{label}** on split `{split}`, declared in the config before the runs"
           f"{'; development seeds ' + ', '.join(map(str, dev_seeds)) + ' left out' if dev_seeds else ''}.", ""]
    by_group = {r["group"]: r for r in rows}
    table = []
    for name, c in tests.items():
        d = c["figures"][metric]
        table.append([name, str(d["n"]), _cell(by_group[c["a"]][metric], metric, by_group[c["a"]]["done"]),
                      _cell(by_group[c["b"]][metric], metric, by_group[c["b"]]["done"]), _diff_cell(d, metric, d["n"]),
                      _p(d["p_t"]), _p(d["p_signflip"]), _p(d["p_holm"]), _better(d, lower)])
    if not table:
        return md + ["Nothing to pair: the comparison has no reference group and no contrast.", ""]
    md += md_table(["comparison (a vs b)", "pairs", "a: mean ± std", "b: mean ± std",
                    f"a - b [95% t-interval]{' ↓' if lower else ''}", "t p", "sign-flip p", "Holm p",
                    "a better / worse / tied"], table)
    md += [f"- {_verdict(c, c['figures'][metric], label, lower)}" for c in tests.values()] + [""]
    methods = {c["figures"][metric]["method"] for c in tests.values()}
    md += [f"Method: {m}. **Bold**: the Holm-corrected sign-flip p is below {ALPHA} and the t-interval excludes 0."
           for m in sorted(methods)]
    md += [""] + ([f"![{plot}]({plot})", ""] if plot else [])
    return md


def _exploratory_section(split: str, rows, tests, keys, cols, chance, plots, notes) -> list[str]:
    md = [f"### Split `{split}`", ""]
    main_keys = [k for k in keys if not k.startswith("digit_acc_")]
    place_keys = [k for k in keys if k.startswith("digit_acc_")]
    for title, ks in (("mean ± std over seeds (↓: lower is better)", main_keys), ("per-place digit accuracy", place_keys)):
        if not ks:
            continue
        md += [f"{title}:", ""]
        table = [[r["group"] + ("" if r["status"] == "ok" else f" ({r['status']})"), f"{r['done']}/{r['seeds']}"]
                 + [_cell(r[k], k, r["done"]) for k in ks] for r in rows]
        table.append(["*chance*", ""] + [fmt(chance.get(k, (None, None))[0], k) for k in ks])
        if any(chance.get(k, (None, None))[1] is not None for k in ks):
            table.append(["*best constant*", ""] + [fmt(chance.get(k, (None, None))[1], k) for k in ks])
        md += md_table(["variant", "n"] + [cols[k][1] + (" ↓" if cols[k][2] else "") for k in ks], table)
    if tests:
        md += ["paired differences (a - b, same seed): mean [95% paired t-interval] and Holm-corrected sign-flip p; "
               "**bold** where that p < 0.05 and the interval excludes 0:", ""]
        for ks in (main_keys, place_keys):
            if not ks:
                continue
            table = [[name, str(len(c["seeds"]))] + [_diff_cell(c["figures"][k], k, len(c["seeds"])) for k in ks]
                     for name, c in tests.items()]
            md += md_table(["comparison", "pairs"] + [cols[k][1] + (" ↓" if cols[k][2] else "") for k in ks], table)
        for name, c in tests.items():
            for side, seeds in ((c["b"], c["only_a"]), (c["a"], c["only_b"])):
                if seeds:
                    md.append(f"- {name}: seed(s) {', '.join(map(str, seeds))} unpaired: no finished {side} run")
    md += [""] + [f"![{p}]({p})" for p in plots] + [""]
    return md + [f"> {n}" for n in notes]


# ---------------------------------------------------------------------------------------------------------
# Plots


def _panel_keys(cols: Mapping[str, tuple], primary: str | None = None) -> list[str]:
    """The (at most 4) figures the plots show: the primary endpoint first, where this split has it."""
    return list(dict.fromkeys(k for k in (primary, *PANEL_KEYS) if k in cols))[:4]


def _spread_plot(path: Path, rows, variants, figures, cols, chance, panels, dev_seeds) -> None:
    """Per group: bar = mean, error bar = sample std, dots = seeds; chance dashed, best constant dotted."""
    groups = [r["group"] for r in rows]
    fig, axes = new_figure(max(5.0, 1.0 + 0.55 * len(groups)) * len(panels), 4.4, ncols=len(panels))
    for ax, key in zip(axes if len(panels) > 1 else [axes], panels):
        means = [r[key]["mean"] if r[key]["mean"] is not None else math.nan for r in rows]
        stds = [r[key]["std"] or 0.0 for r in rows]
        ax.bar(range(len(groups)), means, yerr=stds, capsize=4, color="#4c72b0", alpha=0.8)
        for j, g in enumerate(groups):
            seeds = [figures[v.name].get(key) for v in variants
                     if v.group == g and v.name in figures and v.seed not in dev_seeds]
            seeds = [s for s in seeds if s is not None]
            ax.scatter([j] * len(seeds), seeds, color="black", s=12, zorder=3)
        level, constant = chance.get(key, (None, None))
        if level is not None:
            ax.axhline(level, color="black", linestyle="--", linewidth=1, label=f"chance {fmt(level, key)}")
        if constant is not None:
            ax.axhline(constant, color="0.4", linestyle=":", linewidth=1.5, label=f"best constant {fmt(constant, key)}")
        ax.set_xticks(range(len(groups)), groups, rotation=30, ha="right")
        ax.set_title(f"{cols[key][1]} ({'lower' if cols[key][2] else 'higher'} is better)", fontsize=10)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
        ax.grid(axis="y", alpha=0.3)
    save_figure(fig, path)


def _digit_plot(path: Path, rows, cols, chance, places) -> bool:
    groups = [r["group"] for r in rows]
    fig, ax = new_figure(max(6.0, 2.0 + 0.25 * len(places) * len(groups)), 4.2)
    width = 0.8 / max(1, len(groups))
    drawn = False
    for j, r in enumerate(rows):
        if all(r[p]["mean"] is None for p in places):
            continue  # no bars, no legend entry
        drawn = True
        means = [r[p]["mean"] if r[p]["mean"] is not None else math.nan for p in places]
        stds = [r[p]["std"] or 0.0 for p in places]
        ax.bar([i - 0.4 + width * (j + 0.5) for i in range(len(places))], means, width, yerr=stds, capsize=2,
               label=r["group"], color=series_color(j, len(rows)))
    for i, p in enumerate(places):
        level = chance.get(p, (None, None))[0]
        if level is not None:
            ax.hlines(level, i - 0.4, i + 0.4, colors="black", linestyles="--", linewidth=1.5,
                      label="chance" if "chance" not in ax.get_legend_handles_labels()[1] else None)
    ax.set_xticks(range(len(places)), [cols[p][1].split(": ", 1)[-1] for p in places])
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("digit accuracy")
    ax.set_title("digit accuracy per place (mean ± std over seeds)")
    place_legend(ax, len(groups))
    ax.grid(axis="y", alpha=0.3)
    if drawn:
        save_figure(fig, path)
    return drawn


def _paired_plot(path: Path, tests: Mapping[str, dict], cols, panels, title: str) -> bool:
    """Per comparison and figure: each seed's paired difference as a dot, the mean as a diamond and the
    paired t-interval as a bar; filled where the Holm-corrected test rejects."""
    names = [n for n in tests if any(tests[n]["figures"][k]["diffs"] for k in panels)]
    if not names:
        return False
    fig, axes = new_figure(max(7.0, 4.2 * len(panels)), 1.9 + 0.5 * len(names), ncols=len(panels))
    for i, (ax, key) in enumerate(zip(axes if len(panels) > 1 else [axes], panels)):
        for y, name in enumerate(names):
            d = tests[name]["figures"][key]
            points = list(d["diffs"].values())
            if not points:
                continue
            ax.scatter(points, [y + 0.18] * len(points), color="0.35", s=10, zorder=3,
                       label="seed" if y == 0 else None)
            if d["t_low"] is not None:
                ax.plot([d["t_low"], d["t_high"]], [y, y], color="#4c72b0", linewidth=2)
            ax.plot([d["mean"]], [y], "D", color="#4c72b0", markerfacecolor="#4c72b0" if d["significant"] else "white")
        ax.axvline(0, color="black", linewidth=1)
        ax.margins(x=0.15, y=0.3)
        ax.set_yticks(range(len(names)), names if i == 0 else [""] * len(names))
        ax.invert_yaxis()
        label, lower = cols[key][1], cols[key][2]
        ax.set_title(f"{label}\n(a - b; {'left' if lower else 'right'} is better)", fontsize=9)
        ax.grid(axis="x", alpha=0.3)
    fig.suptitle(title, fontsize=10)
    save_figure(fig, path)
    return True


# ---------------------------------------------------------------------------------------------------------
# The page


def _blank(value):
    return "" if value is None else value


def _point(values: Mapping[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items())


def _confirmation_note(conf: Mapping) -> list[str]:
    return [f"**Confirmation** on fresh seeds of the values chosen in `{conf['file']}` (sha256 {conf['sha256'][:12]}): "
            "each loss runs at its own chosen values. The selection stage that chose them is shown apart, "
            "under \"Selection stage (not evidence)\".", ""]


def _chosen_lines(conf: Mapping) -> list[str]:
    """Each group's values in this confirmation, beside the primary table."""
    return ["Values each group ran at (chosen on the selection stage): " + "; ".join(
        f"`{group}` {_point(values) if values else 'the config values'}" for group, values in conf["chosen"].items())
        + ".", ""]


def _selection_section(conf: Mapping, overrides: Mapping) -> list[str]:
    """The whole validation table of the selection file (every loss and value it ran, the chosen one marked):
    how much the choice mattered, which is no evidence (the values were chosen on these figures)."""
    metric = conf.get("metric") or ""
    seeds = conf.get("seeds") or []
    md = ["## Selection stage (not evidence)", "",
          f"> Not evidence: these figures chose the values above (`{metric}` on `{conf.get('split')}`, "
          f"{'lower' if conf.get('lower_is_better') else 'higher'} is better, development seeds "
          f"{', '.join(map(str, seeds)) or 'none'}), so they cannot also test them. From `{conf['file']}`.", ""]
    chosen_on = dict(conf.get("overrides") or {})
    differ = sorted(k for k in {*chosen_on, *overrides} if chosen_on.get(k) != overrides.get(k))
    md += [f"Selection overrides: `{json.dumps(chosen_on)}`"
           + (f"; this confirmation's differ in {', '.join(f'`{k}`' for k in differ)}." if differ else
              "; the same as this confirmation's."), ""]
    return md + _validation_table(conf.get("losses") or {}, metric)


def _validation_table(losses: Mapping, metric: str) -> list[str]:
    """Every loss and grid value of a selection (its `losses`), the chosen one marked."""
    rows = []
    for loss, entry in losses.items():
        chosen = entry.get("chosen")
        for row in entry.get("table") or []:
            value = row.get("value") or {}
            rows.append([loss, _point(value) or "(config values)", fmt(row.get("mean"), metric),
                         fmt(row.get("std"), metric), _blank(row.get("n")),
                         "**chosen**" if chosen is not None and value == chosen else ""])
        if chosen is None:
            rows.append([loss, "–", "", "", "", f"none chosen: {entry.get('why') or 'no reason recorded'}"])
    return md_table(["loss", "value", f"{metric} mean", "std", "n", "chosen"], rows)


def _validation_section(selection: Mapping | None, metric: str | None) -> list[str]:
    """The selection stage's own page: the choice and the table it was made on, in place of any test."""
    md = ["## The choice on `val` (not evidence)", ""]
    if selection is None:
        return md + ["No primary endpoint was declared in the config (`primary_metric`): nothing to choose on.", ""]
    seeds = ", ".join(map(str, selection.get("seeds") or [])) or "none"
    md += [f"`{metric}` on `val`, {'lower' if selection.get('lower_is_better') else 'higher'} is better, mean over "
           f"development seeds {seeds}; per loss the best value is chosen, ties to the smaller one. A choice, "
           "not a result: these figures cannot also test it.", ""]
    if selection.get("why"):
        md += [f"Nothing chosen: {selection['why']}.", ""]
    return md + _validation_table(selection.get("losses") or {}, metric)


def write_results(out: Path, variants: Sequence[Variant], status: Status, settings: Mapping) -> dict:
    """results.md, results.csv, paired.csv, runs.csv, plots/ and analysis/ from what has finished; returns the
    paths and the paired tests ({split: {comparison: ...}})."""
    from ..analysis import CHANCE_TEXT, analyze_records, headline, write_report

    ev = settings["eval"]
    splits = list(ev["splits"])
    dev_seeds = list(settings.get("dev_seeds") or [])
    primary = settings.get("primary") or {}
    contrasts = [tuple(c) for c in settings.get("contrasts") or []]
    grid = bool(settings.get("grid"))
    selection = settings.get("selection")  # a --grid page: what write_selection wrote (orchestrate.write_page)
    # the selection stage chooses on development seeds: its figures are of them (a --grid runs no other), and
    # it tests nothing
    left_out = sorted({v.seed for v in variants} - set(dev_seeds)) if grid else dev_seeds
    got = collect(out, variants, status, splits, left_out)
    groups = list(dict.fromkeys(v.group for v in variants))
    pairs = [] if grid else comparisons(groups, contrasts)
    plot_dir = out / "plots"
    plot_dir.mkdir(exist_ok=True)
    per_split, report_paths = {}, {}
    for split in splits:
        figures, cols = got.figures[split], got.columns[split]
        keys = [k for k, _, _ in cols]
        col = {k: c for k, c in zip(keys, cols)}
        rows = group_table(variants, status, figures, keys, left_out)
        tests = paired_tests(variants, figures, keys, pairs, dev_seeds=left_out)
        ref = got.reference.get(split)
        chance = {f.key: (f.chance, f.constant) for f in headline(ref[0])} if ref else {}
        plots, panels = [], _panel_keys(col, primary.get("metric"))
        if figures and panels:
            _spread_plot(plot_dir / f"{split}_main_metric.png", rows, variants, figures, col, chance, panels, left_out)
            plots.append(f"plots/{split}_main_metric.png")
        places = [k for k in keys if k.startswith("digit_acc_")]
        if figures and places and _digit_plot(plot_dir / f"{split}_digit_accuracy.png", rows, col, chance, places):
            plots.append(f"plots/{split}_digit_accuracy.png")
        if panels and tests and _paired_plot(plot_dir / f"{split}_paired_differences.png", tests, col, panels,
                                             f"Paired differences on {split} (same seed): seeds, mean and 95% "
                                             "t-interval\nfilled: Holm p < 0.05, interval without 0"):
            plots.append(f"plots/{split}_paired_differences.png")
        if got.pooled[split] and not grid:  # no pooled per-digit report of a selection stage: it chooses only
            analyses = {g: analyze_records(recs) for g, recs in got.pooled[split].items()}
            seeds = got.pooled_seeds[split]
            report_paths[split] = write_report(analyses, out / "analysis" / split, notes=[
                "Each column pools the predictions of these finished seeds of that variant (development seeds "
                "left out; a run whose predictions.jsonl could not be read is not pooled): "
                + "; ".join(f"{g}: {len(seeds[g])} seeds ({_seed_list(seeds[g])})" for g in analyses)
                + ". Chance is over the distinct records (by source and id)."],
                run_info={g: None for g in analyses})
        per_split[split] = {"figures": figures, "keys": keys, "col": col, "rows": rows, "tests": tests,
                            "chance": chance, "plots": plots, "reference": ref}

    _write_csvs(out, variants, status, per_split, {**primary, "split": primary.get("split") or splits[0]})
    samples = "all samples" if ev["limit"] is None else f"first {ev['limit']} samples"
    seeds = sorted({v.seed for v in variants})
    md = ["# Loss comparison", ""]
    if settings.get("grid"):  # compare --grid: the selection stage, whose figures choose and prove nothing
        md += ["**Selection stage: not evidence.** Every loss ran at each value of "
               + ", ".join(f"`{k}` ({', '.join(v)})" for k, v in settings["grid"].items())
               + " on development seeds; variants also differ in that value. The choice per loss on `val` and "
               "the whole validation table: below and in [selection.json](selection.json). Every figure on this "
               "page is of the development seeds and nothing is tested: confirm the chosen values on fresh "
               "seeds.", ""]
    confirmation = settings.get("confirmation")
    if confirmation:  # compare --selection: each loss at its own chosen values, on fresh seeds
        md += _confirmation_note(confirmation)
    md += [f"- config: `{settings['config']}` (sha256 {settings['config_sha256'][:12]})",
           *start_lines(out, variants, status),
           f"- shared overrides: `{json.dumps(settings['overrides'])}`" if settings["overrides"] else
           "- shared overrides: none",
           f"- seeds: {', '.join(map(str, seeds))}"
           + (f"; every aggregate below is of development seeds {', '.join(str(s) for s in seeds if s in dev_seeds)}"
              " (the selection stage)" if grid else
              f"; development seeds {', '.join(map(str, dev_seeds))} are shown in the run table and left out of "
              "every aggregate and test" if dev_seeds else ""),
           f"- evaluation: splits {', '.join(f'`{s}`' for s in splits)}, {samples} of "
           f"{', '.join(f'{n}:{p}' for n, p in ev['data'])}, greedy, max_new_tokens {ev['max_new_tokens']}",
           "- variants differ only in the aux loss / kernel"
           + (", each loss's chosen values (listed under the primary endpoint)" if confirmation else "")
           + " and the seed (model init and data order); control kernels use kernel_seed = base + seed",
           *([] if grid else ["- paired by seed: mean difference with its 95% paired t-interval; the test is the "
                              "exact sign-flip permutation test with Holm's correction across the comparisons of "
                              "each figure"]), ""]
    md += _leakage_section(settings.get("leakage") or {}, bool(settings.get("allow_overlap")))
    primary_split = primary.get("split") or splits[0]
    p = per_split.get(primary_split)
    if grid:
        md += _validation_section(selection, primary.get("metric"))
    elif p is not None:
        plot = f"plots/{primary_split}_paired_differences.png"
        md += _primary_section({**primary, "split": primary_split}, p["tests"], p["rows"], p["col"],
                               plot if plot in p["plots"] else None, dev_seeds)
    if confirmation:
        md += _chosen_lines(confirmation) + _selection_section(confirmation, settings.get("overrides") or {})
    md += ["## Exploratory figures", "",
           "Everything below is exploratory: figures other than the declared endpoint, each corrected only across "
           "the comparisons of that figure. Chance and best constant: from the evaluation records of the first "
           "finished run on each split. " + CHANCE_TEXT, ""]
    for split in splits:
        q = per_split[split]
        md += _exploratory_section(split, q["rows"], q["tests"], q["keys"], q["col"], q["chance"], q["plots"],
                                   [n for n in got.notes if f"({split})" in n or f" {split} " in n])
        if split in report_paths:
            md += [f"Full per-digit comparison on `{split}` (seeds pooled per variant): "
                   f"[analysis/{split}/report.md](analysis/{split}/report.md)", ""]
    md += curve_section(out, variants, status, settings, per_split.get("val", {}).get("chance"), primary_split)
    md += _runs_section(variants, status, per_split, splits, dev_seeds)
    (out / "results.md").write_text("\n".join(md), encoding="utf-8")
    return {"results_md": out / "results.md", "results_csv": out / "results.csv", "paired_csv": out / "paired.csv",
            "runs_csv": out / "runs.csv", "plots": [out / p for q in per_split.values() for p in q["plots"]],
            "reports": report_paths, "tests": {s: q["tests"] for s, q in per_split.items()}}


def _runs_section(variants, status, per_split, splits, dev_seeds) -> list[str]:
    split = splits[0]
    keys = [k for k in per_split[split]["keys"] if not k.startswith("digit_acc_")][:6]
    col = per_split[split]["col"]
    md = ["## Runs", "", f"Figures on `{split}`; every split and figure in runs.csv.", ""]
    rows = []
    for v in variants:
        st = status.variants.get(v.name, {})
        fig = per_split[split]["figures"].get(v.name, {})
        seconds = st.get("seconds")
        rows.append([v.name + (" (dev seed)" if v.seed in dev_seeds else ""), st.get("status", "pending"),
                     "–" if seconds is None else f"{seconds:.0f}", fig.get("records", "–")]
                    + [fmt(fig.get(k), k) for k in keys])
    md += md_table(["run", "status", "seconds", "records"] + [col[k][1] for k in keys], rows)
    failed = [v for v in variants if status.variants.get(v.name, {}).get("status") == "failed"]
    if failed:
        md += ["## Failed runs", ""]
        md += [f"- {v.name}: {status.variants[v.name].get('error', 'failed')} — see runs/{v.name}/error.txt "
               f"and runs/{v.name}/log.txt" for v in failed] + [""]
    return md


def start_lines(out: Path, variants: Sequence[Variant], status: Status) -> list[str]:
    """The page's line on where the finished runs started: the trained folder and its weights' sha256 that each
    run's run_config.json names (a fine-tune of a base), grouped when they differ; no line when none started
    from a trained folder. A record that cannot be read is named, not skipped."""
    starts: dict[str, list[str]] = {}
    for v in variants:
        if status.variants.get(v.name, {}).get("status") != "done":
            continue
        try:
            record = RunRecord.read(out / "runs" / v.name / "model" / RUN_RECORD, missing_ok=True)
        except RunRecordError as e:
            starts.setdefault(f"unreadable run record ({e})", []).append(v.name)
            continue
        line = base_line(record) if record is not None else "no run_config.json kept"
        starts.setdefault(line or "from scratch, a preset or a hub id (no trained folder)", []).append(v.name)
    if not any(line.startswith("starts from") for line in starts):
        return []
    if len(starts) == 1:
        return [f"- every run {next(iter(starts))}"]
    return ["- runs start from different places: " + "; ".join(f"{len(names)} {line} (e.g. {names[0]})"
                                                              for line, names in starts.items())]


def _write_csvs(out: Path, variants, status, per_split, primary: Mapping) -> None:
    stats = ("mean", "std", "min", "max", "n")
    with open(out / "results.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["split", "group", "aux", "kernel_mode", "seeds", "done", "failed", "status", "figure", *stats,
                    "chance"])
        for split, q in per_split.items():
            for r in q["rows"]:
                for k in q["keys"]:
                    w.writerow([split, *(r[c] for c in ("group", "aux", "kernel_mode", "seeds", "done", "failed",
                                                        "status")), k, *(_blank(r[k][s]) for s in stats),
                                _blank(q["chance"].get(k, (None, None))[0])])
    with open(out / "paired.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        fields = ("n", "mean", "sd", "t_low", "t_high", "p_t", "p_signflip", "p_holm", "significant", "wins",
                  "losses", "ties")
        # primary: the row is the declared endpoint (primary_metric on primary_split); with lower_is_better it
        # is what a summary across pages (vlm-smmd summary) reads
        w.writerow(["split", "comparison", "a", "b", "figure", *fields, "method", "primary", "lower_is_better"])
        for split, q in per_split.items():
            for name, c in q["tests"].items():
                for k in q["keys"]:
                    d = c["figures"][k]
                    w.writerow([split, name, c["a"], c["b"], k, *(_blank(d[x]) for x in fields), d["method"],
                                split == primary["split"] and k == primary.get("metric"), q["col"][k][2]])
    keys = list(dict.fromkeys(k for q in per_split.values() for k in q["keys"]))
    with open(out / "runs.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["run", "group", "aux", "kernel_mode", "seed", "split", "status", "seconds", "records"] + keys)
        for v in variants:
            st = status.variants.get(v.name, {})
            for split, q in per_split.items():
                fig = q["figures"].get(v.name, {})
                w.writerow([v.name, v.group, v.aux, v.kernel_mode, v.seed, split, st.get("status", "pending"),
                            st.get("seconds", ""), fig.get("records", "")] + [_blank(fig.get(k)) for k in keys])
