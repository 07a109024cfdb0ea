"""V_num: the numeric sub-vocabulary of a tokenizer (paper, Algorithm 1), its values, the label mask, and
which answer positions form one number (`NumberLayout`), with the place value of each.

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

Numbers (for the number-level losses): a number is a run of answer positions in one row, at consecutive
positions, whose targets are numeric tokens or the decimal point token ("." when the tokenizer has it as a
token of its own); a second decimal point starts a new number. Its value is the decimal reading of the
run's text: "1234.56" as Llama-3's "123", "4", ".", "56" is 123 * 10 + 4 + 56 * 10**-2. Signs, thousands
separators and exponents are not part of a number ("-5" is 5, "1,234" is 1 and 234).

Pure: strings and tensors in, tensors out; nothing here reads files or configs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import torch

_PLAIN_NUMBER = re.compile(r"[0-9]*\.?[0-9]*")
_ASCII_DIGIT = re.compile(r"[0-9]")
_NUMBER_START = frozenset("0123456789.")  # a plain number's first character


def is_plain_number(text: str) -> bool:
    """True when `text` is ASCII digits with at most one '.' and at least one digit ("12", "0.5", ".5")."""
    return bool(text) and _PLAIN_NUMBER.fullmatch(text) is not None and _ASCII_DIGIT.search(text) is not None


@dataclass(frozen=True, eq=False)
class NumberLayout:
    """Which of M answer positions form one number, and the place value of each (`NumericVocab.number_layout`).

    number: LongTensor [M], the number (0..count-1, numbered in row-major order) whose numeric token the
        position's target is; -1 where the target is no numeric token (text, the decimal point, -100).
    exponent: LongTensor [M], the target token's place: its value times 10**exponent is its share of the
        number's value ("12.5": 1, 0, -, -1); 0 outside numbers.
    digits_after: LongTensor [M], how many digits of the number follow the token's last one; 0 outside.
    slot: LongTensor [M], the position's index among its number's numeric tokens (0 first); 0 outside.
    count: numbers K; width: most numeric tokens in one number (0 when K == 0).
    """

    number: torch.Tensor
    exponent: torch.Tensor
    digits_after: torch.Tensor
    slot: torch.Tensor
    count: int
    width: int

    def dense(self, per_position: torch.Tensor, fill: float = 0.0) -> torch.Tensor:
        """[M, ...] -> [count, width, ...]: each number's positions in a row of its own, `fill` elsewhere.

        Assignment, not accumulation, so the result and its gradient are deterministic on every device.
        """
        inside = self.number >= 0
        out = per_position.new_full((self.count, self.width, *per_position.shape[1:]), fill)
        out[self.number[inside], self.slot[inside]] = per_position[inside]
        return out


def _digit_layout(text: str) -> tuple[int, int, bool]:
    """(digits, digits after the '.', has a '.') of a plain-number text."""
    whole, point, fraction = text.partition(".")
    return len(whole) + len(fraction), len(fraction), bool(point)


@dataclass(eq=False)  # tensor fields: identity comparison
class NumericVocab:
    """The numeric tokens of a vocabulary in one fixed order (ascending token id).

    token_ids: LongTensor [N]; values: FloatTensor [N] (may repeat, e.g. "5" and "05"); texts: the N
    token texts; decimal_point_id: the id of the token "." (None: decimals are not read as one number).
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
        odd = [t for t in self.texts if not is_plain_number(t)]
        if odd:
            raise ValueError(f"every numeric token text must be a plain number, got {odd[:5]}")
        if self.decimal_point_id is not None and int(self.decimal_point_id) in set(self.token_ids.tolist()):
            raise ValueError(f"the decimal point token {self.decimal_point_id} cannot be a numeric token")
        # per V_num entry: digits, digits after its own '.', whether it holds a '.'
        layout = [_digit_layout(t) for t in self.texts]
        self._digits = torch.tensor([d for d, _, _ in layout], dtype=torch.long)
        self._fraction_digits = torch.tensor([f for _, f, _ in layout], dtype=torch.long)
        self._has_point = torch.tensor([p for _, _, p in layout], dtype=torch.bool)

    @classmethod
    def from_tokenizer(cls, tokenizer, max_value: float | None = None, canonical: bool = False) -> NumericVocab:
        """V_num of a Hugging Face tokenizer: every non-special token whose text is a plain number.

        The token's own string (e.g. "5", never "Ġ5" or "▁5") must be a plain number and decode to
        itself, so byte-level and sentencepiece space markers are excluded. `max_value` drops larger values.
        `canonical` keeps only integers written without leading zeros (module docstring).
        """
        special = set(getattr(tokenizer, "all_special_ids", []) or [])
        vocab = tokenizer.get_vocab()
        ids, values, texts = [], [], []
        # Few tokens are plain numbers: test that first (a cheap first-character check, then the full one),
        # so only they are sorted by id. A collator builds this per tokenizer; the whole vocabulary is 150k.
        numbers = [(text, tid) for text, tid in vocab.items()
                   if text[:1] in _NUMBER_START and is_plain_number(text)]
        for text, tid in sorted(numbers, key=lambda kv: kv[1]):
            if tid in special:
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
        point = vocab.get(".")
        if point is not None and (point in special or tokenizer.decode([point]) != "."):
            point = None
        return cls(torch.tensor(ids), torch.tensor(values), texts, point)

    def __len__(self) -> int:
        return len(self.token_ids)

    def index_of(self, ids: torch.Tensor) -> torch.Tensor:
        """LongTensor [...] (same shape as `ids`): index into token_ids / values, -1 when not numeric.

        Any id is allowed: negative ones (-100) and ids past the table give -1.
        """
        ids = torch.as_tensor(ids)
        table = self._on(ids.device, "_index")
        if len(table) == 0:
            return torch.full_like(ids, -1, dtype=torch.long)
        inside = (ids >= 0) & (ids < len(table))
        return torch.where(inside, table[ids.clamp(0, len(table) - 1)], -1)

    def mask(self, ids: torch.Tensor) -> torch.Tensor:
        """BoolTensor [...]: True where the id is a numeric token."""
        return self.index_of(ids) >= 0

    def _on(self, device: torch.device, name: str) -> torch.Tensor:
        """The table `name` on `device`, copied there once."""
        key = (name, device)
        if key not in self._tables:
            self._tables[key] = getattr(self, name).to(device)
        return self._tables[key]

    def number_layout(self, targets: torch.Tensor, batch_idx: torch.Tensor, pos_idx: torch.Tensor) -> NumberLayout:
        """The numbers among M answer positions: targets [M] token ids (-100 allowed), batch_idx [M] rows and
        pos_idx [M] positions (any order; `answer_positions(labels)` gives them) -> `NumberLayout` of those M.

        Vectorised on the targets' device; its sizes depend on the data, so it waits for the device.
        """
        targets, batch_idx, pos_idx = (torch.as_tensor(t) for t in (targets, batch_idx, pos_idx))
        if not (targets.dim() == 1 and targets.shape == batch_idx.shape == pos_idx.shape):
            raise ValueError(f"need targets, batch_idx and pos_idx of one shape [M], got {tuple(targets.shape)}, "
                             f"{tuple(batch_idx.shape)} and {tuple(pos_idx.shape)}")
        device = targets.device
        batch_idx, pos_idx = batch_idx.to(device), pos_idx.to(device)
        order = torch.argsort(pos_idx, stable=True)  # row-major order: by row, then by position
        order = order[torch.argsort(batch_idx[order], stable=True)]
        t, b, p = targets[order], batch_idx[order], pos_idx[order]

        index = self.index_of(t)
        numeric = index >= 0
        safe = index.clamp_min(0)
        zero = torch.zeros_like(index)
        digits = torch.where(numeric, self._on(device, "_digits")[safe], zero)
        fraction = torch.where(numeric, self._on(device, "_fraction_digits")[safe], zero)
        point_token = t == self.decimal_point_id if self.decimal_point_id is not None else torch.zeros_like(numeric)
        point = point_token | (numeric & self._on(device, "_has_point")[safe])
        member = numeric | point_token

        follows = torch.zeros_like(member)  # position i continues the run of position i - 1
        follows[1:] = member[1:] & member[:-1] & (b[1:] == b[:-1]) & (p[1:] == p[:-1] + 1)
        run_start = member & ~follows
        first = run_start.nonzero().squeeze(1)
        if len(first) == 0:
            none = torch.full_like(index, -1)
            return NumberLayout(none, zero, zero, zero, 0, 0)
        # a decimal point after an earlier one in the same run starts a new number
        points_before = torch.cumsum(point.long(), 0) - point.long()  # points before i in the whole list
        run = (torch.cumsum(run_start.long(), 0) - 1).clamp_min(0)
        start = run_start | (member & point & (points_before > points_before[first][run]))

        first = start.nonzero().squeeze(1)
        run = (torch.cumsum(start.long(), 0) - 1).clamp_min(0)  # the run of each member
        runs = len(first)
        cum_digits = torch.cumsum(digits, 0)
        through = cum_digits - (cum_digits - digits)[first][run]  # the run's digits up to this token's last
        total = torch.zeros(runs, dtype=torch.long, device=device).index_add_(0, run[member], digits[member])
        whole = total.clone()  # digits before the run's decimal point
        whole[run[point]] = (through - fraction)[point]
        exponent = whole[run] - through + fraction
        digits_after = total[run] - through

        # numbers are the runs holding a numeric token (a lone "." is none), numbered 0..K-1 in order
        tokens = torch.zeros(runs, dtype=torch.long, device=device).index_add_(0, run[numeric], numeric.long()[numeric])
        renumber = torch.cumsum((tokens > 0).long(), 0) - 1
        number = torch.where(numeric, renumber[run], -1)
        cum_numeric = torch.cumsum(numeric.long(), 0)
        slot = cum_numeric - 1 - (cum_numeric - numeric.long())[first][run]
        count, width = torch.stack([(tokens > 0).sum(), tokens.max()]).tolist()

        def back(x):  # to the caller's order, 0 outside numbers
            out = torch.empty_like(x)
            out[order] = torch.where(numeric, x, zero)
            return out

        unsorted = torch.empty_like(number)
        unsorted[order] = number
        return NumberLayout(unsorted, back(exponent), back(digits_after), back(slot), int(count), int(width))
