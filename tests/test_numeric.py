import random
from decimal import Decimal

import pytest
import torch

from vlm_smmd.numeric import NumericVocab, is_plain_number

REJECTED = ["½", "²", "１", " 5", "5 ", "1e3", "inf", "nan", "-1", "+1", "1_000", "1,000", "٣", "Ġ5", "▁5",
            "", ".", "..", "1.2.3", "0x1F", "1/2"]
ACCEPTED = ["0", "9", "12", "007", "0.5", ".5", "5.", "999"]


@pytest.mark.parametrize("text", ACCEPTED)
def test_plain_number_accepts(text):
    assert is_plain_number(text)


@pytest.mark.parametrize("text", REJECTED)
def test_plain_number_rejects(text):
    assert not is_plain_number(text)


@pytest.fixture(scope="module")
def qwen_vocab(qwen_tokenizer):
    return NumericVocab.from_tokenizer(qwen_tokenizer)


def test_qwen_vnum_is_the_ten_digits(qwen_vocab):
    assert qwen_vocab.token_ids.dtype == torch.long and qwen_vocab.values.dtype == torch.float32
    assert qwen_vocab.token_ids.tolist() == list(range(15, 25))
    assert qwen_vocab.values.tolist() == [float(i) for i in range(10)]
    assert qwen_vocab.texts == [str(i) for i in range(10)]
    assert len(qwen_vocab) == 10


def test_qwen_rejected_texts_are_not_numeric(qwen_tokenizer, qwen_vocab):
    vocab = qwen_tokenizer.get_vocab()
    numeric = set(qwen_vocab.token_ids.tolist())
    for text in REJECTED:
        # the token (if the text is one token) and every token the text encodes to, except ASCII digits
        ids = qwen_tokenizer.encode(text, add_special_tokens=False)
        digit_ids = {vocab[d] for d in "0123456789"}
        assert not (set(ids) - digit_ids) & numeric, text
        if len(ids) == 1:
            assert ids[0] not in numeric, text
    assert vocab["inf"] not in numeric and "Ġ5" not in vocab  # Qwen splits " 5" into "Ġ", "5"


def test_qwen_vnum_matches_a_scan_of_every_token(qwen_tokenizer, qwen_vocab):
    """Independent scan: decode every id, keep those whose text is ASCII digits with at most one '.'."""
    expected = []
    for tid in range(len(qwen_tokenizer)):
        text = qwen_tokenizer.decode([tid])
        if text and all(c in "0123456789." for c in text) and text.count(".") <= 1 and text != ".":
            expected.append(tid)
    assert qwen_vocab.token_ids.tolist() == expected


class FakeTokenizer:
    """A Llama-3-like vocabulary with multi-digit tokens, decoys and a special token."""

    def __init__(self):
        texts = ["<s>", "a", ".", "Ġ5", "▁7", "-1", "1e3", "½", "05", "1.5", ".5", "5."]
        texts += [str(i) for i in range(1000)]
        self.vocab = {t: i for i, t in enumerate(texts)}
        self.all_special_ids = [0]

    def get_vocab(self):
        return dict(self.vocab)

    def decode(self, ids):
        inv = {i: t for t, i in self.vocab.items()}
        return "".join(inv[i].replace("Ġ", " ").replace("▁", " ") for i in ids)


def test_multi_digit_tokenizer_values_and_order():
    tok = FakeTokenizer()
    v = NumericVocab.from_tokenizer(tok)
    assert v.texts[:4] == ["05", "1.5", ".5", "5."]
    assert len(v) == 1004
    assert v.values[:4].tolist() == [5.0, 1.5, 0.5, 5.0]
    assert v.values[4:].tolist() == [float(i) for i in range(1000)]
    assert torch.equal(v.token_ids, torch.sort(v.token_ids).values)
    small = NumericVocab.from_tokenizer(tok, max_value=9)
    assert small.texts == ["05", "1.5", ".5", "5."] + [str(i) for i in range(10)]


def test_canonical_keeps_each_integer_once():
    tok = FakeTokenizer()
    v = NumericVocab.from_tokenizer(tok, canonical=True)
    assert v.texts == [str(i) for i in range(1000)]
    assert v.values.tolist() == [float(i) for i in range(1000)]
    assert NumericVocab.from_tokenizer(tok, canonical=True, max_value=99).texts == [str(i) for i in range(100)]


def test_no_numeric_tokens_is_an_error():
    tok = FakeTokenizer()
    tok.vocab = {"a": 0, "b": 1}
    with pytest.raises(ValueError, match="no numeric tokens"):
        NumericVocab.from_tokenizer(tok)


def test_mask_and_index_of(qwen_vocab):
    ids = torch.tensor([[-100, 14, 15, 24], [25, 151935, 10**6, 20]])
    assert qwen_vocab.index_of(ids).tolist() == [[-1, -1, 0, 9], [-1, -1, -1, 5]]
    assert qwen_vocab.mask(ids).tolist() == [[False, False, True, True], [False, False, False, True]]
    assert qwen_vocab.mask(ids).dtype == torch.bool
    assert qwen_vocab.index_of(torch.zeros(0, dtype=torch.long)).shape == (0,)


def test_llama3_vnum_all_and_canonical():
    """The real Llama-3 tokenizer: 0..999 plus the zero-padded 00..099 and 000..099 spellings."""
    pytest.importorskip("tokenizers")
    from vlm_smmd.families.tokenizers import build_llama3_tokenizer

    tok = build_llama3_tokenizer()
    everything = NumericVocab.from_tokenizer(tok)
    expected = {str(i) for i in range(1000)} | {f"{i:02d}" for i in range(10)} | {f"{i:03d}" for i in range(100)}
    assert set(everything.texts) == expected and len(everything) == 1110
    for text, value in zip(everything.texts, everything.values.tolist()):
        assert value == int(text)
    canonical = NumericVocab.from_tokenizer(tok, canonical=True)
    assert sorted(canonical.values.tolist()) == [float(i) for i in range(1000)]
    ids = tok("10:07", add_special_tokens=False).input_ids
    assert [tok.decode([i]) for i in ids] == ["10", ":", "07"]
    assert everything.mask(torch.tensor(ids)).tolist() == [True, False, True]
    assert canonical.mask(torch.tensor(ids)).tolist() == [True, False, False]


# ---------------------------------------------------------------- numbers among answer positions

NUMERIC_TEXTS = [str(d) for d in range(10)] + ["12", "345", "07", "007", "1.5", ".5", "5.", "999"]
POINT_ID, TEXT_IDS = 1, [2, 3]  # ".", and two text tokens ("a", ":")
FIRST_NUMERIC_ID = 10


def _vocab():
    ids = torch.arange(FIRST_NUMERIC_ID, FIRST_NUMERIC_ID + len(NUMERIC_TEXTS))
    return NumericVocab(ids, torch.tensor([float(t) for t in NUMERIC_TEXTS]), NUMERIC_TEXTS, POINT_ID)


def _text(token_id):
    if token_id == POINT_ID:
        return "."
    if token_id >= FIRST_NUMERIC_ID:
        return NUMERIC_TEXTS[token_id - FIRST_NUMERIC_ID]
    return None


def _unit(text):
    """The token's shape with every digit 0 but the last, which is 1 ("345" -> "001", "1.5" -> "0.1")."""
    last = max(i for i, c in enumerate(text) if c.isdigit())
    return "".join(("1" if i == last else "0") if c.isdigit() else c for i, c in enumerate(text))


def reference_numbers(rows):
    """Slow reference from the texts alone: rows = {row: {position: token id}} -> list of numbers, each a
    list of (row, position, place factor, digits after) for its numeric tokens, and the number's Decimal."""
    numbers = []
    for row in sorted(rows):
        runs, current, last = [], [], None
        for pos in sorted(rows[row]):
            text = _text(rows[row][pos])
            dotted = text is not None and "." in text
            if text is None or pos != last or (dotted and any("." in t for _, t in current)):
                if current:
                    runs.append(current)
                current = []
            if text is not None:
                current.append((pos, text))
            last = pos + 1
        runs.append(current)
        for run in runs:
            texts = [t for _, t in run]
            if not any(t != "." for t in texts):
                continue
            tokens = []
            for i, (pos, text) in enumerate(run):
                if text == ".":
                    continue
                shape = "".join(_unit(t) if j == i else t.translate(str.maketrans("123456789", "000000000"))
                                for j, t in enumerate(texts))
                place = Decimal("0" + shape if shape.startswith(".") else shape) / Decimal(_unit(text))
                after = sum(c.isdigit() for t in texts[i + 1:] for c in t)
                tokens.append((row, pos, place, after))
            joined = "".join(texts)
            numbers.append((tokens, Decimal("0" + joined if joined.startswith(".") else joined)))
    return numbers


def _random_rows(seed):
    rng = random.Random(seed)
    choices = list(range(FIRST_NUMERIC_ID, FIRST_NUMERIC_ID + len(NUMERIC_TEXTS))) + [POINT_ID] * 4 + TEXT_IDS * 2
    rows = {}
    for row in range(rng.randint(1, 4)):
        positions = sorted(rng.sample(range(40), rng.randint(0, 25)))  # gaps between positions break numbers
        rows[row] = {pos: rng.choice(choices) for pos in positions}
    return rows


@pytest.mark.parametrize("seed", range(25))
def test_number_layout_matches_a_reading_of_the_texts(seed):
    rows = _random_rows(seed)
    flat = [(row, pos, tid) for row in rows for pos, tid in rows[row].items()]
    random.Random(seed).shuffle(flat)  # any order of positions
    batch_idx = torch.tensor([r for r, _, _ in flat], dtype=torch.long)
    pos_idx = torch.tensor([p for _, p, _ in flat], dtype=torch.long)
    targets = torch.tensor([t for _, _, t in flat], dtype=torch.long)
    layout = _vocab().number_layout(targets, batch_idx, pos_idx)
    where = {(r, p): i for i, (r, p, _) in enumerate(flat)}
    want = reference_numbers(rows)
    assert layout.count == len(want)
    assert layout.width == max((len(tokens) for tokens, _ in want), default=0)
    seen = set()
    for k, (tokens, value) in enumerate(want):  # numbered in row-major order
        total = Decimal(0)
        for slot, (row, pos, place, after) in enumerate(tokens):
            i = where[row, pos]
            seen.add(i)
            assert layout.number[i] == k and layout.slot[i] == slot
            assert Decimal(10) ** int(layout.exponent[i]) == place
            assert layout.digits_after[i] == after
            total += Decimal(NUMERIC_TEXTS[int(targets[i]) - FIRST_NUMERIC_ID]) * place
        assert total == value
    outside = [i for i in range(len(flat)) if i not in seen]
    assert all(layout.number[i] == -1 and layout.exponent[i] == 0 for i in outside)


def test_number_layout_examples_on_qwen(qwen_tokenizer, qwen_vocab):
    assert qwen_vocab.decimal_point_id == qwen_tokenizer.convert_tokens_to_ids(".") == 13
    ids = qwen_tokenizer("10:07 is 12.5, not 1.2.3.", add_special_tokens=False).input_ids
    texts = [qwen_tokenizer.decode([i]) for i in ids]
    rows = torch.zeros(len(ids), dtype=torch.long)
    layout = qwen_vocab.number_layout(torch.tensor(ids), rows, torch.arange(len(ids)))
    got = {}
    for text, number, exponent in zip(texts, layout.number.tolist(), layout.exponent.tolist()):
        if number >= 0:
            got.setdefault(number, []).append((text, exponent))
    # "1.2.3." is two numbers: a second decimal point starts a new one
    assert list(got.values()) == [[("1", 1), ("0", 0)], [("0", 1), ("7", 0)], [("1", 1), ("2", 0), ("5", -1)],
                                  [("1", 0), ("2", -1)], [("3", -1)]]


def test_number_layout_llama3_multi_digit_tokens():
    pytest.importorskip("tokenizers")
    from vlm_smmd.families.tokenizers import build_llama3_tokenizer

    tok = build_llama3_tokenizer()
    vocab = NumericVocab.from_tokenizer(tok)
    ids = tok("1234.56", add_special_tokens=False).input_ids
    assert [tok.decode([i]) for i in ids] == ["123", "4", ".", "56"]
    layout = vocab.number_layout(torch.tensor(ids), torch.zeros(4, dtype=torch.long), torch.arange(4))
    assert layout.number.tolist() == [0, 0, -1, 0] and layout.exponent.tolist() == [1, 0, 0, -2]
    assert layout.digits_after.tolist() == [3, 2, 0, 0] and (layout.count, layout.width) == (1, 3)


def test_number_layout_without_a_decimal_point_token_and_bad_input():
    vocab = NumericVocab(torch.arange(15, 25), torch.arange(10.0), [str(d) for d in range(10)])
    layout = vocab.number_layout(torch.tensor([16, 13, 20]), torch.zeros(3, dtype=torch.long), torch.arange(3))
    assert layout.number.tolist() == [0, -1, 1] and layout.count == 2  # "1.5" is 1 and 5
    empty = vocab.number_layout(torch.tensor([-100, 7]), torch.zeros(2, dtype=torch.long), torch.arange(2))
    assert empty.number.tolist() == [-1, -1] and (empty.count, empty.width) == (0, 0)
    assert vocab.number_layout(*(torch.zeros(0, dtype=torch.long),) * 3).count == 0
    with pytest.raises(ValueError, match="one shape"):
        vocab.number_layout(torch.tensor([16]), torch.tensor([0, 0]), torch.tensor([0]))
    with pytest.raises(ValueError, match="plain number"):
        NumericVocab(torch.tensor([1]), torch.tensor([1.0]), ["-1"])
