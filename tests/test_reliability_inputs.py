"""A JSON records file with content after its top-level value (two arrays concatenated, an array and
then an object or text) is refused with one line naming the file and the byte, under raise and skip
alike: json.loads refuses such a file, and its later records must not vanish."""
import json

import pytest

from tests.conftest import make_image
from vlm_smmd.data import DataError, read_chartqa
from vlm_smmd.data.records import iter_json_array


@pytest.mark.parametrize("tail", ['[{"a": 2}, {"a": 3}]', '{"a": 2}', "notes", "]"])
def test_content_after_the_top_level_array_is_refused(tmp_path, tail):
    path = tmp_path / "r.json"
    head = '[{"a": 1}]'
    path.write_text(f"{head}\n{tail}\n")
    with pytest.raises(DataError, match=rf"r\.json: .*after the top-level value at byte {len(head) + 1}\b"):
        list(iter_json_array(path))


def test_content_after_the_top_level_object_is_refused_and_a_clean_file_reads(tmp_path):
    path = tmp_path / "r.json"
    path.write_text('{"x": [1, 2], "meta": {"k": [3]}}  \n')
    assert [v for _, _, v in iter_json_array(path, "x")] == [1, 2]  # later keys and whitespace are fine
    path.write_text('{"x": [1, 2], "meta": 0} {"x": [3]}')
    with pytest.raises(DataError, match="after the top-level value at byte 25"):
        list(iter_json_array(path, "x"))


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_chartqa_concatenated_arrays_are_an_error_not_one_record(tmp_path, on_error):
    d = tmp_path / "test"
    (d / "png").mkdir(parents=True)
    make_image(seed=1).save(d / "png" / "a.png")
    record = {"imgname": "a.png", "query": "What is the value?", "label": "5"}
    (d / "test_human.json").write_text(json.dumps([record]) + json.dumps([record, record]))
    (d / "test_augmented.json").write_text("[]")
    with pytest.raises(DataError, match=r"test_human\.json: .*after the top-level value at byte"):
        ds = read_chartqa(tmp_path, "test", on_error=on_error)
        list(ds)


@pytest.mark.parametrize("seed", ["-1", "4294967296", "99999999999999999999", "1.5"])
def test_train_seed_out_of_range_is_one_line_before_any_work(tmp_path, capsys, seed):
    from vlm_smmd.cli import main

    config = tmp_path / "run.yaml"
    config.write_text(f"model_name_or_path: tiny\ndataset: clocks\ndata_root: {tmp_path / 'clocks'}\n"
                      f"synthesize: none\noutput_dir: {tmp_path / 'out'}\nuse_cpu: true\n")
    assert main(["train", str(config), "--seed", seed]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "seed must be an integer in 0..4294967295" in err[0]
    assert not (tmp_path / "out").exists()


def test_seed_bounds_are_accepted():
    from vlm_smmd.config import check_seeds

    check_seeds({"seed": 0, "data_seed": "4294967295"})
    check_seeds({"seed": None})


@pytest.mark.parametrize("argv", [["vlm-smmd"], ["vlm-smmd", "train"], ["data-synth"]])
def test_a_command_without_arguments_prints_the_help_and_exits_2(capsys, argv):
    from data_synth.cli import main as synth_main
    from vlm_smmd.cli import main

    entry = synth_main if argv[0] == "data-synth" else main
    assert entry(argv[1:]) == 2
    assert "usage" in capsys.readouterr().err.lower()
    assert entry([*argv[1:], "--help"]) == 0  # asking for the help is no error
    assert "usage" in capsys.readouterr().out.lower()


def test_sighup_ends_data_synth_like_sigterm(tmp_path):
    """A closed terminal (SIGHUP) stops the writer with its one line and exit 128 + 1, the partial dataset
    kept for --resume, as SIGTERM does."""
    import signal

    from tests.data_synth.signals import logged_lines, terminate_when

    args = ["arithmetic", "--num", "100000", "--seed", "8", "--out", "ds", "--no-progress"]
    status, err = terminate_when(args, tmp_path, lambda: logged_lines(tmp_path / ".ds.partial" / "progress.jsonl") > 0,
                                 signum=signal.SIGHUP)
    assert status == 129 and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1 and "rerun with --resume" in err
    assert (tmp_path / ".ds.partial").is_dir() and not (tmp_path / "ds").exists()


@pytest.mark.parametrize("text, match", [
    (b"aux: smmd\nseed: 0\naux: none\n", r"run\.yaml: line 3: key 'aux' is given twice \(first on line 1\)"),
    (b"dataset: clocks\nnote: caf\xe9\n", r"run\.yaml: line 2: not UTF-8 \(byte 0xe9"),
    (b"a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
     b"c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
     b"e: [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n", r"run\.yaml: line \d+: aliases expand past 100000"),
])
def test_config_duplicate_key_non_utf8_and_alias_bomb_are_one_line(tmp_path, capsys, text, match):
    from vlm_smmd.cli import main

    config = tmp_path / "run.yaml"
    config.write_bytes(text)
    assert main(["train", str(config)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0]
    assert __import__("re").search(match, err[0]), err[0]
