from collections import Counter
from fractions import Fraction

import pytest
import torch

from vlm_smmd.data import MixtureDataset, Sample


def _source(name, n):
    return [Sample(image=f"/nowhere/{name}/{k}.png", question=f"{name} q{k}", answer=str(k), source=name,
                   id=f"{name}/{k}") for k in range(n)]


def _ids(mix):
    return [mix[i].id for i in range(len(mix))]


def _largest_remainder(total, weights):
    """Reference allocation with exact fractions: floor of each share, leftovers to the largest remainders."""
    shares = [Fraction(w).limit_denominator(10**9) / sum(Fraction(x).limit_denominator(10**9) for x in weights) * total
              for w in weights]
    counts = [int(s) for s in shares]
    order = sorted(range(len(weights)), key=lambda k: (-(shares[k] - counts[k]), k))
    for k in order[: total - sum(counts)]:
        counts[k] += 1
    return counts


def test_without_weights_every_record_once_shuffled():
    a, b = _source("a", 7), _source("b", 5)
    mix = MixtureDataset({"a": a, "b": b}, seed=1)
    ids = _ids(mix)
    assert sorted(ids) == sorted(s.id for s in a + b)
    assert ids != [s.id for s in a + b]  # shuffled
    assert mix.counts == {"a": 7, "b": 5}
    assert isinstance(mix, torch.utils.data.Dataset) and mix[0].image.startswith("/nowhere/")  # still a path


def test_weights_give_exact_counts_and_balanced_repeats():
    a, b, c = _source("a", 10), _source("b", 3), _source("c", 50)
    weights = [0.5, 0.3, 0.2]
    mix = MixtureDataset({"a": a, "b": b, "c": c}, weights=weights, size=101, seed=0)
    expected = dict(zip("abc", _largest_remainder(101, weights)))
    assert mix.counts == expected and len(mix) == 101
    per_source = Counter(mix[i].source for i in range(len(mix)))
    assert per_source == Counter(expected)
    # b (3 records) is asked for 30 items: each record exactly 10 times; a: 51 of 10 -> 5 or 6 times
    reps_b = Counter(s.id for s in (mix[i] for i in range(len(mix))) if s.source == "b")
    assert set(reps_b.values()) == {expected["b"] // 3}
    reps_a = Counter(s.id for s in (mix[i] for i in range(len(mix))) if s.source == "a")
    assert set(reps_a.values()) <= {expected["a"] // 10, expected["a"] // 10 + 1} and len(reps_a) == 10
    # c is asked for 20 of its 50 records: no record twice
    reps_c = Counter(s.id for s in (mix[i] for i in range(len(mix))) if s.source == "c")
    assert set(reps_c.values()) == {1} and len(reps_c) == 20


def test_default_size_with_weights_is_the_total_of_limited_sources():
    mix = MixtureDataset([_source("a", 30), _source("b", 10)], weights=[1, 3], limits=[None, 4], seed=2)
    assert len(mix) == 34 and mix.counts == {"0": 9, "1": 25}  # 34 * 1/4 = 8.5 -> 9 (tie to first), 25.5 -> 25
    assert _largest_remainder(34, [1, 3]) == [9, 25]


def test_limits_take_a_seeded_subset():
    a = _source("a", 100)
    mix = MixtureDataset({"a": a, "b": _source("b", 5)}, limits={"a": 12}, seed=3)
    used = {mix[i].id for i in range(len(mix)) if mix[i].source == "a"}
    assert len(used) == 12 and len(mix) == 17
    again = MixtureDataset({"a": a, "b": _source("b", 5)}, limits={"a": 12}, seed=3)
    other = MixtureDataset({"a": a, "b": _source("b", 5)}, limits={"a": 12}, seed=4)
    assert {again[i].id for i in range(len(again)) if again[i].source == "a"} == used
    assert {other[i].id for i in range(len(other)) if other[i].source == "a"} != used
    # with weights, a limited source repeats only its subset
    mix = MixtureDataset({"a": a}, weights={"a": 1}, limits={"a": 3}, size=9, seed=0)
    assert Counter(_ids(mix)).most_common()[-1][1] == 3 and len(set(_ids(mix))) == 3
    assert len(MixtureDataset({"a": a}, limits={"a": 0}, seed=0)) == 0


def test_deterministic_by_seed():
    sources = {"a": _source("a", 20), "b": _source("b", 20)}
    one = _ids(MixtureDataset(sources, weights=[2, 1], size=50, seed=5))
    assert one == _ids(MixtureDataset(sources, weights=[2, 1], size=50, seed=5))
    assert one != _ids(MixtureDataset(sources, weights=[2, 1], size=50, seed=6))


def test_indexing_and_dataloader():
    mix = MixtureDataset([_source("a", 4), _source("b", 4)], seed=0)
    assert mix[-1].id == mix[len(mix) - 1].id
    with pytest.raises(IndexError):
        mix[8]
    loader = torch.utils.data.DataLoader(mix, batch_size=3, shuffle=False, collate_fn=list)
    batches = list(loader)
    assert [len(b) for b in batches] == [3, 3, 2] and [s.id for b in batches for s in b] == _ids(mix)


@pytest.mark.parametrize("kwargs, message", [
    (dict(weights=[1, -1]), "weights"),
    (dict(weights=[0, 0]), "weights"),
    (dict(weights=[1, 2, 3]), "3 weights for 2 sources"),
    (dict(limits=[-1, None]), "limit for source '0'"),
    (dict(size=5), "needs weights"),
    (dict(weights={"zzz": 1}), "unknown sources"),
])
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MixtureDataset([_source("a", 3), _source("b", 3)], **kwargs)


def test_weighted_source_without_records_is_an_error():
    with pytest.raises(ValueError, match="source 'b' has weight > 0 but no records"):
        MixtureDataset({"a": _source("a", 3), "b": []}, weights=[1, 1])


def test_from_spec_reads_sources(tmp_path, monkeypatch):
    import vlm_smmd.data.clocks as clocks
    from data_synth.charts import write_chart_dataset

    write_chart_dataset(tmp_path / "dvqa", "dvqa", 2, seed=0, split="train", questions_per_chart=3)
    write_chart_dataset(tmp_path / "chartqa", "chartqa", 2, seed=0, split="train", questions_per_chart=2)
    calls = []

    def fake_clocks(root, split, on_error="raise", **options):
        calls.append((root, split, on_error, options))
        return _source("clocks", 8)

    monkeypatch.setattr(clocks, "read_clocks", fake_clocks)  # the registry looks the reader up when called
    spec = [
        {"name": "dvqa", "root": str(tmp_path / "dvqa"), "weight": 2},
        {"name": "chartqa", "root": str(tmp_path / "chartqa"), "limit": 3, "verify_images": True},
        {"name": "clocks", "root": "/clocks", "split": "test", "weight": 1, "label": "clock faces", "size": 64},
    ]
    mix = MixtureDataset.from_spec(spec, size=40, seed=0, on_error="skip")
    assert mix.names == ["dvqa:train", "chartqa:train", "clock faces"]
    assert mix.counts == dict(zip(mix.names, _largest_remainder(40, [2, 1, 1])))
    assert calls == [("/clocks", "test", "skip", {"size": 64})]
    chart_ids = {mix[i].id for i in range(len(mix)) if mix[i].source == "chartqa"}
    assert len(chart_ids) == 3 and all(mix[i].source in ("dvqa", "chartqa", "clocks") for i in range(len(mix)))
    assert mix.skipped == 0 and "clock faces" in mix.summary()
    with pytest.raises(ValueError, match="name must be one of"):
        MixtureDataset.from_spec([{"name": "coco", "root": "x"}])
    with pytest.raises(ValueError, match="duplicate source"):
        MixtureDataset.from_spec([spec[0], spec[0]])


def test_from_spec_names_the_text_readers(tmp_path):
    import json

    (tmp_path / "gsm8k").mkdir()
    rows = [{"question": f"What is {k} + {k}?", "answer": f"{k}+{k}=<<{k}+{k}={2 * k}>>{2 * k}\n#### {2 * k:,}"}
            for k in range(995, 1001)]
    (tmp_path / "gsm8k" / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "svamp").mkdir()
    (tmp_path / "svamp" / "SVAMP.json").write_text(json.dumps(
        [{"ID": f"chal-{k}", "Body": "Tom has 3 apples.", "Question": "How many?", "Answer": 3.0} for k in range(4)]))
    spec = [
        {"name": "gsm8k", "root": str(tmp_path / "gsm8k"), "target": "rationale"},
        {"name": "svamp", "root": str(tmp_path / "svamp"), "split": "all", "limit": 2},
    ]
    mix = MixtureDataset.from_spec(spec, seed=1)
    assert mix.counts == {"gsm8k:train": 6, "svamp:all": 2} and len(mix) == 8
    items = [mix[i] for i in range(len(mix))]
    assert all(s.image is None for s in items)
    gsm = sorted((s for s in items if s.source == "gsm8k"), key=lambda s: s.id)
    assert gsm[-1].answer == "1000+1000=2000\n#### 2000" and gsm[-1].meta["final_answer"] == "2000"
    with pytest.raises(ValueError, match="SVAMP has no split 'train'"):
        MixtureDataset.from_spec([{"name": "svamp", "root": str(tmp_path / "svamp")}])
