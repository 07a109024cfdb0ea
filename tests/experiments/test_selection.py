"""`compare --grid`: grid parsing, variant expansion, and the per-loss choice on the validation table."""

from pathlib import Path

import pytest

from vlm_smmd.experiments.selection import STAGE, select
from vlm_smmd.experiments.variants import GridError, parse_grid, plan_variants, variant_overrides

REPO = Path(__file__).resolve().parents[2]


def _mean(xs):
    return sum(xs) / len(xs)


def test_select_picks_best_mean_ties_to_smaller_and_lower_is_better():
    seeds = [0, 1, 2]
    runs = {  # loss -> lambda -> per-seed exact match
        "smmd": {"0.1": [0.2, 0.4, 0.3], "0.3": [0.5, 0.6, 0.7], "1": [0.6, 0.5, 0.7], "3": [0.1, 0.2, 0.3]},
        "dist2": {"3": [0.4, 0.4, 0.4], "0.1": [0.1, 0.1, 0.1], "1": [0.5, 0.3, 0.4]},  # 1 ties 3: 1 is smaller
    }
    scores = {loss: {(("aux_lambda", v),): dict(zip(seeds, xs)) for v, xs in points.items()}
              for loss, points in runs.items()}
    got = select(scores, seeds, lower_is_better=False)
    # independent check: the best mean by brute force, smaller value on a tie
    for loss, points in runs.items():
        best = max(points, key=lambda v: (round(_mean(points[v]), 12), -float(v)))
        assert got[loss]["chosen"] == {"aux_lambda": best}
    assert got["smmd"]["chosen"] == {"aux_lambda": "0.3"}  # 0.3 and 1 tie at 0.6: the smaller wins
    assert got["dist2"]["chosen"] == {"aux_lambda": "1"}
    row = got["smmd"]["table"][1]
    assert row["value"] == {"aux_lambda": "0.3"} and row["n"] == 3
    assert row["mean"] == pytest.approx(0.6) and row["std"] == pytest.approx(0.1)
    assert [r["value"]["aux_lambda"] for r in got["dist2"]["table"]] == ["3", "0.1", "1"]  # the whole table, as run

    # a lower-is-better endpoint (mae): the smallest mean wins, ties again to the smaller weight
    mae = {"smmd": {(("aux_lambda", "1"),): {0: 2.0, 1: 4.0}, (("aux_lambda", "0.3"),): {0: 3.0, 1: 3.0},
                    (("aux_lambda", "3"),): {0: 5.0, 1: 1.0}, (("aux_lambda", "0.1"),): {0: 9.0, 1: 9.0}}}
    assert select(mae, [0, 1], lower_is_better=True)["smmd"]["chosen"] == {"aux_lambda": "0.3"}
    mae["smmd"][(("aux_lambda", "0.3"),)] = {0: 3.5, 1: 3.0}
    assert select(mae, [0, 1], lower_is_better=True)["smmd"]["chosen"] == {"aux_lambda": "1"}


def test_select_refuses_an_incomplete_grid():
    scores = {"smmd": {(("aux_lambda", "0.1"),): {0: 0.9, 1: None}, (("aux_lambda", "1"),): {0: 0.1, 1: 0.2}}}
    got = select(scores, [0, 1], lower_is_better=False)["smmd"]
    assert got["chosen"] is None and "aux_lambda=0.1 has 1 of 2" in got["why"]
    assert STAGE == "selection: not evidence"


def test_parse_grid_and_variant_expansion(tmp_path):
    grid = parse_grid(["aux_lambda=0.1,0.3", "--squash=3,9"])
    assert grid == {"aux_lambda": ["0.1", "0.3"], "squash": ["3", "9"]}
    variants = plan_variants(["none", "smmd"], ["shuffled"], [0, 1], {"aux_lambda": ["0.1", "1"]},
                             ungridded=["aux_lambda"])
    assert [v.name for v in variants[:5]] == [
        "none-seed0", "smmd@aux_lambda=0.1-seed0", "smmd@aux_lambda=1-seed0",
        "smmd-shuffled@aux_lambda=0.1-seed0", "smmd-shuffled@aux_lambda=1-seed0"]
    assert len(variants) == 10 and variants[6].seed == 1
    o = variant_overrides({"max_steps": 5}, variants[2], tmp_path, base_kernel_seed=42)
    assert (o["aux_lambda"], o["aux"], o["seed"], o["max_steps"]) == ("1", "smmd", 0, 5)
    # two keys: the product, and the baseline gridded where the key is no loss option
    two = plan_variants(["none"], [], [0], {"aux_lambda": ["1", "3"], "learning_rate": ["1e-3", "1e-4"]},
                        ungridded=["aux_lambda"])
    assert [v.group for v in two] == ["none@learning_rate=1e-3", "none@learning_rate=1e-4"]
    for bad, words in [("aux_lambda", "expected KEY=V1"), ("aux_lambda=", "expected KEY=V1"),
                       ("seed=1,2", "use --seeds"), ("aux_lambda=1,1", "given twice")]:
        with pytest.raises(GridError, match=words):
            parse_grid([bad])
    with pytest.raises(GridError, match="has a grid already"):
        parse_grid(["aux_lambda=1", "aux_lambda=2"])


def test_compare_grid_flags(tmp_path):
    from vlm_smmd.commands import UsageError
    from vlm_smmd.commands.compare import parse

    config = str(REPO / "configs" / "tiny_cpu_clock.yaml")
    base = [config, "--out", str(tmp_path / "c"), "--aux", "none,smmd", "--kernel-controls", ""]
    setting = ["--test_splits", "[test,val]", "--primary_metric", "clock_exact"]
    args = parse([*base, "--grid", "aux_lambda=0.3,1", "--dev-seeds", "0,1,2", *setting])
    assert args.grid_values == {"aux_lambda": ["0.3", "1"]}
    for extra, words in [
        (["--grid", "aux_lamda=0.3,1"], "did you mean 'aux_lambda'"),
        (["--grid", "aux_lambda=0.3,big"], "aux_lambda: expected a number, got 'big'"),
        (["--grid", "aux_lambda=1,3", "--aux_lambda", "2"], "also given as --aux_lambda"),
        (["--grid", "aux_lambda=1,3", "--dev-seeds", "0"], "seed(s) 1, 2 are not among them"),
    ]:
        with pytest.raises(UsageError) as e:
            parse([*base, *extra, *setting])
        assert words in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(UsageError, match="'val' among test_splits"):
        parse([*base, "--grid", "aux_lambda=1,3", "--dev-seeds", "0,1,2"])


def _plant(out, variant, predictions, targets):
    """A finished run as compare leaves it: val/predictions.jsonl and done.json."""
    import json

    run_dir = out / "runs" / variant.name
    (run_dir / "val").mkdir(parents=True)
    (run_dir / "val" / "predictions.jsonl").write_text("".join(
        json.dumps({"id": str(i), "source": "clocks", "question": "q", "prediction": p, "target": t,
                    "targets": [t]}) + "\n" for i, (p, t) in enumerate(zip(predictions, targets))))
    (run_dir / "done.json").write_text(json.dumps({"variant": variant.name, "figures": {}}))


def test_write_selection_reads_the_val_runs_of_dev_seeds(tmp_path):
    import json

    from vlm_smmd.experiments.orchestrate import write_page
    from vlm_smmd.experiments.selection import write_selection
    from vlm_smmd.experiments.store import Status

    variants = plan_variants(["none", "smmd"], [], [0, 1, 7], {"aux_lambda": ["1", "0.3"]}, ungridded=["aux_lambda"])
    targets = ["3:15", "10:07", "6:30", "12:45"]
    right = {  # per run, how many of the 4 it answers exactly
        "none-seed0": 1, "none-seed1": 2, "smmd@aux_lambda=1-seed0": 3, "smmd@aux_lambda=1-seed1": 2,
        "smmd@aux_lambda=0.3-seed0": 2, "smmd@aux_lambda=0.3-seed1": 3,  # 0.3 ties 1 on exact match
        "smmd@aux_lambda=0.3-seed7": 0, "smmd@aux_lambda=1-seed7": 4, "none-seed7": 4}  # seed 7: not a dev seed
    far = {"smmd@aux_lambda=0.3-seed0"}
    status = Status(tmp_path / "status.json", [v.name for v in variants])
    for v in variants:
        k = right[v.name]
        miss = "1:45" if v.name in far else "12:50"
        # a miss: 12:45 read as 12:50 (or 1:45), the others with a last digit 9 (10:07 as 10:09)
        _plant(tmp_path, v, targets[:k] + [miss if t == "12:45" else t[:-1] + "9" for t in targets[k:]], targets)
        status.set(v.name, status="done", seconds=1.0)
    settings = {"primary": {"metric": "exact_match", "split": "val"}, "config": "c.yaml", "config_sha256": "0" * 64,
                "overrides": {}, "dev_seeds": [0, 1], "grid": {"aux_lambda": ["1", "0.3"]},
                "eval": {"splits": ["val"], "limit": None, "data": [["clocks", "/d"]], "max_new_tokens": 8}}
    paths = write_page(tmp_path, variants, status, settings)  # the page says which stage it is
    md = (tmp_path / "results.md").read_text()
    assert "**Selection stage: not evidence.**" in md
    page = json.loads((tmp_path / "selection.json").read_text())  # the page writes the choice beside it
    got = write_selection(tmp_path, variants, settings, dev_seeds=[0, 1])
    assert got == json.loads((tmp_path / "selection.json").read_text()) == page
    # the page shows the choice and its whole table, and its figures are of the seeds it ran (all development
    # seeds in a real --grid), not empty tables that leave every dev seed out; it tests nothing
    choice = md.split("## The choice on `val` (not evidence)", 1)[1].split("##", 1)[0]
    assert "| smmd | aux_lambda=0.3 | 0.625 | 0.177 | 2 | **chosen** |" in choice
    assert "| smmd | aux_lambda=1 | 0.625 | 0.177 | 2 |  |" in choice
    assert "## Primary endpoint" not in md and " vs " not in md.split("## Exploratory figures", 1)[1]
    assert "| none | 2/3 | 0.375 ± 0.177 |" in md  # dev seeds 0 and 1: 1 and 2 of 4 (seed 7 left out)
    assert "every aggregate below is of development seeds 0, 1" in md
    assert paths["tests"] == {"val": {}} and "val_main_metric.png" in {p.name for p in paths["plots"]}
    assert not any("paired" in p.name for p in paths["plots"]) and paths["reports"] == {}  # no pooled report
    assert got["stage"] == "selection: not evidence" and got["seeds"] == [0, 1] and not got["lower_is_better"]
    smmd = got["losses"]["smmd"]
    assert [r["value"] for r in smmd["table"]] == [{"aux_lambda": "1"}, {"aux_lambda": "0.3"}]
    assert [r["mean"] for r in smmd["table"]] == [pytest.approx(0.625), pytest.approx(0.625)]
    assert smmd["chosen"] == {"aux_lambda": "0.3"}  # tie on the dev seeds; seed 7 would have picked 1
    assert got["losses"]["none"]["chosen"] == {}  # the CE-only group is not gridded
    # a lower-is-better endpoint: the time gap, where 0.3's far miss makes it worse
    gap = write_selection(tmp_path, variants, {"primary": {"metric": "mean_time_gap_min"}}, dev_seeds=[0, 1])
    assert gap["lower_is_better"] and gap["losses"]["smmd"]["chosen"] == {"aux_lambda": "1"}


def test_compare_grid_prints_the_choice_its_page_wrote(tmp_path, monkeypatch, capsys):
    import json

    from vlm_smmd.cli import main
    from vlm_smmd.experiments import orchestrate
    right = {"none-seed0": 1, "none-seed1": 1, "smmd@aux_lambda=0.3-seed0": 1, "smmd@aux_lambda=0.3-seed1": 2,
             "smmd@aux_lambda=1-seed0": 3, "smmd@aux_lambda=1-seed1": 3}
    targets = ["3:15", "10:07", "6:30", "12:45"]

    def fake_run_compare(out, variants, settings, spec_base, **kw):  # the runs finish; the page is written
        from vlm_smmd.experiments.store import Status

        status = Status(out / "status.json", [v.name for v in variants])
        for v in variants:
            _plant(out, v, targets[:right[v.name]] + ["1:00"] * (4 - right[v.name]), targets)
            status.set(v.name, status="done", seconds=1.0)
        orchestrate.write_page(out, variants, status, settings)
        return 0

    monkeypatch.setattr(orchestrate, "run_compare", fake_run_compare)
    out = tmp_path / "select"
    assert main(["compare", str(REPO / "configs" / "tiny_cpu_clock.yaml"), "--out", str(out), "--aux", "none,smmd",
                 "--kernel-controls", "", "--grid", "aux_lambda=0.3,1", "--seeds", "0,1", "--dev-seeds", "0,1",
                 "--test_splits", "[val]", "--primary_metric", "clock_exact", "--data_root", str(tmp_path / "d"),
                 "--synthesize_num", "12", "--synthesize_size", "64",
                 "--synthesize_options", '{splits: "train=0.5,val=0.5"}']) == 0
    printed = capsys.readouterr().out
    assert "compare: 6 variants (3 groups x 2 seeds)" in printed
    assert f"selection (not evidence) in {out / 'selection.json'}: smmd {{'aux_lambda': '1'}}" in printed
    assert json.loads((out / "selection.json").read_text())["losses"]["smmd"]["chosen"] == {"aux_lambda": "1"}
    assert "| smmd | aux_lambda=1 | 0.750 | 0.000 | 2 | **chosen** |" in (out / "results.md").read_text()
