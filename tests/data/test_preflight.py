"""Preflight: every record checked once before training, raise or counted skip, cached, parallel."""

import json
import os

import pytest

from tests.conftest import make_image
from vlm_smmd.data import DataError, Sample
from vlm_smmd.data.collator import VLMCollator
from vlm_smmd.data.preflight import CheckedDataset, preflight


@pytest.fixture(scope="module")
def collator(tiny_processor):
    return VLMCollator(tiny_processor)


@pytest.fixture
def records(tmp_path):
    """12 records: good PNG files, plus a corrupt image, a missing one, an empty answer, a huge question."""
    out = []
    for i in range(12):
        path = tmp_path / f"{i}.png"
        make_image(100 + 8 * i, 80, seed=i).save(path)
        out.append(Sample(str(path), "What time is it?", f"{i % 12 + 1}:05", "test", f"r{i}"))
    (tmp_path / "3.png").write_bytes(b"not a png")
    os.remove(tmp_path / "5.png")
    out[7].answer = "  "
    out[9].question = "word " * 400
    return out


def test_skip_drops_each_bad_record_once_by_reason(records, collator, tmp_path):
    result = preflight(records, collator, name="train", max_length=300, on_error="skip", cache_dir=tmp_path / "c",
                       progress=False)
    assert result.kept == [0, 1, 2, 4, 6, 8, 10, 11]
    assert result.skipped == {"unreadable image": 1, "image missing": 1, "invalid record": 1, "too long": 1}
    assert result.total_skipped == 4 and result.checked == 12
    # the lengths are the rows the collator builds
    for i, length in zip(result.kept, result.lengths):
        assert length == int(collator([records[i]])["attention_mask"].sum())
    checked = CheckedDataset(records, result.kept, result.lengths)
    assert len(checked) == 8 and checked[3] is records[4]
    assert "4 skipped" in result.summary() and "train" in result.summary()


def test_raise_stops_at_the_first_bad_record_naming_it(records, collator, tmp_path):
    with pytest.raises(DataError, match=r"3\.png: unreadable image \(record 'r3' of test\)"):
        preflight(records, collator, name="train", on_error="raise", cache_dir=tmp_path / "c", progress=False)


def test_cached_by_records_and_settings(records, collator, tmp_path):
    cache = tmp_path / "c"
    first = preflight(records, collator, name="train", max_length=300, on_error="skip", cache_dir=cache,
                      progress=False)
    again = preflight(records, collator, name="train", max_length=300, on_error="skip", cache_dir=cache,
                      progress=False)
    assert again.cached and not first.cached and again.kept == first.kept and again.lengths == first.lengths
    assert len(list(cache.glob("*.json"))) == 1
    # another max_length is another check
    wider = preflight(records, collator, name="train", max_length=5000, on_error="skip", cache_dir=cache,
                      progress=False)
    assert not wider.cached and 9 in wider.kept
    # a repaired image file is noticed (size and mtime are in the fingerprint)
    make_image(90, 90).save(records[3].image, format="PNG")
    repaired = preflight(records, collator, name="train", max_length=300, on_error="skip", cache_dir=cache,
                         progress=False)
    assert not repaired.cached and 3 in repaired.kept


def test_workers_give_the_same_result(records, collator, tmp_path):
    many = records * 12  # enough records for several chunks
    one = preflight(many, collator, name="t", max_length=300, on_error="skip", cache_dir=tmp_path / "a",
                    progress=False)
    two = preflight(many, collator, name="t", max_length=300, on_error="skip", workers=2, cache_dir=tmp_path / "b",
                    progress=False)
    assert (one.kept, one.lengths, one.skipped) == (two.kept, two.lengths, two.skipped)
    assert one.total_skipped == 4 * 12


def test_extreme_aspect_ratio_is_a_data_error(collator, tmp_path):
    wide = tmp_path / "wide.png"
    make_image(5000, 20).save(wide)
    result = preflight([Sample(str(wide), "q", "1", "test", "wide")], collator, name="t", on_error="skip",
                       cache_dir=tmp_path / "c", progress=False)
    assert result.kept == [] and "unusable image size 5000x20" in result.examples[0]


def test_training_with_batch_size_one_skips_the_corrupt_record_once(tmp_path):
    """A corrupt image with batch size 1 in skip mode: the run finishes and reports exactly 1 skipped."""
    from data_synth.writer import write_clock_dataset
    from vlm_smmd.config import load_config
    from vlm_smmd.training import run

    root = tmp_path / "clocks"
    write_clock_dataset(root, num=10, seed=1, size=64, splits="train=0.6,test=0.4", progress=False)
    rows = [json.loads(line) for line in (root / "train" / "metadata.jsonl").read_text().splitlines()]
    (root / "train" / rows[2]["file_name"]).write_bytes(b"corrupt")
    configs = load_config(None, {
        "model_name_or_path": "tiny", "dataset": "clocks", "data_root": str(root), "eval_split": "test",
        "on_error": "skip", "output_dir": str(tmp_path / "out"), "use_cpu": "true", "max_steps": "8",
        "per_device_train_batch_size": "1", "num_train_epochs": "2", "disable_tqdm": "true", "report_to": "none",
        "train_sampling_strategy": "group_by_length"})
    configs[3].max_steps = -1  # two epochs over the 5 good records: a skip counted per epoch would be 2
    metrics = run(*configs)
    assert metrics["skipped_samples"] == 1
    state = json.loads((tmp_path / "out" / "trainer_state.json").read_text())
    assert state["global_step"] == 10
