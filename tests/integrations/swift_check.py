"""ms-swift's own SFT trainer with the vlm-smmd plugin, run by tests/test_integrations.py inside a venv that
holds ms-swift and the vlm-smmd core (not the project's venv).

argv: MODEL_DIR DATA_JSONL OUT_DIR. Trains one step with `--loss_type smmd` and SMMD_OPTIONS aux_lambda 0.7,
and prints one JSON object: the loss types registered, swift's logged loss, and for the batch swift handed to
the loss: our loss, its CE part beside swift's own CE loss (`loss_map["cross_entropy"]`) on the same outputs,
the step recomputed in float64 from the formulas, and the error for bad options.
"""

import json
import os
import sys

import torch
from swift import sft_main
from swift.loss import loss_map
from swift.utils import import_external_file

from vlm_smmd.integrations.ms_swift import PLUGIN, NumericSwiftLoss, SwiftConfigError
from vlm_smmd.losses import SMMDLoss
from vlm_smmd.numeric import NumericVocab

model_dir, data, out = sys.argv[1:4]
import_external_file(str(PLUGIN))  # swift imports it again by path: the same module, registered once
seen = []
smmd_call = loss_map["smmd"].__call__


def recorded(self, outputs, labels, **kwargs):
    loss = smmd_call(self, outputs, labels, **kwargs)
    num_items = kwargs.get("num_items_in_batch")
    swift_ce = loss_map["cross_entropy"](self.args, self.trainer)(outputs, labels, num_items_in_batch=num_items)
    seen.append(dict(logits=outputs.logits.detach().double(), labels=labels.detach(), num_items=num_items,
                     loss=loss.item(), parts=self.loss.parts(outputs, labels, num_items), swift_ce=swift_ce.item(),
                     args=self.args, trainer=self.trainer))
    return loss


loss_map["smmd"].__call__ = recorded
os.environ["SMMD_OPTIONS"] = json.dumps({"aux_lambda": 0.7})
log = sft_main(["--model", model_dir, "--model_type", "qwen2", "--template", "qwen2_5", "--dataset", data,
                "--tuner_type", "full", "--max_steps", "1", "--per_device_train_batch_size", "4",
                "--gradient_accumulation_steps", "1", "--learning_rate", "1e-3", "--seed", "0", "--use_hf", "true",
                "--dataset_num_proc", "1", "--dataloader_num_workers", "0", "--output_dir", out,
                "--save_strategy", "no", "--report_to", "none", "--logging_steps", "1",
                "--external_plugins", str(PLUGIN), "--loss_type", "smmd"])["log_history"]
step = seen[0]
logits, labels = step["logits"], step["labels"]
num_items = int(step["num_items"])
# independently: CE over the shifted labels plus 0.7 * SMMDLoss summed over numeric targets, over num_items
vocab = NumericVocab.from_tokenizer(step["trainer"].template.tokenizer)
shifted = labels[:, 1:]
ce = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), shifted.flatten(), reduction="sum")
numeric = (shifted != -100) & vocab.mask(shifted)
smmd = SMMDLoss(vocab.values).double()(logits[:, :-1][numeric][:, vocab.token_ids], vocab.index_of(shifted[numeric]),
                                      reduction="sum")
result = {"registered": sorted(k for k, v in loss_map.items() if issubclass(v, NumericSwiftLoss)),
          "logged_loss": log[0]["loss"], "steps_seen": len(seen), "loss": step["loss"],
          "ce": step["parts"]["ce"].item(), "swift_ce": step["swift_ce"],
          "reference": ((ce + 0.7 * smmd) / num_items).item(), "num_items": num_items,
          "answer_tokens": int((shifted != -100).sum()), "numeric_tokens": int(numeric.sum()),
          "logits_shape": list(logits.shape), "labels_shape": list(labels.shape)}
os.environ["SMMD_OPTIONS"] = json.dumps({"sigmas": [-1.0]})
try:
    loss_map["smmd"](step["args"], step["trainer"])
except SwiftConfigError as e:
    result["bad_options"] = str(e)
print(json.dumps(result))
