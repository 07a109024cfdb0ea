"""LLaMA-Factory's own SFT workflow with `use_numeric_loss`, run by tests/test_integrations.py inside a venv that
holds LLaMA-Factory and the vlm-smmd core (not the project's venv).

argv: MODEL_DIR DATASET_DIR OUT_DIR (DATASET_DIR holds dataset_info.json naming "numbers"). Trains one step of
full fine-tuning with aux smmd at lambda 0.7 and prints one JSON object: the trainer class LLaMA-Factory built,
the loss it logged, and for the batch it handed to the loss: our loss and the step recomputed in float64 from
the formulas; then the error for a LLaMA-Factory loss switch set beside ours.
"""

import json
import sys
from pathlib import Path

import torch
from llamafactory.train.tuner import run_exp
from transformers import AutoTokenizer

from vlm_smmd.integrations.llama_factory import LlamaFactoryConfigError, use_numeric_loss
from vlm_smmd.losses import SMMDLoss
from vlm_smmd.losses.hf import NumericLossFunction
from vlm_smmd.numeric import NumericVocab

model_dir, dataset_dir, out = sys.argv[1:4]
seen = []
call = NumericLossFunction.__call__


def recorded(self, outputs, labels, num_items_in_batch=None):
    loss = call(self, outputs, labels, num_items_in_batch)
    seen.append((outputs.logits.detach().double(), labels.detach(), num_items_in_batch, loss.item()))
    return loss


NumericLossFunction.__call__ = recorded
trainer_class = use_numeric_loss(aux="smmd", aux_lambda=0.7)
config = {"model_name_or_path": model_dir, "stage": "sft", "do_train": True, "finetuning_type": "full",
          "dataset": "numbers", "dataset_dir": dataset_dir, "template": "qwen", "cutoff_len": 256,
          "output_dir": out, "per_device_train_batch_size": 4, "gradient_accumulation_steps": 1, "max_steps": 1,
          "learning_rate": 1e-3, "logging_steps": 1, "report_to": "none", "save_strategy": "no", "seed": 0,
          "preprocessing_num_workers": 1, "dataloader_num_workers": 0, "overwrite_output_dir": True}
run_exp(dict(config))
logits, labels, num_items, loss = seen[0]
log = json.loads((Path(out) / "trainer_state.json").read_text())["log_history"]
vocab = NumericVocab.from_tokenizer(AutoTokenizer.from_pretrained(model_dir))
shifted = labels[:, 1:]
ce = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), shifted.flatten(), reduction="sum")
numeric = (shifted != -100) & vocab.mask(shifted)
smmd = SMMDLoss(vocab.values).double()(logits[:, :-1][numeric][:, vocab.token_ids], vocab.index_of(shifted[numeric]),
                                      reduction="sum")
result = {"trainer_class": trainer_class.__name__, "logged_loss": log[0]["loss"], "steps_seen": len(seen),
          "loss": loss, "reference": ((ce + 0.7 * smmd) / int(num_items)).item(), "num_items": int(num_items),
          "answer_tokens": int((shifted != -100).sum()), "numeric_tokens": int(numeric.sum())}
try:
    run_exp(dict(config, use_dft_loss=True, output_dir=out + "-dft"))
except LlamaFactoryConfigError as e:
    result["own_loss_refused"] = str(e)
print(json.dumps(result))
