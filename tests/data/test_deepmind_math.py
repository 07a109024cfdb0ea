import pytest

from vlm_smmd.data import DataError, read_deepmind_math

ADD = ["What is -1.5 + 0.2?", "-1.3", "Calculate 12 + -19.", "-7", "Sum 2 and 45.", "47"]
DIV = ["Divide -1 by 3.", "-1/3", "What is 84 divided by 4?", "21"]
ALGEBRA = ["Solve 3*x = 9 for x.", "3"]


def _module(root, split, name, lines, newline="\n", end="\n"):
    folder = root / "mathematics_dataset-v1.0" / split
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.txt"
    path.write_bytes((newline.join(lines) + (end and newline)).encode())
    return path


@pytest.fixture
def root(tmp_path):
    _module(tmp_path, "interpolate", "arithmetic__add_or_sub", ADD)
    _module(tmp_path, "interpolate", "arithmetic__div", DIV, newline="\r\n")
    _module(tmp_path, "interpolate", "algebra__linear_1d", ALGEBRA)
    return tmp_path


def test_numeric_pairs_and_fraction_skipped(root):
    div = root / "mathematics_dataset-v1.0" / "interpolate" / "arithmetic__div.txt"
    with pytest.raises(DataError, match=f"{div}:1: non-numeric answer '-1/3'"):
        read_deepmind_math(root, "interpolate", progress=False)
    with pytest.warns(UserWarning, match="deepmind_math: skipped 1 records \\(1 non-numeric answer\\)"):
        ds = read_deepmind_math(root, "interpolate", on_error="skip", progress=False)
    assert ds.skipped == 1 and ds.skip_log.counts == {"non-numeric answer": 1}
    # files in name order, pairs in file order; algebra is not an arithmetic module
    assert [(s.question, s.answer) for s in ds] == [(ADD[0], "-1.3"), (ADD[2], "-7"), (ADD[4], "47"), (DIV[2], "21")]
    s = ds[3]
    assert s.image is None and s.source == "deepmind_math" and s.id == "interpolate/arithmetic__div/1"
    assert s.meta == {"split": "interpolate", "module": "arithmetic__div", "final_answer": "21", "raw_answer": "21",
                      "record": 1}
    kept = read_deepmind_math(root / "mathematics_dataset-v1.0", "interpolate", numeric_only=False, progress=False)
    assert [s.answer for s in kept] == ["-1.3", "-7", "47", "-1/3", "21"]


def test_module_selection_and_limits(root):
    ds = read_deepmind_math(root, "interpolate", modules=["algebra__*", "arithmetic__add_or_sub"], progress=False)
    assert [s.meta["module"] for s in ds] == ["algebra__linear_1d"] + ["arithmetic__add_or_sub"] * 3
    assert len(read_deepmind_math(root, "interpolate", "arithmetic__add_or_sub", max_records=2, progress=False)) == 2
    with pytest.raises(FileNotFoundError, match="no module in .* matches \\['probability__\\*'\\] \\(3 modules"):
        read_deepmind_math(root, "interpolate", "probability__*", progress=False)
    with pytest.raises(FileNotFoundError, match="splits found in .*: interpolate"):
        read_deepmind_math(root, "train-easy", progress=False)


def test_missing_answer_line_and_empty_lines(tmp_path):
    path = _module(tmp_path, "train-easy", "arithmetic__mul", ["What is 6 * 7?", "42", "What is 2 * -3?"], end="")
    with pytest.raises(DataError, match=f"{path}:3: malformed record: the question has no answer line"):
        read_deepmind_math(tmp_path, "train-easy", progress=False)
    with pytest.warns(UserWarning):
        ds = read_deepmind_math(tmp_path, "train-easy", on_error="skip", progress=False)
    assert [s.answer for s in ds] == ["42"] and ds.skip_log.counts == {"malformed record": 1}
    path = _module(tmp_path, "train-easy", "arithmetic__mul", ["What is 6 * 7?", "42", "", "What is 2 * -3?", "-6"])
    with pytest.raises(DataError, match=f"{path}:3: blank line"):
        read_deepmind_math(tmp_path, "train-easy", on_error="skip", progress=False)


def test_records_are_read_again_from_their_byte_range(tmp_path):
    lines = [x for k in range(300) for x in (f"What is {k} + {k}? \u00e9", str(2 * k))]
    _module(tmp_path, "extrapolate", "arithmetic__add_sub_multiple", lines, newline="\r\n")
    ds = read_deepmind_math(tmp_path, "extrapolate", progress=False)
    assert len(ds) == 300
    for k in (0, 1, 150, 299, -1):
        kk = k % 300
        assert (ds[k].question, ds[k].answer, ds[k].meta["record"]) == (f"What is {kk} + {kk}? \u00e9", str(2 * kk), kk)
