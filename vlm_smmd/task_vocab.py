"""A task vocabulary: a small real Hugging Face tokenizer learned from a task's own texts.

From-scratch research models cannot afford a 152k-token output layer on two CPU cores, and need no more
than the few dozen words a task uses. `build_task_tokenizer` builds a byte-level BPE tokenizer the way
Qwen's is built, only small:

- the pre-tokenizer is Qwen2's regex (every digit is its own pre-token, so "10:07" is 1, 0, :, 0, 7 and
  V_num is exactly "0".."9") followed by the GPT-2 byte-to-character map ("Ġ" is a space, "Ċ" a newline);
- the base alphabet is all 256 bytes, so any text encodes, unseen characters as their UTF-8 bytes, and
  `decode(encode(text)) == text` for every text (no normalizer, no unknown token, nothing dropped);
- BPE merges learned from the texts turn their frequent words (" clock", "assistant") into single tokens;
- the family's special tokens are added under their own names after the learned vocabulary, so the stock
  processor and chat template work unchanged (Qwen2_5_VLProcessor expands <|image_pad|> by name).

Size: 256 bytes + the learned merges + the special tokens (about 300-450 for a task). Deterministic: the
same texts and arguments give the same ids (the BPE trainer breaks ties by token id, not by hash order).
What it is not: a language model's vocabulary. A model trained with it reads only what the task says.
"""

from __future__ import annotations

from collections.abc import Iterable

# Qwen2's pre-tokenizer pattern (Qwen2.5 and Qwen3 use the same): contractions, words with one leading
# non-letter, single digits, punctuation runs, newlines, spaces.
QWEN_SPLIT_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                      r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def render_template_text(chat_template: str, **variables) -> str:
    """The chat template rendered on one exchange (system default if any, user = image + empty text,
    assistant = empty), then the generation prompt: the template's own words ("system", "user",
    "assistant", a default system prompt, newlines) and its special tokens. Rendered with the same Jinja
    settings as transformers' `apply_chat_template`."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    exchange = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": ""}]},
                {"role": "assistant", "content": [{"type": "text", "text": ""}]}]
    try:
        template = env.from_string(chat_template)
        return (template.render(messages=exchange, add_generation_prompt=False, **variables)
                + template.render(messages=exchange[:1], add_generation_prompt=True, **variables))
    except Exception as e:  # jinja raises many types; the message is what matters
        raise ValueError(f"the chat template does not render a user/assistant exchange: {e}") from None


def _without_specials(text: str, specials: list[str]) -> list[str]:
    """The pieces of `text` between occurrences of the special tokens (the trainer must not learn them)."""
    pieces = [text]
    for special in specials:
        pieces = [part for piece in pieces for part in piece.split(special)]
    return [p for p in pieces if p]


def build_task_tokenizer(texts: Iterable[str], *, special_tokens: list[str], chat_template: str | None,
                         eos_token: str, pad_token: str, bos_token: str | None = None,
                         max_merges: int = 256, min_frequency: int = 2, padding_side: str = "left"):
    """A `transformers.PreTrainedTokenizerFast` whose vocabulary is learned from `texts` (module docstring).

    texts: the task's questions, answers (or whole rendered chats; special-token names in them are cut
      out before training). The chat template's own text (`render_template_text`) is added as often as
      there are texts, since every chat carries it.
    special_tokens: the family's special-token names (e.g. `families.tokenizers.QWEN_SPECIAL_TOKENS`),
      added in this order after the learned vocabulary; all are special (`all_special_ids`).
    eos_token, pad_token, bos_token: names among `special_tokens`.
    max_merges: most BPE merges to learn; min_frequency: a merge needs a pair seen at least this often.
    Raises ValueError on empty or non-string texts, duplicate or missing special tokens, or a text that
    does not round-trip (which would be a bug).
    """
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    texts = list(texts)
    if not texts:
        raise ValueError("build_task_tokenizer needs at least one text")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise ValueError(f"text {i} is a {type(text).__name__}, not a string")
    special_tokens = list(special_tokens)
    if len(set(special_tokens)) != len(special_tokens) or not all(special_tokens):
        raise ValueError(f"special tokens must be distinct non-empty strings, got {special_tokens}")
    for role, name in (("eos_token", eos_token), ("pad_token", pad_token), ("bos_token", bos_token)):
        if name is not None and name not in special_tokens:
            raise ValueError(f"{role} {name!r} is not one of the special tokens")
    if max_merges < 0 or min_frequency < 1:
        raise ValueError(f"max_merges must be >= 0 and min_frequency >= 1, got {max_merges}, {min_frequency}")

    corpus = [piece for text in texts for piece in _without_specials(text, special_tokens)]
    if chat_template is not None:
        rendered = render_template_text(chat_template, bos_token=bos_token or "", eos_token=eos_token)
        corpus += _without_specials(rendered, special_tokens) * len(texts)

    backend = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    backend.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    backend.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(vocab_size=len(alphabet) + max_merges, min_frequency=min_frequency,
                                  initial_alphabet=alphabet, special_tokens=[], show_progress=False)
    backend.train_from_iterator(corpus, trainer)
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special_tokens])

    named = {eos_token, pad_token, bos_token}
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, eos_token=eos_token, pad_token=pad_token, bos_token=bos_token,
        extra_special_tokens=[t for t in special_tokens if t not in named],
        clean_up_tokenization_spaces=False, padding_side=padding_side)
    if chat_template is not None:
        tokenizer.chat_template = chat_template

    for i, text in enumerate(texts):  # a guard: byte-level BPE without a normalizer always round-trips
        ids = tokenizer.encode(text, add_special_tokens=False)
        if tokenizer.decode(ids) != text:
            raise ValueError(f"text {i} does not round-trip through the task tokenizer: {text!r}")
    return tokenizer
