"""EvalArguments, the single list of an evaluation's settings: every field is an eval flag, and compare's
settings (variant.json) carry every field to the worker and back."""

from __future__ import annotations

import dataclasses

import pytest

from vlm_smmd.commands.evaluate import build_parser, eval_arguments, flag_fields, parse
from vlm_smmd.evaluation import EvalArguments, evaluate_model
from vlm_smmd.experiments.orchestrate import eval_settings, read_eval_settings
from vlm_smmd.experiments.store import read_json, write_json

# a value unlike the default for each annotation the fields use; a field of a new type fails here until
# an example is added, so no field escapes the round trip
EXAMPLES = {"str": "val", "int": 3, "int | None": 3, "str | None": "given", "bool": True,
            "tuple[tuple[str, str, str], ...]": (("clocks", "/data/clocks", "train"),),
            "dict[str, dict] | None": {"refcoco": {"coordinates": "pixel"}}}


def _changed() -> EvalArguments:
    values = {f.name: EXAMPLES[f.type] for f in dataclasses.fields(EvalArguments)}
    arguments = EvalArguments(**values)
    same = [f.name for f in dataclasses.fields(EvalArguments) if getattr(arguments, f.name) == f.default]
    assert not same, f"the examples leave {same} at their defaults"
    return arguments


def test_every_field_but_the_flagless_is_an_eval_flag():
    dests = {action.dest for action in build_parser()._actions}
    missing = [name for name in flag_fields() if name not in dests]
    assert not missing, f"EvalArguments fields without an eval flag: {missing}"
    flagless = [f.name for f in dataclasses.fields(EvalArguments) if f.name not in flag_fields()]
    assert flagless == ["reader_options"]


def test_eval_flags_reach_the_arguments(tmp_path):
    (tmp_path / "d").mkdir()
    args = parse(["--model", "tiny", "--data", f"clocks:{tmp_path / 'd'}", "--out", str(tmp_path / "o"),
                  "--split", "val", "--limit", "4", "--batch-size", "2", "--max-new-tokens", "5",
                  "--instruction", "Say it.", "--min-pixels", "7", "--max-pixels", "9", "--on-error", "skip",
                  "--max-image-pixels", "11", "--device", "cpu", "--dtype", "bf16", "--resume",
                  "--train-data", f"clocks:{tmp_path / 'd'}:train"])
    arguments = eval_arguments(args, system_prompt="sys")
    assert arguments == EvalArguments(split="val", limit=4, batch_size=2, max_new_tokens=5, system_prompt="sys",
                                      instruction="Say it.", min_pixels=7, max_pixels=9, on_error="skip",
                                      max_image_pixels=11, device="cpu", dtype="bf16", resume=True,
                                      train_data=(("clocks", str(tmp_path / "d"), "train"),))


def test_compare_settings_round_trip_through_variant_json(tmp_path):
    arguments = _changed()
    spec = tmp_path / "variant.json"
    write_json(spec, {"eval": eval_settings([("clocks", tmp_path / "d")], ["val", "test"], arguments)})
    data, splits, back = read_eval_settings(read_json(spec)["eval"], spec)
    assert (data, splits, back) == ([("clocks", str(tmp_path / "d"))], ["val", "test"], arguments)


def test_an_unknown_setting_is_refused_naming_the_file(tmp_path):
    settings = eval_settings([("clocks", "d")], ["test"], EvalArguments())
    with pytest.raises(ValueError, match=r"variant\.json: unknown evaluation setting\(s\) temperature"):
        read_eval_settings({**settings, "temperature": 0.5}, tmp_path / "variant.json")
    with pytest.raises(ValueError, match=r"variant\.json: the eval settings need"):
        read_eval_settings({k: v for k, v in settings.items() if k != "splits"}, tmp_path / "variant.json")


def test_evaluate_model_takes_the_arguments_or_their_fields_not_both(tmp_path):
    with pytest.raises(TypeError, match="not both"):
        evaluate_model("tiny", ["clocks:x"], tmp_path, EvalArguments(), limit=2)
    with pytest.raises(TypeError):
        evaluate_model("tiny", ["clocks:x"], tmp_path, temperature=0.5)
