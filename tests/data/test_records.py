from decimal import Decimal

import pytest

from vlm_smmd.data import DataError, Sample
from vlm_smmd.data.records import iter_lines, number_text


@pytest.mark.parametrize("text,thousands,expected", [
    ("12", False, "12"), ("-12", False, "-12"), ("+3", False, "3"), ("007.50", False, "7.5"), ("-0", False, "0"),
    (".5", False, "0.5"), (" 42 ", False, "42"), ("1,234", False, None), ("1,234", True, "1234"),
    ("-1,234,567.25", True, "-1234567.25"), ("1,23", True, None), ("12,5", True, None), ("1/2", False, None),
    ("1e3", False, None), ("3*sqrt(7)", False, None), ("", False, None), ("5.", False, None),
])
def test_number_text(text, thousands, expected):
    assert number_text(text, thousands=thousands) == expected
    if expected is not None:  # the same value as Decimal reads it
        assert Decimal(expected) == Decimal(text.strip().replace(",", ""))


def test_text_only_sample_has_no_image():
    s = Sample(image=None, question="What is 2 + 2?", answer="4", source="arithmetic", id="test-1")
    with pytest.raises(DataError, match="record 'test-1' of arithmetic is text-only"):
        s.load_image()


def test_iter_lines_offsets(tmp_path):
    data = b"\xef\xbb\xbfab\r\n\ncd\nef"
    path = tmp_path / "f.txt"
    path.write_bytes(data)
    got = list(iter_lines(path))
    assert [(n, body) for n, _, body in got] == [(1, b"ab"), (2, b""), (3, b"cd"), (4, b"ef")]
    assert all(data[start:start + len(body)] == body for _, start, body in got)
