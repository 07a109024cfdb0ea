"""The task-vocabulary tokenizer: works inside the stock Qwen2.5-VL processor, round-trips, splits digits."""

import pytest
import torch
from PIL import Image

from vlm_smmd.families.qwen2_5_vl import build_processor
from vlm_smmd.families.tokenizers import QWEN_SPECIAL_TOKENS, QWEN_VL_CHAT_TEMPLATE
from vlm_smmd.numeric import NumericVocab
from vlm_smmd.task_vocab import build_task_tokenizer

QUESTIONS = ["What time does the clock show?", "What is the value of the bar?", "Read the bar's height."]
ANSWERS = ["3:07", "12:45", "10:30", "42", "7", "99", "0"]
TEXTS = QUESTIONS * 5 + ANSWERS * 3


def build(texts=TEXTS, **changes):
    kwargs = dict(special_tokens=QWEN_SPECIAL_TOKENS, chat_template=QWEN_VL_CHAT_TEMPLATE,
                  eos_token="<|im_end|>", pad_token="<|endoftext|>")
    kwargs.update(changes)
    return build_task_tokenizer(texts, **kwargs)


@pytest.fixture(scope="module")
def tok():
    return build()


def test_is_a_real_fast_tokenizer_and_small(tok):
    from transformers import PreTrainedTokenizerFast

    assert isinstance(tok, PreTrainedTokenizerFast)
    assert 256 + len(QWEN_SPECIAL_TOKENS) < len(tok) <= 256 + 256 + len(QWEN_SPECIAL_TOKENS)
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>" and tok.padding_side == "left"


def test_special_tokens_keep_their_names_and_are_all_special(tok):
    ids = [tok.convert_tokens_to_ids(t) for t in QWEN_SPECIAL_TOKENS]
    assert len(set(ids)) == len(ids)
    assert sorted(tok.all_special_ids) == sorted(ids)
    # after the learned vocabulary, in the given order (as Qwen's are after its BPE entries)
    assert ids == list(range(len(tok) - len(ids), len(tok)))
    for name, tid in zip(QWEN_SPECIAL_TOKENS, ids):
        assert tok.encode(f"a{name}b", add_special_tokens=False)[1] == tid
        assert tok.decode([tid]) == name


def test_digits_are_single_tokens_and_the_numeric_vocab(tok):
    digit_ids = [tok.convert_tokens_to_ids(str(d)) for d in range(10)]
    for d, tid in enumerate(digit_ids):
        assert tok.decode([tid]) == str(d)
    # every number splits into its digits, whatever digits the texts held ("8" never occurs in TEXTS)
    for number in ["2024", "10:07", "0.58", "88888"]:
        tokens = tok.convert_ids_to_tokens(tok.encode(number, add_special_tokens=False))
        assert tokens == [c for c in number], number
    vocab = NumericVocab.from_tokenizer(tok)
    assert vocab.texts == [str(d) for d in range(10)]
    assert vocab.token_ids.tolist() == digit_ids
    assert vocab.values.tolist() == [float(d) for d in range(10)]


@pytest.mark.parametrize("text", [
    "", " ", "  two  spaces\tand a tab\n\nnewlines\r\n", "héllo wörld ☃ 漢字 🙂", "e\u0301 (not NFC)",
    "What time does the clock show?", "  leading and trailing  ", "<|im_start|> literal", "$12.50 -3e+4 100%",
    "\x00\x7f control bytes",
])
def test_round_trip_any_text(tok, text):
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == text
    assert all(0 <= i < len(tok) for i in ids)


def test_frequent_words_become_single_tokens(tok):
    vocab = tok.get_vocab()
    for word in ["system", "user", "assistant", "What", "Ġclock", "Ġhelpful", "Ġvalue", "Ġbar"]:
        assert word in vocab, word
    question = QUESTIONS[0]
    assert len(tok.encode(question, add_special_tokens=False)) == len(question.split()) + 1  # words + "?"


def test_same_texts_same_ids():
    a, b = build(), build()
    assert a.get_vocab() == b.get_vocab()
    assert a.backend_tokenizer.to_str() == b.backend_tokenizer.to_str()


def test_pre_tokenization_matches_qwen(tok, qwen_tokenizer):
    """The same split as the real Qwen2.5 tokenizer (independent: its own pre-tokenizer from its files)."""
    for text in ["What time is it? 10:07, or 1,234.5!", "  a\n\n b\tc 's it's", "naïve 42x y2k", "x  \n  y"]:
        mine = [piece for piece, _ in tok.backend_tokenizer.pre_tokenizer.pre_tokenize_str(text)]
        qwen = [piece for piece, _ in qwen_tokenizer.backend_tokenizer.pre_tokenizer.pre_tokenize_str(text)]
        assert mine == qwen, text


def test_stock_processor_renders_and_expands_image_pads(tok):
    processor = build_processor(tok)
    width, height = 112, 84  # already multiples of 28: 8 x 6 patches of 14 px, merged 2 x 2 -> 12 tokens
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": QUESTIONS[0]}]},
                {"role": "assistant", "content": "3:07"}]
    text = processor.apply_chat_template(messages, tokenize=False)
    assert text.startswith("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n")
    out = processor(text=[text], images=[Image.new("RGB", (width, height), (9, 99, 199))], return_tensors="pt")
    ids = out["input_ids"][0]
    pad_id = tok.convert_tokens_to_ids("<|image_pad|>")
    assert int((ids == pad_id).sum()) == (width // 14) * (height // 14) // 4 == 12
    assert out["image_grid_thw"].tolist() == [[1, height // 14, width // 14]]
    assert int(out["mm_token_type_ids"][0].sum()) == 12
    # the text round-trips once the expansion is undone
    decoded = tok.decode(ids).replace("<|image_pad|>" * 12, "<|image_pad|>")
    assert decoded == text


def test_collator_labels_the_answer(tok):
    from vlm_smmd.data import Sample
    from vlm_smmd.data.collator import QwenVLCollator

    collator = QwenVLCollator(build_processor(tok))
    samples = [Sample(image=Image.new("RGB", (56, 56)), question=QUESTIONS[0], answer=a, source="t", id=str(i))
               for i, a in enumerate(["3:07", "12:45"])]
    batch = collator(samples)
    for row, answer in enumerate(["3:07", "12:45"]):
        labels = batch["labels"][row]
        kept = labels[labels != -100].tolist()
        assert tok.decode(kept) == answer + "<|im_end|>"
        assert int(batch["numeric_mask"][row].sum()) == sum(c.isdigit() for c in answer)


def test_save_and_reload_give_identical_ids(tok, tmp_path):
    from transformers import AutoProcessor, AutoTokenizer

    processor = build_processor(tok)
    processor.save_pretrained(tmp_path / "p")
    tok.save_pretrained(tmp_path / "t")
    again = AutoTokenizer.from_pretrained(tmp_path / "t")
    reloaded = AutoProcessor.from_pretrained(tmp_path / "p")
    assert type(reloaded) is type(processor)
    text = processor.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "odd ☃ 10:07"}]}],
        tokenize=False, add_generation_prompt=True)
    image = Image.new("RGB", (56, 56))
    a = processor(text=[text], images=[image], return_tensors="pt")["input_ids"]
    b = reloaded(text=[text], images=[image], return_tensors="pt")["input_ids"]
    assert torch.equal(a, b)
    assert again.encode(text) == tok.encode(text)
    assert again.get_vocab() == tok.get_vocab()
    assert again.all_special_ids == tok.all_special_ids
    assert again.chat_template == tok.chat_template == QWEN_VL_CHAT_TEMPLATE


def test_special_names_in_texts_are_not_learned():
    tok = build(["<|im_start|>user\nhello hello<|im_end|>"] * 4)
    assert not any("<|" in t or "im_start" in t for t in tok.get_vocab() if t not in QWEN_SPECIAL_TOKENS)
    assert "Ġhello" in tok.get_vocab()


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="at least one text"):
        build([])
    with pytest.raises(ValueError, match="text 1 is a int"):
        build(["a", 3])
    with pytest.raises(ValueError, match="eos_token '<eos>' is not one of the special tokens"):
        build(eos_token="<eos>")
    with pytest.raises(ValueError, match="distinct"):
        build(special_tokens=QWEN_SPECIAL_TOKENS + ["<|im_end|>"])
    with pytest.raises(ValueError, match="chat template"):
        build(chat_template="{% for m in messages %}{{ m.nope.deeper }}{% endfor %}")
