import dataclasses

import pytest

from vlm_smmd.cli import main
from vlm_smmd.config import ConfigError, aux_options, load_config, parse_overrides


def write(tmp_path, text):
    path = tmp_path / "run.yaml"
    path.write_text(text)
    return path


def test_yaml_and_overrides(tmp_path):
    path = write(tmp_path, "data_root: d\naux: mmd\nsigmas: [1.0, 3.0]\nlearning_rate: 0.01\nuse_cpu: true\n")
    model, data, loss, train = load_config(path, parse_overrides(["--aux", "ntl_was", "--max_steps=7",
                                                                  "--freeze_vision"]))
    assert loss.aux == "ntl_was" and loss.sigmas == [1.0, 3.0]
    assert train.learning_rate == 0.01 and train.max_steps == 7 and model.freeze_vision is True
    assert data.data_root == "d" and train.remove_unused_columns is False
    assert loss.sigmas == [1.0, 3.0] and "sigmas" not in aux_options(loss)  # ntl_was takes no kernel
    assert aux_options(dataclasses.replace(loss, aux="mmd"))["sigmas"] == (1.0, 3.0)


def test_unknown_key_is_named(tmp_path):
    path = write(tmp_path, "data_root: d\nlearnin_rate: 0.1\n")
    with pytest.raises(ConfigError, match="'learnin_rate'.*did you mean 'learning_rate'"):
        load_config(path)
    with pytest.raises(ConfigError, match="'no_such_key'"):
        load_config(write(tmp_path, "data_root: d\n"), {"no_such_key": 1})


def test_train_command_reports_bad_key(tmp_path, capsys):
    path = write(tmp_path, "data_root: d\nbogus_key: 1\n")
    assert main(["train", str(path)]) == 2
    assert "bogus_key" in capsys.readouterr().err


@pytest.mark.parametrize("text, match", [
    ("data_root: d\naux: l2\n", "aux must be one of"),
    ("dataset: clocks\n", "needs the key 'data_root'"),
    ("dataset: mixture\n", "needs the key 'mixture'"),
    ("data_root: d\nalpha: big\n", "alpha='big' must be 'auto' or a finite number >= 0"),
    ("- a\n- b\n", "mapping"),
])
def test_bad_values(tmp_path, text, match):
    with pytest.raises(ConfigError, match=match):
        load_config(write(tmp_path, text))


def test_shipped_configs_parse():
    from pathlib import Path

    configs = sorted(Path(__file__).parent.parent.joinpath("configs").glob("*.yaml"))
    assert len(configs) >= 4
    for path in configs:
        # GPU configs ask for bf16, which TrainingArguments only accepts here with use_cpu
        load_config(path, {"use_cpu": True})


def test_command_line_values_take_their_field_type(tmp_path):
    overrides = parse_overrides(["--instruction", "Answer: a number", "--system_prompt", "no", "--data_root", "010",
                                 "--eval_split", "none", "--sigmas", "1,2.5", "--freeze_vision", "--max_steps", "7",
                                 "--learning_rate", "1e-3", "--lr_scheduler_type", "cosine"])
    model, data, loss, train = load_config(None, overrides)
    assert data.instruction == "Answer: a number"  # not parsed as a YAML mapping
    assert data.system_prompt == "no" and data.data_root == "010"  # text stays text
    assert data.eval_split is None and loss.sigmas == [1.0, 2.5] and model.freeze_vision is True
    assert train.max_steps == 7 and train.learning_rate == 1e-3 and train.lr_scheduler_type == "cosine"


@pytest.mark.parametrize("text, match", [
    ("data_root: d\nfreeze_vision: maybe\n", "freeze_vision: expected true or false"),
    ("data_root: d\nmax_steps: 1.5\n", "max_steps: expected an integer"),
    ("data_root: d\nsystem_prompt: no\n", "system_prompt: expected text"),
    ("data_root: d\nsigmas: [1, x]\n", "sigmas: expected a number"),
])
def test_yaml_values_of_the_wrong_type_name_the_key(tmp_path, text, match):
    with pytest.raises(ConfigError, match=match):
        load_config(write(tmp_path, text))


def test_quoted_yaml_booleans_are_read_as_booleans(tmp_path):
    model, *_ = load_config(write(tmp_path, 'data_root: d\nfreeze_vision: "false"\nlora: "yes"\n'))
    assert model.freeze_vision is False and model.lora is True


def test_mapping_keys_are_parsed_once_into_typed_values(tmp_path):
    from vlm_smmd.config import DataArguments, check_config

    path = tmp_path / "c.yaml"
    path.write_text("dataset: arithmetic\ndata_root: d\nsynthesize: arithmetic\nsynthesize_options: {digits: 2}\n")
    _, data_args, _, _ = check_config(path)
    assert data_args.synthesize_options == {"digits": 2}
    # text set later (an older caller, a run_config.json value) is parsed on assignment, never kept as text
    data_args.reader_options = '{"a": 1}'
    assert data_args.reader_options == {"a": 1}
    mixed = DataArguments(dataset="mixture", mixture='[{"name": "clocks", "root": "r"}]')
    assert mixed.mixture == [{"name": "clocks", "root": "r"}]
    assert dataclasses.replace(mixed).mixture == mixed.mixture


@pytest.mark.parametrize("override, message", [
    ({"synthesize_options": "{digits: [1"}, "--synthesize_options: not a mapping"),
    ({"synthesize_options": "[1, 2]"}, "synthesize_options: expected a mapping"),
    ({"synthesize_options": "{digitz: 2}"}, "unknown key 'digitz' in synthesize_options of synthesize: arithmetic"),
    ({"dataset": "mixture", "mixture": "{name: clocks}"}, "mixture: expected a list of sources"),
])
def test_bad_mapping_values_are_one_line_errors_naming_the_key(tmp_path, override, message):
    from vlm_smmd.config import check_config

    path = tmp_path / "c.yaml"
    path.write_text("dataset: arithmetic\ndata_root: d\nsynthesize: arithmetic\n")
    with pytest.raises(ConfigError, match=message) as caught:
        check_config(path, override)
    assert "\n" not in str(caught.value)


def test_every_synthetic_kind_row_names_a_writer_a_layout_and_its_options():
    import inspect

    from vlm_smmd.data.tasks import SET_BY_RECIPE, SYNTH_KINDS, TASKS, synth_options, synth_writer

    for name, row in SYNTH_KINDS.items():
        assert row.layout in TASKS, name
        params = inspect.signature(synth_writer(name)).parameters
        wanted = {"layout", "split"} if row.per_split else {"num", "seed"}
        assert wanted <= set(params), name  # the contract its row says it follows
        options = synth_options(name)
        assert options and not set(options) & SET_BY_RECIPE, name
        if row.size is not None:  # synthesize_size sets `size`: the writer takes it, the user only per split
            assert "size" in params and ("size" in options) == row.per_split, name


@pytest.mark.parametrize("written", [{"coords": "norm1000"}, '{"coords": "norm1000"}'])
def test_eval_reads_reader_options_of_run_configs_typed_or_as_old_text(tmp_path, written):
    import json

    from vlm_smmd.evaluation import training_data, training_reader_options

    (tmp_path / "run_config.json").write_text(json.dumps({"dataset": "refcoco", "reader_options": written}))
    assert training_reader_options(tmp_path) == {"refcoco": {"coords": "norm1000"}}
    mixture = [{"name": "clocks", "root": "r", "split": "s"}]
    for value in (mixture, json.dumps(mixture)):
        (tmp_path / "run_config.json").write_text(json.dumps({"dataset": "mixture", "mixture": value}))
        assert training_data(tmp_path) == [("clocks", "r", "s")]


def test_a_resume_compares_old_json_text_settings_with_the_typed_values():
    from vlm_smmd.training.resume import changes

    old = {"synthesize_options": '{"digits": 2}', "reader_options": None}
    assert changes(old, {"synthesize_options": {"digits": 2}, "reader_options": None}) == ({}, {})
    refused, _ = changes(old, {"synthesize_options": {"digits": 3}, "reader_options": None})
    assert refused == {"synthesize_options": ({"digits": 2}, {"digits": 3})}
