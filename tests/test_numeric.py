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
