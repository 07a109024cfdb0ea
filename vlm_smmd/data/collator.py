"""Chat batches from Samples for every model family: answer-only labels, a numeric mask, left padding.

One sample becomes one chat: [optional system turn] user turn = the image (if the sample has one), then
the question (plus an optional instruction such as "Answer with a number."), assistant turn = the answer,
rendered by the processor's own chat template. What differs between families (the assistant-turn
markers, the end-of-turn token, image placeholders, how images are sized) comes from `vlm_smmd.families`.
Qwen VL images are sized exactly as qwen-vl-utils sizes them (its `smart_resize` and the same PIL resize
as its `fetch_image`) before the processor, which is told not to resize again; Mllama's processor tiles
images itself. Text-only samples (`image=None`) become text-only chats; a batch may mix both.

Left padding: every row ends with its answer, so the labelled tails line up at the right end of the
batch and the trainer can keep only the last few positions' logits (`logits_to_keep`).

Training batches reuse each sample's processed row across epochs (`VLMCollator` docstring): the processor
treats the texts and images of a batch one by one, so a batch joined from rows processed earlier equals the
batch processed at once, and a training run sees each sample many times.
"""

from __future__ import annotations

import os

import torch
from qwen_vl_utils import smart_resize

from vlm_smmd.data.sample import DataError, Sample, SkipLog, check_on_error, is_blank
from vlm_smmd.numeric import NumericVocab

IGNORE_INDEX = -100
# What a processed row is made of, for the families whose rows are cached: [B, T] tensors padded on the
# left, and per-image tensors concatenated over the batch in row order.
TOKEN_KEYS = ("input_ids", "attention_mask", "mm_token_type_ids")
IMAGE_KEYS = ("pixel_values", "image_grid_thw")
SPAN_MEMO_SIZE = 2**16  # samples whose numeric-span token masks a collator remembers (about 1 KiB each)


def build_messages(sample: Sample, *, system_prompt: str | None = None, instruction: str | None = None,
                   with_answer: bool = True) -> list[dict]:
    """The chat for one sample, in the Hugging Face message format.

    [system (if given)], user = [image, question + "\\n" + instruction (if given, and unless the question
    already ends with it: one clock phrasing says "Answer in H:MM format." itself)] (plain text content for a
    text-only sample), assistant = answer (when `with_answer`). The image entry carries `sample.image`
    (PIL image or path) so the messages also work with qwen_vl_utils.process_vision_info.
    """
    question = sample.question
    if instruction and not " ".join(question.split()).lower().endswith(" ".join(instruction.split()).lower()):
        question = f"{question}\n{instruction}"
    messages = []
    if system_prompt is not None:
        messages.append({"role": "system", "content": system_prompt})
    if sample.image is None:
        messages.append({"role": "user", "content": question})
    else:
        messages.append({"role": "user", "content": [{"type": "image", "image": sample.image},
                                                     {"type": "text", "text": question}]})
    if with_answer:
        messages.append({"role": "assistant", "content": sample.answer})
    return messages


class VLMCollator:
    """Callable turning a list of Samples into one training batch, for any supported family.

    Returns a dict (B rows after skips, T the padded length):
      input_ids, attention_mask: LongTensor [B, T], left-padded (pad id, 0);
      labels: LongTensor [B, T], -100 except the answer tokens and the family's closing end-of-turn token;
      numeric_mask: BoolTensor [B, T], True where the label is a V_num token (and, for a sample with
        `numeric_spans`, lies inside one of them: `_span_mask`);
      skipped_samples: LongTensor [] (only with on_error="skip"), samples of this call left out;
      and every key the processor returns: Qwen VL mm_token_type_ids [B, T], pixel_values [P, C*t*p*p],
      image_grid_thw [N_img, 3]; Mllama pixel_values [B, I, tiles, C, H, W], aspect_ratio_ids [B, I],
      aspect_ratio_mask [B, I, tiles], cross_attention_mask [B, T, I, tiles];
      position_ids (Qwen2.5-VL batches with images: mRoPE [3, B, T]), the positions the model would
      otherwise compute in its forward pass (`Family.position_ids`).

    `processor` is the family's processor, or a tokenizer for text LLMs; `family` defaults to the one the
    processor belongs to. `min_pixels` / `max_pixels` (Qwen VL) default to the processor's own. A sample
    longer than `max_length` tokens, an empty answer, text holding special tokens, an image for a text-only
    model or an unusable image is a DataError naming the record; with on_error="skip" it is left out of
    the batch and counted in `skip_log` (a warning reports the running count).

    Training batches (`__call__`) keep each sample's processed row (token ids, mask, token types, pixel
    values, grid) for Qwen VL and text families, keyed by image path, question and answer, until the rows
    take `cache_mb` MiB (0: no cache; a 56 px image's row takes 75 KiB); a batch is then joined from rows
    (left padding), which equals the processor's output for the same samples. Samples with in-memory images
    are processed every time, and DataLoader workers keep no rows (their collation already runs beside the
    training step, and a worker's rows would end with it at the end of the epoch).
    """

    def __init__(self, processor, *, family=None, numeric_vocab: NumericVocab | None = None,
                 system_prompt: str | None = None, instruction: str | None = None, max_length: int | None = None,
                 min_pixels: int | None = None, max_pixels: int | None = None, on_error: str = "raise",
                 cache_mb: int = 2048):
        from vlm_smmd.families import family_of_processor

        check_on_error(on_error)
        self.processor = processor
        self.family = family if family is not None else family_of_processor(processor)
        self.tokenizer = tok = getattr(processor, "tokenizer", processor)
        self.numeric_vocab = numeric_vocab if numeric_vocab is not None else NumericVocab.from_tokenizer(tok)
        self.system_prompt = system_prompt
        self.instruction = instruction
        self.max_length = max_length
        self.on_error = on_error
        self.skip_log = SkipLog(type(self).__name__)

        sizes = self.family.image_sizes(processor) if self.family.vision else None
        if sizes is not None:
            self.min_pixels = min_pixels if min_pixels is not None else sizes[0]
            self.max_pixels = max_pixels if max_pixels is not None else sizes[1]
            if self.min_pixels > self.max_pixels:
                raise ValueError(f"min_pixels {self.min_pixels} exceeds max_pixels {self.max_pixels}")
            self.factor = processor.image_processor.patch_size * processor.image_processor.merge_size

        if tok.pad_token_id is None:
            raise ValueError("the tokenizer has no pad token")
        self.pad_id = tok.pad_token_id
        self.image_token_id = tok.convert_tokens_to_ids(self.family.image_token) if self.family.vision else None
        self.end_id = tok.convert_tokens_to_ids(self.family.end_of_turn)
        # the assistant-turn opener as token ids ("<|im_start|>assistant\n" is 151644, 77091, 198 on Qwen2.5)
        self.assistant_header = tok.encode(self.family.assistant_header, add_special_tokens=False)
        # Text that would be read as control tokens (turn markers, image placeholders) is refused.
        self.special_texts = [t.content for t in tok.added_tokens_decoder.values() if t.special]
        # processed rows by sample (`_key`); None where the processor's output is not made of rows we can join
        cacheable = cache_mb > 0 and (not self.family.vision or self.family.resize_factor is not None)
        self.row_cache: dict | None = {} if cacheable else None
        self.row_cache_bytes, self.row_cache_budget = 0, cache_mb * 2**20
        self._span_memo: dict = {}  # (answer ids, answer, spans) -> which ids lie inside the spans

    # -- per sample -------------------------------------------------------------------------------
    def resize(self, image, where: str = ""):
        """`image` resized the way qwen_vl_utils.fetch_image does (smart_resize + PIL's default filter), for
        families sized that way; unchanged otherwise. An image smart_resize refuses (an extreme aspect
        ratio, a side that rounds to nothing) is a DataError."""
        if self.family.resize_factor is None:
            return image
        width, height = image.size
        try:
            h, w = smart_resize(height, width, factor=self.factor, min_pixels=self.min_pixels,
                                max_pixels=self.max_pixels)
        except ValueError as e:
            raise DataError(f"unusable image size {width}x{height} ({where}): {e}") from None
        return image if (w, h) == (width, height) else image.resize((w, h))

    def _prepare(self, sample: Sample, with_answer: bool):
        """(chat text, [resized RGB image] or []) for one sample; DataError naming the record when unusable."""
        where = f"record {sample.id!r} of {sample.source}"
        if with_answer:
            if not isinstance(sample.answer, str):
                raise DataError(f"answer is not a string ({type(sample.answer).__name__}) ({where})")
            if is_blank(sample.answer):  # nothing visible: whitespace, zero-width and other format characters
                raise DataError(f"empty answer ({where})")
        fields = (("question", sample.question), ("answer", sample.answer if with_answer else ""))
        for name, text in fields:
            if not isinstance(text, str):
                raise DataError(f"{name} is not a string ({where})")
            hit = next((s for s in self.special_texts if s in text), None)
            if hit:
                raise DataError(f"{name} contains the special token {hit} ({where})")
        if sample.image is not None and not self.family.vision:
            raise DataError(f"the sample has an image but {self.family.title} takes text only ({where})")
        messages = build_messages(sample, system_prompt=self.system_prompt, instruction=self.instruction,
                                  with_answer=with_answer)
        text = self.processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=not with_answer)
        images = [] if sample.image is None else [self.resize(sample.load_image(), where)]
        return text, images

    def _gather(self, samples, with_answer: bool, on_error: str):
        kept, texts, images = [], [], []
        for sample in samples:
            try:
                text, image = self._prepare(sample, with_answer)
            except DataError as e:
                if on_error == "raise":
                    raise
                self.skip_log.add(e)
                continue
            kept.append(sample)
            texts.append(text)
            images.append(image)
        return kept, texts, images

    # -- per batch --------------------------------------------------------------------------------
    def _process(self, texts, images, kept) -> dict:
        """One processor call: tokenise (the template wrote every special token), expand image placeholders,
        process the images, pad on the left; then check each row's placeholder count."""
        kwargs = dict(padding=True, padding_side="left", add_special_tokens=False, return_tensors="pt")
        if not self.family.vision:
            return dict(self.tokenizer(texts, **kwargs))
        batch = self.family.process(self.processor, texts, images, **kwargs)
        found = (batch["input_ids"] == self.image_token_id).sum(1)
        expected = self.family.expected_image_tokens(batch, [len(i) for i in images], self.processor)
        for row in torch.nonzero(found != expected).flatten().tolist():
            s = kept[row]
            raise DataError(f"{int(found[row])} {self.family.image_token} tokens where the image needs "
                            f"{int(expected[row])} (record {s.id!r} of {s.source})")
        return batch

    def _skip_or_raise(self, error: DataError) -> None:
        if self.on_error == "raise":
            raise error
        self.skip_log.add(error)

    def _all_skipped(self, n: int) -> DataError:
        self.skip_log.report()
        return DataError(f"every sample of this batch of {n} was skipped: {self.skip_log.summary()}")

    def __call__(self, samples: list[Sample]) -> dict:
        if not samples:
            raise ValueError(f"{type(self).__name__} got an empty list of samples")
        skipped_before = self.skip_log.total
        if self.row_cache is not None:
            kept, batch = self._joined(samples)
        else:
            kept, texts, images = self._gather(samples, with_answer=True, on_error=self.on_error)
            kept, batch = self._processed(kept, texts, images, len(samples))

        batch["labels"] = self._labels(batch["input_ids"], kept)
        batch["numeric_mask"] = self.numeric_vocab.mask(batch["labels"]) & self._span_mask(batch["input_ids"],
                                                                                           batch["labels"], kept)
        positions = self.family.position_ids(batch, self.processor)
        if positions is not None:
            batch["position_ids"] = positions
        if self.on_error == "skip":  # the batch carries its count, so the trainer can total it over workers
            batch["skipped_samples"] = torch.tensor(self.skip_log.total - skipped_before)
        if self.skip_log.total > skipped_before:
            self.skip_log.report()
        return batch

    def _too_long(self, lengths: list[int], kept) -> list[bool]:
        """Which rows exceed max_length (each one raised or counted as skipped)."""
        too_long = [self.max_length is not None and n > self.max_length for n in lengths]
        for row in [r for r, long in enumerate(too_long) if long]:
            s = kept[row]
            self._skip_or_raise(DataError(f"sample too long: {lengths[row]} tokens > max_length {self.max_length} "
                                          f"(record {s.id!r} of {s.source})"))
        return too_long

    def _processed(self, kept, texts, images, n: int, batch: dict | None = None):
        """(kept samples, batch) from one processor call over the prepared samples (`batch`, when given, is
        that call's output), less the samples over max_length; `n` samples were asked for."""
        if not kept:
            raise self._all_skipped(n)
        batch = batch if batch is not None else self._process(texts, images, kept)
        too_long = self._too_long(batch["attention_mask"].sum(1).tolist(), kept)
        if all(too_long):
            raise self._all_skipped(n)
        if any(too_long):  # rare: process the rest again rather than cut rows out of every output
            rows = [r for r, long in enumerate(too_long) if not long]
            kept, texts, images = [kept[r] for r in rows], [texts[r] for r in rows], [images[r] for r in rows]
            batch = self._process(texts, images, kept)
        return kept, batch

    # -- the row cache ----------------------------------------------------------------------------
    @staticmethod
    def _key(sample: Sample):
        """What a sample's processed row depends on besides the collator's settings; None when it cannot be
        told by value (an in-memory image; a question or answer that is not text, which fails its check)."""
        if not (isinstance(sample.question, str) and isinstance(sample.answer, str)):
            return None
        if sample.image is not None and not isinstance(sample.image, (str, os.PathLike)):
            return None
        return (None if sample.image is None else os.fspath(sample.image)), sample.question, sample.answer

    def _joined(self, samples):
        """(kept samples, batch) joined from each sample's processed row: the cached ones, and the others
        from one processor call (then cached while the budget lasts)."""
        keys = [self._key(s) for s in samples]
        rows = [None if key is None else self.row_cache.get(key) for key in keys]
        todo, texts, images = [], [], []
        for i in [i for i, row in enumerate(rows) if row is None]:
            try:
                text, image = self._prepare(samples[i], with_answer=True)
            except DataError as e:
                self._skip_or_raise(e)
                continue
            todo.append(i)
            texts.append(text)
            images.append(image)
        if todo:
            batch = self._process(texts, images, [samples[i] for i in todo])
            if not set(batch) <= {*TOKEN_KEYS, *IMAGE_KEYS}:  # a processor whose output is not rows we can join
                if any(row is not None for row in rows):
                    raise RuntimeError(f"the processor returned {sorted(batch)} after batches of rows; build the "
                                       "collator with cache_mb=0")
                self.row_cache = None
                return self._processed([samples[i] for i in todo], texts, images, len(samples), batch)
            for i, row in zip(todo, self._split(batch, images)):
                rows[i] = row
                self._remember(keys[i], row)
            if len(todo) == len(samples):  # no row came from the cache: this call's batch is the joined batch
                return self._processed(samples, texts, images, len(samples), batch)
        kept = [s for s, row in zip(samples, rows) if row is not None]
        rows = [row for row in rows if row is not None]
        if not kept:
            raise self._all_skipped(len(samples))
        too_long = self._too_long([len(row["input_ids"]) for row in rows], kept)
        kept = [s for s, long in zip(kept, too_long) if not long]
        rows = [row for row, long in zip(rows, too_long) if not long]
        if not kept:
            raise self._all_skipped(len(samples))
        return kept, self._join(rows)

    def _remember(self, key, row: dict) -> None:
        size = sum(t.numel() * t.element_size() for t in row.values())
        in_worker = torch.utils.data.get_worker_info() is not None
        if key is not None and not in_worker and self.row_cache_bytes + size <= self.row_cache_budget:
            self.row_cache[key] = row
            self.row_cache_bytes += size

    @staticmethod
    def _split(batch: dict, images) -> list[dict]:
        """One processed batch as rows: each sample's TOKEN_KEYS without the left padding ([L]) and its
        images' IMAGE_KEYS ([P_i, ...] and [N_i, 3]); copies, so a row does not hold the batch's memory."""
        lengths = batch["attention_mask"].sum(1).tolist()
        width = batch["input_ids"].shape[1]
        grids = batch.get("image_grid_thw")
        pixels = torch.split(batch["pixel_values"], grids.prod(-1).tolist()) if grids is not None else ()
        rows, image = [], 0
        for r, (length, row_images) in enumerate(zip(lengths, images)):
            row = {key: batch[key][r, width - length:].clone() for key in TOKEN_KEYS if key in batch}
            if row_images:
                row["pixel_values"] = torch.cat(pixels[image:image + len(row_images)])
                row["image_grid_thw"] = grids[image:image + len(row_images)].clone()
                image += len(row_images)
            rows.append(row)
        return rows

    def _join(self, rows: list[dict]) -> dict:
        """The batch of these rows, as the processor pads it: on the left, with the pad id in input_ids and
        0 elsewhere; the images' tensors concatenated in row order."""
        width = max(len(row["input_ids"]) for row in rows)
        batch = {}
        for key in [k for k in TOKEN_KEYS if k in rows[0]]:
            fill = self.pad_id if key == "input_ids" else 0
            padded = torch.full((len(rows), width), fill, dtype=rows[0][key].dtype)
            for r, row in enumerate(rows):
                padded[r, width - len(row[key]):] = row[key]
            batch[key] = padded
        with_images = [row for row in rows if "image_grid_thw" in row]
        for key in IMAGE_KEYS if with_images else ():
            batch[key] = torch.cat([row[key] for row in with_images])
        return batch

    def _labels(self, input_ids: torch.Tensor, kept) -> torch.Tensor:
        """LongTensor [B, T]: the ids after the last assistant header through the last end-of-turn token,
        else -100. The span is found by token ids, never by searching the text."""
        B, T = input_ids.shape
        pos = torch.arange(T)
        n = len(self.assistant_header)
        header_end = torch.ones(B, T - n + 1, dtype=torch.bool)  # header occupies [t, t + n)
        for k, tid in enumerate(self.assistant_header):
            header_end &= input_ids[:, k:T - n + 1 + k] == tid
        last_header = torch.where(header_end, pos[: T - n + 1], -1).amax(1)
        start = last_header + n
        end = torch.where(input_ids == self.end_id, pos, -1).amax(1)  # the closing end-of-turn token
        bad = (last_header < 0) | (end <= start)
        for row in torch.nonzero(bad).flatten().tolist():
            s = kept[row]
            raise DataError(f"cannot locate the answer tokens after the assistant header "
                            f"(answer {s.answer!r}, record {s.id!r} of {s.source})")
        span = (pos >= start[:, None]) & (pos <= end[:, None])
        return torch.where(span, input_ids, IGNORE_INDEX)

    def _span_mask(self, input_ids: torch.Tensor, labels: torch.Tensor, kept) -> torch.Tensor:
        """BoolTensor [B, T]: False at the answer tokens outside the sample's `numeric_spans`, True elsewhere
        (everywhere in rows whose sample has numeric_spans None), so `& numeric_mask` keeps the numeric
        tokens inside the spans. A span that does not start and end on token boundaries is a DataError
        naming the record."""
        keep = torch.ones_like(labels, dtype=torch.bool)
        for row, sample in enumerate(kept):
            spans = getattr(sample, "numeric_spans", None)
            if spans is None:
                continue
            answer_pos = torch.nonzero(labels[row] != IGNORE_INDEX).flatten()[:-1]  # less the end-of-turn token
            spans = spans_checked(spans, sample.answer, f"record {sample.id!r} of {sample.source}")
            ids = input_ids[row, answer_pos].tolist()
            key = (tuple(ids), sample.answer, tuple(spans))
            inside = self._span_memo.get(key)
            if inside is None:  # ~0.2 ms a sample (the prefix decodes); remembered, as rows are, across epochs
                inside = self._tokens_in_spans(ids, sample, spans)
                if len(self._span_memo) < SPAN_MEMO_SIZE:
                    self._span_memo[key] = inside
            keep[row, answer_pos] = torch.tensor(inside, dtype=torch.bool)
        return keep

    def _tokens_in_spans(self, ids: list[int], sample: Sample, spans: list[tuple[int, int]]) -> list[bool]:
        """For each answer token id, whether it lies inside one of `spans` (character spans of sample.answer).

        Token boundaries come from decoding every prefix of the ids: character c of the labelled text is a
        boundary after k tokens exactly when the first k tokens decode to the text's first c characters, so
        a span is mapped only when its tokens provably spell it (a token ending inside a multi-byte
        character is no boundary). The answer is found in the labelled text as written, or stripped (the
        Llama-3 templates trim it)."""
        where = f"record {sample.id!r} of {sample.source}"
        answer = sample.answer
        prefixes = self.tokenizer.batch_decode([ids[:k] for k in range(len(ids) + 1)], skip_special_tokens=False,
                                               clean_up_tokenization_spaces=False)
        text = prefixes[-1]
        at, found = text.find(answer), True  # text offset = answer offset + at
        if at < 0:
            at = text.find(answer.strip())
            found = at >= 0 and bool(answer.strip())
            at -= len(answer) - len(answer.lstrip())  # spans keep the offsets of the answer as written
        if not found:
            raise DataError(f"the answer tokens do not spell the answer, so its numeric spans cannot be placed "
                            f"(answer {answer!r}, tokens {text!r}, {where})")
        boundary = {len(p): k for k, p in enumerate(prefixes) if text.startswith(p)}  # character -> tokens
        inside = [False] * len(ids)
        for span in spans:
            first, last = boundary.get(span[0] + at), boundary.get(span[1] + at)
            if first is None or last is None:
                raise DataError(f"numeric span {list(span)} ({answer[span[0]:span[1]]!r}) does not fall on token "
                                f"boundaries of the answer {answer!r} ({where})")
            inside[first:last] = [True] * (last - first)
        return inside

    def measure(self, sample: Sample) -> int:
        """Tokens the sample's training chat takes, without building pixel values; the same checks as a
        batch (image decodes and has a usable size, answer non-empty, no special tokens, numeric spans on
        token boundaries): DataError names the record. Equals the sample's row length in `self([sample])`."""
        text, images = self._prepare(sample, with_answer=True)
        ids = self.tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
        if getattr(sample, "numeric_spans", None) is not None:
            self._span_mask(ids, self._labels(ids, [sample]), [sample])
        length = ids.shape[1]
        return length + sum(self.family.placeholder_tokens(img, self.processor) - 1 for img in images)

    def prompt_batch(self, samples: list[Sample]) -> dict:
        """Left-padded generation inputs: the same chats without the assistant turn, ending with the
        assistant header (add_generation_prompt). No labels; errors always raise (rows must match samples).
        Keys: what the processor returns (input_ids, attention_mask [B, T], and the image inputs)."""
        if not samples:
            raise ValueError("prompt_batch got an empty list of samples")
        kept, texts, images = self._gather(samples, with_answer=False, on_error="raise")
        return self._process(texts, images, kept)


def spans_checked(spans, answer: str, where: str) -> list[tuple[int, int]]:
    """`numeric_spans` as (start, end) pairs with 0 <= start < end <= len(answer); DataError otherwise."""
    if not isinstance(spans, (tuple, list)):
        raise DataError(f"numeric_spans must be a list of [start, end) pairs, got {spans!r} ({where})")
    checked = []
    for span in spans:
        ok = isinstance(span, (tuple, list)) and len(span) == 2 and all(
            isinstance(v, int) and not isinstance(v, bool) for v in span)
        if not ok or not 0 <= span[0] < span[1] <= len(answer):
            raise DataError(f"numeric span {span!r} is not [start, end) inside the answer {answer!r} ({where})")
        checked.append((span[0], span[1]))
    return checked


QwenVLCollator = VLMCollator  # the name of the first release, where only Qwen2.5-VL existed
