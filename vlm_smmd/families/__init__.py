"""Model families: what differs between Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Llama-3.2-Vision and text LLMs.

A family is one small file declaring a `Family` subclass: the model class and `model_type`, how images are
sized, the chat markers that open and close the assistant turn, which parameters are vision / projector /
language, the LoRA target names, and a tiny randomly initialised preset on the real tokenizer. Everything
else (collator, trainer, evaluation, analysis) reads these attributes and never names a family.

Adding a family: write `families/<name>.py` with a subclass of `Family` and list it in `_MODULES`.
"""

from __future__ import annotations

import copy
import json
import os
from importlib import import_module
from pathlib import Path

_MODULES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "mllama", "qwen2", "llama")


def looks_like_path(name: str) -> bool:
    """A model name that can only be a folder ("./x", "~/m", "/abs", "outputs/demo/model", "x/"), never a
    hub id, which is "name" or "org/name" (nor a preset)."""
    return os.path.isabs(name) or name.startswith((".", "~")) or name.count("/") > 1 or name.endswith(("/", "\\"))


class ModelLoadError(ValueError):
    """The path, hub id or preset does not name a usable checkpoint of a supported family."""


class Family:
    """Base class; subclasses set the class attributes and override what differs."""

    model_type: str = ""            # config.json "model_type"
    title: str = ""                 # human name, e.g. "Qwen2.5-VL"
    preset: str | None = None       # name of the tiny preset, e.g. "tiny-qwen3-vl"
    vision: bool = True             # takes images
    processor_class: str | None = None  # class name of its multimodal processor
    assistant_header: str = ""      # text that opens the assistant turn (after the prompt)
    end_of_turn: str = ""           # token closing the assistant turn; the answer's label includes it
    image_token: str | None = None  # placeholder token of an image in the text
    # Images are resized by qwen-vl-utils' smart_resize to multiples of this factor (patch x merge) before
    # the processor, which is told not to resize again; None: the processor sizes images itself (tiles).
    resize_factor: int | None = None
    # Linear layers LoRA wraps, by name suffix, restricted to the language part (or the vision part).
    lora_text_suffixes: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                           "down_proj")
    lora_vision_suffixes: tuple[str, ...] = ()
    # Parameter-name markers of the vision tower and the projector (checked on "." + name).
    vision_markers: tuple[str, ...] = ()
    projector_markers: tuple[str, ...] = ()
    # The model computes its own positions from the attention mask (Qwen's mRoPE); otherwise the collator
    # passes position_ids counted over real tokens so left padding does not shift them.
    own_positions: bool = False
    # Tiny preset image bounds (pixels).
    tiny_min_pixels: int = 56 * 56
    tiny_max_pixels: int = 224 * 224
    # The released checkpoints' architectures, {hub id: config keyword arguments}, so that a hub id with
    # `random_init` builds exactly that model offline (no weights, no hub).
    published: dict[str, dict] = {}

    # -- model --------------------------------------------------------------------------------------
    def model_class(self):
        """The transformers class loaded with `from_pretrained`."""
        raise NotImplementedError

    def tiny_config(self):
        """The tiny preset's config (sizes in the family file)."""
        raise NotImplementedError

    def tiny_processor(self, min_pixels: int | None = None, max_pixels: int | None = None):
        """The tiny preset's processor (a tokenizer for text families), built offline."""
        raise NotImplementedError

    def config_class(self):
        """The transformers config class of this family's checkpoints."""
        raise NotImplementedError

    def published_config(self, hub_id: str):
        """The config of a released checkpoint (`published`), built offline."""
        return self.config_class()(**copy.deepcopy(self.published[hub_id]))

    def published_processor(self, hub_id: str, min_pixels: int | None = None, max_pixels: int | None = None):
        """The processor of a released checkpoint, built offline: the real tokenizer and the image
        processor's published settings (the tiny preset's processor where they are the same)."""
        return self.tiny_processor(min_pixels, max_pixels)

    def load_processor(self, path: str, *, min_pixels: int | None = None, max_pixels: int | None = None,
                       trust_remote_code: bool = False):
        """The processor saved with a checkpoint (AutoProcessor, or AutoTokenizer for text families)."""
        from transformers import AutoProcessor, AutoTokenizer

        if not self.vision:
            return AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
        kwargs = {"trust_remote_code": trust_remote_code}
        if self.resize_factor is not None:
            kwargs.update({k: v for k, v in (("min_pixels", min_pixels), ("max_pixels", max_pixels)) if v})
        return AutoProcessor.from_pretrained(path, **kwargs)

    def parameter_part(self, name: str) -> str:
        """'vision', 'projector' or 'language' for a parameter (or module) name of this family's model."""
        dotted = f".{name}"
        if any(m in dotted for m in self.projector_markers):
            return "projector"
        if any(m in dotted for m in self.vision_markers):
            return "vision"
        return "language"

    # -- batches ------------------------------------------------------------------------------------
    def image_sizes(self, processor) -> tuple[int, int] | None:
        """(min_pixels, max_pixels) the processor sizes images to, for families sized by smart_resize."""
        if self.resize_factor is None:
            return None
        size = processor.image_processor.size
        return size["shortest_edge"], size["longest_edge"]

    def processor_kwargs(self) -> dict:
        """Extra keyword arguments of the processor call (images are already sized: no resize)."""
        return {"do_resize": False} if self.resize_factor is not None else {}

    def process(self, processor, texts: list[str], images_per_row: list[list], **kwargs) -> dict:
        """One processor call over a batch whose rows hold these images (a row may hold none)."""
        flat = [img for row in images_per_row for img in row]
        return dict(processor(text=texts, images=flat or None, **self.processor_kwargs(), **kwargs))

    def expected_image_tokens(self, batch: dict, images_per_row: list[int], processor):
        """LongTensor [B]: how many image-placeholder tokens each row must hold after processing."""
        import torch

        return torch.tensor(images_per_row, dtype=torch.long)

    def position_ids(self, batch: dict, processor):
        """Position ids the model would otherwise derive from `batch` in its forward pass, computed by the
        collator on the host (where DataLoader workers can pay for them); None: the model derives them."""
        return None

    def speed_up(self, model) -> None:
        """Swap modules of `model` (in place) for faster ones that compute exactly the same; the trainer
        calls it. Weights, state-dict keys and the saved config are unchanged."""

    def placeholder_tokens(self, image, processor) -> int:
        """Tokens one (already sized) image occupies in the text after processing."""
        return 1

    def add_masked_image(self, inputs: dict, processor) -> None:
        """Give a micro-batch without images one blank image that no text token can see, in place.

        Under ZeRO-3 every rank gathers each module's parameters collectively, in forward order: a rank
        whose batch is text-only would skip the vision tower that the other ranks run, and hang (DDP
        likewise expects a gradient for every parameter). With the masked image every rank runs the same
        modules in the same order; the text positions compute exactly what they compute without it, and
        the vision parameters get zero gradients."""
        raise NotImplementedError

    def describe_numbers(self) -> str:
        """How this family's tokenizer writes numbers (README family table)."""
        return ""


# ---------------------------------------------------------------------------------------------------------
# Registry


def _families() -> dict[str, Family]:
    found = {}
    for name in _MODULES:
        module = import_module(f"{__name__}.{name}")
        found[module.FAMILY.model_type] = module.FAMILY
    return found


_REGISTRY: dict[str, Family] | None = None


def families() -> dict[str, Family]:
    """{model_type: Family} of every supported family."""
    global _REGISTRY
    if _REGISTRY is None:
        _REGISTRY = _families()
    return _REGISTRY


def presets() -> dict[str, Family]:
    """{preset name: Family}; "tiny" is Qwen2.5-VL."""
    table = {f.preset: f for f in families().values() if f.preset}
    table["tiny"] = families()["qwen2_5_vl"]
    return table


def published_family(hub_id: str) -> Family | None:
    """The family whose `published` table holds this hub id, or None."""
    return next((f for f in families().values() if hub_id in f.published), None)


def published_ids() -> list[str]:
    """Every hub id whose architecture is known offline."""
    return [hub_id for f in families().values() for hub_id in f.published]


def supported() -> str:
    return ", ".join(f"{f.title} ({t})" for t, f in families().items())


def family_for(model_type: str | None, where: str = "") -> Family:
    """The family of a config's `model_type`; ModelLoadError listing the supported ones otherwise."""
    family = families().get(model_type or "")
    if family is None:
        prefix = f"{where}: " if where else ""
        raise ModelLoadError(f"{prefix}model_type {model_type!r} is not a supported family; supported: {supported()}")
    return family


def family_of(model) -> Family:
    """The family of a (possibly peft- or DeepSpeed-wrapped) model, from its config's model_type."""
    config = getattr(model, "config", None)
    if config is None and hasattr(model, "module"):
        config = model.module.config
    return family_for(getattr(config, "model_type", None))


def family_of_processor(processor) -> Family:
    """The family a processor (or, for text families, a tokenizer) belongs to.

    A multimodal processor is matched by its class; a bare tokenizer by its chat markers: Llama-3 header
    tokens mean the llama family, ChatML markers the qwen2 family.
    """
    name = type(processor).__name__
    for family in families().values():
        if family.vision and name == family.processor_class:
            return family
    tokenizer = getattr(processor, "tokenizer", processor)
    vocab = tokenizer.get_vocab()
    if hasattr(processor, "image_processor"):
        raise ModelLoadError(f"{name} is not the processor of a supported family; supported: {supported()}")
    if "<|start_header_id|>" in vocab:
        return families()["llama"]
    if "<|im_start|>" in vocab:
        return families()["qwen2"]
    raise ModelLoadError(f"cannot tell the chat format of tokenizer {type(tokenizer).__name__}: it has neither "
                         "ChatML (<|im_start|>) nor Llama-3 (<|start_header_id|>) markers")


def checkpoint_model_type(name_or_path: str) -> str | None:
    """model_type from a local folder's config.json (ModelLoadError for unusable folders), or None for a
    name that is not a local path (a hub id; its config is read by transformers)."""
    path = Path(name_or_path)
    if not path.exists():
        return None
    if not path.is_dir():
        raise ModelLoadError(f"{name_or_path}: not a model directory")
    config_file = path / "config.json"
    if not config_file.is_file() and (path / "adapter_config.json").is_file():
        raise ModelLoadError(f"{name_or_path}: holds a LoRA adapter, not a model; train with merge_lora: true, "
                             "or load the base model and apply the adapter with peft.PeftModel.from_pretrained")
    if not config_file.is_file():
        raise ModelLoadError(f"{name_or_path}: holds no model (no config.json)")
    try:
        config = json.loads(config_file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ModelLoadError(f"{config_file}: not a readable config.json ({e})") from None
    if not isinstance(config, dict):
        raise ModelLoadError(f"{config_file}: not a config mapping")
    return config.get("model_type")
