"""The ms-swift loss plugin: every registered aux loss (`vlm_smmd.losses.AUX_NAMES`) as a `--loss_type`.

    swift sft --external_plugins "$(python -m vlm_smmd.integrations.ms_swift)" --loss_type smmd ...

ms-swift (>= 4.0) imports the file `swift_plugin.py` beside this one, which calls `register()`: each name goes
into `swift.loss.loss_map` as a `swift.loss.BaseLoss` that the SFT trainer builds as `cls(args, trainer)` and
calls as `loss(outputs, labels, num_items_in_batch=..., loss_scale=..., trainer=...)`. Logits [B, T', V]
come with labels [B, T'] cut to the same window (swift's `logits_to_keep`), still unshifted, so the drop-in
(`numeric_loss_func`) applies as it is: CE + lambda * aux, both sums divided by `num_items_in_batch`.

Options come from the environment, as JSON, because swift's command line takes no loss options:
    SMMD_OPTIONS='{"aux_lambda": 0.5, "numeric_vocab": "canonical", "sigmas": [1.0, 2.0]}'
keys: aux_lambda, numeric_vocab and the aux loss's own options (`LOSSES[name].options`), checked when the
trainer builds the loss. Per-token `loss_scale` weights, sequence parallelism and Megatron are refused.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..losses import AUX_NAMES, numeric_loss_func

OPTIONS_VARIABLE = "SMMD_OPTIONS"
PLUGIN = Path(__file__).with_name("swift_plugin.py")  # the file to pass to --external_plugins


class SwiftConfigError(ValueError):
    """The plugin cannot run as configured (options, or a swift feature it does not support)."""


def loss_options(environ=None) -> dict:
    """The keyword arguments of `numeric_loss_func` (besides tokenizer and aux) from SMMD_OPTIONS in `environ`
    (default: os.environ)."""
    text = (os.environ if environ is None else environ).get(OPTIONS_VARIABLE, "").strip()
    if not text:
        return {}
    try:
        options = json.loads(text)
    except json.JSONDecodeError as e:
        raise SwiftConfigError(f"{OPTIONS_VARIABLE} is not JSON ({e.msg} at character {e.pos}): {text!r}") from None
    if not isinstance(options, dict):
        raise SwiftConfigError(f"{OPTIONS_VARIABLE} must be a JSON object of options, got {text!r}")
    return options


class NumericSwiftLoss:
    """CE + lambda * aux for ms-swift's SFT trainer; `register` mixes it with swift's BaseLoss per aux name."""

    aux = "smmd"

    def __init__(self, args, trainer):
        super().__init__(args, trainer)
        if self.is_megatron:
            raise SwiftConfigError(f"loss_type {self.aux!r} runs on the transformers trainer (swift sft), not "
                                   "Megatron")
        template = getattr(trainer, "template", None)
        if getattr(template, "sequence_parallel_size", 1) > 1:
            raise SwiftConfigError(f"loss_type {self.aux!r} needs whole sequences: set sequence_parallel_size 1")
        tokenizer = getattr(template, "tokenizer", None)
        options = loss_options()
        try:
            self.loss = numeric_loss_func(trainer.processing_class if tokenizer is None else tokenizer, aux=self.aux,
                                          **options)
        except (TypeError, ValueError) as e:
            raise SwiftConfigError(f"{OPTIONS_VARIABLE}={json.dumps(options)}: {e}") from None

    def __call__(self, outputs, labels, *, num_items_in_batch=None, loss_scale=None, **kwargs):
        """outputs with logits [B, T', V], labels [B, T'] (-100 outside the answer) -> scalar loss."""
        if loss_scale is not None and bool((loss_scale.reshape(labels.shape)[labels != -100] != 1).any()):
            raise SwiftConfigError(f"loss_type {self.aux!r} weighs every answer token alike; per-token loss_scale "
                                   "weights would be ignored: train without --loss_scale")
        return self.loss(outputs, labels, num_items_in_batch)


def register() -> list[str]:
    """Add every aux loss but "none" (swift's default is CE alone) to ms-swift's loss_map; returns the names.

    A name swift already uses for a loss of its own is refused rather than replaced."""
    from swift.loss import BaseLoss, loss_map

    names = [name for name in AUX_NAMES if name != "none"]
    for name in names:
        existing = loss_map.get(name)
        if existing is not None and not issubclass(existing, NumericSwiftLoss):
            raise SwiftConfigError(f"ms-swift already has a loss_type {name!r} ({existing.__qualname__})")
        loss_map[name] = type(f"NumericSwiftLoss_{name}", (NumericSwiftLoss, BaseLoss),
                              {"aux": name, "__module__": __name__})
    return names


if __name__ == "__main__":
    print(PLUGIN)
