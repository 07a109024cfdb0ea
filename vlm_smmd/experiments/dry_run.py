"""`dry_run(config)`: a config's real architecture at truncated depth, trained 2 steps on the CPU, saved,
reloaded and asked one question, in a temporary folder, so that a config whose shapes, dtypes and options
do not go together fails here, in one line, rather than on a rented GPU.

What is real: the released architecture of the config's hub id (`random_init`: its published widths,
heads, vocabulary, rope; random weights), the dtype, attention implementation, freezing, LoRA, gradient
checkpointing, the DeepSpeed config (over gloo, one process), the processor with the config's min/max
pixels, the loss, max_length. What is cut: the depth (`TEXT_LAYERS` text layers, `VISION_LAYERS` vision
blocks, the layer-index lists of the architecture mapped into them), the batch (one sample, no gradient
accumulation), the steps (2), the training of the input embedding and LM head (`freeze_vocabulary`), and
the data: a few records of the config's dataset when its data_root is there, else a stand-in of the same
kind rendered into the temporary folder at the config's resolution (clocks at synthesize_size, charts at
the largest area max_pixels lets through, a COCO-sized image with boxes for RefCOCO, GSM8K-style word
problems). The config's output_dir is never touched.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import gc
import json
import math
import resource
import tempfile
import time
from pathlib import Path

TEXT_LAYERS = 2
VISION_LAYERS = 2
STEPS = 2
CHART_ASPECT = 4 / 3  # the stand-in chart's width / height (ChartQA's charts are mostly landscape)


class DryRunError(ValueError):
    """The config cannot work as written: one line naming the stage and the reason."""


def _mapped(indices, depth, new_depth, *, distinct):
    """Layer indices of a `depth`-deep stack mapped into a `new_depth`-deep one, in order; `distinct`
    keeps only different ones (index lists whose entries must not repeat)."""
    mapped = [min(new_depth - 1, i * new_depth // depth) for i in indices]
    return list(dict.fromkeys(mapped)) if distinct else mapped


def truncated_architecture(kwargs: dict, text_layers: int = TEXT_LAYERS, vision_layers: int = VISION_LAYERS) -> dict:
    """A released config's keyword arguments (`Family.published[hub_id]`) at `text_layers` text layers and
    `vision_layers` vision blocks, every width unchanged. Layer-index lists follow into the shorter stacks:
    Qwen2.5-VL's full-attention blocks (the last block is one), Qwen3-VL's DeepStack taps (distinct blocks),
    Llama-3.2-Vision's cross-attention layers (the last text layer is one), global layers (as many as the
    local ones) and intermediate taps (their count, hence the projector's width, kept)."""
    out = copy.deepcopy(kwargs)
    text = out.get("text_config", out)
    depth = text["num_hidden_layers"]
    text["num_hidden_layers"] = min(text_layers, depth)
    if "cross_attention_layers" in text:
        kept = [i for i in text["cross_attention_layers"] if i < text["num_hidden_layers"]]
        text["cross_attention_layers"] = kept or [text["num_hidden_layers"] - 1]
    text.pop("layer_types", None)  # derived from the depth by the config class
    vision = out.get("vision_config")
    if vision is None:
        return out
    key = "depth" if "depth" in vision else "num_hidden_layers"
    depth, new = vision[key], min(vision_layers, vision[key])
    vision[key] = new
    if "fullatt_block_indexes" in vision:
        vision["fullatt_block_indexes"] = [new - 1]
    if "deepstack_visual_indexes" in vision:
        vision["deepstack_visual_indexes"] = _mapped(vision["deepstack_visual_indexes"], depth, new, distinct=True)
    if "num_global_layers" in vision:
        vision["num_global_layers"] = min(vision["num_global_layers"], new)
    if "intermediate_layers_indices" in vision:  # indices into the encoder's per-layer outputs (no embedding)
        vision["intermediate_layers_indices"] = _mapped(vision["intermediate_layers_indices"], depth, new,
                                                        distinct=False)
    return out


def _depth_of(config) -> str:
    text = getattr(config, "text_config", config)
    line = f"{text.num_hidden_layers} text layers"
    vision = getattr(config, "vision_config", None)
    if vision is not None:
        blocks = getattr(vision, "depth", None) or vision.num_hidden_layers
        line += f", {blocks} vision blocks"
    return line


# -- data --------------------------------------------------------------------------------------------------

def _chart_size(max_pixels: int | None, factor: int) -> tuple[int, int]:
    """(width, height) of the largest CHART_ASPECT chart whose area, rounded to multiples of `factor`, is
    within max_pixels (ChartQA-like 800 x 600 without a bound)."""
    if not max_pixels:
        return 800, 600
    height = math.floor(math.sqrt(max_pixels / CHART_ASPECT) / factor) * factor
    width = math.floor(max_pixels / height / factor) * factor
    return width, height


def _write_refcoco(root: Path, splits) -> None:
    """A RefCOCO-layout stand-in: one COCO-sized (640 x 480) image with two boxes, a ref per split."""
    from PIL import Image, ImageDraw

    (root / "images").mkdir(parents=True)
    image = Image.new("RGB", (640, 480), (235, 235, 225))
    draw = ImageDraw.Draw(image)
    boxes = {1: [100, 80, 200, 150], 2: [380, 220, 160, 200]}
    for (x, y, w, h), colour in zip(boxes.values(), ((200, 30, 30), (30, 60, 200)), strict=True):
        draw.rectangle([x, y, x + w, y + h], fill=colour)
    name = "COCO_train2014_000000000001.jpg"
    image.save(root / "images" / name, quality=90)
    (root / "instances.json").write_text(json.dumps({
        "images": [{"id": 1, "file_name": name, "width": 640, "height": 480}],
        "annotations": [{"id": i, "image_id": 1, "bbox": b, "category_id": 1} for i, b in boxes.items()],
        "categories": [{"id": 1, "name": "box"}]}))
    refs = [{"ref_id": n, "ann_id": 1 + n % 2, "image_id": 1, "split": split, "category_id": 1,
             "sentences": [{"sent": phrase, "sent_id": n, "raw": phrase}]}
            for n, (split, phrase) in enumerate((s, p) for s in splits for p in ("red box", "blue box"))]
    (root / "refs(unc).json").write_text(json.dumps(refs))


def _write_gsm8k(root: Path, splits) -> None:
    """A GSM8K-layout stand-in ({split}.jsonl, worked solutions ending '#### N')."""
    root.mkdir(parents=True)
    problems = [("Tom has 12 apples and buys 30 more. How many apples does he have?",
                 "He has 12 + 30 = <<12+30=42>>42 apples.\n#### 42"),
                ("A box holds 6 rows of 8 pens. How many pens are in the box?",
                 "There are 6 * 8 = <<6*8=48>>48 pens.\n#### 48")]
    for split in splits:
        (root / f"{split}.jsonl").write_text("".join(json.dumps({"question": q, "answer": a}) + "\n"
                                                     for q, a in problems))


def stand_in_source(kind: str, root: Path, splits, *, data_args, model_args, factor) -> dict:
    """Write a stand-in of dataset `kind` into `root` (or say how to synthesize one): the DataArguments
    fields to use for it. DryRunError for a kind with no stand-in."""
    from ..data.tasks import SYNTH_KINDS

    if kind == "refcoco":
        _write_refcoco(root, splits)
        return {"data_root": str(root), "synthesize": "none"}
    if kind == "gsm8k":
        _write_gsm8k(root, splits)
        return {"data_root": str(root), "synthesize": "none"}
    if kind in SYNTH_KINDS:
        synth = data_args.synthesize if data_args.synthesize != "none" else kind
        options = dict(data_args.synthesize_options or {})
        row = SYNTH_KINDS[synth]
        if row.per_split and row.size is None:  # charts synthesize_size does not size: the config's resolution
            options.setdefault("size", list(_chart_size(model_args.max_pixels, factor or 28)))
            options.setdefault("questions_per_chart", 1)
        return {"data_root": str(root), "synthesize": synth, "synthesize_num": 8,
                "synthesize_options": options or None}
    raise DryRunError(f"dataset {kind!r}: its data_root is not there and the dry run has no stand-in for it; "
                      "point data_root at a copy of the data")


def dry_run_data(data_args, model_args, folder: Path, factor) -> tuple[object, str]:
    """(DataArguments for the dry run, a line saying where its records come from)."""
    splits = [s for s in dict.fromkeys((data_args.train_split, data_args.eval_split)) if s]
    limits = {"max_train_samples": STEPS, "max_eval_samples": 1, "preflight_workers": 1}
    if data_args.dataset == "mixture":
        entries, said = [], []
        for n, entry in enumerate(data_args.mixture):
            root = Path(entry["root"])
            if not root.exists():
                fields = stand_in_source(entry["name"], folder / f"data{n}_{entry['name']}",
                                         [entry.get("split", data_args.train_split), *splits],
                                         data_args=dataclasses.replace(data_args, synthesize="none"),
                                         model_args=model_args, factor=factor)
                if fields.get("synthesize", "none") != "none":  # a mixture reads files: render them now
                    from ..training.datasets import synthesize_if_missing

                    synthesize_if_missing(dataclasses.replace(
                        data_args, **fields, dataset=entry["name"], train_split=entry.get("split", data_args.train_split)))
                entry = {**entry, "root": fields["data_root"]}
                said.append(f"{entry['name']} (stand-in)")
            else:
                said.append(f"{entry['name']} ({root})")
            entries.append(entry)
        return dataclasses.replace(data_args, mixture=entries, **limits), "mixture of " + ", ".join(said)
    root = Path(data_args.data_root)
    if root.exists() and data_args.synthesize == "none":
        return dataclasses.replace(data_args, **limits), f"{data_args.dataset} records from {root}"
    fields = stand_in_source(data_args.dataset, folder / "data", splits, data_args=data_args,
                             model_args=model_args, factor=factor)
    return dataclasses.replace(data_args, **fields, **limits), f"a stand-in for {data_args.dataset} rendered for the dry run"


# -- the run -----------------------------------------------------------------------------------------------

def _train_overrides(folder: Path) -> dict:
    """TrainingArguments the dry run sets over the config's: 2 steps of one sample in `folder`, no
    evaluation or checkpoint during training, no worker processes, on the CPU."""
    return {"output_dir": str(folder / "model"), "max_steps": str(STEPS), "per_device_train_batch_size": "1",
            "per_device_eval_batch_size": "1", "gradient_accumulation_steps": "1", "eval_strategy": "no",
            "save_strategy": "no", "logging_steps": "1", "dataloader_num_workers": "0", "report_to": "none",
            "use_cpu": "true", "disable_tqdm": "true", "resume_from_checkpoint": "none", "push_to_hub": "false"}


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: kilobytes


def dry_run(config_path, overrides: dict | None = None, *, text_layers: int = TEXT_LAYERS,
            vision_layers: int = VISION_LAYERS, workdir=None, verbose: bool = True) -> dict:
    """Run the dry run of a config (module docstring); returns its summary (depth, parameters built and
    trainable, the step times, the training loss, the reloaded model's answer, peak RSS). The temporary
    folder (under `workdir` when given) is removed afterwards. DryRunError in one line when the config
    cannot work; bad keys and values are the ConfigError `load_config` raises."""
    from ..config import load_config, uses_deepspeed
    from ..training.recipe import ensure_single_process_env

    if uses_deepspeed(config_path, overrides or {}):
        ensure_single_process_env()  # before TrainingArguments initialises DeepSpeed
    with tempfile.TemporaryDirectory(prefix="vlm-smmd-dry-run-", dir=workdir) as tmp:
        folder = Path(tmp)
        model_args, data_args, loss_args, train_args = load_config(
            config_path, {**(overrides or {}), **_train_overrides(folder)})
        return _dry_run(model_args, data_args, loss_args, train_args, folder, text_layers, vision_layers, verbose)


@contextlib.contextmanager
def _architecture(model_args, text_layers, vision_layers):
    """(family, the model name the run loads, the truncated config or None for a preset, what was built)
    for the duration of the block: a released hub id is registered at truncated depth under
    "<hub id>@dry-run" in its family's `published` table (random_init builds it), and taken out after."""
    from ..families import presets, published_family, published_ids

    name = model_args.model_name_or_path
    if name in presets():
        yield presets()[name], name, None, f"the {name} preset (full depth)"
        return
    family = published_family(name)
    if family is None:
        raise DryRunError(f"model_name_or_path {name!r}: the dry run builds a released architecture known offline "
                          f"({', '.join(published_ids())}) or a preset")
    kwargs = truncated_architecture(family.published[name], text_layers, vision_layers)
    table, dry_name = family.published, f"{name}@dry-run"
    family.published = {**table, dry_name: kwargs}
    try:
        yield family, dry_name, family.published_config(dry_name), f"{name} at its published width"
    finally:
        family.published = table


def check_options(family, model_args) -> None:
    """DryRunError for options the model cannot honour: adapters asked for where it has no layers to take them
    (`modeling.lora_target_modules` would leave them out)."""
    if model_args.lora and model_args.lora_vision and not (family.vision and family.lora_vision_suffixes):
        raise DryRunError(f"lora_vision: {family.title} has no vision layers to put LoRA adapters on; "
                          "set lora_vision: false")
    if model_args.lora and not family.lora_text_suffixes:
        raise DryRunError(f"lora: {family.title} names no language layers for LoRA adapters")


def _stage(name: str, error: BaseException) -> DryRunError:
    text = " ".join(str(error).split()) or type(error).__name__
    return DryRunError(f"dry run failed while {name}: {type(error).__name__}: {text}")


# what a config that does not go together raises from transformers, peft, DeepSpeed or torch
RUN_ERRORS = (ValueError, TypeError, RuntimeError, KeyError, IndexError, AttributeError, ImportError,
              NotImplementedError, AssertionError, OSError)


def freeze_vocabulary(model) -> int:
    """Freeze the input embedding and the LM head (tied or not); returns how many parameters this took out
    of training. The dry run does so because their [V, H] optimizer states are most of its memory (a
    Qwen2.5-VL-7B's two are 1.09B parameters, ~20 GB under AdamW and ZeRO) and their shapes depend on
    nothing else in the config; every other trainable parameter trains as configured."""
    frozen = 0
    for module in (model.get_input_embeddings(), model.get_output_embeddings()):
        for param in module.parameters() if module is not None else ():
            if param.requires_grad:
                param.requires_grad_(False)
                frozen += getattr(param, "ds_numel", param.numel())
    return frozen


@contextlib.contextmanager
def _no_zero3_init():
    """transformers' ZeRO-3 setting (global once TrainingArguments names a stage-3 config) off for the block:
    under it `from_config` partitions and initialises each sub-model's weights, which a meta-device build has
    none of (a vision tower's rotary buffer: "Cannot copy out of meta tensor")."""
    from transformers.integrations import deepspeed as hf_deepspeed

    ref = hf_deepspeed._hf_deepspeed_config_weak_ref
    held = ref() if ref is not None else None
    hf_deepspeed.unset_hf_deepspeed_config()
    try:
        yield
    finally:
        if held is not None:
            hf_deepspeed.set_hf_deepspeed_config(held)


def _counts(name, model_args):
    """(parameters, trainable parameters) of the model the run builds, counted on the meta device."""
    import torch

    from ..modeling import load_model_and_processor

    with _no_zero3_init(), torch.device("meta"):
        model, _ = load_model_and_processor(
            name, dtype=model_args.torch_dtype, random_init=model_args.random_init, freeze_vision=model_args.freeze_vision,
            freeze_merger=model_args.freeze_merger, freeze_language=model_args.freeze_language,
            lora=model_args.lora, lora_r=model_args.lora_r, lora_alpha=model_args.lora_alpha,
            lora_dropout=model_args.lora_dropout, lora_vision=model_args.lora_vision, verbose=False)
    frozen = freeze_vocabulary(model) if model_args.random_init else 0
    return (sum(p.numel() for p in model.parameters()),
            sum(p.numel() for p in model.parameters() if p.requires_grad), frozen)


class StepClock:
    """`replan` for the recipe (called after each step; answers None: the threads stay) that notes when
    each step ended; `start()` is the recipe's `on_ready` (just before training)."""

    def __init__(self):
        self.marks = []

    def start(self):
        self.marks = [time.perf_counter()]

    def __call__(self):
        self.marks.append(time.perf_counter())

    @property
    def times(self) -> list[float]:
        """Seconds per step; the first includes the DeepSpeed engine's and the data loader's start."""
        return [b - a for a, b in zip(self.marks, self.marks[1:])]


def _dry_run(model_args, data_args, loss_args, train_args, folder, text_layers, vision_layers, verbose) -> dict:
    from ..families import ModelLoadError
    from ..training.recipe import run

    started = time.perf_counter()
    with _architecture(model_args, text_layers, vision_layers) as (family, name, config, built):
        model_args = dataclasses.replace(model_args, model_name_or_path=name, random_init=config is not None)
        check_options(family, model_args)
        data_args, data_line = dry_run_data(data_args, model_args, folder, family.resize_factor)
        zero = _zero_stage(train_args.deepspeed)
        report = {"model": name.removesuffix("@dry-run"), "built": built,
                  "depth": _depth_of(config) if config is not None else "full",
                  "dtype": model_args.torch_dtype, "lora": model_args.lora,
                  "gradient_checkpointing": bool(train_args.gradient_checkpointing),
                  "deepspeed": train_args.deepspeed, "zero_stage": zero, "data": data_line,
                  "min_pixels": model_args.min_pixels, "max_pixels": model_args.max_pixels}
        if verbose:
            print(f"dry run: {built}, {report['depth']}, {model_args.torch_dtype}"
                  + (f", ZeRO-{zero} over gloo" if zero is not None else "") + f"; data: {data_line}", flush=True)
        try:
            report["parameters"], report["trainable_parameters"], report["vocabulary_frozen"] = _counts(name, model_args)
            clock = StepClock()
            metrics = run(model_args, data_args, loss_args, train_args, on_ready=clock.start, replan=clock,
                          prepare_model=freeze_vocabulary if config is not None else None)
        except (ModelLoadError, DryRunError):
            raise
        except RUN_ERRORS as e:  # an option, shape or dtype that does not go together
            raise _stage("building and training the model", e) from e
    report.update(step_s=[round(s, 2) for s in clock.times], train_loss=metrics.get("train_loss"),
                  eval_loss=metrics.get("eval_loss"))
    gc.collect()
    out = Path(train_args.output_dir)
    try:
        report["answer"] = _reload_and_answer(out, model_args, data_args)
    except RUN_ERRORS as e:
        raise _stage("reloading the saved model and answering one sample", e) from e
    report.update(saved_mb=round(sum(p.stat().st_size for p in out.rglob("*") if p.is_file()) / 2**20, 1),
                  peak_rss_mb=round(_peak_rss_mb()), total_s=round(time.perf_counter() - started, 1))
    if verbose:
        print(summary(report))
    return report


def _zero_stage(deepspeed) -> int | None:
    if not deepspeed:
        return None
    config = deepspeed if isinstance(deepspeed, dict) else json.loads(Path(deepspeed).read_text())
    return config.get("zero_optimization", {}).get("stage", 0)


def _reload_and_answer(out: Path, model_args, data_args) -> dict:
    """The saved model and processor loaded back from `out` (in the run's dtype), greedy on one sample of
    the eval split (the training split without one): its prompt, answer, target and score."""
    from transformers.integrations.deepspeed import unset_hf_deepspeed_config

    from ..data import read_split
    from ..evaluation import generate_predictions
    from ..modeling import load_model_and_processor

    # as `vlm-smmd eval` would, in a process of its own: the training's ZeRO-3 setting, global in
    # transformers while this process lives, would partition the reloaded model to nothing (no engine)
    unset_hf_deepspeed_config()

    model, processor = load_model_and_processor(str(out), dtype=model_args.torch_dtype, verbose=False,
                                                min_pixels=model_args.min_pixels, max_pixels=model_args.max_pixels)
    samples = read_split(data_args, data_args.eval_split or data_args.train_split)
    (record,) = generate_predictions(model, processor, [samples[0]], batch_size=1, max_new_tokens=8,
                                     system_prompt=data_args.system_prompt, instruction=data_args.instruction,
                                     min_pixels=model_args.min_pixels, max_pixels=model_args.max_pixels,
                                     progress=False)
    return {"id": record.get("id"), "prediction": record.get("prediction"), "target": record.get("target"),
            "correct": record.get("correct")}


def summary(report: dict) -> str:
    """The dry run's summary, a few lines."""
    trained = report.get("trainable_parameters")
    lines = [f"dry run passed: {report['built']} ({report['depth']})",
             f"  parameters built {report['parameters']:,}, trainable {trained:,}; {report['dtype']}"
             + (", LoRA" if report["lora"] else "") + (", gradient checkpointing" if report["gradient_checkpointing"]
                                                       else "")
             + (f", DeepSpeed ZeRO-{report['zero_stage']}" if report["zero_stage"] is not None else ""),
             *([f"  input embedding and LM head frozen for the dry run ({report['vocabulary_frozen']:,} parameters "
                "the config trains)"] if report.get("vocabulary_frozen") else []),
             f"  data: {report['data']}; pixels {report['min_pixels']}..{report['max_pixels']}",
             f"  {len(report['step_s'])} steps of 1 sample: " + ", ".join(f"{s:.1f} s" for s in report["step_s"])
             + f"; train loss {report['train_loss']:.3f}",
             f"  saved {report['saved_mb']:.0f} MB, reloaded, answered {report['answer']['id']}: "
             f"{report['answer']['prediction']!r} (target {report['answer']['target']!r})",
             f"  peak RSS {report['peak_rss_mb']:,} MB; {report['total_s']:.0f} s in all"]
    return "\n".join(lines)
