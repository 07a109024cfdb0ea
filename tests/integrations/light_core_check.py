"""Import the light core (the losses, the numeric vocabulary, the framework adapters) and run the drop-in and
SMMDLoss forward and backward on a duck-typed tokenizer; print one JSON object: the modules of the pipeline
that got imported (none expected) and the losses. Run here and in a venv holding the core install alone."""

import json
import sys

import torch

from vlm_smmd.losses import NumericLossMixin, SMMDLoss, numeric_loss_func  # noqa: F401 (the public names load)

PIPELINE = ("transformers", "peft", "deepspeed", "accelerate", "datasets", "torchvision", "qwen_vl_utils", "PIL",
            "yaml", "matplotlib", "trl", "swift", "llamafactory")


class Tokenizer:
    """What NumericVocab.from_tokenizer reads: get_vocab and decode. Digits are ids 3..12."""

    vocab = {"<pad>": 0, "x": 1, ":": 2, **{str(d): 3 + d for d in range(10)}}

    def get_vocab(self):
        return dict(self.vocab)

    def decode(self, ids):
        inverse = {i: t for t, i in self.vocab.items()}
        return "".join(inverse[i] for i in ids)


torch.manual_seed(0)
logits = torch.randn(2, 5, len(Tokenizer.vocab), requires_grad=True)  # [B, T, V]
labels = torch.tensor([[-100, -100, 4, 2, 9], [-100, 1, 12, 3, -100]])  # "1:6" and "x90"
loss = numeric_loss_func(Tokenizer(), aux="smmd", aux_lambda=0.5)({"logits": logits}, labels)
loss.backward()
smmd = SMMDLoss(torch.arange(10.0))(torch.randn(4, 10), torch.tensor([0, 3, 9, 5]))
print(json.dumps({"pipeline_modules": sorted(m for m in PIPELINE if m in sys.modules), "loss": loss.item(),
                  "grad_norm": logits.grad.norm().item(), "smmd": smmd.item()}))
