"""V_num: the numeric sub-vocabulary of a tokenizer (paper, Algorithm 1), its values, and label helpers.

A token is numeric when its text is a plain ASCII number: one or more digits 0-9 with at most one '.'
(".5" and "5." count; "." does not) and nothing else — no sign, space, exponent, underscore, Unicode
digit, "inf" or "nan". For Qwen2/2.5 that is exactly the ten digit tokens "0".."9" (ids 15..24).

Pure: strings and tensors in, tensors out; nothing here reads files or configs.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

_PLAIN_NUMBER = re.compile(r"[0-9]*\.?[0-9]*")
_ASCII_DIGIT = re.compile(r"[0-9]")

# Place value of a position that holds no digit (see `NumericVocab.place_values`).
NO_PLACE = None


def is_plain_number(text: str) -> bool:
    """True when `text` is ASCII digits with at most one '.' and at least one digit ("12", "0.5", ".5")."""
    return bool(text) and _PLAIN_NUMBER.fullmatch(text) is not None and _ASCII_DIGIT.search(text) is not None


def digit_places(text: str) -> list[tuple[str, int]]:
    """(digit, power of ten) for each digit of a plain number: "12.5" -> [("1", 1), ("2", 0), ("5", -1)].

    Raises ValueError when `text` is not a plain number (see `is_plain_number`).
    """
    if not is_plain_number(text):
        raise ValueError(f"not a plain ASCII number: {text!r}")
    whole, _, frac = text.partition(".")
    return [(d, len(whole) - 1 - i) for i, d in enumerate(whole)] + [(d, -1 - i) for i, d in enumerate(frac)]


@dataclass(eq=False)  # tensor fields: identity comparison
class NumericVocab:
    """The numeric tokens of a vocabulary in one fixed order (ascending token id).

    token_ids: LongTensor [N]; values: FloatTensor [N] (may repeat, e.g. "5" and "05"); texts: the N
    token texts; decimal_point_id: id of the lone "." token, if the tokenizer has one (joins the digit
    runs of "12.5" when a tokenizer splits it as "12", ".", "5").
    """

    token_ids: torch.Tensor
    values: torch.Tensor
    texts: list[str]
    decimal_point_id: int | None = None
    _tables: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self):
        self.token_ids = torch.as_tensor(self.token_ids, dtype=torch.long).reshape(-1)
        self.values = torch.as_tensor(self.values, dtype=torch.float32).reshape(-1)
        if not (len(self.token_ids) == len(self.values) == len(self.texts)):
            raise ValueError("token_ids, values and texts must have the same length")
        if len(self.token_ids) and (self.token_ids.min() < 0 or len(set(self.token_ids.tolist())) != len(self)):
            raise ValueError("token ids must be distinct and non-negative")
        # id -> index into token_ids, -1 when not numeric; one slot past the largest id.
        size = int(self.token_ids.max()) + 1 if len(self) else 0
        self._index = torch.full((size,), -1, dtype=torch.long)
        self._index[self.token_ids] = torch.arange(len(self))

    @classmethod
    def from_tokenizer(cls, tokenizer, max_value: float | None = None) -> NumericVocab:
        """V_num of a Hugging Face tokenizer: every non-special token whose text is a plain number.

        The token's own string (e.g. "5", never "Ġ5" or "▁5") must be a plain number and decode to
        itself, so byte-level and sentencepiece space markers are excluded. `max_value` drops larger values.
        """
        special = set(getattr(tokenizer, "all_special_ids", []) or [])
        ids, values, texts = [], [], []
        for text, tid in sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1]):
            if tid in special or not is_plain_number(text):
                continue
            if tokenizer.decode([tid]) != text:
                continue
            value = float(text)
            if max_value is not None and value > max_value:
                continue
            ids.append(tid)
            values.append(value)
            texts.append(text)
        if not ids:
            raise ValueError("the tokenizer has no numeric tokens (no token is a plain ASCII number)")
        point = tokenizer.get_vocab().get(".")
        if point is not None and tokenizer.decode([point]) != ".":
            point = None
        return cls(torch.tensor(ids), torch.tensor(values), texts, point)

    def __len__(self) -> int:
        return len(self.token_ids)

    def lookup(self, width: int) -> torch.Tensor:
        """LongTensor [width]: token id -> index into token_ids / values, -1 when not numeric.

        `width` is the model's logit width, which may exceed len(tokenizer) (151936 or 152064 for a
        151665-token Qwen2.5 tokenizer); it must cover every numeric id.
        """
        if width < len(self._index):
            raise ValueError(f"logit width {width} does not cover numeric token id {len(self._index) - 1}")
        table = torch.full((width,), -1, dtype=torch.long)
        table[: len(self._index)] = self._index
        return table

    def index_of(self, ids: torch.Tensor) -> torch.Tensor:
        """LongTensor [...] (same shape as `ids`): index into token_ids / values, -1 when not numeric.

        Any id is allowed: negative ones (-100) and ids past the table give -1.
        """
        ids = torch.as_tensor(ids)
        table = self._tables.get(ids.device)
        if table is None:
            table = self._tables[ids.device] = self._index.to(ids.device)
        if len(table) == 0:
            return torch.full_like(ids, -1, dtype=torch.long)
        inside = (ids >= 0) & (ids < len(table))
        return torch.where(inside, table[ids.clamp(0, len(table) - 1)], -1)

    def mask(self, ids: torch.Tensor) -> torch.Tensor:
        """BoolTensor [...]: True where the id is a numeric token."""
        return self.index_of(ids) >= 0

    def number_spans(self, ids: Sequence[int] | torch.Tensor) -> list[tuple[int, int]]:
        """Half-open [start, end) spans of the numbers in a 1-D label/id sequence [T].

        A number is a maximal run of numeric tokens, where one decimal-point token between two numeric
        tokens joins them ("12", ".", "5" is one span of 3). "10:07" gives two spans; -100 breaks a span.
        """
        seq = torch.as_tensor(ids).reshape(-1)
        index = self.index_of(seq).tolist()
        seq = seq.tolist()
        spans, t, n = [], 0, len(seq)
        while t < n:
            if index[t] < 0:
                t += 1
                continue
            start, has_point = t, False
            while t < n:
                if index[t] >= 0:
                    has_point = has_point or "." in self.texts[index[t]]
                    t += 1
                elif (seq[t] == self.decimal_point_id and not has_point and t + 1 < n and index[t + 1] >= 0
                      and "." not in self.texts[index[t + 1]]):
                    has_point = True
                    t += 1
                else:
                    break
            spans.append((start, t))
        return spans

    def place_values(self, ids: Sequence[int] | torch.Tensor) -> list[int | None]:
        """Per position of a 1-D sequence [T]: the power of ten of the token's last digit, else None.

        Units 0, tens 1, tenths -1, ... within each `number_spans` span ("12.5" as "1","2",".","5" gives
        [1, 0, None, -1]; a multi-digit token "123" followed by "4" gives [1, 0]). Positions outside
        numbers and the decimal-point token get None (`NO_PLACE`).
        """
        seq = torch.as_tensor(ids).reshape(-1)
        index = self.index_of(seq).tolist()
        places: list[int | None] = [NO_PLACE] * len(index)
        for start, end in self.number_spans(seq):
            pieces = [self.texts[index[t]] if index[t] >= 0 else "." for t in range(start, end)]
            text = "".join(pieces)
            whole = text.index(".") if "." in text else len(text)  # digits before the point
            stop = 0  # offset just past the current piece in `text`
            for t, piece in zip(range(start, end), pieces):
                stop += len(piece)
                if index[t] < 0:
                    continue  # the decimal-point token
                last = stop - 1 if piece[-1] != "." else stop - 2  # offset of the piece's last digit
                places[t] = whole - 1 - last if last < whole else whole - last
        return places
