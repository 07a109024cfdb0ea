"""Evaluation: answer extraction, scores, metrics, batched generation, and `vlm-smmd eval` end to end."""

import json
import os
import statistics

import pytest
import torch

from tests.conftest import make_image
from vlm_smmd.cli import main as cli
from vlm_smmd.data import DataError, Sample
from vlm_smmd.evaluation import (
    extract_answer,
    format_metrics_table,
    generate_predictions,
    json_safe,
    parse_data_spec,
    sample_targets,
    score_prediction,
    style_keys,
    summarize,
    write_outputs,
)

# ---------------------------------------------------------------------------------------------------------
# extract_answer


@pytest.mark.parametrize("text,source,expected", [
    ("12", "chartqa", "12"),
    ("  The answer is 42.\nBecause the bar says so.", "chartqa", "42"),
    ("\n\n  Answer: Democrat\n", "dvqa", "Democrat"),
    ("Final answer: 0.07", "plotqa", "0.07"),
    ("So the answer is: 17", "plotqa", "17"),
    ("A: 5", "chartqa", "5"),
    ("3.5.", "plotqa", "3.5"),
    ("12.", "plotqa", "12"),
    ("U.S.", "chartqa", "U.S."),
    ("**7**", "dvqa", "7"),
    ('"yes"', "dvqa", "yes"),
    ("answering is hard", "chartqa", "answering is hard"),
    ("", "chartqa", ""),
    ("   \n \n", "clocks", ""),
    ("1:30", "chartqa", "1:30"),
    ("It is 3:15 pm.", "clocks", "3:15 pm"),
    ("It is 3:15 p.m.", "clocks", "3:15 p.m."),
    ("It is 3:15.", "clocks", "3:15"),
    ("I think 10:07 or 10:08", "clocks", "10:07"),
    ("25:99 then 4:05", "clocks", "4:05"),  # the first *valid* reading
    ("first line\nthe clock shows 7:45:30", "clocks", "7:45:30"),  # anywhere in the text
    ("The time is quarter to five.", "clocks", "quarter to five"),
    ("12:345", "clocks", "12:345"),  # no reading: the general rule
])
def test_extract_answer(text, source, expected):
    assert extract_answer(text, source) == expected


def test_score_prediction():
    s = score_prediction("12:03", ["11:58"], "clocks")
    assert s == {"exact_match": 0.0, "time_exact": 0.0, "hour_correct": 0.0, "minute_correct": 0.0,
                 "time_gap_minutes": 5.0, "within_1_min": 0.0, "minute_within_1": 0.0, "within_5_min": 1.0}
    s = score_prediction("3:07 pm", ["3:07"], "clocks")
    assert (s["time_exact"], s["hour_correct"], s["minute_correct"], s["time_gap_minutes"]) == (1.0, 1.0, 1.0, 0.0)
    assert s["exact_match"] == 0.0  # the string differs; the reading does not
    s = score_prediction("quarter past", ["3:15"], "clocks")
    assert s["time_gap_minutes"] is None and s["within_5_min"] == 0.0 and s["time_exact"] == 0.0
    # several labels: the best one counts; relaxed accuracy only for chart sources
    assert score_prediction("0.46", ["45", "0.45"], "chartqa") == {"exact_match": 0.0, "relaxed_accuracy": 1.0}
    assert score_prediction("Three", ["three"], "dvqa") == {"exact_match": 1.0, "relaxed_accuracy": 1.0}
    with pytest.raises(ValueError, match="holds no time"):
        score_prediction("3:15", ["noon"], "clocks")


def test_json_safe():
    from pathlib import Path

    import numpy as np

    value = {"a": (1, np.int64(2)), 3: Path("x/y"), "f": float("nan"), "t": torch.tensor(1.5), "n": None}
    assert json_safe(value) == {"a": [1, 2], "3": "x/y", "f": None, "t": 1.5, "n": None}


# ---------------------------------------------------------------------------------------------------------
# summarize


def _rec(source, split, scores, **meta):
    return {"id": f"{source}-{len(meta)}", "source": source, "split": split, "question": "q", "target": "1",
            "targets": ["1"], "prediction": "1", "raw_output": "1", "meta": meta, "scores": scores}


def _clock(em, exact, gap, **meta):
    return _rec("clocks", "test", {"exact_match": em, "time_exact": exact, "hour_correct": exact,
                                   "minute_correct": 1.0, "time_gap_minutes": gap,
                                   "within_5_min": float(gap is not None and gap <= 5)}, **meta)


def test_summarize_counts_and_breakdowns():
    chart = [
        _rec("chartqa", "test", {"exact_match": 1.0, "relaxed_accuracy": 1.0}, subset="human"),
        _rec("chartqa", "test", {"exact_match": 0.0, "relaxed_accuracy": 1.0}, subset="human"),
        _rec("chartqa", "test", {"exact_match": 0.0, "relaxed_accuracy": 0.0}, subset="human"),
        _rec("chartqa", "test", {"exact_match": 1.0, "relaxed_accuracy": 1.0}, subset="augmented"),
        _rec("chartqa", "val", {"exact_match": 0.0, "relaxed_accuracy": 0.0}, subset="augmented"),
    ]
    dvqa = [
        _rec("dvqa", "val_easy", {"exact_match": 1.0, "relaxed_accuracy": 1.0}, template_id="data_1",
             question_type="data"),
        _rec("dvqa", "val_easy", {"exact_match": 0.0, "relaxed_accuracy": 0.0}, template_id="reasoning_2",
             question_type="reasoning"),
        _rec("plotqa", None, {"exact_match": 0.0, "relaxed_accuracy": 1.0}, template="min_max", type="data"),
    ]
    common = dict(background="plain", border_width=3)  # constant / numeric: no breakdown
    clocks = [
        _clock(1.0, 1.0, 0.0, hour=3, minute=7, file_name="a.png", face_shape="round", numerals="arabic",
               second_hand=True, style={"tip": "arrow"}, **common),
        _clock(0.0, 0.0, 30.0, hour=4, minute=7, file_name="b.png", face_shape="round", numerals="roman",
               second_hand=False, style={"tip": "plain"}, **common),
        _clock(0.0, 0.0, None, hour=5, minute=8, file_name="c.png", face_shape="square", numerals="roman",
               second_hand=False, style={"tip": "plain"}, **common),
        _clock(0.0, 0.0, 4.0, hour=6, minute=9, file_name="d.png", face_shape="square", numerals=None,
               second_hand=False, style={"tip": "arrow"}, **common),
    ]
    records = chart + dvqa + clocks
    m = summarize(records)
    assert m["count"] == 12
    assert m["exact_match"] == pytest.approx(4 / 12)
    assert set(m["sources"]) == {"chartqa", "dvqa", "plotqa", "clocks"}

    test = m["sources"]["chartqa"]["test"]
    assert (test["count"], test["exact_match"], test["relaxed_accuracy"]) == (4, 0.5, 0.75)
    assert test["by"] == {"subset": {
        "augmented": {"count": 1, "exact_match": 1.0, "relaxed_accuracy": 1.0},
        "human": {"count": 3, "exact_match": pytest.approx(1 / 3), "relaxed_accuracy": pytest.approx(2 / 3)},
    }}
    assert m["sources"]["chartqa"]["val"]["count"] == 1
    assert m["sources"]["chartqa"]["val"]["by"]["subset"] == {
        "augmented": {"count": 1, "exact_match": 0.0, "relaxed_accuracy": 0.0}}

    dv = m["sources"]["dvqa"]["val_easy"]
    assert dv["count"] == 2 and set(dv["by"]) == {"template_id", "question_type"}
    assert dv["by"]["template_id"] == {"data_1": {"count": 1, "exact_match": 1.0, "relaxed_accuracy": 1.0},
                                       "reasoning_2": {"count": 1, "exact_match": 0.0, "relaxed_accuracy": 0.0}}
    assert m["sources"]["plotqa"]["unknown"]["by"]["template"]["min_max"]["count"] == 1

    c = m["sources"]["clocks"]["test"]
    assert c["count"] == 4
    assert (c["exact_match"], c["time_exact"], c["minute_correct"], c["within_5_min"]) == (0.25, 0.25, 1.0, 0.5)
    assert c["no_time"] == 1
    assert c["mean_time_gap_minutes"] == pytest.approx(statistics.fmean([0.0, 30.0, 4.0]))
    assert c["median_time_gap_minutes"] == 4.0
    # style keys: categorical strings/bools (None allowed), nested dicts dotted; not hour/minute/file name,
    # not numeric, not constant
    assert style_keys(clocks) == ["face_shape", "numerals", "second_hand", "style.tip"]
    assert set(c["by"]) == {"face_shape", "numerals", "second_hand", "style.tip"}
    assert {k: v["count"] for k, v in c["by"]["numerals"].items()} == {"arabic": 1, "null": 1, "roman": 2}
    assert {k: v["count"] for k, v in c["by"]["second_hand"].items()} == {"false": 3, "true": 1}
    square = c["by"]["face_shape"]["square"]
    assert (square["count"], square["no_time"], square["mean_time_gap_minutes"], square["within_5_min"]) == \
        (2, 1, 4.0, 0.5)
    arrow = c["by"]["style.tip"]["arrow"]
    assert (arrow["count"], arrow["time_exact"], arrow["mean_time_gap_minutes"]) == (2, 0.5, 2.0)

    with pytest.raises(ValueError, match="no records"):
        summarize([])


def test_write_outputs_is_what_analysis_reads(tmp_path):
    from vlm_smmd.analysis import load_predictions

    records = [_clock(1.0, 1.0, 0.0, face_shape="round"), _rec("chartqa", "test", {"exact_match": 0.0,
                                                                                    "relaxed_accuracy": 0.0})]
    records[1]["targets"] = ["12", "12.0"]
    metrics = summarize(records)
    pred, met = write_outputs(records, metrics, tmp_path / "out")
    assert [json.loads(line) for line in pred.read_text().splitlines()] == records
    assert json.loads(met.read_text()) == metrics
    assert [r["targets"] for r in load_predictions(pred)] == [["1"], ["12", "12.0"]]


# ---------------------------------------------------------------------------------------------------------
# Generation


def _samples():
    """Different image sizes and question lengths, so a batch of them is left-padded."""
    return [
        Sample(make_image(120, 90, 0), "What time does the clock show?", "3:07", "clocks", "c0",
               {"split": "test", "face_shape": "round"}),
        Sample(make_image(200, 150, 7), "What is the value of the tallest bar in this chart, in millions?", "12",
               "chartqa", "q1", {"split": "test", "subset": "human", "answers": ["12", "12.0"]}),
        Sample(make_image(64, 64, 3), "How many bars?", "three", "dvqa", "d2", {"template_id": "data_1"}),
    ]


def _greedy_alone(model, processor, sample, max_new_tokens):
    """Slow reference: one sample, full forward pass per step (no cache, no padding), argmax."""
    from vlm_smmd.data.collator import QwenVLCollator

    batch = QwenVLCollator(processor).prompt_batch([sample])
    assert batch["attention_mask"].all()
    ids, types = batch["input_ids"], batch["mm_token_type_ids"]
    stop = {processor.tokenizer.convert_tokens_to_ids("<|im_end|>"), model.generation_config.eos_token_id}
    new = []
    with torch.no_grad():
        for _ in range(max_new_tokens):
            logits = model(input_ids=ids, attention_mask=torch.ones_like(ids), mm_token_type_ids=types,
                           pixel_values=batch["pixel_values"], image_grid_thw=batch["image_grid_thw"],
                           use_cache=False).logits
            token = int(logits[0, -1].argmax())
            new.append(token)
            if token in stop:
                break
            ids = torch.cat([ids, torch.tensor([[token]])], 1)
            types = torch.cat([types, torch.zeros(1, 1, dtype=types.dtype)], 1)
    return processor.tokenizer.decode(new, skip_special_tokens=True)


def test_batched_generation_matches_each_sample_alone(tiny_model_and_processor):
    model, processor = tiny_model_and_processor
    samples = _samples()
    from vlm_smmd.data.collator import QwenVLCollator

    mask = QwenVLCollator(processor).prompt_batch(samples)["attention_mask"]
    assert len(set(mask.sum(1).tolist())) == 3  # three prompt lengths: the batch is left-padded
    batched = generate_predictions(model, processor, samples, batch_size=3, max_new_tokens=4, progress=False)
    assert [r["id"] for r in batched] == ["c0", "q1", "d2"]
    for sample, record in zip(samples, batched):
        assert record["raw_output"] == _greedy_alone(model, processor, sample, 4)
        assert record["prediction"] == extract_answer(record["raw_output"], sample.source)
    # the record fields
    r = batched[1]
    assert (r["source"], r["split"], r["question"], r["target"], r["targets"]) == \
        ("chartqa", "test", samples[1].question, "12", ["12", "12.0"])
    assert r["meta"]["subset"] == "human" and set(r["scores"]) == {"exact_match", "relaxed_accuracy"}
    assert set(batched[0]["scores"]) == {"exact_match", "time_exact", "hour_correct", "minute_correct",
                                         "time_gap_minutes", "within_1_min", "minute_within_1", "within_5_min"}
    assert batched[2]["split"] is None and batched[2]["targets"] == ["three"]


def test_unusable_sample_raises_or_is_skipped(tiny_model_and_processor, tmp_path):
    from vlm_smmd.data.sample import SkipLog

    model, processor = tiny_model_and_processor
    samples = _samples()[:2]
    samples.insert(1, Sample(tmp_path / "missing.png", "q?", "1", "plotqa", "gone"))
    no_time = Sample(make_image(), "What time is it?", "noon", "clocks", "noon")
    with pytest.raises(DataError, match="missing.png"):
        generate_predictions(model, processor, samples, batch_size=2, max_new_tokens=1, progress=False)
    with pytest.raises(DataError, match="cannot score record 'noon'"):
        generate_predictions(model, processor, [no_time], max_new_tokens=1, progress=False)
    log = SkipLog("eval")
    with pytest.warns(UserWarning, match="skipped 2"):
        records = generate_predictions(model, processor, samples + [no_time], batch_size=2, max_new_tokens=1,
                                       progress=False, on_error="skip", skip_log=log)
    assert [r["id"] for r in records] == ["c0", "q1"]
    assert log.counts == {"image missing": 1, "malformed record": 1}


# ---------------------------------------------------------------------------------------------------------
# Data specs and the command


def test_parse_data_spec(tmp_path):
    spec = parse_data_spec(f"clocks:{tmp_path}")
    assert spec.name == "clocks" and spec.path == tmp_path
    assert parse_data_spec("chartqa:C:/data").path.as_posix() == "C:/data"  # only the first ':' splits
    for bad, message in [("clocks", "NAME:PATH"), ("clocks:", "NAME:PATH"), ("mnist:/x", "unknown source")]:
        with pytest.raises(ValueError, match=message):
            parse_data_spec(bad)


def test_main_bad_arguments(tmp_path, capsys):
    assert main(["--model", "tiny", "--data", "mnist:/x", "--out", str(tmp_path)]) == 2
    assert "unknown source 'mnist'" in capsys.readouterr().err
    assert main(["--model", "tiny", "--data", f"clocks:{tmp_path / 'nope'}", "--out", str(tmp_path)]) == 1
    assert "no such dataset folder" in capsys.readouterr().err
    assert main(["--model", "tiny", "--data", f"dvqa:{tmp_path}", "--data", f"dvqa:{tmp_path}",
                 "--out", str(tmp_path)]) == 1
    assert "once" in capsys.readouterr().err


def main(argv):
    return cli(["eval", *argv])


# ---------------------------------------------------------------------------------------------------------
# End to end: a saved tiny model, synthetic clocks and charts in every layout


@pytest.fixture(scope="module")
def saved_tiny_model(tmp_path_factory):
    from vlm_smmd.modeling import load_model_and_processor

    path = tmp_path_factory.mktemp("tiny_model")
    model, processor = load_model_and_processor("tiny", verbose=False)
    model.save_pretrained(path)
    processor.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def eval_data(tmp_path_factory):
    from data_synth.charts import write_chart_dataset
    from data_synth.writer import write_clock_dataset

    root = tmp_path_factory.mktemp("eval_data")
    write_clock_dataset(root / "clocks", 4, seed=1, size=96, splits={"train": 0.25, "test": 0.75}, progress=False)
    for layout, num in (("chartqa", 2), ("plotqa", 1), ("dvqa", 1)):
        write_chart_dataset(root / layout, layout, num, seed=3, split="test", size=(160, 120), questions_per_chart=2)
    return root


@pytest.mark.slow
def test_eval_end_to_end(saved_tiny_model, eval_data, tmp_path, capsys):
    from vlm_smmd.analysis import load_predictions
    from vlm_smmd.data import read_chartqa, read_clocks, read_dvqa, read_plotqa

    out = tmp_path / "eval"
    argv = ["--model", str(saved_tiny_model), "--out", str(out), "--limit", "3", "--batch-size", "2",
            "--max-new-tokens", "3", "--instruction", "Answer briefly."]
    for name in ("clocks", "chartqa", "plotqa", "dvqa"):
        argv += ["--data", f"{name}:{eval_data / name}"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert str(out / "predictions.jsonl") in printed and str(out / "metrics.json") in printed
    assert "source" in printed and "clocks" in printed

    readers = {"clocks": read_clocks, "chartqa": read_chartqa, "plotqa": read_plotqa, "dvqa": read_dvqa}
    expected = {name: list(reader(eval_data / name, "test"))[:3] for name, reader in readers.items()}
    assert {k: len(v) for k, v in expected.items()} == {"clocks": 3, "chartqa": 3, "plotqa": 2, "dvqa": 2}

    lines = (out / "predictions.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert len(records) == 10
    for r in records:
        assert set(r) == {"id", "source", "split", "question", "target", "targets", "prediction", "raw_output",
                          "meta", "scores", "image"}
        assert os.path.isabs(r["image"]) and os.path.isfile(r["image"])
        assert r["split"] == "test"
        assert r["prediction"] == extract_answer(r["raw_output"], r["source"])
        assert r["scores"] == score_prediction(r["prediction"], r["targets"], r["source"])
    for name, samples in expected.items():
        got = [r for r in records if r["source"] == name]
        assert [r["id"] for r in got] == [str(s.id) for s in samples]
        assert [r["target"] for r in got] == [s.answer for s in samples]
        assert [r["question"] for r in got] == [s.question for s in samples]
    chart = [r for r in records if r["source"] == "chartqa"]
    assert [r["targets"] for r in chart] == [[str(a) for a in s.meta["answers"]] for s in expected["chartqa"]]

    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["count"] == 10
    assert {s: {split: m["count"] for split, m in splits.items()} for s, splits in metrics["sources"].items()} == \
        {"clocks": {"test": 3}, "chartqa": {"test": 3}, "plotqa": {"test": 2}, "dvqa": {"test": 2}}
    for name, splits in metrics["sources"].items():
        got = [r for r in records if r["source"] == name]
        m = splits["test"]
        assert m["exact_match"] == pytest.approx(statistics.fmean(r["scores"]["exact_match"] for r in got))
        for key, groups in m["by"].items():  # each breakdown partitions the records
            assert sum(g["count"] for g in groups.values()) == len(got), (name, key)
    subsets = [r["meta"]["subset"] for r in chart]
    assert {k: v["count"] for k, v in metrics["sources"]["chartqa"]["test"]["by"]["subset"].items()} == \
        {s: subsets.count(s) for s in set(subsets)}
    assert set(metrics["sources"]["dvqa"]["test"]["by"]) == {"template_id", "question_type"}
    assert set(metrics["sources"]["plotqa"]["test"]["by"]) == {"template", "type"}
    clocks = metrics["sources"]["clocks"]["test"]
    assert "time_exact" in clocks and "no_time" in clocks
    assert set(clocks["by"]) == set(style_keys([r for r in records if r["source"] == "clocks"]))
    assert not {"hour", "minute", "second", "file_name", "question", "render_seed"} & set(clocks["by"])
    for name, counts in metrics["skipped"].items():
        assert counts["read"] in (0, None) and counts["generate"] == 0 and counts["reasons"] == {}, name
    assert set(metrics["skipped"]) == set(readers)

    assert len(load_predictions(out / "predictions.jsonl")) == 10
    assert cli(["analyze", str(out / "predictions.jsonl"), "--out", str(tmp_path / "analysis")]) == 0
    assert (tmp_path / "analysis" / "report.md").is_file()


# ---------------------------------------------------------------------------------------------------------
# Markup around answers (issue 14 item 10) and the text tasks (issue 15 item 5)


@pytest.mark.parametrize("text,expected", [
    ("**Answer:** 7", "7"),
    ("- **Answer:** 7", "7"),
    ("### Final answer: 12", "12"),
    ("> The answer is 5.", "5"),
    ("**Answer:**\n\n`42`", "42"),  # the prefix alone on its line: the next line
    ("*The answer is* _Democrat_", "Democrat"),
    ("__1.5__", "1.5"),
    ("2*3", "2*3"),  # markers between word characters stay
    ("snake_case", "snake_case"),
    ("-5", "-5"),  # a minus is no bullet
    ("Answer:", ""),
])
def test_extract_answer_strips_markup_before_prefixes(text, expected):
    assert extract_answer(text, "chartqa") == expected


@pytest.mark.parametrize("source", ["gsm8k", "svamp", "deepmind_math", "arithmetic"])
def test_extract_answer_text_tasks_take_the_final_number(source):
    assert extract_answer("She sold 48/2 = 24 clips.\n#### 1,234", source) == "1234"
    assert extract_answer("**The answer is $1,234.**", source) == "1234"
    assert extract_answer("3 + 4 = 7", source) == "7"
    assert extract_answer("I do not know", source) == ""


def test_score_prediction_text_tasks():
    s = score_prediction("1234.0", ["1234"], "gsm8k")
    assert s == {"exact_match": 0.0, "number_exact": 1.0, "within_0.001": 1.0, "within_0.01": 1.0,
                 "within_0.05": 1.0}
    s = score_prediction("1240", ["1234"], "svamp")  # 0.49% off
    assert (s["number_exact"], s["within_0.001"], s["within_0.01"], s["within_0.05"]) == (0.0, 0.0, 1.0, 1.0)
    assert score_prediction("", ["-5"], "arithmetic")["within_0.05"] == 0.0
    with pytest.raises(ValueError, match="not a number"):
        score_prediction("1", ["-1/3"], "deepmind_math")


def test_text_targets_are_the_final_number_whatever_was_trained():
    rationale = Sample(image=None, question="q", answer="24 + 48 = 72\n#### 72", source="gsm8k", id="test/0",
                       meta={"final_answer": "72", "solution": "..."})
    assert sample_targets(rationale) == ["72"]
    chart = Sample(image=None, question="q", answer="7", source="chartqa", id="c", meta={"final_answer": "9"})
    assert sample_targets(chart) == ["7"]  # only the text tasks use final_answer


def test_summarize_and_table_for_text_tasks():
    def text(source, exact, rel3, rel2, rel5, **meta):
        return _rec(source, "test", {"exact_match": exact, "number_exact": exact, "within_0.001": rel3,
                                     "within_0.01": rel2, "within_0.05": rel5}, **meta)

    records = [text("gsm8k", 1.0, 1.0, 1.0, 1.0), text("gsm8k", 0.0, 0.0, 0.0, 1.0),
               text("deepmind_math", 0.0, 1.0, 1.0, 1.0, module="arithmetic__div"),
               text("deepmind_math", 0.0, 0.0, 0.0, 0.0, module="arithmetic__mul"),
               text("svamp", 1.0, 1.0, 1.0, 1.0, type="Subtraction")]
    m = summarize(records)
    g = m["sources"]["gsm8k"]["test"]
    assert (g["count"], g["number_exact"], g["within_0.001"], g["within_0.05"]) == (2, 0.5, 0.5, 1.0)
    assert m["sources"]["deepmind_math"]["test"]["by"]["module"]["arithmetic__div"]["within_0.01"] == 1.0
    assert set(m["sources"]["svamp"]["test"]["by"]) == {"type"}
    table = format_metrics_table(m).splitlines()
    assert table[0].split() == ["source", "split", "count", "exact", "num", "exact", "rel", "0.1%", "rel", "1%",
                                "rel", "5%"]  # no chart or clock columns without such records
    assert table[2].split() == ["gsm8k", "test", "2", "0.500", "0.500", "0.500", "0.500", "1.000"]
    mixed = format_metrics_table(summarize(records + [_clock(1.0, 1.0, 0.0)])).splitlines()
    assert "time exact" in mixed[0] and "num exact" in mixed[0] and "relaxed" not in mixed[0]
    assert mixed[1].split()[:3] == ["clocks", "test", "1"] and mixed[1].split()[-4:] == ["-", "-", "-", "-"]


def test_parse_data_spec_text_tasks(tmp_path):
    for name in ("gsm8k", "svamp", "deepmind_math", "arithmetic"):
        assert parse_data_spec(f"{name}:{tmp_path}").name == name


@pytest.fixture(scope="module")
def text_eval_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("text_eval_data")
    (root / "gsm8k").mkdir()
    (root / "gsm8k" / "test.jsonl").write_text("".join(json.dumps(
        {"question": f"Tom has {k} boxes of 617 pens. How many pens?", "answer": f"<<{k}*617={k * 617}>>\n#### {k * 617:,}"})
        + "\n" for k in (1, 2, 3)))
    (root / "svamp").mkdir()
    (root / "svamp" / "SVAMP.json").write_text(json.dumps(
        [{"ID": "chal-1", "Body": "Dan had 4 pens.", "Question": "He lost half. How many now?", "Answer": 2.0,
          "Type": "Common-Division"}]))
    folder = root / "dm" / "interpolate"
    folder.mkdir(parents=True)
    (folder / "arithmetic__div.txt").write_text("Divide -1 by 4.\n-0.25\nDivide 1 by 3.\n1/3\n")
    (root / "arith").mkdir()
    (root / "arith" / "interpolate.jsonl").write_text(json.dumps(
        {"id": "t0", "question": "What is 12 - 19?", "answer": "-7", "operation": "sub", "operands": ["12", "19"],
         "split": "interpolate"}) + "\n")
    return root


@pytest.mark.slow
def test_eval_end_to_end_text_tasks(saved_tiny_model, text_eval_data, tmp_path, capsys):
    out = tmp_path / "eval"
    argv = ["--model", str(saved_tiny_model), "--out", str(out), "--limit", "2", "--batch-size", "2",
            "--max-new-tokens", "3", "--split", "interpolate", "--on-error", "skip",
            "--data", f"deepmind_math:{text_eval_data / 'dm'}", "--data", f"arithmetic:{text_eval_data / 'arith'}"]
    with pytest.warns(UserWarning, match="non-numeric answer"):
        assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "num exact" in printed and "deepmind_math" in printed
    records = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert [r["id"] for r in records] == ["interpolate/arithmetic__div/0", "t0"]
    for r in records:
        assert r["prediction"] == extract_answer(r["raw_output"], r["source"])
        assert r["scores"] == score_prediction(r["prediction"], r["targets"], r["source"])
        assert set(r["scores"]) == {"exact_match", "number_exact", "within_0.001", "within_0.01", "within_0.05"}
    assert [r["targets"] for r in records] == [["-0.25"], ["-7"]]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["skipped"]["deepmind_math"]["read"] == 1
    assert metrics["skipped"]["deepmind_math"]["reasons"] == {"non-numeric answer": 1}

    out = tmp_path / "eval_gsm"
    argv = ["--model", str(saved_tiny_model), "--out", str(out), "--max-new-tokens", "2", "--split", "test",
            "--data", f"gsm8k:{text_eval_data / 'gsm8k'}", "--data", f"svamp:{text_eval_data / 'svamp'}"]
    assert main(argv) == 0
    records = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert [r["targets"] for r in records] == [["617"], ["1234"], ["1851"], ["2"]]
    assert [r["target"] for r in records] == ["617", "1234", "1851", "2"]


def test_eval_asks_as_in_training_unless_told_otherwise(tmp_path):
    from vlm_smmd.evaluation import training_prompts

    model = tmp_path / "model"
    model.mkdir()
    system, instruction, note = training_prompts(model, None, None)  # no run_config.json: nothing taken, and said
    assert (system, instruction) == (None, None) and "has no run_config.json" in note
    (model / "run_config.json").write_text(json.dumps({"instruction": "Answer in H:MM format.",
                                                       "system_prompt": None}))
    system, instruction, note = training_prompts(model, None, None)
    assert (system, instruction) == (None, "Answer in H:MM format.") and "run_config.json" in note
    assert training_prompts(model, None, "Say it.")[:2] == (None, "Say it.")  # given on the command line
    assert training_prompts(model, "", "") == ("", None, "")  # an empty system turn; no instruction
    # trained with an empty system turn (the research configs): asked with one, not with the family's default
    (model / "run_config.json").write_text(json.dumps({"instruction": "", "system_prompt": ""}))
    system, instruction, note = training_prompts(model, None, None)
    assert (system, instruction) == ("", None) and "system prompt ''" in note
    assert training_prompts("tiny", None, None) == (None, None, "")  # a preset has no run_config.json


def test_eval_reads_the_test_split_with_the_runs_reader_options(tmp_path, saved_tiny_model):
    # RefCOCO's targets depend on its reader options (coords): eval must read as training did
    import shutil

    from tests.data.test_refcoco import plant
    from vlm_smmd.evaluation import evaluate_model

    data = plant(tmp_path / "refcoco")
    model = tmp_path / "model"
    shutil.copytree(saved_tiny_model, model)
    (model / "run_config.json").write_text(json.dumps({
        "dataset": "refcoco", "data_root": str(data), "reader_options": json.dumps({"coords": "norm1000"})}))
    metrics = evaluate_model(model, [f"refcoco:{data}"], tmp_path / "eval", split="val", max_new_tokens=2,
                             progress=False)
    assert metrics["run"]["reader_options"] == {"refcoco": {"coords": "norm1000"}}
    (record,) = [json.loads(line) for line in (tmp_path / "eval" / "predictions.jsonl").read_text().splitlines()]
    assert json.loads(record["target"])["bbox_2d"] == [0, 0, 1000, 1000]  # the 56 x 56 image's whole box
    # given explicitly, the options win (here: none, so the reader's default, absolute pixels)
    metrics = evaluate_model(model, [f"refcoco:{data}"], tmp_path / "eval2", split="val", max_new_tokens=2,
                             progress=False, reader_options={})
    (record,) = [json.loads(line) for line in (tmp_path / "eval2" / "predictions.jsonl").read_text().splitlines()]
    assert json.loads(record["target"])["bbox_2d"] == [0, 0, 56, 56] and metrics["run"]["reader_options"] == {}
