import json
import random
import re
from fractions import Fraction

import pytest
from PIL import Image

from data_synth import charts
from data_synth.charts import (
    KINDS,
    QTYPES,
    VALUE_KINDS,
    main,
    make_chart,
    make_questions,
    write_chart_dataset,
)

PLAIN_NUMBER = re.compile(r"^-?\d+(\.\d*[1-9])?$")  # no exponent, no trailing zeros, no separators


def derive(chart, q):
    """Answer of a question from the stored data, with exact fractions (independent of data_synth)."""
    rows = [[Fraction(v) for v in s["values"]] for s in chart["series"]]
    cats, args, qtype = chart["categories"], q["args"], q["qtype"]
    row = rows[args.get("series", 0)]
    if qtype == "value":
        return row[args["category"]]
    if qtype == "compare":
        a, b = row[args["a"]], row[args["b"]]
        if args["form"] == "yesno":
            return "Yes" if a > b else "No"
        return cats[args["a"]] if a > b else cats[args["b"]]
    if qtype in ("max", "min"):
        ranked = sorted(range(len(row)), key=lambda k: row[k], reverse=qtype == "max")
        return cats[ranked[0]] if args["ask"] == "label" else row[ranked[0]]
    if qtype == "difference":
        return abs(row[args["a"]] - row[args["b"]])
    if qtype == "sum":
        total = Fraction(0)
        for k in args["categories"]:
            total += row[k]
        return total
    if qtype == "count":
        if args["what"] == "categories":
            return Fraction(len(cats))
        return Fraction(len([v for v in row if v > Fraction(args["threshold"])]))
    raise AssertionError(qtype)


def check_chart(chart):
    """Data invariants and every answer re-derived; returns the question types seen."""
    for s in chart["series"]:
        values = [Fraction(v) for v in s["values"]]
        assert len(values) == len(chart["categories"]) and len(set(values)) == len(values)
        assert all(v > 0 for v in values)
        kind = chart["value_kind"]
        if kind in ("integer", "large"):
            assert all(v.denominator == 1 for v in values)
        if kind == "large":
            assert min(values) >= 100_000
        if kind == "decimal":
            assert all(100 % v.denominator == 0 for v in values)  # at most two decimals
        if kind == "percentage":
            assert all(0 < v < 100 for v in values)
        if chart["kind"] == "pie":
            assert sum(values) == 100
    assert len(set(chart["categories"])) == len(chart["categories"])
    seen = set()
    for q in chart["questions"]:
        expected = derive(chart, q)
        if isinstance(expected, Fraction):
            assert q["numeric"] and PLAIN_NUMBER.match(q["answer"]), q
            assert Fraction(q["answer"]) == expected, (chart, q)
        else:
            assert not q["numeric"] and q["answer"] == expected, (chart, q)
        # the question names what it asks about
        args = q["args"]
        for key in ("category", "a", "b"):
            if key in args:
                assert chart["categories"][args[key]] in q["question"]
        name = chart["series"][args.get("series", 0)]["name"]
        if name and q["qtype"] != "count" or (name and args.get("what") == "above"):
            assert name in q["question"], q
        if args.get("threshold"):
            assert args["threshold"] in q["question"]
        seen.add(q["qtype"])
    return seen


def test_every_answer_rederived_from_the_data():
    kinds, value_kinds, qtypes = set(), set(), set()
    for k in range(400):
        rng = random.Random(k)
        chart = make_chart(rng)
        chart["questions"] = make_questions(chart, rng, 7)
        qtypes |= check_chart(chart)
        kinds.add(chart["kind"])
        value_kinds.add(chart["value_kind"])
    assert kinds == set(KINDS) and value_kinds == set(VALUE_KINDS) and qtypes == set(QTYPES)


def test_numbers_format_without_noise():
    from decimal import Decimal

    assert [charts.fmt(Decimal(t)) for t in ("12.50", "3.00", "0.10", "1E+3", "-0.0", "7")] == [
        "12.5", "3", "0.1", "1000", "0", "7"]
    assert charts.display(Decimal("1234567"), "large") == "1,234,567"
    assert charts.display(Decimal("45.5"), "percentage") == "45.5%"


@pytest.mark.parametrize("layout", ["chartqa", "plotqa", "dvqa"])
def test_written_dataset_matches_its_data_file(tmp_path, layout):
    info = write_chart_dataset(tmp_path, layout, 3, seed=4, split="test", questions_per_chart=4, size=(300, 240))
    assert info["charts"] == 3 and info["questions"] == 12
    stored = [json.loads(line) for line in open(info["data_file"])]
    for chart in stored:
        check_chart(chart)
        with Image.open(tmp_path / chart["image"]) as img:
            assert img.size == (300, 240) and img.format == "PNG"
    if layout == "plotqa":
        pairs = json.loads((tmp_path / "test" / "qa_pairs_V2.json").read_text())["qa_pairs"]
        by_id = {p["question_id"]: p for p in pairs}
        for chart in stored:
            for q in chart["questions"]:
                p = by_id[q["ref"]["question_id"]]
                assert p["image_index"] == chart["index"] and p["question_string"] == q["question"]
                if q["numeric"]:  # numbers are JSON numbers in PlotQA, as in the release
                    assert isinstance(p["answer"], (int, float)) and Fraction(str(p["answer"])) == Fraction(q["answer"])
                else:
                    assert p["answer"] == q["answer"]
    if layout == "chartqa":
        for chart in stored:
            name = chart["image"].rsplit("/", 1)[1]
            table = (tmp_path / "test" / "tables" / name.replace(".png", ".csv")).read_text().splitlines()
            assert len(table) == 1 + len(chart["categories"])


def test_splits_draw_different_charts():
    one = make_chart(random.Random("charts:0:train:0"))
    assert one == make_chart(random.Random("charts:0:train:0"))
    assert one != make_chart(random.Random("charts:0:test:0"))


def test_cli(tmp_path, capsys):
    out = tmp_path / "ds"
    assert main(["--layout", "plotqa", "--num", "2", "--seed", "1", "--out", str(out), "--split", "test",
                 "--kinds", "pie,hbar", "--no-progress"]) == 0
    assert "wrote 2 charts, 6 questions" in capsys.readouterr().out
    stored = [json.loads(line) for line in open(out / "charts_data" / "test.jsonl")]
    assert {c["kind"] for c in stored} <= {"pie", "hbar"}
    assert (out / "test" / "png" / "1.png").is_file()
    with pytest.raises(SystemExit):
        main(["--layout", "plotqa", "--num", "2", "--out", str(out), "--kinds", "donut"])
    with pytest.raises(SystemExit):
        main(["--layout", "coco", "--num", "2", "--out", str(out)])
    assert main(["--layout", "dvqa", "--num", "0", "--out", str(out)]) == 2


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="layout"):
        write_chart_dataset(tmp_path, "figureqa", 1)
    with pytest.raises(ValueError, match="size"):
        write_chart_dataset(tmp_path, "dvqa", 1, size=(10, 10))
    with pytest.raises(ValueError, match="kinds"):
        write_chart_dataset(tmp_path, "dvqa", 1, kinds=("radar",))
