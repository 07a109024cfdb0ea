"""`compare --curve`: curve steps, the checkpoint callback, the worker's curve.json, the page's section."""

import json
import math
import re
from decimal import ROUND_HALF_UP, Decimal

import pytest

from tests.test_compare import CONFIG, PNG, main, plant_run, settings_for
from vlm_smmd.experiments import curves
from vlm_smmd.experiments.curves import (
    checkpoint_steps,
    curve_section,
    curve_step,
    parse_percents,
    write_curve,
)
from vlm_smmd.experiments.results import write_results
from vlm_smmd.experiments.store import Status
from vlm_smmd.experiments.variants import plan_variants


def test_curve_steps_round_half_up_and_leave_the_last_step_to_the_final_model():
    assert curve_step(25, 1000) == 250
    assert curve_step(50, 3) == 2  # 1.5 rounds up
    assert curve_step(25, 10) == 3  # 2.5 rounds up
    assert curve_step(33, 7) == 2  # 2.31
    assert curve_step(10, 4) == 1  # 0.4: at least step 1 (step 0 would be the initial model)
    for max_steps in range(1, 60):  # against decimal rounding, half up
        for p in range(1, 100):
            exact = Decimal(p * max_steps) / 100
            assert curve_step(p, max_steps) == max(1, int(exact.quantize(Decimal(1), rounding=ROUND_HALF_UP)))
    assert checkpoint_steps([25, 50, 75], 1000) == {250, 500, 750}
    assert checkpoint_steps([50, 75], 2) == {1}  # 75 % of 2 is step 2: the final model, no checkpoint


@pytest.mark.parametrize("text, words", [("0", "from 1 to 99"), ("50,100", "from 1 to 99"), ("50,50", "twice"),
                                         ("half", "comma-separated"), ("", "from 1 to 99")])
def test_bad_percents_are_one_line(text, words):
    with pytest.raises(ValueError, match=words) as e:
        parse_percents(text)
    assert "\n" not in str(e.value)
    assert parse_percents("75, 25,50") == [25, 50, 75]


# ---------------------------------------------------------------------------------------------------------
# The callback: checkpoints at exactly those steps, the trained weights unchanged


def _train(tmp_path, name, callbacks):
    import torch
    from transformers import Trainer, TrainingArguments

    class Net(torch.nn.Module):  # dropout draws from the RNG every step: a save that used it would show
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 1)
            self.drop = torch.nn.Dropout(0.5)

        def forward(self, x, labels):
            return {"loss": ((self.lin(self.drop(x)).squeeze(-1) - labels) ** 2).mean()}

    g = torch.Generator().manual_seed(0)
    data = [{"x": torch.randn(4, generator=g), "labels": torch.randn((), generator=g)} for _ in range(32)]
    args = TrainingArguments(output_dir=str(tmp_path / name), max_steps=7, per_device_train_batch_size=2,
                             save_strategy="no", use_cpu=True, report_to=[], seed=0, disable_tqdm=True,
                             logging_strategy="no", dataloader_num_workers=0)
    torch.manual_seed(0)
    trainer = Trainer(model=Net(), args=args, train_dataset=data, callbacks=callbacks)
    trainer.train()
    return {k: v.clone() for k, v in trainer.model.state_dict().items()}, tmp_path / name


def test_save_at_steps_saves_exactly_there_and_leaves_the_weights_alone(tmp_path):
    import functools

    import torch

    from vlm_smmd.training.trainer import SaveAtSteps

    plain, plain_dir = _train(tmp_path, "plain", [])
    saved, saved_dir = _train(tmp_path, "curve", [SaveAtSteps(functools.partial(checkpoint_steps, [25, 50, 99]))])
    # 25 % of 7 = 1.75 -> 2, 50 % = 3.5 -> 4, 99 % = 6.93 -> 7 (the last step: no checkpoint)
    assert sorted(p.name for p in saved_dir.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]
    assert not list(plain_dir.glob("checkpoint-*"))
    assert plain.keys() == saved.keys()
    for key in plain:
        assert torch.equal(plain[key], saved[key]), key


# ---------------------------------------------------------------------------------------------------------
# The worker's curve.json: checkpoints evaluated once, a retry skips points done, a missing one recorded


def _val_records(n, right):
    return [{"id": str(i), "source": "clocks", "question": "q", "prediction": "3:15" if i < right else "4:00",
             "target": "3:15", "targets": ["3:15"]} for i in range(n)]


def _fake_run(tmp_path, max_steps, checkpoints):
    run = tmp_path / "run"
    (run / "model").mkdir(parents=True)
    (run / "model" / "trainer_state.json").write_text(json.dumps({"max_steps": max_steps, "global_step": max_steps}))
    for step in checkpoints:
        folder = run / "model" / f"checkpoint-{step}"
        folder.mkdir()
        (folder / "trainer_state.json").write_text("{}")
        (folder / "model.safetensors").write_bytes(b"")
    (run / "val").mkdir()
    (run / "val" / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _val_records(10, 9)))
    return run


def test_write_curve_evaluates_each_checkpoint_once_and_a_retry_only_what_is_missing(tmp_path, monkeypatch):
    from vlm_smmd.analysis import analyze_records
    from vlm_smmd.evaluation import EvalArguments

    calls = []

    def fake_point(folder, data, out_dir, arguments):
        calls.append((folder.name, arguments.split, arguments.limit))
        step = int(folder.name.split("-")[1])
        return analyze_records(_val_records(arguments.limit, step))  # step k: k of `limit` right

    monkeypatch.setattr(curves, "evaluate_point", fake_point)
    run = _fake_run(tmp_path, max_steps=8, checkpoints=[2, 4])
    curve = {"percents": [25, 50, 75], "limit": 4, "metric": "exact_match", "split": "val"}
    got = write_curve(run, [["clocks", "/d"]], EvalArguments(split="test", limit=None), curve)
    assert calls == [("checkpoint-2", "val", 4), ("checkpoint-4", "val", 4)]  # 75 % = step 6: none saved
    points = {p["percent"]: p for p in got["points"]}
    assert [(p["step"], p["n"], p["exact_match"]) for p in points.values()] == [
        (2, 4, 0.5), (4, 4, 1.0), (6, 0, None), (8, 4, 1.0)]  # 100 %: the final val run's first 4 (all right)
    assert "checkpoint-6" in points[75]["missing"]
    assert json.loads((run / "curve.json").read_text()) == got

    calls.clear()
    (run / "model" / "checkpoint-6").mkdir()  # now there (as if saved): the retry evaluates only that point
    (run / "model" / "checkpoint-6" / "trainer_state.json").write_text("{}")
    (run / "model" / "checkpoint-6" / "model.safetensors").write_bytes(b"")
    again = write_curve(run, [["clocks", "/d"]], EvalArguments(), curve)
    assert calls == [("checkpoint-6", "val", 4)]
    assert [p["exact_match"] for p in again["points"]] == [0.5, 1.0, 1.0, 1.0]


# ---------------------------------------------------------------------------------------------------------
# The page


def _plant_curve(out, variant, values, label="exact match"):
    run = out / "runs" / variant.name
    run.mkdir(parents=True, exist_ok=True)
    (run / "curve.json").write_text(json.dumps({
        "split": "val", "limit": 4, "metric": "exact_match", "label": label, "lower_is_better": False,
        "points": [{"percent": p, "step": p, "n": 4, "exact_match": v} for p, v in values.items()]}))


CURVE = {"percents": [25, 50], "limit": 4, "metric": "exact_match", "split": "val"}


def _page_setup(tmp_path):
    variants = plan_variants(["none", "smmd"], [], [0, 1, 2, 3])
    by = {v.name: v for v in variants}
    status = Status(tmp_path / "status.json", [v.name for v in variants])
    for v in variants:
        status.set(v.name, status="done")
    values = {  # seed 3 is a development seed with outlying values: it must not move any figure
        "none-seed0": {25: 0.10, 50: 0.30, 100: 0.50}, "none-seed1": {25: 0.20, 50: 0.25, 100: 0.45},
        "none-seed2": {25: 0.15, 50: 0.40, 100: 0.60}, "none-seed3": {25: 0.99, 50: 0.99, 100: 0.99},
        "smmd-seed0": {25: 0.30, 50: 0.50, 100: 0.55}, "smmd-seed1": {25: 0.20, 50: 0.45, 100: 0.65},
        "smmd-seed3": {25: 0.0, 50: 0.0, 100: 0.0},  # smmd-seed2: no curve.json
    }
    for name, vals in values.items():
        _plant_curve(tmp_path, by[name], vals)
    (tmp_path / "runs" / "smmd-seed2").mkdir(parents=True)
    return variants, status, values


def _t_interval(diffs):
    from scipy import stats

    n = len(diffs)
    mean = sum(diffs) / n
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
    half = stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def _row(md, first):
    line = next(line for line in md if line.startswith(f"| {first} |"))
    return [c.strip() for c in line.strip("|").split("|")][1:]


def test_curve_section_re_derives_from_the_runs_curve_files(tmp_path):
    variants, status, values = _page_setup(tmp_path)
    settings = {**settings_for(("test", "val")), "curve": CURVE, "dev_seeds": [3],
                "primary": {"metric": "exact_match", "split": "test"}}
    md = curve_section(tmp_path, variants, status, settings)
    assert md[0] == "## Learning curve (val, 4 samples per point; exploratory)"
    text = "\n".join(md)
    assert "final endpoint is the 100 % figure on the primary split `test`" in text and "exploratory" in text.lower()

    for group, seeds in (("none", [0, 1, 2]), ("smmd", [0, 1])):  # dev seed 3 left out; smmd-seed2 has no file
        cells = _row(md, group)
        for cell, p in zip(cells, (25, 50, 100)):
            xs = [values[f"{group}-seed{s}"][p] for s in seeds]
            mean = sum(xs) / len(xs)
            sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1))
            assert cell == f"{mean:.3f} ± {sd:.3f} (n={len(seeds)}/3)"
    cells = _row(md, "smmd - none")
    for cell, p in zip(cells, (25, 50, 100)):
        mean, low, high = _t_interval([values[f"smmd-seed{s}"][p] - values[f"none-seed{s}"][p] for s in (0, 1)])
        assert cell == f"{mean:+.3f} [{low:+.3f}, {high:+.3f}] (n=2)"
    assert "- smmd-seed2: no curve.json; counted as a run without a value" in md
    assert (tmp_path / "plots" / "curve.png").read_bytes().startswith(PNG)


def test_a_run_whose_curve_has_no_value_at_a_point_counts_there_and_damage_is_named(tmp_path):
    variants, status, _ = _page_setup(tmp_path)
    _plant_curve(tmp_path, variants[1], {25: 0.3, 50: None, 100: 0.55})  # smmd-seed0: its 50 % checkpoint missing
    (tmp_path / "runs" / "smmd-seed1" / "curve.json").write_text("{trunc")
    settings = {**settings_for(("val",)), "curve": CURVE}
    md = curve_section(tmp_path, variants, status, settings)
    cells = _row(md, "smmd")
    assert cells[0].endswith("(n=2/4)") and cells[1] == "0.000 (n=1/4)"  # only the dev seed 3 has 50 %
    assert any(line.startswith("- smmd-seed1: ") and "curve.json is damaged" in line for line in md)


def test_write_results_carries_the_section_and_no_curve_no_section(tmp_path):
    variants, status, _ = _page_setup(tmp_path)
    targets = ["3:15", "10:07", "6:30", "12:45"]
    for v in variants:
        plant_run(tmp_path, v, targets, targets, split="val")
    settings = {**settings_for(("val",)), "primary": {"metric": "exact_match", "split": "val"}, "curve": CURVE}
    md = write_results(tmp_path, variants, status, settings)["results_md"].read_text()
    assert "## Learning curve (val, 4 samples per point; exploratory)" in md
    assert md.index("## Learning curve") < md.index("## Runs")
    assert "![plots/curve.png](plots/curve.png)" in md
    (tmp_path / "plots" / "curve.png").unlink()
    md = write_results(tmp_path, variants, status, {**settings, "curve": None})["results_md"].read_text()
    assert "Learning curve" not in md and not (tmp_path / "plots" / "curve.png").exists()


# ---------------------------------------------------------------------------------------------------------
# compare: the flag's checks, and one end-to-end run


@pytest.mark.parametrize("extra, words", [
    (["--primary_metric", "exact_match"], "needs primary_metric and 'val' among test_splits"),
    (["--test_splits", "[test,val]"], "needs primary_metric and 'val' among test_splits"),
    (["--test_splits", "[test,val]", "--primary_metric", "exact_match", "--launcher", "torchrun"], "drop --launcher"),
])
def test_curve_is_refused_without_val_and_endpoint(extra, words, tmp_path, capsys):
    assert main([str(CONFIG), "--out", str(tmp_path / "out"), "--curve", "50", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_compare_with_a_curve_end_to_end(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    out, data = tmp_path / "out", tmp_path / "clocks"
    argv = [str(CONFIG), "--aux", "none", "--kernel-controls", "", "--seeds", "0", "--out", str(out),
            "--eval-limit", "4", "--eval-batch-size", "4", "--max-new-tokens", "4", "--data_root", str(data),
            "--synthesize_num", "24", "--synthesize_size", "64",
            "--synthesize_options", '{splits: "train=0.6,val=0.2,test=0.2"}', "--test_splits", "[test,val]",
            "--primary_metric", "exact_match", "--max_steps", "2", "--per_device_train_batch_size", "2",
            "--max_eval_samples", "2", "--disable_tqdm", "true", "--dataloader_num_workers", "0",
            "--curve", "50", "--curve-limit", "3"]
    assert main(argv) == 0
    run = out / "runs" / "none-seed0"
    curve = json.loads((run / "curve.json").read_text())
    assert (curve["split"], curve["limit"], curve["metric"]) == ("val", 3, "exact_match")
    assert [(p["percent"], p["step"], p["n"]) for p in curve["points"]] == [(50, 1, 3), (100, 2, 3)]
    assert all(math.isfinite(p["exact_match"]) for p in curve["points"])
    assert len((run / "curve" / "step-1" / "predictions.jsonl").read_text().splitlines()) == 3
    assert not (run / "model" / "checkpoint-1").exists()  # evaluated, then deleted with the weights
    assert json.loads((out / "compare.json").read_text())["curve"]["percents"] == [50]
    md = (out / "results.md").read_text()
    assert "## Learning curve (val, 3 samples per point; exploratory)" in md
    assert (out / "plots" / "curve.png").read_bytes().startswith(PNG)
    capsys.readouterr()
    # a resume with other curve points is refused before any run
    assert main([a if a != "50" else "25" for a in argv]) == 2
    err = capsys.readouterr().err
    assert "other settings" in err and re.search(r"\bcurve\b", err)
