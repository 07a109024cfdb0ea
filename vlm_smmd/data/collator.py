"""Qwen2.5-VL chat batches from Samples: answer-only labels, a numeric mask, left padding.

One sample becomes one chat: [optional system turn] user turn = the image, then the question (plus an
optional instruction such as "Answer with a number."), assistant turn = the answer, rendered by the
processor's own chat template. Images are sized exactly as qwen-vl-utils sizes them (its `smart_resize`
and the same PIL resize as its `fetch_image`) before the processor, which is told not to resize again.

Left padding: every row ends with its answer, so the labelled tails line up at the right end of the
batch and the trainer can keep only the last few positions' logits (`logits_to_keep`).
"""

from __future__ import annotations

import torch
from qwen_vl_utils import smart_resize

from vlm_smmd.data.sample import DataError, Sample, SkipLog, check_on_error
from vlm_smmd.numeric import NumericVocab

IGNORE_INDEX = -100


def build_messages(sample: Sample, *, system_prompt: str | None = None, instruction: str | None = None,
                   with_answer: bool = True) -> list[dict]:
    """The chat for one sample, in the Hugging Face multimodal message format.

    [system (if given)], user = [image, question + "\\n" + instruction (if given)], assistant = answer
    (when `with_answer`). The image entry carries `sample.image` (PIL image or path) so the messages
    also work with qwen_vl_utils.process_vision_info.
    """
    question = sample.question if not instruction else f"{sample.question}\n{instruction}"
    messages = []
    if system_prompt is not None:
        messages.append({"role": "system", "content": [{"type": "text", "text": system_prompt}]})
    messages.append({"role": "user", "content": [{"type": "image", "image": sample.image},
                                                 {"type": "text", "text": question}]})
    if with_answer:
        messages.append({"role": "assistant", "content": [{"type": "text", "text": sample.answer}]})
    return messages


class QwenVLCollator:
    """Callable turning a list of Samples into one Qwen2.5-VL training batch.

    Returns a dict (B rows after skips, T the padded length, P the image patches of the batch):
      input_ids, attention_mask, mm_token_type_ids: LongTensor [B, T], left-padded (pad id, 0, 0);
      labels: LongTensor [B, T], -100 except the answer tokens and the closing <|im_end|>;
      numeric_mask: BoolTensor [B, T], True where the label is a V_num token;
      skipped_samples: LongTensor [] (only with on_error="skip"), samples of this call left out;
      pixel_values: FloatTensor [P, C*t*p*p]; image_grid_thw: LongTensor [B, 3];
      and any other key the processor returns.

    `min_pixels` / `max_pixels` default to the processor's own (`size.shortest_edge` / `longest_edge`).
    A sample longer than `max_length` tokens, an empty answer, text holding special tokens or an
    unreadable image is a DataError naming the record; with on_error="skip" it is left out of the batch
    and counted in `skip_log` (a warning reports the running count).
    """

    def __init__(self, processor, *, numeric_vocab: NumericVocab | None = None, system_prompt: str | None = None,
                 instruction: str | None = None, max_length: int | None = None, min_pixels: int | None = None,
                 max_pixels: int | None = None, on_error: str = "raise"):
        check_on_error(on_error)
        self.processor = processor
        self.tokenizer = tok = processor.tokenizer
        self.numeric_vocab = numeric_vocab if numeric_vocab is not None else NumericVocab.from_tokenizer(tok)
        self.system_prompt = system_prompt
        self.instruction = instruction
        self.max_length = max_length
        self.on_error = on_error
        self.skip_log = SkipLog("QwenVLCollator")

        image_processor = processor.image_processor
        self.merge_size = image_processor.merge_size
        self.factor = image_processor.patch_size * image_processor.merge_size
        size = image_processor.size
        self.min_pixels = min_pixels if min_pixels is not None else size["shortest_edge"]
        self.max_pixels = max_pixels if max_pixels is not None else size["longest_edge"]
        if self.min_pixels > self.max_pixels:
            raise ValueError(f"min_pixels {self.min_pixels} exceeds max_pixels {self.max_pixels}")

        if tok.pad_token_id is None:
            raise ValueError("the tokenizer has no pad token")
        self.pad_id = tok.pad_token_id
        self.image_token_id = processor.image_token_id
        self.im_end_id = tok.convert_tokens_to_ids("<|im_end|>")
        # "<|im_start|>assistant\n" as token ids (151644, 77091, 198 on Qwen2.5): the answer starts after it.
        self.assistant_header = tok.encode("<|im_start|>assistant\n", add_special_tokens=False)
        # Text that would be read as control tokens (turn markers, image placeholders) is refused.
        self.special_texts = [t.content for t in tok.added_tokens_decoder.values() if t.special]

    # -- per sample -------------------------------------------------------------------------------
    def resize(self, image):
        """`image` resized the way qwen_vl_utils.fetch_image does (smart_resize + PIL's default filter)."""
        width, height = image.size
        h, w = smart_resize(height, width, factor=self.factor, min_pixels=self.min_pixels,
                            max_pixels=self.max_pixels)
        return image if (w, h) == (width, height) else image.resize((w, h))

    def _prepare(self, sample: Sample, with_answer: bool):
        """(chat text, resized RGB image) for one sample; DataError naming the record when unusable."""
        where = f"record {sample.id!r} of {sample.source}"
        if with_answer:
            if not isinstance(sample.answer, str):
                raise DataError(f"answer is not a string ({type(sample.answer).__name__}) ({where})")
            if not sample.answer.strip():
                raise DataError(f"empty answer ({where})")
        fields = (("question", sample.question), ("answer", sample.answer if with_answer else ""))
        for name, text in fields:
            if not isinstance(text, str):
                raise DataError(f"{name} is not a string ({where})")
            hit = next((s for s in self.special_texts if s in text), None)
            if hit:
                raise DataError(f"{name} contains the special token {hit} ({where})")
        messages = build_messages(sample, system_prompt=self.system_prompt, instruction=self.instruction,
                                  with_answer=with_answer)
        text = self.processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=not with_answer)
        return text, self.resize(sample.load_image())

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
    def _process(self, texts, images) -> dict:
        """One processor call: tokenise, expand <|image_pad|>, patchify (no resize), pad on the left."""
        out = self.processor(images=images, text=texts, padding=True, padding_side="left", do_resize=False,
                             return_tensors="pt")
        return dict(out)

    def _check_image_tokens(self, batch: dict, kept) -> None:
        """Each row holds exactly prod(grid) / merge_size^2 <|image_pad|> tokens."""
        found = (batch["input_ids"] == self.image_token_id).sum(1)
        expected = batch["image_grid_thw"].prod(1) // self.merge_size**2
        for row in torch.nonzero(found != expected).flatten().tolist():
            s = kept[row]
            raise DataError(f"{int(found[row])} <|image_pad|> tokens for a grid of {int(expected[row])} "
                            f"(record {s.id!r} of {s.source})")

    def _drop_rows(self, batch: dict, keep: torch.Tensor) -> dict:
        """The batch without the rows where `keep` [B] is False, and without columns that are all padding."""
        tokens_per_image = batch["image_grid_thw"].prod(1)
        patch_keep = keep.repeat_interleave(tokens_per_image)
        attention = batch["attention_mask"][keep]
        first = int((attention.sum(0) > 0).long().argmax()) if attention.numel() else 0
        shape = batch["input_ids"].shape
        out = {}
        for key, value in batch.items():
            if key == "pixel_values":
                out[key] = value[patch_keep]
            elif key == "image_grid_thw":
                out[key] = value[keep]
            elif torch.is_tensor(value) and value.shape == shape:
                out[key] = value[keep][:, first:]
            else:
                raise RuntimeError(f"QwenVLCollator cannot drop rows from the processor output {key!r}")
        return out

    def _skip_or_raise(self, error: DataError) -> None:
        if self.on_error == "raise":
            raise error
        self.skip_log.add(error)

    def __call__(self, samples: list[Sample]) -> dict:
        if not samples:
            raise ValueError("QwenVLCollator got an empty list of samples")
        skipped_before = self.skip_log.total
        kept, texts, images = self._gather(samples, with_answer=True, on_error=self.on_error)
        if not kept:
            self.skip_log.report()
            raise DataError(f"every sample of this batch of {len(samples)} was skipped: {self.skip_log.summary()}")
        batch = self._process(texts, images)
        self._check_image_tokens(batch, kept)

        if self.max_length is not None:
            lengths = batch["attention_mask"].sum(1)
            too_long = lengths > self.max_length
            for row in torch.nonzero(too_long).flatten().tolist():
                s = kept[row]
                self._skip_or_raise(DataError(f"sample too long: {int(lengths[row])} tokens > max_length "
                                              f"{self.max_length} (record {s.id!r} of {s.source})"))
            if too_long.all():
                self.skip_log.report()
                raise DataError(f"every sample of this batch of {len(samples)} was skipped: "
                                f"{self.skip_log.summary()}")
            if too_long.any():
                batch = self._drop_rows(batch, ~too_long)
                kept = [s for s, long in zip(kept, too_long.tolist()) if not long]

        batch["labels"] = self._labels(batch["input_ids"], kept)
        batch["numeric_mask"] = self.numeric_vocab.mask(batch["labels"])
        if self.on_error == "skip":  # the batch carries its count, so the trainer can total it over workers
            batch["skipped_samples"] = torch.tensor(self.skip_log.total - skipped_before)
        if self.skip_log.total > skipped_before:
            self.skip_log.report()
        return batch

    def _labels(self, input_ids: torch.Tensor, kept) -> torch.Tensor:
        """LongTensor [B, T]: the ids after the last assistant header through the last <|im_end|>, else -100.

        The span is found by token ids, never by searching the text.
        """
        B, T = input_ids.shape
        pos = torch.arange(T)
        n = len(self.assistant_header)
        header_end = torch.ones(B, T - n + 1, dtype=torch.bool)  # header occupies [t, t + n)
        for k, tid in enumerate(self.assistant_header):
            header_end &= input_ids[:, k:T - n + 1 + k] == tid
        last_header = torch.where(header_end, pos[: T - n + 1], -1).amax(1)
        start = last_header + n
        end = torch.where(input_ids == self.im_end_id, pos, -1).amax(1)  # the closing <|im_end|>
        bad = (last_header < 0) | (end <= start)
        for row in torch.nonzero(bad).flatten().tolist():
            s = kept[row]
            raise DataError(f"cannot locate the answer tokens after the assistant header "
                            f"(answer {s.answer!r}, record {s.id!r} of {s.source})")
        span = (pos >= start[:, None]) & (pos <= end[:, None])
        return torch.where(span, input_ids, IGNORE_INDEX)

    def prompt_batch(self, samples: list[Sample]) -> dict:
        """Left-padded generation inputs: the same chats without the assistant turn, ending with the
        assistant header (add_generation_prompt). No labels; errors always raise (rows must match samples).

        Keys: input_ids, attention_mask, mm_token_type_ids [B, T], pixel_values [P, D], image_grid_thw [B, 3].
        """
        if not samples:
            raise ValueError("prompt_batch got an empty list of samples")
        kept, texts, images = self._gather(samples, with_answer=False, on_error="raise")
        batch = self._process(texts, images)
        self._check_image_tokens(batch, kept)
        return batch
