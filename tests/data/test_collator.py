"""QwenVLCollator on the real Qwen2.5 tokenizer: answer-only labels, numeric mask, left padding, sizing."""

import re

import pytest
import torch
from qwen_vl_utils import fetch_image, smart_resize

from tests.conftest import make_image
from vlm_smmd.data import DataError, Sample
from vlm_smmd.data.collator import QwenVLCollator, build_messages
from vlm_smmd.numeric import NumericVocab

ASSISTANT_HEADER = [151644, 77091, 198]  # <|im_start|> "assistant" "\n"
IM_END = 151645


def sample(answer="10:07", *, size=(120, 90), seed=0, question="What time does the clock show?", id="r0"):
    return Sample(make_image(*size, seed=seed), question, answer, "test", id)


@pytest.fixture(scope="module")
def vocab(qwen_tokenizer):
    return NumericVocab.from_tokenizer(qwen_tokenizer)


@pytest.fixture(scope="module")
def make(tiny_processor, vocab):
    """QwenVLCollator(tiny_processor, **options) sharing one NumericVocab (built once: ~0.4 s)."""
    return lambda processor=tiny_processor, **options: QwenVLCollator(processor, numeric_vocab=vocab, **options)


@pytest.fixture(scope="module")
def collator(make):
    return make()


def labelled(batch, row):
    labels = batch["labels"][row]
    return labels[labels != -100]


def test_assistant_header_ids(qwen_tokenizer, collator):
    assert qwen_tokenizer.encode("<|im_start|>assistant\n", add_special_tokens=False) == ASSISTANT_HEADER
    assert collator.assistant_header == ASSISTANT_HEADER
    assert collator.end_id == IM_END


@pytest.mark.parametrize("answer", ["10:07", "3.5%", "Democrat", "1,234", "12 million", "-0.25", "Yes"])
def test_labels_decode_to_answer_plus_im_end(collator, qwen_tokenizer, answer):
    batch = collator([sample(answer)])
    ids, labels = batch["input_ids"][0], batch["labels"][0]
    assert qwen_tokenizer.decode(labelled(batch, 0)) == answer + "<|im_end|>"
    # The labelled span is contiguous, right after the assistant header, and stops before the final "\n".
    where = torch.nonzero(labels != -100).flatten()
    start, end = int(where[0]), int(where[-1])
    assert torch.equal(where, torch.arange(start, end + 1))
    assert ids[start - 3:start].tolist() == ASSISTANT_HEADER
    assert int(ids[end]) == IM_END and end == len(ids) - 2
    assert qwen_tokenizer.decode(ids[-1:]) == "\n" and int(labels[-1]) == -100
    assert torch.equal(labels[start:end + 1], ids[start:end + 1])


@pytest.mark.parametrize("answer,digits", [("10:07", 4), ("3.5%", 2), ("Democrat", 0), ("2,019", 4)])
def test_numeric_mask_marks_exactly_the_answer_digits(collator, qwen_tokenizer, answer, digits):
    batch = collator([sample(answer)])
    mask, labels = batch["numeric_mask"][0], batch["labels"][0]
    assert mask.dtype == torch.bool and mask.shape == labels.shape
    # Independent: a position is numeric iff it is labelled and its token decodes to one ASCII digit.
    expected = torch.tensor([int(lab) != -100 and qwen_tokenizer.decode([int(lab)]) in list("0123456789")
                             for lab in labels])
    assert torch.equal(mask, expected)
    assert int(mask.sum()) == digits
    # The question's digits (in the prompt) are never marked.
    batch = collator([sample("7", question="Is it 10:45 or 3:15?")])
    assert int(batch["numeric_mask"].sum()) == 1


def test_mixed_sizes_pad_left_and_match_single_forward(tiny_model_and_processor, make):
    model, processor = tiny_model_and_processor
    model.eval()
    collator = make(processor)
    samples = [sample("10:07", size=(120, 90), id="a"), sample("3.5%", size=(300, 200), seed=5, id="b"),
               sample("Democrat", size=(64, 160), seed=9, question="Which party?", id="c")]
    batch = collator(samples)
    grids = batch["image_grid_thw"]
    assert len({tuple(g) for g in grids.tolist()}) == 3
    assert batch["pixel_values"].shape[0] == int(grids.prod(1).sum())

    B, T = batch["input_ids"].shape
    lengths = batch["attention_mask"].sum(1)
    assert int(lengths.max()) == T and bool((lengths < T).any())
    for row in range(B):
        pad = T - int(lengths[row])
        att = batch["attention_mask"][row]
        assert att[:pad].sum() == 0 and bool(att[pad:].all())
        assert (batch["input_ids"][row, :pad] == processor.tokenizer.pad_token_id).all()
        assert (batch["mm_token_type_ids"][row, :pad] == 0).all()
        assert (batch["labels"][row, :pad] == -100).all() and not batch["numeric_mask"][row, :pad].any()
        n_image = (batch["input_ids"][row] == processor.image_token_id).sum()
        assert n_image == grids[row].prod() // 4
        assert torch.equal(batch["mm_token_type_ids"][row], (batch["input_ids"][row] == processor.image_token_id).long())

    model_inputs = {k: v for k, v in batch.items() if k not in ("labels", "numeric_mask")}
    with torch.no_grad():
        logits = model(**model_inputs, use_cache=False).logits
        assert torch.isfinite(logits).all()
        for row, s in enumerate(samples):
            alone = collator([s])
            single = model(**{k: v for k, v in alone.items() if k not in ("labels", "numeric_mask")},
                           use_cache=False).logits[0]
            # Logits that predict the labelled tokens: one position before each label (the model shifts).
            predict = torch.nonzero(batch["labels"][row] != -100).flatten() - 1
            single_predict = torch.nonzero(alone["labels"][0] != -100).flatten() - 1
            assert len(predict) == len(single_predict)
            torch.testing.assert_close(logits[row, predict], single[single_predict], atol=1e-4, rtol=1e-4)

        # The check is sensitive: without the 3-D positions (the collator's position_ids, or mm_token_type_ids
        # for the model to derive them from) the logits change.
        no_positions = {k: v for k, v in model_inputs.items() if k not in ("mm_token_type_ids", "position_ids")}
        wrong = model(**no_positions, use_cache=False).logits
        predict = torch.nonzero(batch["labels"][0] != -100).flatten() - 1
        assert not torch.allclose(wrong[0, predict], logits[0, predict], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("size,min_pixels,max_pixels", [
    ((120, 90), None, None), ((1000, 333), 56 * 56, 224 * 224), ((37, 500), 128 * 28 * 28, 256 * 28 * 28),
    ((448, 448), 56 * 56, 448 * 448), ((20, 20), 56 * 56, 100 * 100),
])
def test_image_sizing_matches_qwen_vl_utils(make, tiny_processor, size, min_pixels, max_pixels):
    collator = make(min_pixels=min_pixels, max_pixels=max_pixels)
    lo = min_pixels if min_pixels is not None else tiny_processor.image_processor.size["shortest_edge"]
    hi = max_pixels if max_pixels is not None else tiny_processor.image_processor.size["longest_edge"]
    image = make_image(*size, seed=3)
    h, w = smart_resize(size[1], size[0], factor=28, min_pixels=lo, max_pixels=hi)
    reference = fetch_image({"image": image, "min_pixels": lo, "max_pixels": hi}, image_patch_size=14)
    resized = collator.resize(image)
    assert resized.size == reference.size == (w, h)
    assert resized.tobytes() == reference.tobytes()
    # The processor does not resize again, even where its own limits differ from the collator's.
    batch = collator([Sample(image, "q", "1", "test", "r")])
    assert batch["image_grid_thw"][0].tolist() == [1, h // 14, w // 14]


def test_processor_sees_exactly_the_resized_image(make, tiny_processor):
    collator = make(max_pixels=448 * 448)
    image = make_image(448, 448, seed=1)
    batch = collator([Sample(image, "q", "1", "test", "r")])
    expected = tiny_processor.image_processor(images=[collator.resize(image)], do_resize=False, return_tensors="pt")
    assert batch["image_grid_thw"].tolist() == [[1, 32, 32]]
    assert torch.equal(batch["pixel_values"], expected["pixel_values"])


def test_max_length_raise_and_skip(make, tiny_processor):
    short = sample("5", size=(60, 60), id="short")
    long = sample("12345", size=(400, 400), id="long-one")
    lengths = [int(make()([s])["attention_mask"].sum()) for s in (short, long)]
    limit = (lengths[0] + lengths[1]) // 2
    assert lengths[0] <= limit < lengths[1]

    with pytest.raises(DataError, match="too long.*long-one"):
        make(max_length=limit)([short, long])
    with pytest.raises(DataError) as err:
        make(max_length=limit)([long])
    assert "long-one" in str(err.value) and str(limit) in str(err.value)

    skipping = make(max_length=limit, on_error="skip")
    with pytest.warns(UserWarning, match="skipped 1"):
        batch = skipping([long, short])
    assert skipping.skip_log.total == 1 and skipping.skip_log.counts == {"too long": 1}
    alone = make()([short])
    assert int(batch.pop("skipped_samples")) == 1  # the batch carries its own skip count
    assert batch.keys() == alone.keys()
    for key in batch:  # the remaining batch is exactly the short sample's own batch (padding trimmed)
        assert torch.equal(batch[key], alone[key]), key

    with pytest.warns(UserWarning), pytest.raises(DataError, match="every sample"):
        skipping([long])


@pytest.mark.parametrize("answer", ["", "   ", "\n", "\u200b", "\ufeff", "\u2060", " \u200b\u200c "])
def test_empty_answer_is_an_error(make, collator, tiny_processor, answer):
    with pytest.raises(DataError, match=r"empty answer.*'blank'"):
        collator([sample("1"), sample(answer, id="blank")])
    skipping = make(on_error="skip")
    with pytest.warns(UserWarning):
        batch = skipping([sample("1"), sample(answer, id="blank")])
    assert batch["input_ids"].shape[0] == 1 and skipping.skip_log.total == 1


def test_missing_image_names_file_and_record(collator, tmp_path):
    path = tmp_path / "images" / "clock_0042.png"
    with pytest.raises(DataError) as err:
        collator([Sample(str(path), "q", "3", "clocks", "clock-42")])
    assert str(path) in str(err.value) and "clock-42" in str(err.value)


def test_special_tokens_in_text_are_refused(collator):
    with pytest.raises(DataError, match=re.escape("<|image_pad|> (record 'evil'")):
        collator([sample("1", question="look <|image_pad|>", id="evil")])
    with pytest.raises(DataError, match=re.escape("answer contains the special token <|im_end|>")):
        collator([sample("1<|im_end|>")])


def test_system_prompt_and_instruction_in_rendered_text(make, tiny_processor, qwen_tokenizer):
    collator = make(system_prompt="You read clocks.", instruction="Answer with a number.")
    batch = collator([sample("4", question="How many bars?")])
    text = qwen_tokenizer.decode(batch["input_ids"][0])
    assert text.startswith("<|im_start|>system\nYou read clocks.<|im_end|>\n<|im_start|>user\n<|vision_start|>")
    assert "<|vision_end|>How many bars?\nAnswer with a number.<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n" in text
    assert "helpful assistant" not in text
    messages = build_messages(sample("4"), instruction="Be brief.", with_answer=False)
    assert [m["role"] for m in messages] == ["user"]
    assert messages[0]["content"][1]["text"].endswith("\nBe brief.")


def test_prompt_batch_ends_with_assistant_header(make, tiny_processor, qwen_tokenizer):
    collator = make(instruction="Answer with a number.")
    samples = [sample("10:07", size=(120, 90)), sample("3.5%", size=(200, 300), seed=2, id="r1")]
    prompts = collator.prompt_batch(samples)
    assert "labels" not in prompts and "numeric_mask" not in prompts
    assert {"input_ids", "attention_mask", "mm_token_type_ids", "pixel_values", "image_grid_thw"} <= prompts.keys()
    assert (prompts["input_ids"][:, -3:] == torch.tensor(ASSISTANT_HEADER)).all()
    assert prompts["attention_mask"][:, -1].all() and not prompts["attention_mask"][:, 0].all()  # left padded
    # Each prompt is exactly the training sequence up to the answer.
    train = collator(samples)
    for row in range(2):
        prompt = prompts["input_ids"][row][prompts["attention_mask"][row].bool()]
        full = train["input_ids"][row][train["attention_mask"][row].bool()]
        assert torch.equal(full[:len(prompt)], prompt)
        assert qwen_tokenizer.decode(full[len(prompt):]) == samples[row].answer + "<|im_end|>\n"


def test_bad_arguments(make, tiny_processor):
    with pytest.raises(ValueError, match="on_error"):
        make(on_error="ignore")
    with pytest.raises(ValueError, match="min_pixels"):
        make(min_pixels=10_000, max_pixels=5_000)


def test_instruction_is_not_repeated_when_the_question_ends_with_it():
    s = Sample(None, "What time does the clock show? Answer in H:MM format.", "3:07", "clocks", "x")
    assert build_messages(s, instruction="Answer in H:MM format.")[0]["content"] == s.question
    other = Sample(None, "What time is it?", "3:07", "clocks", "y")
    assert build_messages(other, instruction="Answer in H:MM format.")[0]["content"] == (
        "What time is it?\nAnswer in H:MM format.")


def on_disk(tmp_path, n, sizes=((120, 90), (56, 112), (200, 200))):
    """n Samples whose images are PNG files (the row cache keys them by path); every 4th is text-only."""
    samples = []
    for i in range(n):
        if i % 4 == 3:
            samples.append(Sample(None, f"What is {i} + 1?", str(i + 1), "test", f"t{i}"))
            continue
        path = tmp_path / f"img{i}.png"
        make_image(*sizes[i % len(sizes)], seed=i).save(path)
        samples.append(Sample(path, "What time does the clock show?", f"{i}:0{i % 10}", "test", f"r{i}"))
    return samples


def assert_same_batch(got, want):
    assert got.keys() == want.keys()
    for key in want:
        assert got[key].dtype == want[key].dtype and torch.equal(got[key], want[key]), key


def test_batches_joined_from_cached_rows_equal_processed_batches(make, tmp_path):
    """Samples seen before come from the row cache, without the processor; every batch (all new, all seen,
    mixed, repeated samples, other orders and lengths) equals the processor's batch of the same samples."""
    samples = on_disk(tmp_path, 12)
    cached, plain = make(), make(cache_mb=0)
    assert plain.row_cache is None
    calls = []
    process = cached._process
    cached._process = lambda texts, *rest: calls.append(len(texts)) or process(texts, *rest)
    orders = [[0, 1, 2, 3, 4, 5], [5, 4, 3, 2, 1, 0], [0, 6, 7, 3, 3, 8], [11, 10, 9, 8, 7, 6, 5, 4], [9]]
    for order in orders:
        assert_same_batch(cached([samples[i] for i in order]), plain([samples[i] for i in order]))
    assert calls == [6, 3, 3]  # only the samples not seen before went through the processor
    assert len(cached.row_cache) == 12
    assert cached.row_cache_bytes == sum(t.numel() * t.element_size() for row in cached.row_cache.values()
                                         for t in row.values())
    # the cache is keyed by what the row depends on: another answer for the same image is a new row
    changed = Sample(samples[0].image, samples[0].question, "11:11", "test", "r0b")
    assert_same_batch(cached([changed, samples[1]]), plain([changed, samples[1]]))
    assert calls[-1] == 1


def test_row_cache_stays_within_its_budget(make, tmp_path):
    samples = on_disk(tmp_path, 16, sizes=((200, 200),))
    cached, plain = make(cache_mb=1), make(cache_mb=0)
    for start in (0, 8, 0, 8):
        assert_same_batch(cached(samples[start:start + 8]), plain(samples[start:start + 8]))
    assert 0 < len(cached.row_cache) < 16 and cached.row_cache_bytes <= 2**20


def test_row_cache_skips_and_counts_like_the_processor(make, tmp_path):
    """Bad records are skipped (and counted) on every call, cached neighbours or not; in-memory images are
    never cached."""
    samples = on_disk(tmp_path, 4)
    missing = Sample(tmp_path / "gone.png", "q", "3", "test", "gone")
    long = sample("12345", size=(400, 400), id="long-one")
    limit = int(make()([long])["attention_mask"].sum()) - 1
    cached, plain = make(on_error="skip", max_length=limit), make(on_error="skip", max_length=limit, cache_mb=0)
    for _ in range(3):
        batch = [samples[0], missing, long, samples[1], samples[3]]
        with pytest.warns(UserWarning):
            assert_same_batch(cached(batch), plain(batch))
    assert cached.skip_log.counts == plain.skip_log.counts and cached.skip_log.total == 6
    assert len(cached.row_cache) == 3  # the three samples on disk; not the missing file, not the PIL image


def test_processor_outputs_that_are_not_rows_turn_the_cache_off(make, tiny_processor, tmp_path):
    from vlm_smmd.families import family_of_processor

    class WithExtra(type(family_of_processor(tiny_processor))):
        def process(self, processor, texts, images_per_row, **kwargs):
            out = super().process(processor, texts, images_per_row, **kwargs)
            return {**out, "extra": torch.arange(len(texts))}

    samples = on_disk(tmp_path, 3)
    cached, plain = make(family=WithExtra()), make(family=WithExtra(), cache_mb=0)
    assert_same_batch(cached(samples), plain(samples))
    assert cached.row_cache is None and cached(samples)["extra"].tolist() == [0, 1, 2]


def test_dataloader_workers_keep_no_rows(make, tmp_path, monkeypatch):
    samples = on_disk(tmp_path, 8)
    plain = make(cache_mb=0)
    loader = torch.utils.data.DataLoader(samples, batch_size=4, num_workers=1, collate_fn=make())
    for _ in range(2):  # two epochs
        for i, batch in enumerate(loader):
            assert_same_batch(batch, plain(samples[4 * i:4 * i + 4]))
    collator = make()
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: object())  # as inside a worker
    assert_same_batch(collator(samples), plain(samples))
    assert collator.row_cache == {}
