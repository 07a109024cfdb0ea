"""`vlm-smmd compare`: variant plan, per-run figures, aggregation over seeds, results files, resume."""

import csv
import json
import math
import sys
from pathlib import Path

import pytest

from vlm_smmd.analysis import analyze_records
from vlm_smmd.cli import main as cli
from vlm_smmd.experiments.results import comparisons, paired_tests, run_metrics, write_results
from vlm_smmd.experiments.statistics import spread
from vlm_smmd.experiments.store import Status
from vlm_smmd.experiments.variants import Variant, plan_variants, variant_overrides
from vlm_smmd.metrics import clock_time_gap

REPO = Path(__file__).resolve().parent.parent
CONFIG = REPO / "configs" / "tiny_cpu_clock.yaml"
PNG = b"\x89PNG\r\n\x1a\n"


def main(argv):
    return cli(["compare", *argv])


def rec(i, prediction, target, source="clocks"):
    return {"id": str(i), "source": source, "question": "q", "prediction": prediction, "target": target,
            "targets": [target]}


def test_plan_variants_and_overrides(tmp_path):
    variants = plan_variants(["none", "smmd"], ["random", "shuffled"], [0, 1])
    assert [v.name for v in variants] == [
        "none-seed0", "smmd-seed0", "smmd-random-seed0", "smmd-shuffled-seed0",
        "none-seed1", "smmd-seed1", "smmd-random-seed1", "smmd-shuffled-seed1"]
    assert variants[2] == Variant("smmd-random", "smmd", "random", 0)
    assert variants[7] == Variant("smmd-shuffled", "smmd", "shuffled", 1)

    base = {"max_steps": 5, "kernel_seed": 99}
    o = variant_overrides(base, variants[5], tmp_path / "r", base_kernel_seed=42)
    assert o == {"max_steps": 5, "kernel_seed": 99, "aux": "smmd", "kernel_mode": "value_distance", "seed": 1,
                 "output_dir": str(tmp_path / "r" / "model")}
    # a control kernel is drawn per seed: kernel_seed = base + seed
    o = variant_overrides(base, variants[6], tmp_path / "r", base_kernel_seed=42)
    assert (o["kernel_mode"], o["kernel_seed"], o["seed"]) == ("random", 43, 1)
    assert base == {"max_steps": 5, "kernel_seed": 99}  # not mutated


def test_spread_matches_hand_computation():
    s = spread([0.5, None, 0.75, 1.0])
    mean = (0.5 + 0.75 + 1.0) / 3
    std = math.sqrt(sum((x - mean) ** 2 for x in (0.5, 0.75, 1.0)) / 2)
    assert s == {"n": 3, "mean": pytest.approx(mean), "std": pytest.approx(std), "min": 0.5, "max": 1.0}
    assert spread([0.25])["std"] is None and spread([0.25])["mean"] == 0.25
    assert spread([None]) == {"n": 0, "mean": None, "std": None, "min": None, "max": None}


def test_run_metrics_numbers_and_mixture():
    records = [
        rec(0, "12", "12", "chartqa"),       # exact
        rec(1, "10.4", "10", "chartqa"),     # relaxed only (4%), rel err 0.04
        rec(2, "25", "20", "plotqa"),        # rel err 0.25; units wrong
        rec(3, "many", "30", "dvqa"),        # non-numeric prediction
        rec(4, "3:00", "3:00"),              # a clock record: not numeric, not chart
    ]
    m = run_metrics(analyze_records(records))
    assert m["records"] == 5
    assert m["exact_match"] == pytest.approx(2 / 5)
    assert m["relaxed_accuracy"] == pytest.approx(2 / 4)  # over the 4 chart records only
    assert m["mae"] == pytest.approx((0 + 0.4 + 5) / 3)  # over the 3 parsed predictions
    assert m["within_1"] == pytest.approx(2 / 4)  # over the 4 numeric records: "many" misses
    assert m["non_numeric_rate"] == pytest.approx(1 / 4)
    assert "value_exact" not in m  # a text-task figure: no text source here
    # tens: 1/1/2 all right; units: 2/0/0 -> right, right, wrong (5 vs 0)
    assert m["digit_acc_tens"] == 1.0 and m["digit_acc_units"] == pytest.approx(2 / 3)
    assert "digit_acc_tenths" not in m  # only in the prediction ("extra"): no target digit, no figure
    assert m["clock_exact"] == 1.0 and m["mean_time_gap_min"] == 0.0
    assert m["digit_acc_hour_units"] == 1.0 and m["digit_acc_minute_tens"] == 1.0


def plant_run(out, variant, predictions, targets, split="test"):
    """A finished run as compare leaves it: SPLIT/predictions.jsonl and done.json."""
    run_dir = out / "runs" / variant.name
    (run_dir / split).mkdir(parents=True, exist_ok=True)
    records = [rec(i, p, t) for i, (p, t) in enumerate(zip(predictions, targets))]
    (run_dir / split / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    done = run_dir / "done.json"
    figures = json.loads(done.read_text())["figures"] if done.is_file() else {}
    figures[split] = run_metrics(analyze_records(records))
    done.write_text(json.dumps({"variant": variant.name, "figures": figures}))


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def settings_for(splits=("test",), **extra):
    return {"config": "c.yaml", "config_sha256": "0" * 64, "overrides": {"max_steps": 2},
            "eval": {"splits": list(splits), "limit": None, "data": [["clocks", "/d"]], "max_new_tokens": 8}, **extra}


def test_write_results_aggregates_seeds_and_reports_failures(tmp_path):
    variants = plan_variants(["none", "smmd"], ["random"], [0, 1])
    targets = ["3:15", "10:07", "6:30", "12:45"]
    plant_run(tmp_path, variants[0], ["3:15", "10:07", "6:35", "1:45"], targets)   # none-seed0: 2/4 exact
    plant_run(tmp_path, variants[1], ["3:15", "10:07", "6:30", "12:40"], targets)  # smmd-seed0: 3/4
    plant_run(tmp_path, variants[3], ["3:15", "1:07", "6:30", "12:45"], targets)   # none-seed1: 3/4
    plant_run(tmp_path, variants[4], ["3:15", "10:07", "6:30", "12:45"], targets)  # smmd-seed1: 4/4
    plant_run(tmp_path, variants[2], ["x", "x", "x", "x"], targets)                # smmd-random-seed0
    status = Status(tmp_path / "status.json", [v.name for v in variants])
    for v in variants[:5]:
        status.set(v.name, status="done", seconds=1.0)
    status.set(variants[5].name, status="failed", error="training exited with status 1: KeyError: 'x'")

    paths = write_results(tmp_path, variants, status, settings_for())

    rows = {(r["group"], r["figure"]): r for r in read_csv(paths["results_csv"])}
    assert list(dict.fromkeys(g for g, _ in rows)) == ["none", "smmd", "smmd-random"]
    none, smmd, control = rows["none", "exact_match"], rows["smmd", "exact_match"], rows["smmd-random", "exact_match"]
    assert float(none["mean"]) == pytest.approx(0.625)
    assert float(none["std"]) == pytest.approx(math.sqrt(2 * 0.125 ** 2))
    assert (none["min"], none["max"], none["n"], none["split"]) == ("0.5", "0.75", "2", "test")
    assert float(smmd["mean"]) == pytest.approx(0.875)
    # mean time gap: none-seed0 gaps (0, 0, 5, 60) -> 16.25; none-seed1 (0, 1:07 vs 10:07 = 3 h round the
    # 12-hour dial, 0, 0) -> 45
    assert float(rows["none", "mean_time_gap_min"]["mean"]) == pytest.approx((16.25 + 45) / 2)
    # hour units over seeds: none-seed0 3/4 (1 vs 2), none-seed1 3/4 (1 vs 0 for 10:07)
    assert float(rows["none", "digit_acc_hour_units"]["mean"]) == pytest.approx(0.75)
    assert (control["status"], control["done"], control["failed"]) == ("1 failed", "1", "1")
    assert control["n"] == "1" and control["std"] == ""
    assert float(rows["smmd-random", "no_time_rate"]["mean"]) == 1.0
    assert rows["smmd-random", "mean_time_gap_min"]["n"] == "0"

    runs = {r["run"]: r for r in read_csv(paths["runs_csv"])}
    assert runs["smmd-random-seed1"]["status"] == "failed" and runs["smmd-random-seed1"]["exact_match"] == ""
    assert float(runs["none-seed1"]["exact_match"]) == 0.75 and runs["none-seed1"]["split"] == "test"

    md = paths["results_md"].read_text()
    assert "| none | 2/2 | 0.625 ± 0.177 |" in md
    assert "smmd-random (1 failed) | 1/2" in md
    assert "## Failed runs" in md and "KeyError: 'x'" in md and "runs/smmd-random-seed1/error.txt" in md
    # chance from the evaluation targets, exactly: every ordered pair of distinct records
    pairs = [(targets[j], targets[i]) for i in range(4) for j in range(4) if i != j]
    gap_chance = sum(clock_time_gap(p, t) for p, t in pairs) / len(pairs)
    assert float(rows["none", "mean_time_gap_min"]["chance"]) == pytest.approx(gap_chance)
    assert float(rows["none", "hour_correct"]["chance"]) == 0.0  # four different hours
    # every rate column is 0 by chance with four different times (within_1_min among them)
    assert f"| *chance* |  | 0.000 | 0.000 | 0.000 | 0.000 | 0.000 | 0.000 | {gap_chance:.2f} |" in md
    # paired with none by seed: smmd - none = +0.25 on both seeds (a zero-width t-interval; two pairs can
    # never reach p < 0.05 by sign-flip: 2/4); smmd-random only has seed 0
    paired = {(r["comparison"], r["figure"]): r for r in read_csv(paths["paired_csv"])}
    d = paired["smmd vs none", "exact_match"]
    assert float(d["mean"]) == pytest.approx(0.25) and d["n"] == "2"
    assert float(d["t_low"]) == pytest.approx(0.25) == float(d["t_high"])
    assert float(d["p_signflip"]) == pytest.approx(0.5) and d["significant"] == "False"
    assert paired["smmd-random vs none", "exact_match"]["n"] == "1"
    assert paired["smmd-random vs none", "exact_match"]["t_low"] == ""
    assert "| smmd vs none | 2 | +0.250 [+0.250, +0.250] p=0.500 |" in md
    assert "**+0.250" not in md  # nothing is bold that the corrected test does not reject
    assert "- smmd-random vs none: seed(s) 1 unpaired: no finished smmd-random run" in md
    assert "No primary endpoint was declared" in md
    assert [p.name for p in paths["plots"]] == ["test_main_metric.png", "test_digit_accuracy.png",
                                                "test_paired_differences.png"]
    for p in paths["plots"]:
        assert p.read_bytes().startswith(PNG)
    tests = paths["tests"]["test"]
    assert tests["smmd vs none"]["figures"]["exact_match"]["diffs"] == {0: 0.25, 1: 0.25}  # the plot's seed points
    assert paths["reports"]["test"] == tmp_path / "analysis" / "test" / "report.md"
    analysis = json.loads((tmp_path / "analysis" / "test" / "analysis.json").read_text())
    assert analysis["runs"]["none"]["records"] == 8  # both seeds pooled


def _planted_comparison(tmp_path, diffs_by_seed):
    """none, smmd and smmd-shuffled runs on 8 clock targets: none reads 4 exactly, smmd 4 + diffs_by_seed[seed],
    smmd-shuffled 3 + diffs_by_seed[seed]."""
    variants = plan_variants(["none", "smmd"], ["shuffled"], list(diffs_by_seed))
    targets = [f"{h}:00" for h in range(1, 9)]
    tmp_path.mkdir(exist_ok=True)
    status = Status(tmp_path / "status.json", [v.name for v in variants])
    for v in variants:
        right = 4 + (diffs_by_seed[v.seed] if v.group != "none" else 0) - (v.group == "smmd-shuffled")
        plant_run(tmp_path, v, targets[:right] + ["12:30"] * (8 - right), targets)
        status.set(v.name, status="done", seconds=1.0)
    return variants, status


def test_primary_endpoint_leads_and_bold_needs_the_corrected_test(tmp_path):
    # six seeds, smmd always 2 of 8 ahead: exact sign-flip p = 2/64 for each of the three comparisons
    variants, status = _planted_comparison(tmp_path, {s: 2 for s in range(6)})
    settings = settings_for(primary={"metric": "exact_match", "split": "test"}, contrasts=[["smmd", "smmd-shuffled"]],
                            leakage={"test": {"lines": ["test images also in training: 0 of 8"], "held_out": True,
                                              "leaks": False}})
    paths = write_results(tmp_path, variants, status, settings)
    md = paths["results_md"].read_text()
    primary = md.index("## Primary endpoint")
    assert md.index("## Held out?") < primary < md.index("## Exploratory figures")
    assert "- `test`: test images also in training: 0 of 8" in md
    tests = paths["tests"]["test"]
    assert list(tests) == ["smmd vs none", "smmd-shuffled vs none", "smmd vs smmd-shuffled"]
    d = tests["smmd vs none"]["figures"]["exact_match"]
    assert d["p_signflip"] == pytest.approx(2 / 64) and d["n"] == 6
    # Holm over the three comparisons of this figure, each 2/64: 3 * 2/64 > 0.05
    assert d["p_holm"] == pytest.approx(3 * 2 / 64) and d["significant"] is False
    head = md[primary:md.index("## Exploratory figures")]
    # the interval [+0.250, +0.250] excludes 0, but Holm's p does not hold: a lead, not "no difference"
    assert "smmd vs none: not established in exact match" in head and "not a finding" in head
    assert "no detectable difference" not in head
    assert "**" not in head.split("Method:")[0].split("| comparison")[1]

    # with one comparison only, 2/64 stands and the cell is bold
    variants, status = _planted_comparison(tmp_path / "b", {s: 2 for s in range(6)})
    variants = [v for v in variants if v.group != "smmd-shuffled"]
    paths = write_results(tmp_path / "b", variants, status, settings_for(primary={"metric": "exact_match",
                                                                                  "split": "test"}))
    d = paths["tests"]["test"]["smmd vs none"]["figures"]["exact_match"]
    assert d["p_holm"] == pytest.approx(2 / 64) and d["significant"] is True
    md = paths["results_md"].read_text()
    assert "**+0.250 [+0.250, +0.250] p=0.031**" in md
    assert "smmd vs none: smmd is better in exact match" in md


def test_dev_seeds_are_shown_and_left_out(tmp_path):
    variants, status = _planted_comparison(tmp_path, {0: 4, 1: 1, 2: 1, 3: 1})
    paths = write_results(tmp_path, variants, status,
                          settings_for(dev_seeds=[0], primary={"metric": "exact_match", "split": "test"}))
    d = paths["tests"]["test"]["smmd vs none"]["figures"]["exact_match"]
    assert d["n"] == 3 and d["diffs"] == {1: 0.125, 2: 0.125, 3: 0.125}
    rows = {(r["group"], r["figure"]): r for r in read_csv(paths["results_csv"])}
    assert rows["smmd", "exact_match"]["n"] == "3" and float(rows["smmd", "exact_match"]["mean"]) == 0.625
    md = paths["results_md"].read_text()
    assert "development seeds 0" in md and "smmd-seed0 (dev seed)" in md
    # without the development seed smmd is ahead by 0.125 on each of 3 seeds; 3 seeds give an exact
    # sign-flip p of 2/8, an interval that still excludes 0: not established
    assert "smmd vs none: not established in exact match" in md


def test_an_interval_holding_zero_reads_no_detectable_difference(tmp_path):
    # smmd ahead by 2/8 on two seeds, behind by 1/8 on two: the t-interval holds 0
    variants, status = _planted_comparison(tmp_path, {0: 2, 1: 2, 2: -1, 3: -1})
    settings = settings_for(primary={"metric": "exact_match", "split": "test"})
    d = write_results(tmp_path, variants, status, settings)["tests"]["test"]["smmd vs none"]
    d = d["figures"]["exact_match"]
    assert d["t_low"] < 0 < d["t_high"] and d["significant"] is False
    md = (tmp_path / "results.md").read_text()
    assert "smmd vs none: no detectable difference in exact match" in md
    assert "smmd vs none: not established" not in md


def test_pairing_by_seed_leaves_out_an_unpaired_seed():
    variants = plan_variants(["none", "smmd"], [], [0, 1, 2])
    figures = {"none-seed0": {"mae": 2.0}, "none-seed1": {"mae": 3.0},  # none-seed2 failed
               "smmd-seed0": {"mae": 1.5}, "smmd-seed1": {"mae": 2.0}, "smmd-seed2": {"mae": 9.0}}
    tests = paired_tests(variants, figures, ["mae"], comparisons(["none", "smmd"]))
    assert list(tests) == ["smmd vs none"]
    c = tests["smmd vs none"]
    assert c["seeds"] == [0, 1] and c["only_a"] == [2] and c["only_b"] == []
    assert c["figures"]["mae"]["n"] == 2 and c["figures"]["mae"]["mean"] == pytest.approx(-0.75)
    assert comparisons(["smmd", "ntl_was"]) == [] and comparisons(["smmd", "ntl_was"], [("smmd", "ntl_was")]) == [
        ("smmd", "ntl_was")]


def test_results_without_a_reference_say_nothing_is_paired(tmp_path):
    variants = plan_variants(["smmd"], [], [0])
    plant_run(tmp_path, variants[0], ["3:15", "1:00"], ["3:15", "4:00"])
    status = Status(tmp_path / "status.json", [v.name for v in variants])
    status.set(variants[0].name, status="done", seconds=1.0)
    paths = write_results(tmp_path, variants, status, settings_for(primary={"metric": "exact_match", "split": "test"}))
    assert "Nothing to pair: the comparison has no reference group and no contrast." in paths["results_md"].read_text()
    assert read_csv(paths["paired_csv"]) == []


@pytest.mark.parametrize("argv, message", [
    (["--seed", "3"], "--seed is set per variant by compare; use --seeds"),
    (["--aux", "none,smd"], "--aux: unknown 'smd'"),
    (["--seeds", "0,0"], "--seeds: expected distinct integers"),
    (["--max_stpes", "3"], "unknown config key 'max_stpes'"),
    (["--kernel-controls", "permuted"], "--kernel-controls: unknown 'permuted'"),
])
def test_bad_arguments_fail_before_any_run(argv, message, tmp_path, capsys):
    assert main([str(CONFIG), "--out", str(tmp_path / "out"), *argv]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out" / "runs").exists()


def test_rerun_with_other_settings_is_refused(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "compare.json").write_text(json.dumps({"config": str(CONFIG), "overrides": {"max_steps": 1}}))
    assert main([str(CONFIG), "--out", str(out), "--max_steps", "2", "--data_root", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err
    assert "other settings" in err and "overrides" in err
    assert not (tmp_path / "d").exists()  # refused before rendering any data


def test_an_endpoint_the_split_has_no_figure_for_is_refused_before_any_run(tmp_path, capsys):
    # the clock page's figure is clock_exact; time_exact is the per-sample score's name, not a figure
    data = ["--data_root", str(tmp_path / "d"), "--synthesize_num", "20", "--synthesize_size", "64"]
    assert main([str(CONFIG), "--out", str(tmp_path / "out"), "--primary_metric", "time_exact", *data]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]  # after the data's rendering progress
    assert last.startswith("vlm-smmd compare: ")
    assert "primary_metric 'time_exact'" in last and "split 'test'" in last and "clock_exact" in last
    assert not (tmp_path / "out").exists()


def test_split_figures_follow_the_records_kinds(tmp_path):
    from vlm_smmd.config import check_config
    from vlm_smmd.experiments.orchestrate import split_figures
    from vlm_smmd.training import synthesize_if_missing

    _, data_args, _, _ = check_config(CONFIG, {"data_root": str(tmp_path / "d"), "synthesize_num": "20",
                                               "synthesize_size": "64"})
    synthesize_if_missing(data_args)
    figures = split_figures(data_args, "test")
    assert {"exact_match", "clock_exact", "hour_correct", "mean_time_gap_min"} <= set(figures)
    assert "value_exact" not in figures and "time_exact" not in figures


# ---------------------------------------------------------------------------------------------------------
# End to end on the tiny CPU clock setting: 2 steps, 16 synthesised 64 px clocks, 2 eval samples


@pytest.mark.slow
def test_compare_end_to_end_failure_resume_and_retry(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the thread plan's override, passed on to every variant process
    out, data = tmp_path / "out", tmp_path / "clocks"
    argv = [str(CONFIG), "--aux", "none,smmd", "--kernel-controls", "", "--seeds", "0", "--out", str(out),
            "--eval-limit", "2", "--eval-batch-size", "2", "--max-new-tokens", "4",
            "--data_root", str(data), "--synthesize_num", "16", "--synthesize_size", "64", "--max_steps", "2",
            "--per_device_train_batch_size", "2", "--max_eval_samples", "2", "--logging_steps", "1",
            "--disable_tqdm", "true", "--dataloader_num_workers", "0"]
    # CE alone first: --out becomes a compare folder (a foreign non-empty folder would be refused)
    assert main([a if a != "none,smmd" else "none" for a in argv]) == 0
    printed = capsys.readouterr().out
    assert "[1/1] none-seed0: done in" in printed
    assert "test: test images also in training: 0 of 2" in printed  # the held-out check, before any run
    assert "threads: 1 job x 1 torch thread (set by OMP_NUM_THREADS" in printed
    assert json.loads((out / "runs" / "none-seed0" / "train.json").read_text())["torch_threads"] == 1
    # make smmd-seed0 fail: a file where its training output folder must go
    blocker = out / "runs" / "smmd-seed0" / "model"
    blocker.parent.mkdir(parents=True)
    blocker.write_text("in the way")

    assert main(argv) == 1
    printed = capsys.readouterr()
    assert "[1/2] none-seed0: done earlier, skipped" in printed.out and "[2/2] smmd-seed0: FAILED" in printed.out
    assert "rerun the same command to retry" in printed.err
    status = json.loads((out / "status.json").read_text())["variants"]
    assert status["none-seed0"]["status"] == "done" and status["smmd-seed0"]["status"] == "failed"
    assert "FileExistsError" in status["smmd-seed0"]["error"]
    assert "FileExistsError" in (out / "runs" / "smmd-seed0" / "error.txt").read_text()
    rows = {r["group"]: r for r in read_csv(out / "results.csv") if r["figure"] == "exact_match"}
    assert rows["smmd"]["status"] == "failed" and rows["smmd"]["mean"] == ""
    assert "## Failed runs" in (out / "results.md").read_text()

    # the finished run: its figures are those of its own predictions; weights dropped, config kept
    none_dir = out / "runs" / "none-seed0"
    records = [json.loads(line) for line in (none_dir / "test" / "predictions.jsonl").read_text().splitlines()]
    assert len(records) == 2
    em = sum(r["scores"]["exact_match"] for r in records) / len(records)
    assert float(rows["none"]["mean"]) == pytest.approx(em)
    assert (none_dir / "model" / "config.json").is_file()
    assert not list((none_dir / "model").glob("*.safetensors"))
    assert (none_dir / "test" / "analysis" / "report.md").is_file()
    finished = {p: p.stat().st_mtime_ns for p in (none_dir / "test" / "predictions.jsonl", none_dir / "log.txt",
                                                   none_dir / "done.json")}

    # rerun: none-seed0 is skipped, smmd-seed0 retried (here through --launcher, the torchrun path)
    blocker.unlink()
    assert main(argv + ["--launcher", sys.executable]) == 0
    printed = capsys.readouterr().out
    assert "[1/2] none-seed0: done earlier, skipped" in printed and "[2/2] smmd-seed0: done in" in printed
    assert {p: p.stat().st_mtime_ns for p in finished} == finished
    smmd_dir = out / "runs" / "smmd-seed0"
    assert not (smmd_dir / "error.txt").exists()
    assert "-m vlm_smmd.cli train" in (smmd_dir / "log.txt").read_text()
    assert "'aux': '" in (smmd_dir / "log.txt").read_text()  # the training loop logged CE / aux parts
    status = json.loads((out / "status.json").read_text())["variants"]
    assert {k: v["status"] for k, v in status.items()} == {"none-seed0": "done", "smmd-seed0": "done"}
    assert "error" not in status["smmd-seed0"]
    rows = {r["group"]: r for r in read_csv(out / "results.csv") if r["figure"] == "exact_match"}
    assert [rows[g]["status"] for g in ("none", "smmd")] == ["ok", "ok"]
    md = (out / "results.md").read_text()
    assert "| none | 1/1 |" in md and "| smmd | 1/1 |" in md and "Failed runs" not in md
    assert (out / "plots" / "test_main_metric.png").read_bytes().startswith(PNG)
    assert (out / "analysis" / "test" / "report.md").is_file()


def test_jobs_run_variants_side_by_side_with_the_thread_plan(tmp_path, monkeypatch, capsys):
    import threading
    import time

    from vlm_smmd.experiments import orchestrate

    running, most, envs, lock = [0], [0], [], threading.Lock()

    def fake_variant(variant, run_dir, spec, launcher, keep_models, env=None):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
            envs.append(env)
        time.sleep(0.2)
        run_dir.mkdir(parents=True, exist_ok=True)
        with lock:
            running[0] -= 1
        if variant.seed == 2:
            raise orchestrate.VariantFailed(run_dir, "training exited with status 1")
        return {"variant": variant.name, "figures": {"test": {"exact_match": 0.5}}}

    monkeypatch.setattr(orchestrate, "run_variant", fake_variant)
    monkeypatch.setattr(orchestrate, "write_results", lambda *a: {
        "results_md": "r.md", "results_csv": "r.csv", "runs_csv": "runs.csv", "reports": {}})
    variants = plan_variants(["none", "smmd"], [], [0, 1, 2])
    for jobs, expected in ((1, 1), (3, 3)):
        out = tmp_path / f"jobs{jobs}"
        (out / "runs").mkdir(parents=True)
        most[0] = 0
        rc = orchestrate.run_compare(out, variants, {}, {}, overrides={}, base_kernel_seed=0, jobs=jobs,
                                     env={"OMP_NUM_THREADS": "1"})
        assert rc == 1  # the seed-2 variants failed, the others ran
        assert most[0] == expected
        status = json.loads((out / "status.json").read_text())["variants"]
        assert sorted(v["status"] for v in status.values()) == ["done"] * 4 + ["failed"] * 2
        assert len(list(out.glob("runs/*/done.json"))) == 4
    assert envs and all(e == {"OMP_NUM_THREADS": "1"} for e in envs)
    assert "FAILED" in capsys.readouterr().out


def test_runs_without_predictions_are_one_note_per_split_and_tiny_p_reads_well(tmp_path):
    # twelve seeds, smmd always ahead: exact sign-flip p = 2/4096 < 0.001
    variants, status = _planted_comparison(tmp_path, {s: 2 for s in range(12)})
    variants = [v for v in variants if v.group != "smmd-shuffled"]
    for v in variants[:5]:  # as in a comparison copied from docs/, which keeps done.json but no predictions
        (tmp_path / "runs" / v.name / "test" / "predictions.jsonl").unlink()
    paths = write_results(tmp_path, variants, status, settings_for(primary={"metric": "exact_match",
                                                                            "split": "test"}))
    md = paths["results_md"].read_text()
    assert "**+0.250 [+0.250, +0.250] p < 0.001**" in md and "p=<" not in md
    notes = [line for line in md.splitlines() if "figures from done.json" in line]
    assert len(notes) == 1, notes
    assert notes[0].startswith("> 5 run(s) (test): figures from done.json") and "and 2 more" in notes[0]
    # the figures still come from done.json: all 12 pairs are tested
    assert paths["tests"]["test"]["smmd vs none"]["figures"]["exact_match"]["n"] == 12
    # the per-digit report names the seeds it pools, so its denominator does not claim all 12
    from vlm_smmd.experiments.results import _seed_list

    report = (tmp_path / "analysis" / "test" / "report.md").read_text()
    for group in ("none", "smmd"):
        kept = [v.seed for v in variants[5:] if v.group == group]
        assert 0 < len(kept) < 12 and f"{group}: {len(kept)} seeds ({_seed_list(kept)})" in report
    assert _seed_list([7, 3, 4, 5, 9, 10]) == "3-5, 7, 9-10"


def test_plots_lead_with_the_declared_primary_endpoint():
    from vlm_smmd.experiments.results import _panel_keys

    cols = {k: (k, k, False) for k in ("exact_match", "point_in_box", "centre_error", "point_x_error")}
    assert _panel_keys(cols, "point_in_box") == ["point_in_box", "exact_match", "centre_error"]
    assert _panel_keys(cols, "centre_error")[0] == "centre_error"
    assert _panel_keys(cols, None) == ["exact_match", "point_in_box", "centre_error"]
    assert _panel_keys(cols, "not_here") == ["exact_match", "point_in_box", "centre_error"]
