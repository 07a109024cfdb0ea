"""`compare --selection`: the confirmation runs each loss at the values its selection.json chose, on fresh seeds."""

import json
from pathlib import Path

import pytest

from vlm_smmd.experiments.selection import STAGE, SelectionError, confirmation_overrides, load_selection
from vlm_smmd.experiments.store import Status
from vlm_smmd.experiments.variants import plan_variants, variant_overrides
from vlm_smmd.run_record import file_sha256

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "configs" / "tiny_cpu_clock.yaml"


def _row(value, mean, seeds=(0, 1)):
    return {"value": value, "mean": mean, "std": 0.05, "n": len(seeds), "scores": {str(s): mean for s in seeds}}


def selection_file(path, *, sha=None, **losses):
    """A selection.json as compare --grid writes it, on CONFIG unless `sha` says otherwise; `losses` replace
    the default ones (None: leave that loss out)."""
    table = {
        "none": {"table": [_row({}, 0.40)], "chosen": {}},
        "smmd": {"table": [_row({"aux_lambda": "0.3"}, 0.61), _row({"aux_lambda": "1"}, 0.55)],
                 "chosen": {"aux_lambda": "0.3"}},
        "dist2": {"table": [_row({"aux_lambda": "0.3"}, 0.42), _row({"aux_lambda": "1"}, 0.47)],
                  "chosen": {"aux_lambda": "1"}},
    }
    for loss, entry in losses.items():
        if entry is None:
            table.pop(loss)
        else:
            table[loss] = entry
    data = {"stage": STAGE, "split": "val", "metric": "exact_match", "lower_is_better": False, "seeds": [0, 1],
            "config": str(CONFIG), "config_sha256": sha or file_sha256(CONFIG), "overrides": {"max_steps": "2"},
            "losses": table}
    path.write_text(json.dumps(data))
    return path


def test_each_loss_runs_at_its_own_chosen_values_under_its_plain_name(tmp_path):
    chosen = {"none": {}, "smmd": {"aux_lambda": "0.3"}, "dist2": {"aux_lambda": "1"}}
    variants = plan_variants(["none", "smmd", "dist2"], ["shuffled"], [5, 6], chosen=chosen)
    # plain group names: the pairing against CE only (same seed) works as in any comparison
    assert [v.name for v in variants[:4]] == ["none-seed5", "smmd-seed5", "dist2-seed5", "smmd-shuffled-seed5"]
    base = {"max_steps": 2, "aux_lambda": 9.0}
    lambdas = {v.name: variant_overrides(base, v, tmp_path, base_kernel_seed=42).get("aux_lambda") for v in variants}
    assert lambdas == {"none-seed5": 9.0, "smmd-seed5": "0.3", "dist2-seed5": "1", "smmd-shuffled-seed5": "0.3",
                       "none-seed6": 9.0, "smmd-seed6": "0.3", "dist2-seed6": "1", "smmd-shuffled-seed6": "0.3"}
    with pytest.raises(ValueError, match="no chosen values for 'mmd'"):
        plan_variants(["mmd"], [], [5], chosen=chosen)
    with pytest.raises(ValueError, match="exclude each other"):
        plan_variants(["smmd"], [], [5], {"aux_lambda": ["1"]}, chosen=chosen)


def test_confirmation_refuses_what_is_not_a_fair_confirmation(tmp_path):
    path = selection_file(tmp_path / "selection.json")
    data = load_selection(path)
    sha = file_sha256(CONFIG)
    got = confirmation_overrides(data, path, ["none", "smmd"], ["random"], [5, 6], [0, 1, 2], sha)
    assert got == {"none": {}, "smmd": {"aux_lambda": "0.3"}}

    def refused(*, auxes=("none", "smmd"), controls=(), seeds=(5,), dev=(0, 1), config_sha=sha, data=data):
        with pytest.raises(SelectionError) as e:
            confirmation_overrides(data, path, list(auxes), list(controls), list(seeds), list(dev), config_sha)
        assert "\n" not in str(e.value)
        return str(e.value)

    # a development seed, declared or one the selection chose on, is no fresh seed
    assert refused(seeds=(5, 2), dev=(0, 1, 2)).startswith("--seeds 2: not fresh")
    assert "--seeds 1: not fresh" in refused(seeds=(1, 7), dev=())
    # a loss with no chosen value, or one the file does not list: refused naming the loss and the file
    incomplete = load_selection(selection_file(tmp_path / "s2.json", dist2={
        "table": [_row({"aux_lambda": "1"}, 0.4, seeds=(0,))], "chosen": None, "why": "incomplete: aux_lambda=1 has 1 of 2"}))
    text = refused(auxes=("dist2",), data=incomplete)
    assert text.startswith(f"{path}: 'dist2' has no chosen value (incomplete: aux_lambda=1 has 1 of 2)")
    text = refused(auxes=("none", "mmd"))
    assert str(path) in text and "lists no 'mmd'" in text
    # control kernels take smmd's values: without smmd in the file they have none
    text = refused(auxes=("none",), controls=("shuffled",), data=load_selection(selection_file(tmp_path / "s3.json",
                                                                                               smmd=None)))
    assert "lists no 'smmd' (whose values the control kernels shuffled take)" in text
    # another config file (its sha256)
    text = refused(config_sha="f" * 64)
    assert text.startswith(f"{path}: chosen on another config file") and "ffffffffffff" in text


def test_ce_left_out_of_a_selection_over_loss_options_runs_at_the_config_values(tmp_path):
    # a grid over loss options (aux_lambda) does not change CE, so a selection may leave CE out
    path = selection_file(tmp_path / "selection.json", none=None, dist2=None)
    data = load_selection(path)
    sha = file_sha256(CONFIG)
    got = confirmation_overrides(data, path, ["none", "smmd"], [], [5], [0, 1], sha, loss_options=["aux_lambda"])
    assert got == {"none": {}, "smmd": {"aux_lambda": "0.3"}}
    # a grid over a key that changes CE too (learning_rate) leaves CE's value unknown: refused
    other = load_selection(selection_file(tmp_path / "lr.json", none=None, dist2=None, smmd={
        "table": [_row({"learning_rate": "0.001"}, 0.5), _row({"learning_rate": "0.01"}, 0.6)],
        "chosen": {"learning_rate": "0.01"}}))
    for sel, options in [(other, ["aux_lambda"]), (data, [])]:
        with pytest.raises(SelectionError, match="lists no 'none'"):
            confirmation_overrides(sel, path, ["none", "smmd"], [], [5], [0, 1], sha, loss_options=options)


@pytest.mark.parametrize("content, words", [
    (None, "no such selection file"),
    ("{not json", "not a JSON selection file"),
    (json.dumps({"stage": "comparison", "losses": {}}), "not a selection file (stage 'comparison'"),
    (json.dumps({"stage": STAGE, "losses": {"smmd": {"chosen": None}}, "seeds": [0]}), "malformed: 'losses'"),
    (json.dumps({"stage": STAGE, "losses": {"smmd": {"table": [], "chosen": {"aux_lambda": 1}}}, "seeds": [0]}),
     "malformed: smmd's chosen"),
    (json.dumps({"stage": STAGE, "losses": {}, "seeds": [0]}), "records no config_sha256"),
])
def test_a_selection_file_that_cannot_be_used_is_one_line_naming_it(tmp_path, content, words):
    path = tmp_path / "selection.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(SelectionError) as e:
        load_selection(path)
    assert str(e.value).startswith(f"{path}: ") and words in str(e.value) and "\n" not in str(e.value)


def _parse(tmp_path, *extra):
    from vlm_smmd.commands.compare import parse

    return parse([str(CONFIG), "--out", str(tmp_path / "c"), "--kernel-controls", "", *extra])


def test_compare_selection_flags(tmp_path):
    from vlm_smmd.commands import UsageError

    path = selection_file(tmp_path / "selection.json")
    args = _parse(tmp_path, "--selection", str(path), "--seeds", "5,6", "--dev-seeds", "0,1,2")
    assert args.auxes == ["none", "smmd", "dist2"]  # by default the losses the file lists
    assert args.chosen == {"none": {}, "smmd": {"aux_lambda": "0.3"}, "dist2": {"aux_lambda": "1"}}
    assert _parse(tmp_path, "--selection", str(path), "--seeds", "5", "--aux", "none,smmd").chosen == {
        "none": {}, "smmd": {"aux_lambda": "0.3"}}
    assert _parse(tmp_path, "--seeds", "5").chosen is None  # a plain compare
    # a selection of SMMD's weight alone: the confirmation still runs CE, at the config values
    smmd_only = selection_file(tmp_path / "smmd_only.json", none=None, dist2=None)
    args = _parse(tmp_path, "--selection", str(smmd_only), "--seeds", "5")
    assert args.auxes == ["none", "smmd"] and args.chosen == {"none": {}, "smmd": {"aux_lambda": "0.3"}}
    other = selection_file(tmp_path / "other.json", sha="0" * 64)
    for extra, words in [
        (["--seeds", "5,1"], "--seeds 1: not fresh"),
        (["--seeds", "5", "--dev-seeds", "5"], "--seeds 5: not fresh"),
        (["--seeds", "5", "--aux", "none,smooth"], "lists no 'smooth'"),
        (["--seeds", "5", "--aux_lambda", "2"], "--aux_lambda: "),
        (["--seeds", "5", "--selection", str(other)], "chosen on another config file (sha256 000000000000"),
        (["--seeds", "5", "--selection", str(tmp_path / "missing.json")], "missing.json: no such selection file"),
    ]:
        argv = extra if "--selection" in extra else ["--selection", str(path), *extra]
        with pytest.raises(UsageError) as e:
            _parse(tmp_path, *argv)
        assert words in str(e.value) and "\n" not in str(e.value), (extra, str(e.value))
    with pytest.raises(SystemExit):  # argparse's usage error: the two stages exclude each other
        _parse(tmp_path, "--selection", str(path), "--grid", "aux_lambda=0.3,1", "--seeds", "0,1",
               "--dev-seeds", "0,1")


def test_write_selection_records_the_config_it_chose_on(tmp_path):
    from vlm_smmd.experiments.selection import write_selection

    variants = plan_variants(["smmd"], [], [0], {"aux_lambda": ["1"]}, ungridded=["aux_lambda"])
    Status(tmp_path / "status.json", [v.name for v in variants])
    settings = {"primary": {"metric": "exact_match"}, "config": "c.yaml", "config_sha256": "ab" * 32,
                "overrides": {"max_steps": "2"}, "eval": {"splits": ["val"]}}
    got = write_selection(tmp_path, variants, settings, dev_seeds=[0])
    assert (got["config"], got["config_sha256"], got["overrides"]) == ("c.yaml", "ab" * 32, {"max_steps": "2"})
    assert json.loads((tmp_path / "selection.json").read_text())["config_sha256"] == "ab" * 32


def test_the_page_shows_the_selection_table_apart_marked_not_evidence(tmp_path):
    from vlm_smmd.experiments.results import write_results

    sel_path = selection_file(tmp_path / "selection.json", dist2={
        "table": [_row({"aux_lambda": "1"}, 0.47)], "chosen": None, "why": "incomplete: aux_lambda=3 has 1 of 2"})
    selection = json.loads(sel_path.read_text())
    chosen = {"none": {}, "smmd": {"aux_lambda": "0.3"}}
    variants = plan_variants(["none", "smmd"], [], [5, 6], chosen=chosen)
    out = tmp_path / "out"
    out.mkdir()
    status = Status(out / "status.json", [v.name for v in variants])
    targets = ["3:15", "10:07", "6:30", "12:45"]
    for v, right in zip(variants, (2, 3, 1, 4)):
        run_dir = out / "runs" / v.name / "test"
        run_dir.mkdir(parents=True)
        predictions = targets[:right] + ["1:00"] * (4 - right)
        run_dir.joinpath("predictions.jsonl").write_text("".join(json.dumps(
            {"id": str(i), "source": "clocks", "question": "q", "prediction": p, "target": t, "targets": [t]}) + "\n"
            for i, (p, t) in enumerate(zip(predictions, targets))))
        (out / "runs" / v.name / "done.json").write_text(json.dumps({"variant": v.name, "figures": {}}))
        status.set(v.name, status="done", seconds=1.0)
    settings = {"config": str(CONFIG), "config_sha256": file_sha256(CONFIG), "overrides": {"max_steps": "3"},
                "eval": {"splits": ["test"], "limit": None, "data": [["clocks", "/d"]], "max_new_tokens": 8},
                "primary": {"metric": "exact_match", "split": "test"},
                "confirmation": {"file": str(sel_path), "sha256": file_sha256(sel_path),
                                 **{k: selection[k] for k in ("metric", "split", "seeds", "lower_is_better",
                                                              "overrides", "losses")}, "chosen": chosen}}
    md = write_results(out, variants, status, settings)["results_md"].read_text()
    primary, rest = md.split("## Primary endpoint", 1)[1].split("## Selection stage (not evidence)", 1)
    assert "smmd vs none" in primary  # the confirmation's own table comes first, the chosen values beside it
    assert "`none` the config values; `smmd` aux_lambda=0.3." in primary
    section = rest.split("## Exploratory figures", 1)[0]
    assert "Not evidence" in section and "development seeds 0, 1" in section
    assert "this confirmation's differ in `max_steps`" in section  # chosen at max_steps 2, confirmed at 3
    rows = [line for line in section.splitlines() if line.startswith("| ") and "loss" not in line]
    assert rows == ["| none | (config values) | 0.400 | 0.050 | 2 | **chosen** |",
                    "| smmd | aux_lambda=0.3 | 0.610 | 0.050 | 2 | **chosen** |",
                    "| smmd | aux_lambda=1 | 0.550 | 0.050 | 2 |  |",
                    "| dist2 | aux_lambda=1 | 0.470 | 0.050 | 2 |  |",
                    "| dist2 | – |  |  |  | none chosen: incomplete: aux_lambda=3 has 1 of 2 |"]
    assert md.index("**Confirmation** on fresh seeds") < md.index("## Primary endpoint")


def test_a_resume_with_another_selection_file_is_refused(tmp_path, monkeypatch, capsys):
    from vlm_smmd.cli import main
    from vlm_smmd.experiments import orchestrate

    seen = {}

    def fake_run_compare(out, variants, settings, spec_base, **kw):
        seen.update(variants=variants, settings=settings)
        return 0

    monkeypatch.setattr(orchestrate, "run_compare", fake_run_compare)
    (tmp_path / "a").mkdir()
    first = selection_file(tmp_path / "a" / "selection.json")
    out = tmp_path / "out"
    argv = [str(CONFIG), "--out", str(out), "--aux", "none,smmd", "--kernel-controls", "", "--seeds", "5",
            "--data_root", str(tmp_path / "d"), "--synthesize_num", "12", "--synthesize_size", "64",
            "--max_eval_samples", "2", "--eval-limit", "2"]
    assert main(["compare", *argv, "--selection", str(first)]) == 0
    assert "confirmation of " in capsys.readouterr().out
    stored = json.loads((out / "compare.json").read_text())["selection"]
    assert stored == {"file": str(first.resolve()), "sha256": file_sha256(first)}
    assert [(v.name, v.overrides) for v in seen["variants"]] == [("none-seed5", ()),
                                                                ("smmd-seed5", (("aux_lambda", "0.3"),))]
    assert seen["settings"]["confirmation"]["chosen"] == {"none": {}, "smmd": {"aux_lambda": "0.3"}}
    # the same folder with another selection (smmd chose 1): refused before any run
    (tmp_path / "b").mkdir()
    second = selection_file(tmp_path / "b" / "selection.json", smmd={
        "table": [_row({"aux_lambda": "1"}, 0.5)], "chosen": {"aux_lambda": "1"}})
    seen.clear()
    assert main(["compare", *argv, "--selection", str(second)]) == 2
    err = capsys.readouterr().err
    assert "other settings (selection differ" in err and not seen
    assert main(["compare", *argv]) == 2  # nor resumed as a plain compare at the config's weights
    assert "other settings (selection differ" in capsys.readouterr().err
