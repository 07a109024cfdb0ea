"""V_num: the numeric sub-vocabulary of a tokenizer (paper, Algorithm 1), its values, and the label mask.

A token is numeric when its text is a plain ASCII number: one or more digits 0-9 with at most one '.'
(".5" and "5." count; "." does not) and nothing else — no sign, space, exponent, underscore, Unicode
digit, "inf" or "nan". For Qwen2/2.5/3 that is exactly the ten digit tokens "0".."9" (ids 15..24).

Multi-digit tokenizers (Llama-3: every integer 0..999 is one token) also hold zero-padded tokens such
as "07" and "007". Two ways to treat them (`from_tokenizer(..., canonical=...)`):
- all (default): every plain-number token is in V_num with its numeric value, so "7", "07" and "007"
  all have value 7. Their value distance is 0, hence kernel entry 1: SMMD treats mass on "07" as mass
  on the right value when the target is "7" (and vice versa) and leaves the choice of spelling to CE.
  This keeps "10:07"'s minute token "07" a numeric position.
- canonical (the official code's restriction): only the integers 0..max_value written without leading
  zeros (and no '.') that are single tokens, so every value appears once; "07" is then not numeric and
  its position gets CE only.

Pure: strings and tensors in, tensors out; nothing here reads files or configs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import torch

_PLAIN_NUMBER = re.compile(r"[0-9]*\.?[0-9]*")
_ASCII_DIGIT = re.compile(r"[0-9]")


def is_plain_number(text: str) -> bool:
    """True when `text` is ASCII digits with at most one '.' and at least one digit ("12", "0.5", ".5")."""
    return bool(text) and _PLAIN_NUMBER.fullmatch(text) is not None and _ASCII_DIGIT.search(text) is not None


@dataclass(eq=False)  # tensor fields: identity comparison
class NumericVocab:
    """The numeric tokens of a vocabulary in one fixed order (ascending token id).

    token_ids: LongTensor [N]; values: FloatTensor [N] (may repeat, e.g. "5" and "05"); texts: the N
    token texts.
    """

    token_ids: torch.Tensor
    values: torch.Tensor
    texts: list[str]
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
    def from_tokenizer(cls, tokenizer, max_value: float | None = None, canonical: bool = False) -> NumericVocab:
        """V_num of a Hugging Face tokenizer: every non-special token whose text is a plain number.

        The token's own string (e.g. "5", never "Ġ5" or "▁5") must be a plain number and decode to
        itself, so byte-level and sentencepiece space markers are excluded. `max_value` drops larger values.
        `canonical` keeps only integers written without leading zeros (module docstring).
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
            if canonical and not (text.isdigit() and text == str(int(text))):
                continue
            ids.append(tid)
            values.append(value)
            texts.append(text)
        if not ids:
            raise ValueError("the tokenizer has no numeric tokens (no token is a plain ASCII number)")
        return cls(torch.tensor(ids), torch.tensor(values), texts)

    def __len__(self) -> int:
        return len(self.token_ids)

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
