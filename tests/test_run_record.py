"""RunRecord: the one type that writes and reads run_config.json."""
import json

import pytest

from vlm_smmd.run_record import RunRecord, RunRecordError


def _record() -> RunRecord:
    return RunRecord(settings={"model_name_or_path": "scratch", "dataset": "clocks", "data_root": "/d/clocks",
                               "instruction": "Answer in H:MM format.", "system_prompt": "", "aux": "smmd",
                               "mixture": None, "reader_options": {"layout": "x"}, "max_steps": 3},
                     family="qwen2_vl", numeric_vocab_size=10, threads={"threads": 2}, data_fingerprint="ab12",
                     resumed=[{"checkpoint": "out/checkpoint-2", "step": 2, "changed": {}}])


def test_round_trip_equals_and_writes_the_flat_layout(tmp_path):
    record = _record()
    record.write(tmp_path / "run_config.json")
    assert RunRecord.read(tmp_path / "run_config.json") == record
    on_disk = json.loads((tmp_path / "run_config.json").read_text())
    # flat, as every earlier release wrote it: settings and the record's keys side by side
    assert on_disk["instruction"] == "Answer in H:MM format." and on_disk["family"] == "qwen2_vl"
    assert on_disk["resumed"][0]["step"] == 2 and "settings" not in on_disk


def test_an_older_file_reads_and_keeps_unknown_keys(tmp_path):
    # written before the typed settings (mixture as JSON text), with no thread plan, fingerprint or resumes,
    # and a key this release does not know
    old = {"model_name_or_path": "Qwen/Qwen2-VL-2B-Instruct", "dataset": "mixture",
           "mixture": '[{"name": "clocks", "root": "/d"}]', "family": "qwen2_vl", "numeric_vocab_size": 10,
           "some_future_key": {"x": 1}}
    (tmp_path / "run_config.json").write_text(json.dumps(old, indent=1))
    record = RunRecord.read(tmp_path / "run_config.json")
    assert record.get("mixture") == old["mixture"] and record.threads is None and record.resumed == []
    assert record.to_dict() == old  # nothing dropped, nothing added
    record.write(tmp_path / "again.json")
    assert json.loads((tmp_path / "again.json").read_text()) == old


@pytest.mark.parametrize("text, said", [("{not json", "not valid JSON"), ("[1, 2]", "a JSON object expected"),
                                        ('{"resumed": {"step": 2}}', "resumed must be a list"),
                                        ('{"numeric_vocab_size": "ten"}', "numeric_vocab_size must be an integer"),
                                        ('{"resumed": [3]}', "resumed must be a list of objects")])
def test_a_malformed_file_is_one_line_naming_it(tmp_path, text, said):
    path = tmp_path / "run_config.json"
    path.write_text(text)
    with pytest.raises(RunRecordError) as e:
        RunRecord.read(path)
    assert str(path) in str(e.value) and said in str(e.value) and "\n" not in str(e.value)


def test_a_missing_file_is_no_record_only_where_optional(tmp_path):
    assert RunRecord.read(tmp_path / "run_config.json", missing_ok=True) is None
    with pytest.raises(RunRecordError, match="no such run record"):
        RunRecord.read(tmp_path / "run_config.json")


def test_eval_reads_the_record_and_refuses_a_malformed_one(tmp_path):
    from vlm_smmd.evaluation import training_data, training_prompts, training_reader_options

    model = tmp_path / "model"
    (model / "checkpoint-4").mkdir(parents=True)
    _record().write(model / "run_config.json")
    assert training_prompts(model / "checkpoint-4", None, None)[:2] == ("", "Answer in H:MM format.")
    assert training_data(model) == [("clocks", "/d/clocks", "train")]
    assert training_reader_options(model) == {"clocks": {"layout": "x"}}
    (model / "run_config.json").write_text('{"instruction": "Answer.",')  # cut short: once read as no record
    for read in (lambda m: training_prompts(m, None, None), training_data, training_reader_options):
        with pytest.raises(RunRecordError, match=f"^{model / 'run_config.json'}: not valid JSON"):
            read(model / "checkpoint-4")


def test_a_report_notes_a_malformed_record_and_shows_a_good_one_flat(tmp_path):
    from vlm_smmd.analysis.runinfo import load_run_info

    _record().write(tmp_path / "run_config.json")
    info = load_run_info(tmp_path)
    assert info["config"] == _record().to_dict() and "no run_config.json" not in " ".join(info["notes"])
    (tmp_path / "run_config.json").write_text('{"threads": 4}')  # a report never raises: it says why
    info = load_run_info(tmp_path)
    assert info["config"] is None and f"{tmp_path / 'run_config.json'}: threads must be an object, found 4" in info["notes"]


@pytest.mark.parametrize("record", [{"dataset": "mixture", "mixture": '{"name": "clocks"}'},
                                    {"dataset": "refcoco", "reader_options": "[1, 2]"}])
def test_eval_refuses_a_record_whose_data_settings_do_not_parse(tmp_path, record):
    from vlm_smmd.evaluation import training_data, training_reader_options

    (tmp_path / "run_config.json").write_text(json.dumps(record))
    read = training_data if "mixture" in record else training_reader_options
    with pytest.raises(RunRecordError, match=f"^{tmp_path / 'run_config.json'}: ") as e:
        read(tmp_path)
    assert "\n" not in str(e.value)
