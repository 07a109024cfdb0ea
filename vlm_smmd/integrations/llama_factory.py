"""LLaMA-Factory's SFT stage trained with CE + lambda * aux, through its own trainer.

    from llamafactory.train.tuner import run_exp
    from vlm_smmd.integrations.llama_factory import use_numeric_loss

    use_numeric_loss(aux="smmd", aux_lambda=1.0)
    run_exp()  # reads the YAML named on the command line, as `llamafactory-cli train` does

LLaMA-Factory has no loss plugin, so `use_numeric_loss` replaces the trainer class its SFT workflow builds
(`llamafactory.train.sft.workflow.CustomSeq2SeqTrainer`) with a subclass that sets the transformers Trainer's
`compute_loss_func` to `numeric_loss_func(<the run's tokenizer>, aux, ...)`. Everything else is LLaMA-Factory's:
data, templates, LoRA, DeepSpeed, evaluation. The transformers Trainer passes `num_items_in_batch`, so the
normalisation is the drop-in's (`vlm_smmd.losses.hf`). LLaMA-Factory's own loss switches (use_dft_loss,
use_eaft_loss, use_asft_loss) replace the loss too and are refused beside it. Call it in every process (under
torchrun each rank runs the script), before `run_exp`.
"""

from __future__ import annotations

from ..losses import numeric_loss_func

OWN_LOSSES = ("use_dft_loss", "use_eaft_loss", "use_asft_loss")  # LLaMA-Factory's flags that set the loss


class LlamaFactoryConfigError(ValueError):
    """The numeric loss cannot run with this LLaMA-Factory configuration."""


def use_numeric_loss(aux: str = "smmd", aux_lambda: float = 1.0, numeric_vocab="all", **loss_options) -> type:
    """Make LLaMA-Factory's SFT workflow train with CE + aux_lambda * aux (arguments as `numeric_loss_func`,
    checked when the trainer is built); returns the trainer class now in use."""
    from llamafactory.train.sft import trainer as sft_trainer
    from llamafactory.train.sft import workflow

    base = sft_trainer.CustomSeq2SeqTrainer  # LLaMA-Factory's class, also after an earlier call

    class NumericSeq2SeqTrainer(base):
        def __init__(self, finetuning_args, *args, **kwargs):
            chosen = [flag for flag in OWN_LOSSES if getattr(finetuning_args, flag, False)]
            if chosen:
                raise LlamaFactoryConfigError(f"{', '.join(chosen)} replaces the loss; turn it off to train with "
                                              f"aux {aux!r}")
            super().__init__(finetuning_args, *args, **kwargs)
            self.compute_loss_func = numeric_loss_func(self.processing_class, aux=aux, aux_lambda=aux_lambda,
                                                       numeric_vocab=numeric_vocab, **loss_options)

    NumericSeq2SeqTrainer.__qualname__ = NumericSeq2SeqTrainer.__name__ = f"Numeric{base.__name__}"
    workflow.CustomSeq2SeqTrainer = NumericSeq2SeqTrainer
    return NumericSeq2SeqTrainer
