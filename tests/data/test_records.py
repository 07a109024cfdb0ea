import json
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vlm_smmd.data import DataError, Sample
from vlm_smmd.data.records import format_number, iter_json_array, iter_lines, number_text, parse_json
from vlm_smmd.data.sample import is_blank


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


# ------------------------------------------------------------------------------ numbers keep their digits


@given(st.integers(-10**40, 10**40), st.integers(-60, 60))
def test_format_number_keeps_a_decimal_exactly(digits, exponent):
    value = Decimal(f"{digits}E{exponent}")  # exact: up to 41 digits, any scale
    text = format_number(value)
    assert Decimal(text) == value and "e" not in text.lower()
    assert text == "0" or not (("." in text and text.endswith("0")) or text.lstrip("-").startswith("00"))


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_format_number_reads_back_as_the_same_float(value):
    assert float(format_number(value)) == value  # nothing rounded beyond the double itself


def test_format_number_limits_and_exact_rounding():
    with pytest.raises(ValueError, match="more than 4300 digits"):
        format_number(Decimal("1e5000"))
    with pytest.raises(ValueError, match="more than 4300 digits"):
        format_number(Decimal("1e-5000"))
    assert format_number(Decimal("1e4299")) == "1" + "0" * 4299
    # rounding asked for: half-up on the decimal text, exact for any length (not limited to 28 digits)
    assert format_number(Decimal("123456789012345678901234567890.125"), 2) == "123456789012345678901234567890.13"


def test_parse_json_keeps_number_text():
    obj = parse_json(b'{"a": 12345678901234567.0, "b": 0.30000000000000004, "c": 7, "d": 1e400}')
    assert obj == {"a": Decimal("12345678901234567.0"), "b": Decimal("0.30000000000000004"), "c": 7,
                   "d": Decimal("1e400")}
    assert type(obj["c"]) is int


# ---------------------------------------------------------------------------------- blank answers


@pytest.mark.parametrize("text, blank", [
    ("", True), ("  \n\t", True), ("\u200b", True), ("\ufeff", True), ("\u2060", True), (" \u200b\u200c\u200d ", True),
    ("\u00ad", True), ("\x00", True), ("\u3000", True), ("0", False), ("a\u200b", False), ("\u200b7", False),
    ("\u0661", False),
])
def test_is_blank(text, blank):
    assert is_blank(text) is blank


# ----------------------------------------------------------------------- streaming parser: bad UTF-8


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 16, 100, 1 << 20])
def test_bad_utf8_names_its_byte_whatever_the_chunking(tmp_path, chunk):
    # multi-byte characters before the bad byte, so characters are cut at chunk edges
    head = json.dumps([{"q": "caf\u00e9 \u20ac \U0001f600 " * 3, "n": k} for k in range(4)], ensure_ascii=False)
    data = head[:-1].encode() + b', {"q": "bad \xff here"}]'
    path = tmp_path / "a.json"
    path.write_bytes(data)
    bad = data.index(b"\xff")
    with pytest.raises(DataError, match=rf"a\.json: not valid UTF-8 at byte {bad}: invalid start byte \(byte 0xff\)"):
        list(iter_json_array(path, chunk_bytes=chunk))


@pytest.mark.parametrize("chunk", [1, 4, 1 << 20])
def test_utf8_cut_at_the_end_of_file_names_its_byte(tmp_path, chunk):
    data = '["\u00e9", "'.encode() + "\u20ac".encode()[:2]
    path = tmp_path / "a.json"
    path.write_bytes(data)
    with pytest.raises(DataError, match=rf"not valid UTF-8 at byte {len(data) - 2}: unexpected end of data"):
        list(iter_json_array(path, chunk_bytes=chunk))
