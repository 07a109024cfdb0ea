"""A `val` split in a research setting (issue 40): new images of seen values, disjoint from train and test by
the leakage check, and holding none of the values an unseen-values split keeps out of training."""

import pytest

from vlm_smmd.config import check_config
from vlm_smmd.data import read_split
from vlm_smmd.data.leakage import check_leakage
from vlm_smmd.training import synthesize_if_missing

CLOCKS = """dataset: clocks
data_root: {root}
synthesize: clocks
synthesize_num: 80
synthesize_size: 64
synthesize_options: {{splits: "train=0.7,val=0.15,test=0.15", plain: true, unseen_fraction: 0.2, unseen_num: 12}}
test_splits: [test, test_unseen, val]
primary_metric: clock_exact
"""

BARS = """dataset: chartqa
data_root: {root}
synthesize: bars
synthesize_num: 40
synthesize_size: 56
synthesize_options: {{unseen_fraction: 0.2}}
test_splits: [test, test_unseen, val]
primary_metric: exact_match
"""


@pytest.mark.parametrize("text", [CLOCKS, BARS], ids=["clocks", "bars"])
def test_rendered_val_split_shares_nothing_with_train_or_test(tmp_path, text):
    config = tmp_path / "setting.yaml"
    config.write_text(text.format(root=tmp_path / "data"), encoding="utf-8")
    _, data_args, _, _ = check_config(config)
    synthesize_if_missing(data_args)
    split = {s: read_split(data_args, s) for s in ("train", "val", "test", "test_unseen")}
    assert len(split["val"]) >= 4
    assert check_leakage(iter(split["val"]), iter(split["val"])).images.k == len(split["val"])  # the check sees a copy
    for other in ("train", "test", "test_unseen"):
        report = check_leakage(iter(split["val"]), iter(split[other]))
        assert report.images.n == len(split["val"]) and report.images.k == 0, other
    # seen values only: no val answer is one the unseen split holds out
    unseen = check_leakage(iter(split["val"]), iter(split["test_unseen"]))
    train = check_leakage(iter(split["test_unseen"]), iter(split["train"]))
    assert train.answers.k == 0  # the unseen split really holds values training lacks
    assert unseen.answers.k == 0
