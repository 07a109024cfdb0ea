"""Tasks out to lmms-eval / VLMEvalKit and their prediction files back in (issue 46 items 5 and 6)."""

import base64
import csv
import importlib.util
import io
import json
import subprocess
import sys

import pytest
import yaml
from PIL import Image

from vlm_smmd.cli import main as cli
from vlm_smmd.data.collator import build_messages
from vlm_smmd.data.tasks import read
from vlm_smmd.evaluation import extract_answer, sample_targets, score_prediction
from vlm_smmd.harness import read_any_predictions
from vlm_smmd.harness.scorer import metric_names, render_utils

INSTRUCTION = "Answer with the exact value."


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from data_synth.charts import write_chart_dataset
    from data_synth.writer import write_clock_dataset

    root = tmp_path_factory.mktemp("harness_data")
    write_clock_dataset(root / "clocks", 6, seed=2, size=64, splits={"test": 1.0}, progress=False)
    write_chart_dataset(root / "chartqa", "chartqa", 2, seed=3, split="test", size=(160, 120), questions_per_chart=2)
    return root


@pytest.fixture(scope="module")
def tasks(data, tmp_path_factory):
    """{kind: exported lmms-eval task folder}."""
    out = tmp_path_factory.mktemp("tasks")
    for kind in ("clocks", "chartqa"):
        assert cli(["export", "lmms-eval", "--data", f"{kind}:{data / kind}", "--out", str(out / kind),
                    "--instruction", INSTRUCTION]) == 0
    return out


def _load_utils(folder, name="exported_utils"):
    spec = importlib.util.spec_from_file_location(f"{name}_{folder.name}", folder / "utils.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _yaml(path):
    class Loader(yaml.SafeLoader):
        pass

    Loader.add_constructor("!function", lambda loader, node: ("function", loader.construct_scalar(node)))
    return yaml.load(path.read_text(encoding="utf-8"), Loader=Loader)


def _docs(folder):
    return [json.loads(line) for line in (folder / "test.jsonl").read_text(encoding="utf-8").splitlines()]


# ---------------------------------------------------------------------------------------------------------
# The exported utils.py: standalone, and scoring as eval does


def test_utils_runs_with_the_standard_library_alone(tmp_path):
    (tmp_path / "utils.py").write_text(render_utils(["exact_match", "time_gap_minutes"], header="t"), encoding="utf-8")
    doc = {"source": "clocks", "targets": ["12:00"], "meta": "{}"}
    code = ("import sys, json; sys.path.insert(0, sys.argv[1]); import utils; "
            f"print(json.dumps(utils.process_results({doc!r}, ['It is 11:59.'])))")
    # -I -S: no site-packages, so neither vlm_smmd nor any third-party package can be imported
    done = subprocess.run([sys.executable, "-I", "-S", "-c", code, str(tmp_path)], capture_output=True, text=True,
                          check=True)
    assert json.loads(done.stdout) == {"exact_match": 0.0, "mean_time_gap_minutes": 1.0,
                                       "median_time_gap_minutes": 1.0, "no_time": 0.0}


def _clock_texts(h, m):
    """Answers a model might give near the reading h:mm: formats, offsets across 12, no time at all."""
    out = []
    for dm in (0, 1, -1, 2, 5, 6, 59, 360):
        t = (h * 60 + m + dm) % 720
        hh, mm = divmod(t, 60)
        out += [f"{hh or 12}:{mm:02d}", f"It is {hh or 12}:{mm:02d} pm.", f"**{hh + 12}:{mm:02d}**"]
    return out + [f"{h}:{m:02d}:30", "noon", "", "3 o'clock", "The time is 25:00 or 7:5"]


def _chart_texts(target):
    out = ["", "yes", f"{target}%", f"The answer is {target}.", f"- **{target}**", f"{target}\nmore"]
    try:
        value = float(target)
        out += [repr(value * f) for f in (1.0, 1.04, 1.05, 1.06, 0.95, 0.9499, -1.0, 0.0)]
    except ValueError:
        pass
    return out


def _text_texts(target):
    return [f"So {target} apples.\n#### {target}", f"The answer is {target}", "#### 1,234", f"-{target}", "none",
            f"{target}.0", f"{target} then 7"]


def test_exported_scorer_agrees_with_eval_on_many_pairs(tmp_path):
    keys = {"clocks": ["exact_match", "time_exact", "hour_correct", "minute_correct", "time_gap_minutes",
                       "within_1_min", "minute_within_1", "within_5_min"],
            "chartqa": ["exact_match", "relaxed_accuracy"],
            "gsm8k": ["exact_match", "number_exact", "within_0.001", "within_0.01", "within_0.05"]}
    cases = [("clocks", [f"{h}:{m:02d}"], text) for h in range(1, 13) for m in range(0, 60, 7)
             for text in _clock_texts(h, m)]
    cases += [("chartqa", [t, "x"], text) for t in ("12", "0", "3.5", "45%", "-7", "Democrat", "1e3", "100")
              for text in _chart_texts(t)]
    cases += [("gsm8k", [t], text) for t in ("18", "0", "-3", "1234", "2.5") for text in _text_texts(t)]
    modules = {}
    for source, names in keys.items():
        (tmp_path / source).mkdir()
        (tmp_path / source / "utils.py").write_text(render_utils(names, header=source), encoding="utf-8")
        modules[source] = _load_utils(tmp_path / source)
    assert len(cases) > 2000
    disagree = []
    for source, targets, text in cases:
        expected = score_prediction(extract_answer(text, source), targets, source)
        got = modules[source].process_results({"source": source, "targets": targets, "meta": "{}"}, [text])
        want = {name: (float(expected["time_gap_minutes"] is None) if name == "no_time" else
                       expected["time_gap_minutes"] if name.endswith("time_gap_minutes") else expected[name])
                for name in metric_names(keys[source])}
        if got != want:
            disagree.append((source, targets, text, got, want))
    assert not disagree, disagree[:3]


# ---------------------------------------------------------------------------------------------------------
# The task folder


def test_exported_task_holds_what_lmms_eval_reads(data, tasks):
    for kind in ("clocks", "chartqa"):
        folder = tasks / kind
        config = _yaml(folder / f"vlm_smmd_{kind}.yaml")
        assert config["task"] == f"vlm_smmd_{kind}" and config["dataset_path"] == "json"
        assert config["dataset_kwargs"]["data_files"] == {"test": "test.jsonl"} and config["test_split"] == "test"
        assert config["output_type"] == "generate_until"
        for hook in ("doc_to_visual", "doc_to_text", "doc_to_target", "process_results"):
            assert config[hook] == ("function", f"utils.{hook}")
        assert config["generation_kwargs"] == {"max_new_tokens": 16, "temperature": 0, "do_sample": False,
                                               "num_beams": 1, "until": []}
        utils = _load_utils(folder)
        docs = _docs(folder)
        samples = list(read(kind, data / kind, "test"))
        assert len(docs) == len(samples)
        for doc, sample in zip(docs, samples):
            assert doc["source"] == kind and doc["id"] == str(sample.id) and doc["targets"] == sample_targets(sample)
            trained = build_messages(sample, instruction=INSTRUCTION, with_answer=False)[-1]["content"][-1]["text"]
            assert utils.doc_to_text(doc) == trained and INSTRUCTION in trained
            assert utils.doc_to_visual(doc)[0].tobytes() == sample.load_image().tobytes()
            names = [m["metric"] for m in config["metric_list"]]
            assert list(utils.process_results(doc, [sample.answer])) == names  # keys equal the metric names
        better = {m["metric"]: m["higher_is_better"] for m in config["metric_list"]}
        if kind == "clocks":
            assert not better["mean_time_gap_minutes"] and not better["no_time"] and better["within_1_min"]
            assert {"exact_match", "within_1_min", "within_5_min", "hour_correct", "minute_correct"} <= set(better)
        else:
            assert set(better) == {"exact_match", "relaxed_accuracy"}


def test_export_refuses_a_foreign_folder_and_overwrites_its_own(data, tmp_path, capsys):
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep")
    argv = ["export", "lmms-eval", "--data", f"clocks:{data / 'clocks'}"]
    assert cli([*argv, "--out", str(foreign), "--overwrite"]) == 2
    assert "did not write" in capsys.readouterr().err and (foreign / "notes.txt").read_text() == "keep"
    out = tmp_path / "task"
    assert cli([*argv, "--out", str(out), "--limit", "2"]) == 0
    assert cli([*argv, "--out", str(out)]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert cli([*argv, "--out", str(out), "--overwrite", "--limit", "1"]) == 0
    assert len(_docs(out)) == 1 and sorted(p.name for p in (out / "images").iterdir()) == ["000000.png"]
    assert cli(["export", "lmms-eval", "--data", f"refcoco:{data}", "--out", str(tmp_path / "r")]) == 1
    assert "cannot be exported" in capsys.readouterr().err


def test_vlmevalkit_tsv(data, tmp_path):
    out = tmp_path / "vk"
    assert cli(["export", "vlmevalkit", "--data", f"clocks:{data / 'clocks'}", "--out", str(out),
                "--instruction", INSTRUCTION]) == 0
    with (out / "vlm_smmd_clocks.tsv").open(encoding="utf-8", newline="") as stream:
        rows = list(csv.DictReader(stream, delimiter="\t"))
    samples = list(read("clocks", data / "clocks", "test"))
    assert [r["index"] for r in rows] == [str(i) for i in range(len(samples))]
    for row, sample in zip(rows, samples):
        assert list(row)[:5] == ["index", "image", "question", "answer", "category"]
        assert row["answer"] == sample.answer and row["question"].endswith(INSTRUCTION)
        image = Image.open(io.BytesIO(base64.b64decode(row["image"])))
        assert image.tobytes() == sample.load_image().tobytes()


# ---------------------------------------------------------------------------------------------------------
# Round trip: an eval run's predictions through the exported process_results give its metrics.json


def _aggregate(config, utils, values):
    """lmms-eval's aggregation of one metric: its built-in mean (sum / len) or the task's function."""
    agg = next(m["aggregation"] for m in config["metric_list"] if m["metric"] == values[0])
    column = values[1]
    if agg == "mean":
        return sum(column) / len(column)
    return getattr(utils, agg[1].split(".")[1])(column)


@pytest.mark.slow
def test_round_trip_equals_eval_metrics(data, tasks, tmp_path):
    out = tmp_path / "eval"
    argv = ["eval", "--model", "tiny", "--out", str(out), "--batch-size", "4", "--max-new-tokens", "6",
            "--instruction", INSTRUCTION]
    for kind in ("clocks", "chartqa"):
        argv += ["--data", f"{kind}:{data / kind}"]
    assert cli(argv) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    predictions = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    for kind in ("clocks", "chartqa"):
        folder = tasks / kind
        config, utils = _yaml(folder / f"vlm_smmd_{kind}.yaml"), _load_utils(folder, "round_trip")
        by_id = {doc["id"]: doc for doc in _docs(folder)}
        mine = [p for p in predictions if p["source"] == kind]
        assert len(mine) == len(by_id)
        per_doc = [utils.process_results(by_id[p["id"]], [p["raw_output"]]) for p in mine]
        expected = metrics["sources"][kind]["test"]
        assert set(per_doc[0]) == set(expected) - {"count", "by"}  # every figure of metrics.json, no other
        for name in per_doc[0]:
            got = _aggregate(config, utils, (name, [r[name] for r in per_doc]))
            assert got == expected[name], (kind, name, got, expected[name])


def test_lmms_eval_loads_the_exported_task(tasks):
    pytest.importorskip("lmms_eval", reason="lmms-eval is not installed (pip install lmms-eval)")
    from lmms_eval.tasks import TaskManager, get_task_dict

    manager = TaskManager(include_path=str(tasks / "clocks"))
    assert "vlm_smmd_clocks" in manager.all_tasks
    task = get_task_dict(["vlm_smmd_clocks"], manager)["vlm_smmd_clocks"]
    doc = task.test_docs()[0]
    assert task.doc_to_text(doc).endswith(INSTRUCTION)
    assert set(task.process_results(doc, [doc["answer"]])) == set(task.aggregation())


# ---------------------------------------------------------------------------------------------------------
# Predictions in: lmms-eval samples, VLMEvalKit prediction files


def _lmms_samples(folder, answers, path, flatten=True):
    lines = []
    for doc_id, (doc, answer) in enumerate(zip(_docs(folder), answers)):
        resp = answer if flatten else [[answer]]
        lines.append(json.dumps({"doc_id": doc_id, "doc": doc, "target": doc["answer"], "arguments": [],
                                 "resps": [resp] if flatten else resp, "filtered_resps": resp}))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_lmms_eval_samples_read_as_predictions(tasks, tmp_path):
    folder = tasks / "clocks"
    docs = _docs(folder)
    answers = [f"The time is {d['answer']}." if i % 2 else "It is 7:61" for i, d in enumerate(docs)]
    for flatten in (True, False):
        fmt, records = read_any_predictions(_lmms_samples(folder, answers, tmp_path / f"s{flatten}.jsonl", flatten))
        assert fmt == "lmms-eval"
        assert [r["prediction"] for r in records] == [extract_answer(a, "clocks") for a in answers]
        assert [r["id"] for r in records] == [d["id"] for d in docs] and records[0]["source"] == "clocks"
        assert records[1]["targets"] == docs[1]["targets"] and records[1]["meta"] == json.loads(docs[1]["meta"])
    # a task this tool did not write: the harness's name, its target, clock extraction for a time target
    foreign = tmp_path / "foreign.jsonl"
    foreign.write_text(json.dumps({"doc_id": 3, "doc": {"question": "q"}, "target": "4:05",
                                   "resps": [["It is 4:05."]], "filtered_resps": ["It is 4:05."]}) + "\n")
    fmt, (record,) = read_any_predictions(foreign)
    assert (record["source"], record["id"], record["prediction"], record["targets"]) == ("lmms-eval", "3", "4:05",
                                                                                         ["4:05"])


def _vlmevalkit_rows(folder, answers):
    rows = []
    for i, (doc, answer) in enumerate(zip(_docs(folder), answers)):
        rows.append({"index": i, "question": doc["prompt"], "answer": doc["targets"][0], "category": doc["category"],
                     "source": doc["source"], "id": doc["id"], "targets": json.dumps(doc["targets"]),
                     "prediction": answer})
    return rows


def test_vlmevalkit_predictions_read(tasks, tmp_path):
    folder = tasks / "chartqa"
    answers = [f"The answer is {d['targets'][0]}." for d in _docs(folder)]
    rows = _vlmevalkit_rows(folder, answers)
    path = tmp_path / "model_vlm_smmd_chartqa.tsv"
    with path.open("w", newline="") as stream:
        writer = csv.DictWriter(stream, fieldnames=list(rows[0]), delimiter="\t")
        writer.writeheader()
        writer.writerows(rows)
    fmt, records = read_any_predictions(path)
    assert fmt == "vlmevalkit" and all(r["source"] == "chartqa" for r in records)
    assert [r["prediction"] for r in records] == [extract_answer(a, "chartqa") for a in answers]
    # the harness's own columns only
    bare = tmp_path / "bare.tsv"
    bare.write_text("index\tquestion\tanswer\tprediction\n0\tq\t10:10\tit is 10:10\n")
    _, (record,) = read_any_predictions(bare)
    assert (record["source"], record["prediction"], record["id"]) == ("vlmevalkit", "10:10", "0")


def test_vlmevalkit_xlsx(tasks, tmp_path, monkeypatch):
    path = tmp_path / "preds.xlsx"
    path.write_bytes(b"PK")
    monkeypatch.setitem(sys.modules, "openpyxl", None)  # as if not installed
    with pytest.raises(ValueError, match="needs openpyxl: pip install openpyxl"):
        read_any_predictions(path)
    monkeypatch.undo()
    openpyxl = pytest.importorskip("openpyxl", reason="openpyxl is not installed")
    rows = _vlmevalkit_rows(tasks / "clocks", ["3:00"] * 3)
    book = openpyxl.Workbook()
    book.active.append(list(rows[0]))
    for row in rows:
        book.active.append(list(row.values()))
    book.save(path)
    fmt, records = read_any_predictions(path)
    assert fmt == "vlmevalkit" and [r["prediction"] for r in records] == ["3:00"] * 3


@pytest.mark.parametrize(("name", "text", "missing"), [
    ("s.jsonl", '{"doc_id": 0, "doc": {}, "resps": ["1"]}\n', "missing target"),
    ("s.jsonl", '{"answer": 1, "output": "2"}\n', "neither a vlm-smmd prediction"),
    ("p.tsv", "index\tquestion\tanswer\n0\tq\t1\n", "missing column prediction"),
    ("p.jsonl", '{"id": 1, "source": "clocks", "question": "q"}\n', "missing field 'prediction'"),
])
def test_wrong_layout_is_one_line_naming_the_missing_fields(tmp_path, capsys, name, text, missing):
    path = tmp_path / name
    path.write_text(text)
    assert cli(["analyze", str(path), "--out", str(tmp_path / "a")]) == 1
    err = capsys.readouterr().err.strip()
    assert missing in err and str(path) in err and len(err.splitlines()) == 1


def test_analyze_reads_each_harness_and_compares_them(tasks, tmp_path, capsys):
    folder = tasks / "clocks"
    docs = _docs(folder)
    own = tmp_path / "own" / "predictions.jsonl"
    own.parent.mkdir()
    own.write_text("".join(json.dumps({"id": d["id"], "source": "clocks", "question": d["question"],
                                       "targets": d["targets"], "prediction": "12:00"}) + "\n" for d in docs))
    lmms = _lmms_samples(folder, [d["answer"] for d in docs], tmp_path / "samples_vlm_smmd_clocks.jsonl")
    rows = _vlmevalkit_rows(folder, [f"It is {d['answer']}" for d in docs])
    vk = tmp_path / "vk.tsv"
    with vk.open("w", newline="") as stream:
        writer = csv.DictWriter(stream, fieldnames=list(rows[0]), delimiter="\t")
        writer.writeheader()
        writer.writerows(rows)
    out = tmp_path / "analysis"
    assert cli(["analyze", str(own), str(lmms), str(vk), "--names", "own,lmms,vk", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    for name, fmt in (("own", "vlm-smmd"), ("lmms", "lmms-eval"), ("vk", "vlmevalkit")):
        assert f"{name}: " in printed and f"read as a {fmt} prediction file ({len(docs)} records)" in printed
    analysis = json.loads((out / "analysis.json").read_text())
    runs = analysis["runs"]
    assert runs["lmms"]["clock"]["rates"]["exact"] == 1.0 and runs["vk"]["clock"]["rates"]["exact"] == 1.0
    assert runs["own"]["clock"]["mean_gap"] > 0 and "comparison" in analysis
    assert (out / "report.md").is_file() and any(out.glob("*gap*.png"))
