"""Throughput of the chart readers (records/s), one process.

For each layout a large QA file is generated in a temporary folder (records drawn like the real ones,
pointing at a few hundred small PNGs, so the existence checks are cached as on real data), then:
- read:   building the reader (streaming parse, validation, image existence) -> records/s and MB/s
- random: `ds[i]` at random indices (seek, parse one record, build the Sample) -> records/s
- ChartQA parquet: read, random `ds[i]` (row-group reads), and `ds[i].load_image()` in file order.
Prints a table; `--json` prints one JSON object instead.

    python bench/readers.py [--records 200000] [--parquet-rows 2000] [--json]
"""

from __future__ import annotations

import argparse
import io
import json
import random
import tempfile
import time
from pathlib import Path

from PIL import Image

from vlm_smmd.data import read_chartqa, read_dvqa, read_plotqa

IMAGES = 300


def _png(path: Path, k: int) -> None:
    Image.new("RGB", (32, 24), (k % 256, 80, 160)).save(path)


def _question(rng: random.Random, k: int) -> str:
    return f"What is the difference between the {rng.choice(['highest', 'lowest'])} and the value of series {k % 7}?"


def _answer(rng: random.Random):
    return rng.choice([rng.randint(0, 10_000), round(rng.uniform(0, 1000), 2), "Yes", "No", "Mexico"])


def make_plotqa(root: Path, n: int) -> Path:
    rng = random.Random(0)
    (root / "test" / "png").mkdir(parents=True)
    for k in range(IMAGES):
        _png(root / "test" / "png" / f"{k}.png", k)
    path = root / "test" / "qa_pairs_V2.json"
    with open(path, "w") as f:
        f.write('{"qa_pairs": [')
        for k in range(n):
            rec = {"image_index": k % IMAGES, "question_string": _question(rng, k), "answer": _answer(rng),
                   "answer_bbox": {"x": 0.1, "y": 0.2, "w": 0.05, "h": 0.3}, "template": "data_retrieval",
                   "type": "open", "question_id": k}
            f.write((", " if k else "") + json.dumps(rec))
        f.write("]}")
    return path


def make_dvqa(root: Path, n: int) -> Path:
    rng = random.Random(1)
    (root / "images").mkdir(parents=True)
    for k in range(IMAGES):
        _png(root / "images" / f"bar_test_{k:08d}.png", k)
    recs = [{"question_id": k, "image": f"bar_test_{k % IMAGES:08d}.png", "question": _question(rng, k),
             "answer": str(_answer(rng)), "template_id": rng.choice(["structure", "data", "reasoning"]),
             "answer_bbox": []} for k in range(n)]
    (root / "qa").mkdir()
    path = root / "qa" / "test_qa.json"
    path.write_text(json.dumps(recs))
    return path


def make_chartqa(root: Path, n: int) -> list[Path]:
    rng = random.Random(2)
    (root / "test" / "png").mkdir(parents=True)
    for k in range(IMAGES):
        _png(root / "test" / "png" / f"{41699051005347 + k}.png", k)
    paths = []
    for subset in ("human", "augmented"):
        recs = [{"imgname": f"{41699051005347 + k % IMAGES}.png", "query": _question(rng, k),
                 "label": str(_answer(rng))} for k in range(n // 2)]
        path = root / "test" / f"test_{subset}.json"
        path.write_text(json.dumps(recs))
        paths.append(path)
    return paths


def make_parquet(root: Path, n: int) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(3)
    images = []
    for _ in range(n):
        buf = io.BytesIO()
        img = Image.effect_noise((96, 72), 40).convert("RGB")  # a few KB of PNG each
        img.save(buf, format="PNG")
        images.append({"bytes": buf.getvalue(), "path": None})
    table = pa.table({"image": images, "query": [_question(rng, k) for k in range(n)],
                      "label": [[str(_answer(rng))] for _ in range(n)], "human_or_machine": [k % 2 for k in range(n)]})
    path = root / "data" / "test-00000-of-00001.parquet"
    path.parent.mkdir(parents=True)
    pq.write_table(table, path, row_group_size=100)  # what `datasets` uses for image columns
    return path


def timed(fn, *args):
    t = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - t


def random_access(ds, count: int, load: bool = False) -> float:
    rng = random.Random(0)
    idx = [rng.randrange(len(ds)) for _ in range(count)]
    t = time.perf_counter()
    for i in idx:
        s = ds[i]
        if load:
            s.load_image()
    return count / (time.perf_counter() - t)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=200_000, help="QA records per JSON layout")
    p.add_argument("--parquet-rows", type=int, default=2000)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    results, rows = {}, []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        cases = [
            ("plotqa", make_plotqa, read_plotqa),
            ("dvqa", make_dvqa, read_dvqa),
            ("chartqa", make_chartqa, read_chartqa),
        ]
        for name, make, reader in cases:
            made = make(tmp / name, args.records)
            size_mb = sum(q.stat().st_size for q in (made if isinstance(made, list) else [made])) / 2**20
            ds, seconds = timed(reader, tmp / name, "test")
            read_rate = len(ds) / seconds
            rand_rate = random_access(ds, 20_000)
            results[f"{name}_read_records_per_s"] = round(read_rate)
            results[f"{name}_read_mb_per_s"] = round(size_mb / seconds, 1)
            results[f"{name}_random_getitem_records_per_s"] = round(rand_rate)
            rows.append((name, len(ds), f"{size_mb:.1f}", f"{read_rate:,.0f}", f"{size_mb / seconds:.1f}",
                         f"{rand_rate:,.0f}"))
        make_parquet(tmp / "parquet", args.parquet_rows)
        ds, seconds = timed(read_chartqa, tmp / "parquet", "test")
        read_rate = len(ds) / seconds
        rand_rate = random_access(ds, 500)
        t = time.perf_counter()
        for i in range(len(ds)):
            ds[i].load_image()
        seq_load = len(ds) / (time.perf_counter() - t)
        results.update({"chartqa_parquet_read_records_per_s": round(read_rate),
                        "chartqa_parquet_random_getitem_records_per_s": round(rand_rate),
                        "chartqa_parquet_sequential_load_image_records_per_s": round(seq_load)})
        rows.append(("chartqa parquet", len(ds), "", f"{read_rate:,.0f}", "", f"{rand_rate:,.0f}"))
    if args.json:
        print(json.dumps(results))
        return 0
    print(f"{'layout':<16} {'records':>9} {'MB':>7} {'read rec/s':>12} {'read MB/s':>10} {'random getitem rec/s':>21}")
    for row in rows:
        print(f"{row[0]:<16} {row[1]:>9} {row[2]:>7} {row[3]:>12} {row[4]:>10} {row[5]:>21}")
    print(f"chartqa parquet: getitem + load_image in file order {seq_load:,.0f} records/s "
          f"({args.parquet_rows} rows of 96x72 PNG, row groups of 100)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
