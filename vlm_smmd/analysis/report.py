"""report.md and analysis.json for one or several runs, beside the plots."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from vlm_smmd.data.tasks import SIZED_SYNTHESIZERS, TASKS

from .clocks import GAP_BUCKETS, WITHIN_MINUTES, WORST_GAP
from .collapse import COLLAPSE_DISTINCT, COLLAPSE_SHARE
from .digits import rate
from .formatting import fmt, md_table
from .headline_figures import Metric, compare_runs, headline
from .numbers import ABS_WITHIN, REL_THRESHOLDS, REL_TOLERANCES
from .plots import place_order, safe_name, training_curve, write_plots
from .records import KINDS
from .runinfo import load_run_info

# the settings of run_config.json a run section shows first (the rest under "every setting")
IDENTITY_KEYS = ("model_name_or_path", "family", "dataset", "data_root", "mixture", "train_split", "eval_split",
                 "synthesize", "synthesize_num", "synthesize_size", "aux", "aux_lambda", "kernel", "kernel_mode",
                 "max_steps", "num_train_epochs", "per_device_train_batch_size", "gradient_accumulation_steps",
                 "learning_rate", "lr_scheduler_type", "warmup_steps", "warmup_ratio", "seed")
_SIZE_KEY = re.compile(r"hidden|layers|depth|heads|intermediate|vocab|pixels|image_size|patch")

CHANCE_TEXT = ("**Chance** is the expected score of a predictor that ignores the input but knows the answer "
               "distribution: each record's target is scored against another record's answer, averaged over "
               "every ordered pair of distinct records. **Best constant** is the single answer that scores best "
               "on these very targets (shown in brackets), an in-sample upper bound for a model that always "
               "gives one answer. A model has learned something only where it beats both.")


def _raw(value) -> str:
    """A config value as written: text as is, everything else as JSON (0.5, true, [2.0])."""
    return value if isinstance(value, str) else json.dumps(value)


def _cell(f: Metric | None) -> str:
    """value with its numerator / denominator: "0.312 (156/500)", "1.070 (over 480 of 500)", "2.1 (n=500)"."""
    if f is None:
        return "–"
    if f.count is not None:
        return f"{fmt(f.value)} ({f.count}/{f.n})"
    if f.total is not None and f.total != f.n:
        return f"{fmt(f.value)} (over {f.n} of {f.total})"
    return f"{fmt(f.value)} (n={f.n})"


def _constant_cell(f: Metric) -> str:
    if f.constant is None:
        return "–"
    return fmt(f.constant) + (f" ({f.constant_answer!r})" if f.constant_answer is not None else "")


def _summary(analyses: Mapping[str, dict]) -> list[str]:
    runs = list(analyses)
    figs = {r: {f.key: f for f in headline(analyses[r])} for r in runs}
    keys = list(dict.fromkeys(k for r in runs for k in figs[r]))
    chance_cols = [runs[0]] if all(
        [(f.chance, f.constant) for f in headline(analyses[r])] == [(f.chance, f.constant) for f in
                                                                    headline(analyses[runs[0]])] for r in runs) else runs
    header = ["figure", "over", *runs]
    for r in chance_cols:
        header += ["chance" if len(chance_cols) == 1 else f"chance ({r})",
                   "best constant" if len(chance_cols) == 1 else f"best constant ({r})"]
    rows = []
    for k in keys:
        first = next(figs[r][k] for r in runs if k in figs[r])
        row = [first.label + (" ↓" if first.lower_is_better else ""), first.over, *(_cell(figs[r].get(k)) for r in runs)]
        for r in chance_cols:
            f = figs[r].get(k)
            row += [fmt(f.chance) if f else "–", _constant_cell(f) if f else "–"]
        rows.append(row)
    lines = ["## Summary", "", "Each figure with its count over its denominator (n); ↓: lower is better. "
             + CHANCE_TEXT, ""]
    lines += md_table(header, rows)
    methods = {f"{what}: {part['method']}" for r in chance_cols for what, part in (
        ("answers", analyses[r]["chance"]), ("numbers", analyses[r]["numeric"]["chance"]),
        ("clocks", analyses[r]["clock"]["chance"]),
        ("points and boxes", (analyses[r].get("grounding") or {}).get("chance") or {"records": 0}))
        if part.get("records", 2) >= 2}
    lines += [f"Chance computed {'; '.join(sorted(methods))}.", ""]
    return lines


def _run_section(runs: Sequence[str], infos: Mapping[str, Mapping | None], analyses: Mapping[str, dict],
                 out: Path, plots: dict[str, str]) -> list[str]:
    md = ["## Runs", ""]
    for i, r in enumerate(runs):
        info = infos.get(r) or {}
        md += [f"### {r}", ""]
        config, history, evaluation = info.get("config"), info.get("log_history"), info.get("evaluation")
        if info.get("run_dir"):
            md += [f"Training folder: `{info['run_dir']}`", ""]
        if config:
            shown = [k for k in IDENTITY_KEYS if k in config]
            shown += [k for k in config if k not in shown and _SIZE_KEY.search(k)]
            steps = config.get("max_steps")
            shown = [k for k in shown if config[k] is not None  # epochs do not count when max_steps is set
                     and not (k == "num_train_epochs" and isinstance(steps, int) and steps > 0)
                     and not (k == "synthesize_size" and config.get("synthesize") not in SIZED_SYNTHESIZERS)]
            md += md_table(["setting", "value"], [[k, _raw(config[k])] for k in shown])
            md += ["<details><summary>every setting of the run (run_config.json)</summary>", ""]
            md += md_table(["key", "value"], [[k, _raw(v)] for k, v in config.items()])
            md += ["</details>", ""]
        else:
            md += ["Run settings: not available.", ""]
        if evaluation:
            md += ["Evaluation: " + ", ".join(f"{k} {json.dumps(evaluation[k])}" for k in
                                              ("model", "data", "split", "limit", "max_new_tokens")
                                              if k in evaluation), ""]
        if history:
            chance = {f.key: f.chance for f in headline(analyses[r])}
            name = f"training_curve_{i}_{safe_name(r)}.png"
            if training_curve(history, chance, f"Training curve: {r}", out / name):
                plots[f"training_curve:{r}"] = name
                last = {}
                for entry in history:
                    last.update({k: v for k, v in entry.items() if isinstance(v, (int, float))})
                summary = [f"{k} {fmt(float(last[k]))}" for k in ("ce", "aux", "eval_ce", "eval_loss") if k in last]
                if "train_runtime" in last:
                    summary.append(f"training time {last['train_runtime']:.0f} s")
                md += [f"Last logged values (step {last.get('step', '–')}): " + ", ".join(summary) + ".", "",
                       f"![training curve {r}]({name})", ""]
            else:
                md += ["Training curve: not available (the log history holds no loss values).", ""]
        else:
            md += ["Training curve: not available.", ""]
        if info.get("notes"):
            md += ["Not found: " + "; ".join(info["notes"]) + ".", ""]
    return md


def _collapse_section(runs: Sequence[str], analyses: Mapping[str, dict]) -> list[str]:
    col = {r: analyses[r]["collapse"] for r in runs}
    md = ["## Does the model repeat itself?", "",
          f"Flagged when the most common answer is over {COLLAPSE_SHARE:.0%} of the answers and over twice as "
          f"common as the most common target, or when there are fewer distinct answers than "
          f"{COLLAPSE_DISTINCT:.0%} of the distinct targets (with at least 10 distinct targets).", ""]
    md += md_table(["", *runs], [
        ["distinct answers", *(c["distinct_predictions"] for c in col.values())],
        ["distinct targets", *(c["distinct_targets"] for c in col.values())],
        ["most common answer", *(f"{c['most_common_prediction']!r}: {c['most_common_count']}/{c['records']} "
                                 f"({fmt(c['most_common_share'])})" for c in col.values())],
        ["share of the most common target", *(c["most_common_target_share"] for c in col.values())],
        ["five most common answers", *(", ".join(f"{p!r} x{k}" for p, k in c["top_predictions"])
                                       for c in col.values())],
        ["collapsed", *("yes" if c["collapsed"] else "no" for c in col.values())],
    ])
    return md


def _digit_tables(runs: Sequence[str], parts: Mapping[str, Mapping], plots: Mapping[str, str], prefix: str,
                  level: str, holding: str | None = None) -> list[str]:
    """Per-place accuracy with chance, |digit error| histogram with chance, confusion matrices. `holding`:
    what the answers counted hold ("a number" without a prefix, else "a time")."""
    names = place_order(parts[r]["places"] for r in runs)
    md = [f"{level} Accuracy per place", "",
          "accuracy = correct / target digits at that place (over answers holding "
          f"{holding or ('a time' if prefix else 'a number')}); missing = the answer has no digit there; extra = it has a digit "
          "where the target has none.", ""]

    def place_cell(r, nm):
        p = parts[r]["places"].get(nm)
        if p is None:
            return "no data"
        return f"{fmt(p['accuracy'])} ({p['correct']}/{p['target_digits']}; {p['missing']} missing, {p['extra']} extra)"

    md += md_table(["place", *runs, "chance"],
                   [[nm, *(place_cell(r, nm) for r in runs), parts[runs[0]]["chance"]["places"].get(nm)] for nm in names])
    if f"{prefix}place_accuracy" in plots:
        md += [f"![accuracy per place]({plots[f'{prefix}place_accuracy']})", ""]
    md += [f"{level} |digit error| over aligned digits (both have a digit at that place)", ""]
    chance = parts[runs[0]]["chance"]["digit_error_fractions"]
    md += md_table(["|digit error|", *runs, "chance (fraction)"],
                   [[d, *(parts[r]["digit_error_histogram"][d] for r in runs), chance[d]] for d in range(10)])
    if f"{prefix}digit_error" in plots:
        md += [f"![digit error distribution]({plots[f'{prefix}digit_error']})", ""]
    md += [f"{level} Digit confusion (rows: target digit, columns: predicted digit)", ""]
    for r in runs:
        md += [f"**{r}**", ""]
        if f"{prefix}confusion:{r}" not in plots:
            md += ["no data (no aligned digits)", ""]
            continue
        md += md_table(["target \\ pred", *map(str, range(10))], [[d, *parts[r]["confusion"][d]] for d in range(10)])
        md += [f"![confusion {r}]({plots[f'{prefix}confusion:{r}']})", ""]
    return md


def write_report(analyses: Mapping[str, dict], out_dir, *, inputs: Mapping[str, str] | None = None,
                 notes: Sequence[str] = (), run_info: Mapping[str, Mapping | None] | None = None) -> Path:
    """Write report.md, analysis.json and the PNG plots for one or several runs (one table column per
    run, overlaid plots) into `out_dir`; returns the report path. `run_info`: {run: `load_run_info(...)`}
    for the run's identity and training curve; by default looked up from each run's `inputs` path (its
    folder's metrics.json names the model folder); a run without any says "not available"."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    runs = list(analyses)
    inputs = dict(inputs or {})
    if run_info is None:
        run_info = {r: load_run_info(predictions=inputs[r]) if r in inputs else None for r in runs}
    plots = write_plots(analyses, out)

    md = ["# Error analysis", ""]
    for r in runs:
        c = analyses[r]["collapse"]
        if c["collapsed"]:
            md += [f"> **Warning: {r} mostly repeats itself**: {'; and '.join(c['reasons'])}. Its figures say "
                   "little about reading the input; compare them with the best constant.", ""]
        unknown = analyses[r]["unknown_sources"]
        if unknown:
            named = ", ".join(f"{s!r} ({n} records)" for s, n in unknown.items())
            md += [f"> **Warning: {r} has sources that name no task**: {named}. They are scored by exact match "
                   f"only (no relaxed accuracy, no final-number figures); the tasks are {', '.join(TASKS)}.", ""]
    md += md_table(["run", "predictions", "records"], [[r, inputs.get(r, "–"), analyses[r]["records"]] for r in runs])
    md += [f"> {note}" for note in notes] + ([""] if notes else [])
    md += _summary(analyses)
    md += _collapse_section(runs, analyses)
    md += _run_section(runs, run_info, analyses, out, plots)

    md += ["## Records by kind", "",
           "Every record is counted in exactly one kind; only `numeric` records enter the digit analysis, only "
           "`clock` records the clock analysis and only `grounding` records the point and box figures.", ""]
    md += md_table(["kind", *runs], [[k, *(analyses[r]["kinds"][k] for r in runs)] for k in KINDS])
    sources = sorted({s for a in analyses.values() for s in a["by_source"]})
    md += md_table(["source: records / exact match / relaxed accuracy", *runs],
                   [[s, *(" / ".join(fmt(v) for v in analyses[r]["by_source"][s].values())
                          if s in analyses[r]["by_source"] else "–" for r in runs)] for s in sources])

    numeric = {r: analyses[r]["numeric"] for r in runs}
    if any(n["records"] for n in numeric.values()):
        md += _numeric_section(runs, numeric, plots)
    clock = {r: analyses[r]["clock"] for r in runs}
    if any(c["records"] for c in clock.values()):
        md += _clock_section(runs, clock, plots)
    grounding = {r: analyses[r].get("grounding") or {"records": 0} for r in runs}
    if any(g["records"] for g in grounding.values()):
        md += _grounding_section(runs, grounding, plots)

    (out / "analysis.json").write_text(json.dumps(
        {"runs": analyses, "comparison": compare_runs(analyses), "inputs": inputs, "notes": list(notes),
         "run_info": run_info, "plots": plots}, indent=1, default=str) + "\n", encoding="utf-8")
    report = out / "report.md"
    report.write_text("\n".join(md), encoding="utf-8")
    return report


def _numeric_section(runs, numeric, plots) -> list[str]:
    ch = numeric[runs[0]]["chance"]
    md = ["## Numeric answers", ""]
    md += md_table(["", *runs], [
        ["numeric-target records", *(numeric[r]["records"] for r in runs)],
        ["answers holding no number (left out of the digit tables and the MAE)",
         *(numeric[r]["non_numeric_predictions"] for r in runs)],
        ["analysed (both numeric)", *(numeric[r]["analysed"] for r in runs)],
        ["value exactly right", *(numeric[r]["value_exact"] for r in runs)],
        ["all digits right (sign aside)", *(numeric[r]["all_digits_correct"] for r in runs)],
        ["sign errors", *(numeric[r]["sign_errors"] for r in runs)],
    ])
    md += ["### Absolute error", "",
           "Mean and median |prediction - target| over the answers that hold a number; \"within ±k\" over every "
           "numeric record (an answer holding no number is a miss).", ""]
    rows = [["mean absolute error (n)", *(f"{fmt(numeric[r]['abs_error']['mean'])} (n={numeric[r]['analysed']} of "
                                          f"{numeric[r]['records']})" for r in runs), ch.get("mae")],
            ["median absolute error", *(numeric[r]["abs_error"]["median"] for r in runs), "–"]]
    rows += [[f"within ±{k}", *(f"{fmt(numeric[r]['within_abs_rate'][str(k)])} ({numeric[r]['within_abs'][str(k)]}/"
                                f"{numeric[r]['records']})" for r in runs), ch.get("within_abs", {}).get(str(k))]
             for k in ABS_WITHIN]
    rows += [[f"within relative tolerance {t:g}", *(f"{fmt(numeric[r]['within_relative_rate'][f'{t:g}'])} "
                                                    f"({numeric[r]['within_relative'][f'{t:g}']}/{numeric[r]['records']})"
                                                    for r in runs), ch.get("within_relative", {}).get(f"{t:g}")]
             for t in REL_TOLERANCES]
    md += md_table(["", *runs, "chance"], rows)
    if "abs_within" in plots:
        md += ["![absolute error](abs_within.png)", ""]
    if any(numeric[r]["places"] for r in runs):
        md += _digit_tables(runs, numeric, plots, "", "###")
        names = place_order(numeric[r]["places"] for r in runs)
        md += ["### Place of the first wrong digit", ""]
        md += md_table(["first wrong place", *runs],
                       [[nm, *(numeric[r]["first_wrong_place"].get(nm, 0) for r in runs)] for nm in names]
                       + [["none (all digits right)", *(numeric[r]["all_digits_correct"] for r in runs)]])
        if "first_wrong_place" in plots:
            md += ["![first wrong place](first_wrong_place.png)", ""]
    else:
        md += ["No answer holds a number: no digit analysis.", ""]
    md += ["### Length and magnitude errors", ""]
    md += md_table(["", *runs], [
        ["too many integer digits", *(numeric[r]["length_errors"]["int_too_many"] for r in runs)],
        ["too few integer digits", *(numeric[r]["length_errors"]["int_too_few"] for r in runs)],
        ["too many fraction digits", *(numeric[r]["length_errors"]["frac_too_many"] for r in runs)],
        ["too few fraction digits", *(numeric[r]["length_errors"]["frac_too_few"] for r in runs)],
        ["order of magnitude differs", *(numeric[r]["magnitude_errors"] for r in runs)],
    ])
    md += ["### Relative error", "",
           "Fraction of numeric records with a non-zero target whose relative error is at most the threshold "
           "(answers holding no number count as above every threshold); mean and median over parsed "
           "predictions.", ""]
    rel = {r: numeric[r]["relative_error"] for r in runs}
    md += md_table(["", *runs],
                   [["records with non-zero target", *(rel[r]["nonzero_target_records"] for r in runs)],
                    ["records with zero target (no relative error)", *(rel[r]["zero_target_records"] for r in runs)]]
                   + [[f"<= {thr:g}", *(rel[r]["cdf"][str(thr)] for r in runs)] for thr in REL_THRESHOLDS]
                   + [["median", *(rel[r]["median"] for r in runs)], ["mean", *(rel[r]["mean"] for r in runs)]])
    if "relative_error_cdf" in plots:
        md += ["![relative error CDF](relative_error_cdf.png)", ""]
    return md


def _clock_section(runs, clock, plots) -> list[str]:
    runs = [r for r in runs if clock[r]["records"]]
    ch = clock[runs[0]]["chance"]
    rates = ch.get("rates", {})
    md = ["## Clock answers", "",
          "12-hour dial. Rates are over every clock record (an answer holding no time fails them all). "
          "Swapped hands: predicted hour == target minute // 5 (mod 12) and predicted minute within "
          f"{clock[runs[0]]['swap_tolerance_minutes']:g} minutes of where the hour hand points "
          "((hour mod 12) * 5 + minute / 12), the prediction not being right on both.", ""]
    rows = [["clock records", *(clock[r]["records"] for r in runs), "–"]]
    for key, label in [("exact", "exact time"), ("hour_correct", "hour correct"),
                       ("minute_correct", "minute correct"), ("both_correct", "hour and minute correct"),
                       ("hour_only", "hour only correct"), ("minute_only", "minute only correct"),
                       ("neither", "neither correct"), ("no_time", "no time in answer"),
                       ("swapped_hands", "swapped hands")]:
        rows.append([label, *(f"{clock[r][key]}/{clock[r]['records']} ({fmt(clock[r]['rates'][key])})" for r in runs),
                     rates.get(key, 0.0 if key == "no_time" else None)])
    rows += [[f"within {k} min", *(f"{clock[r]['within_minutes'][str(k)]}/{clock[r]['records']} "
                                   f"({fmt(clock[r]['within_minutes_rate'][str(k)])})" for r in runs),
              ch.get("within_minutes_rate", {}).get(str(k))] for k in WITHIN_MINUTES]
    rows += [["mean gap (min) over answers holding a time",
              *(f"{fmt(clock[r]['mean_gap'])} (over {clock[r]['analysed']} of {clock[r]['records']} answers that "
                "hold a time)" for r in runs), ch.get("mean_gap")],
             [f"mean gap (min), an answer holding no time counted as {WORST_GAP:g}",
              *(f"{fmt(clock[r]['mean_gap_worst_case'])} (over all {clock[r]['records']})" for r in runs),
              ch.get("mean_gap")],
             ["median gap (min) over answers holding a time", *(clock[r]["median_gap"] for r in runs), "–"]]
    md += md_table(["", *runs, "chance"], rows)
    md += ["### Time-gap histogram (minutes, answers holding a time)", ""]
    fractions = ch.get("gap_bucket_fractions") or [None] * len(GAP_BUCKETS)
    md += md_table(["gap", *runs, "chance (fraction)"],
                   [[b["label"], *(clock[r]["gap_buckets"][i]["count"] for r in runs), fractions[i]]
                    for i, b in enumerate(clock[runs[0]]["gap_buckets"])])
    md += ["![time-gap histogram](clock_gap_hist.png)" if "clock_gap_hist" in plots
           else "No answer holds a time: no gap histogram.", ""]
    if "clock_breakdown" in plots:
        md += ["![hour vs minute correctness](clock_breakdown.png)", ""]
    md += ["### Clock digits", "",
           "Hour written on the 12-hour dial (1..12: hours 10-12 have a tens digit), minute and second as two "
           "digits.", ""]
    if any(clock[r]["places"] for r in runs):
        md += _digit_tables(runs, clock, plots, "clock_", "####")
    else:
        md += ["No answer holds a time: no digit analysis.", ""]
    return md


def _grounding_section(runs, grounding, plots) -> list[str]:
    runs = [r for r in runs if grounding[r]["records"]]
    g0 = grounding[runs[0]]
    ch, const = g0["chance"], g0.get("constant") or {}
    thr = f"{g0['iou_threshold']:g}"
    md = ["## Points and boxes", "",
          "Coordinates as the answer writes them (pixels of the resized image, or 0..1000). IoU and the IoU "
          f">= {thr} share are over every box record (an answer giving no valid box scores 0); point in box over "
          "every point record with a target box (no valid point is a miss); corner and centre errors over the "
          "answers giving a box or a point. Chance pairs records of the same task; the best constant point "
          "(in brackets) is the one point inside the most target boxes, or nearest to all target points.", ""]

    def count(r, key, n_key):
        g = grounding[r]
        return f"{g[key]}/{g[n_key]} ({fmt(rate(g[key], g[n_key]))})"

    def error(r, key, n_key):
        e = grounding[r][key]
        return f"{fmt(e['mean'])} (median {fmt(e['median'])}; over {e['analysed']} of {grounding[r][n_key]})"

    rows = [["grounding records", *(grounding[r]["records"] for r in runs), "–"],
            ["answers giving no valid point or box", *(count(r, "no_valid_answer", "records") for r in runs),
             ch.get("no_valid_answer_rate")]]
    if any(grounding[r]["box_records"] for r in runs):
        rows += [["box records", *(grounding[r]["box_records"] for r in runs), "–"],
                 ["mean IoU", *(grounding[r]["iou_mean"] for r in runs), ch.get("iou_mean")],
                 [f"IoU >= {thr}", *(count(r, "iou_at_threshold", "box_records") for r in runs),
                  ch.get("iou_at_threshold_rate")],
                 ["corner error (mean of the two corners' distances)",
                  *(error(r, "corner_error", "box_records") for r in runs), ch.get("corner_error_mean")],
                 ["no valid box", *(grounding[r]["no_valid_box"] for r in runs), "–"]]
    if any(grounding[r]["point_records"] for r in runs):
        rows += [["point records", *(grounding[r]["point_records"] for r in runs), "–"],
                 ["point in box", *(count(r, "point_in_box", "point_in_box_records") for r in runs),
                  _with_constant(ch.get("point_in_box_rate"), const, "point_in_box")],
                 ["centre error (distance to the target point)",
                  *(error(r, "centre_error", "point_records") for r in runs),
                  _with_constant(ch.get("centre_error_mean"), const, "centre_error")],
                 ["no valid point", *(grounding[r]["no_valid_point"] for r in runs), "–"]]
    md += md_table(["", *runs, "chance"], rows)
    if "grounding_examples" in plots:
        md += ["### Predicted vs true on the first records", "",
               "Target box or point in green, each run's answer in its colour (a cross: no valid answer).", "",
               f"![predicted vs true]({plots['grounding_examples']})", ""]
    for task in ("point", "box"):
        have = [r for r in runs if grounding[r].get(f"{task}_digits")]
        if not have:
            continue
        parts = {r: {**grounding[r][f"{task}_digits"],
                     "chance": {"places": {}, "digit_error_fractions": [None] * 10,
                                **((grounding[have[0]].get("chance") or {}).get(f"{task}_digits") or {})}}
                 for r in have}
        ch_coords = parts[have[0]]["chance"].get("coordinates") or {}
        md += [f"### Each coordinate of the {task} answers", "",
               f"Over the {task} answers giving a valid {task}; |error| in answer units. Chance pairs records as "
               "above.", ""]
        md += md_table(["coordinate", *have, "chance mean |error|", "chance exact"],
                       [[name, *(_coordinate_cell(parts[r]["coordinates"][name]) for r in have), ch_coords.get(name, {}).get("mean_abs_error"),
                         ch_coords.get(name, {}).get("exact_rate")] for name in parts[have[0]]["coordinates"]])
        if any(parts[r]["places"] for r in have):
            md += _digit_tables(have, parts, plots, f"{task}_", "####", f"a valid {task}")
    return md


def _coordinate_cell(c: Mapping) -> str:
    return f"{fmt(c['mean_abs_error'])} (median {fmt(c['median_abs_error'])}); exact {c['exact']}/{c['analysed']}"


def _with_constant(chance, const: Mapping, key: str) -> str:
    """A chance cell with the best constant answer's figure where there is one: "0.064 (best constant 0.106
    at [90, 94])"."""
    if const.get(f"{key}_answer") is None:
        return fmt(chance)
    x, y = const[f"{key}_answer"]
    return f"{fmt(chance)} (best constant {fmt(const[f'{key}_mean' if key == 'centre_error' else f'{key}_rate'])} at [{x:g}, {y:g}])"
