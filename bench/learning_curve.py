"""Learning curve of a training run: evaluate every checkpoint-N of a run folder (and its final model) on
held-out data, and print the headline figures per step with their chance levels.

    vlm-smmd train configs/scratch_cpu_clock.yaml --output_dir outputs/clock_curve \
        --save_strategy steps --save_steps 1000
    python bench/learning_curve.py outputs/clock_curve --data clocks:outputs/data/clocks_64_color \
        --instruction "Answer in H:MM format." [--limit 500]

Writes curve.csv and curve.md into the run folder (each checkpoint's predictions under curve/step-N).
The Trainer records no wall-clock time per checkpoint, so the table gives samples seen; the run's
train_runtime is printed when the run folder has train_results.json.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from vlm_smmd.analysis import headline  # noqa: E402
from vlm_smmd.evaluation import EvalArguments  # noqa: E402
from vlm_smmd.experiments.curves import evaluate_point, run_checkpoints  # noqa: E402

KEYS = {  # the figures a curve shows, per kind of answer: headline keys
    "chart": ("exact_match", "relaxed_accuracy", "mae", "within_1", "within_2"),
    "clock": ("hour_correct", "minute_correct", "clock_exact", "within_5_min", "mean_time_gap_min",
              "mean_time_gap_worst_min", "no_time_rate"),
    "number": ("exact_match", "value_exact", "mae", "within_1"),
}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run", type=Path)
    p.add_argument("--data", required=True, help="NAME:PATH as for vlm-smmd eval")
    p.add_argument("--instruction")
    p.add_argument("--limit", type=int)
    p.add_argument("--batch-size", type=int, default=100)
    p.add_argument("--max-new-tokens", type=int, default=8)
    args = p.parse_args(argv)
    steps = run_checkpoints(args.run)
    if not steps:
        p.error(f"{args.run}: no complete checkpoint-N folder or final model")
    batch = json.loads((steps[-1][1] / "trainer_state.json").read_text()).get("train_batch_size")
    rows, chance = [], {}
    for step, folder in steps:
        out = args.run / "curve" / f"step-{step}"
        analysis = evaluate_point(folder, [args.data], out, EvalArguments(
            limit=args.limit, batch_size=args.batch_size, max_new_tokens=args.max_new_tokens,
            instruction=args.instruction))
        figs = {f.key: f for f in headline(analysis)}
        kind = "clock" if "hour_correct" in figs else "chart" if "relaxed_accuracy" in figs else "number"
        row = {"step": step, "samples_seen": step * batch if batch else None, "n": analysis["records"],
               "distinct_answers": analysis["collapse"]["distinct_predictions"]}
        for key in KEYS[kind]:
            if key in figs:
                row[key] = figs[key].value
                chance[key] = figs[key].chance
        rows.append(row)
        print(json.dumps(row), flush=True)
    columns = list(dict.fromkeys(k for r in rows for k in r))
    with (args.run / "curve.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, columns)
        w.writeheader()
        w.writerows(rows)

    def fmt(v):
        return "" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(fmt(r.get(c)) for c in columns) + " |" for r in rows]
    lines.append("| chance | | | | " + " | ".join(fmt(chance.get(c)) for c in columns[4:]) + " |")
    (args.run / "curve.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    final = args.run / "train_results.json"
    if final.is_file():
        print(f"train_runtime {json.loads(final.read_text()).get('train_runtime')} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
