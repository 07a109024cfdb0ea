"""Run under `torchrun --nproc_per_node 2`: ZeRO-3 training where rank 0's micro-batches all hold an image
and rank 1's are all text-only (sequential sampling, one sample per rank and step). Without the vision
pass on text-only batches, rank 1 skips the vision tower whose parameters rank 0 gathers: a hang.

    python -m torch.distributed.run --nproc_per_node 2 tests/zero3_worker.py PRESET OUT_DIR
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.conftest import make_image  # noqa: E402


def main(preset: str, out: str) -> None:
    from vlm_smmd.config import LossArguments, VLMTrainingArguments
    from vlm_smmd.data import Sample
    from vlm_smmd.data.collator import VLMCollator
    from vlm_smmd.training import NumericTrainer, build_objective, connect_deepspeed_comm

    args = VLMTrainingArguments(output_dir=out, use_cpu=True, report_to="none", max_steps=3,
                                per_device_train_batch_size=1, learning_rate=1e-3, logging_steps=1,
                                save_strategy="no", disable_tqdm=True, train_sampling_strategy="sequential",
                                deepspeed=str(Path(__file__).resolve().parent.parent / "configs/deepspeed/zero3.json"))
    connect_deepspeed_comm(args)
    from vlm_smmd.modeling import load_model_and_processor

    model, processor = load_model_and_processor(preset, verbose=False)
    # even indices (rank 0 under sequential sampling) hold images, odd ones (rank 1) are text-only
    data = [Sample(make_image(96, 72, seed=i), "What time is it?", f"{i % 12 + 1}:0{i % 10}", "clocks", f"img{i}")
            if i % 2 == 0 else Sample(None, f"What is {i} + {i}?", str(2 * i), "text", f"txt{i}")
            for i in range(12)]
    collator = VLMCollator(processor)
    trainer = NumericTrainer(model=model, args=args, train_dataset=data, data_collator=collator,
                             processing_class=processor,
                             objective=build_objective(LossArguments(aux="smmd"), collator.numeric_vocab))
    trainer.train()
    if args.process_index == 0:
        losses = [h["total"] for h in trainer.state.log_history if "total" in h]
        Path(out, "losses.json").write_text(json.dumps(losses))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
