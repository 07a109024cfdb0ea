"""The drop-in on whatever transformers this venv holds (an older one, beside the core install alone), run by
tests/test_install.py. argv: MODEL_DIR (a tiny causal LM with its tokenizer) OUT_DIR.

Prints one JSON object: the versions; the drop-in's loss on a batch beside CE + lambda * SMMD recomputed in
float64 from the same logits; and the weights after one SGD step of the transformers Trainer with
compute_loss_func, on four answers as one batch of 4 or as 2 micro-batches of 2 accumulated (the normalisation
by num_items_in_batch makes them the same update).
"""

import json
import sys

import torch
import transformers
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    DataCollatorForSeq2Seq,
    Trainer,
    TrainingArguments,
)

from vlm_smmd.losses import SMMDLoss, numeric_loss_func
from vlm_smmd.numeric import NumericVocab

model_dir, out = sys.argv[1:3]
tokenizer = AutoTokenizer.from_pretrained(model_dir)
vocab = NumericVocab.from_tokenizer(tokenizer)
loss_func = numeric_loss_func(tokenizer, aux="smmd", aux_lambda=0.7)


def example(question, answer):
    turn = [{"role": "user", "content": question}]
    prompt = tokenizer(tokenizer.apply_chat_template(turn, tokenize=False, add_generation_prompt=True),
                       add_special_tokens=False).input_ids
    ids = tokenizer(tokenizer.apply_chat_template(turn + [{"role": "assistant", "content": answer}], tokenize=False),
                    add_special_tokens=False).input_ids
    return {"input_ids": ids, "attention_mask": [1] * len(ids), "labels": [-100] * len(prompt) + ids[len(prompt):]}


data = [example(f"What is {a} + {b}?", str(a + b)) for a, b in [(3, 4), (12, 30), (7, 8), (100, 23)]]
collate = DataCollatorForSeq2Seq(tokenizer)
result = {"transformers": transformers.__version__}
try:
    import trl

    result["trl"] = trl.__version__
except ImportError:
    pass

# the loss against the formulas, in float64 on the model's logits
model = AutoModelForCausalLM.from_pretrained(model_dir)
batch = collate(data)
labels = batch.pop("labels")
logits = model(**batch).logits.double()
num_items = int((labels[:, 1:] != -100).sum())
loss = loss_func({"logits": logits}, labels, num_items_in_batch=num_items)
shifted = labels[:, 1:]
ce = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), shifted.flatten(), reduction="sum")
numeric = (shifted != -100) & vocab.mask(shifted)
smmd = SMMDLoss(vocab.values).double()(logits[:, :-1][numeric][:, vocab.token_ids], vocab.index_of(shifted[numeric]),
                                      reduction="sum")
loss.backward()
result.update(loss=loss.item(), reference=((ce + 0.7 * smmd) / num_items).item(), numeric_tokens=int(numeric.sum()),
              grad_norm=torch.cat([p.grad.flatten() for p in model.parameters()]).norm().item())


def one_step(batch_size, accumulation):
    """Weights after one SGD step (lr 1) over the four answers."""
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    args = TrainingArguments(output_dir=f"{out}/ga{accumulation}", use_cpu=True, report_to="none", max_steps=1,
                             optim="sgd", learning_rate=1.0, max_grad_norm=0.0, lr_scheduler_type="constant",
                             weight_decay=0.0, per_device_train_batch_size=batch_size,
                             gradient_accumulation_steps=accumulation, save_strategy="no", disable_tqdm=True)
    Trainer(model=model, args=args, train_dataset=data, data_collator=collate, compute_loss_func=loss_func).train()
    return torch.cat([p.detach().flatten() for p in model.parameters()])


before = torch.cat([p.detach().flatten() for p in AutoModelForCausalLM.from_pretrained(model_dir).parameters()])
one, two = one_step(4, 1), one_step(2, 2)
result.update(update_norm=(one - before).norm().item(), accumulation_difference=(two - one).norm().item())
print(json.dumps(result))
