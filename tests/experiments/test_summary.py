"""vlm-smmd summary: each page's declared endpoint against CE, Holm across pages, minimal detectable differences;
and the page's own additions it reads (paired.csv's primary column) or shows (where the runs started)."""

import json
import math
import shutil

import pytest

from tests.test_compare import plant_run, read_csv, settings_for
from vlm_smmd.cli import main as cli
from vlm_smmd.experiments.results import start_lines, write_results
from vlm_smmd.experiments.store import Status
from vlm_smmd.experiments.summary import minimal_detectable_difference, summarize
from vlm_smmd.experiments.variants import plan_variants

TARGETS = ["3:15", "10:07", "6:30", "12:45"]
PRIMARY = {"metric": "exact_match", "split": "test"}
BASE = {"folder": "outputs/scratch_cpu_base", "sha256": "7328ab6832f0" + "0" * 52, "files": {}}


def page(out, hits_none, hits_smmd, base=None):
    """A finished compare page of none vs smmd on clocks: seed i gets hits_none[i] / hits_smmd[i] of 4 exact."""
    out.mkdir(parents=True, exist_ok=True)
    seeds = list(range(len(hits_none)))
    variants = plan_variants(["none", "smmd"], [], seeds)
    status = Status(out / "status.json", [v.name for v in variants])
    for v in variants:
        hits = (hits_none if v.aux == "none" else hits_smmd)[v.seed]
        plant_run(out, v, TARGETS[:hits] + ["1:01"] * (4 - hits), TARGETS)
        if base is not None:
            (out / "runs" / v.name / "model").mkdir(parents=True)
            record = {"aux": v.aux} | ({"base": base(v)} if base(v) else {})
            (out / "runs" / v.name / "model" / "run_config.json").write_text(json.dumps(record))
        status.set(v.name, status="done", seconds=1.0)
    return write_results(out, variants, status, settings_for(primary=PRIMARY))


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    """Two finished pages (writing one, plots included, takes seconds): a from a base, b from scratch."""
    root = tmp_path_factory.mktemp("pages")
    page(root / "a", [1, 1, 2, 1, 2], [3, 4, 4, 3, 4], base=lambda v: BASE)  # smmd ahead on every seed
    page(root / "b", [2, 2, 3, 1, 2], [3, 1, 3, 2, 4])  # mixed
    return root


def test_paired_csv_marks_the_declared_endpoint_and_its_direction(pages):
    rows = read_csv(pages / "a" / "paired.csv")
    marked = [(r["split"], r["figure"]) for r in rows if r["primary"] == "True"]
    assert marked == [("test", "exact_match")]
    direction = {r["figure"]: r["lower_is_better"] for r in rows}
    assert direction["exact_match"] == "False" and direction["mean_time_gap_min"] == "True"


def test_holm_runs_across_pages_not_within_each(pages):
    rows = summarize([("chart", pages / "a"), ("clock", pages / "b")])
    assert [(r["setting"], r["a"], r["b"], r["figure"]) for r in rows] == [
        ("chart", "smmd", "none", "exact_match"), ("clock", "smmd", "none", "exact_match")]
    a, b = rows
    # the differences by hand: a (+.5, +.75, +.5, +.5, +.5), b (+.25, -.25, 0, +.25, +.5)
    assert a["mean"] == pytest.approx(0.55) and b["mean"] == pytest.approx(0.15)
    assert a["p_signflip"] == pytest.approx(2 / 32)  # all five positive: 2 of the 32 sign patterns
    within = {r["figure"]: float(r["p_holm"]) for r in read_csv(pages / "a" / "paired.csv")
              if r["comparison"] == "smmd vs none"}
    assert within["exact_match"] == pytest.approx(a["p_signflip"])  # alone on its page: no correction there
    low, high = sorted([a["p_signflip"], b["p_signflip"]])  # Holm with m = 2, step by step
    first = min(1.0, 2 * low)
    assert sorted([a["p_holm"], b["p_holm"]]) == pytest.approx([first, max(first, high)])
    assert not a["significant"] and a["verdict"] == "no detectable difference"  # 0.125 after the correction
    # the group figures beside the test come from results.csv
    assert a["b_mean"] == pytest.approx(7 / 20) and a["a_mean"] == pytest.approx(18 / 20)
    assert a["mdd"] == pytest.approx(minimal_detectable_difference(a["sd"], 5))
    assert a["mdd_corrected"] > a["mdd"]


def test_minimal_detectable_difference_has_the_power_it_claims():
    stats = pytest.importorskip("scipy.stats")
    for n, sd in ((20, 0.1), (10, 0.3), (5, 1.0)):
        mdd = minimal_detectable_difference(sd, n)
        df, crit = n - 1, stats.t.ppf(0.975, n - 1)
        shift = mdd * math.sqrt(n) / sd
        power = stats.nct.sf(crit, df, shift) + stats.nct.cdf(-crit, df, shift)  # the exact two-sided t power
        assert power == pytest.approx(0.8, abs=0.03), (n, power)
        assert mdd == pytest.approx((stats.t.ppf(0.975, df) + stats.t.ppf(0.8, df)) * sd / math.sqrt(n))
    assert minimal_detectable_difference(None, 20) is None and minimal_detectable_difference(0.1, 1) is None


def test_the_command_writes_the_table_and_refuses_what_it_cannot_use(pages, tmp_path, capsys):
    for name in ("a", "b"):
        shutil.copytree(pages / name, tmp_path / name)
    out = tmp_path / "summary"
    assert cli(["summary", f"chart, base={tmp_path / 'a'}", f"clock, base={tmp_path / 'b'}", "--out", str(out)]) == 0
    assert "2 tests against CE across 2 pages" in capsys.readouterr().out
    md = (out / "summary.md").read_text()
    assert "| chart, base | smmd vs none | exact_match on `test` | 5 |" in md
    assert "all 2 tests of this table" in md
    assert [r["setting"] for r in read_csv(out / "summary.csv")] == ["chart, base", "clock, base"]

    assert cli(["summary", f"x={tmp_path / 'a'}", "--out", str(out)]) == 2  # would replace the summary
    assert "already holds a summary" in capsys.readouterr().err
    assert cli(["summary", f"x={tmp_path / 'a'}", f"x={tmp_path / 'b'}", "--out", str(tmp_path / "s2")]) == 2
    assert "repeated: x" in capsys.readouterr().err
    assert cli(["summary", f"x={tmp_path}", "--out", str(tmp_path / "s3")]) == 2
    assert "no paired.csv" in capsys.readouterr().err
    old = tmp_path / "a" / "paired.csv"  # a page written before the primary column
    rows = read_csv(old)
    old.write_text("split,comparison,a,b,figure,n\n" + "".join(f"{r['split']},{r['comparison']},{r['a']},{r['b']},"
                                                                   f"{r['figure']},{r['n']}\n" for r in rows))
    assert cli(["summary", f"x={tmp_path / 'a'}", "--out", str(tmp_path / "s4")]) == 2
    err = capsys.readouterr().err
    assert f"{old}: no primary column" in err and len(err.strip().splitlines()) == 1


def test_the_page_says_where_its_runs_started(pages, tmp_path):
    assert "- every run starts from outputs/scratch_cpu_base (sha256 7328ab6832f0)" in (pages / "a" / "results.md").read_text()
    assert "starts from" not in (pages / "b" / "results.md").read_text()  # from scratch: no line
    variants = plan_variants(["none", "smmd"], [], [0, 1])
    status = Status(tmp_path / "status.json", [v.name for v in variants])
    for v in variants:
        status.set(v.name, status="done", seconds=1.0)
        (tmp_path / "runs" / v.name / "model").mkdir(parents=True)
        record = {"aux": v.aux} | ({"base": BASE} if v.seed == 0 else {})
        (tmp_path / "runs" / v.name / "model" / "run_config.json").write_text(json.dumps(record))
    assert start_lines(tmp_path, variants, status) == [
        "- runs start from different places: 2 starts from outputs/scratch_cpu_base (sha256 7328ab6832f0) "
        "(e.g. none-seed0); 2 from scratch, a preset or a hub id (no trained folder) (e.g. none-seed1)"]
    (tmp_path / "runs" / "smmd-seed1" / "model" / "run_config.json").write_text("{broken")
    assert "1 unreadable run record (" in start_lines(tmp_path, variants, status)[0]
