"""Per-GPU memory of a training config, planned without a GPU or a hub (`vlm-smmd plan`).

Parameter counts come from the architecture built on the meta device (no memory: the published config of
a released hub id, a preset, the scratch sizes or a local checkpoint's config.json), split into vision,
projector and language parts and filtered by the config's freezing and LoRA targets as training would.
Everything else is arithmetic:

- model states under the ZeRO stage (DeepSpeed's own accounting, bytes per parameter P, N GPUs): 16-bit
  weights 2P (ZeRO-3: 2P/N plus the largest module gathered), gradients in 16 and 32 bits (ZeRO-1: 2P + 4P/N;
  ZeRO-2: 6P/N; ZeRO-3: 4P/N plus the largest module's), fp32 master 4P/N, Adam moments 8P/N; offloaded states leave the
  GPU. Without DeepSpeed a bf16 model trains in bf16: weights, gradients and both moments in bf16, no master;
  LoRA adapters stay fp32 there (peft), so their weights, gradients and moments take 4 bytes each.
- activations saved for backward, per token per decoder layer, from what the HF layers keep (bf16, b = 2,
  hidden h, MLP width I, key/value width kv): each RMSNorm its fp32 input and rsqrt (4h + 4), with trained
  weights also its normalised input to the weight and its output, the projections' input (2bh); attention its
  q, k, v, output and log-sum-exp (fused SDPA: nothing T x T; k and v at full head count when a padding mask
  makes HF repeat them); the gated MLP its act input, act output, up and down input (4bI). A frozen Linear
  keeps no input, but each LoRA adapter keeps its dropout mask, its dropped fp32 input and lora_A's output.
  Gradient checkpointing keeps each layer's input (bh) and recomputes one layer at a time.
- logits: the answer-only head keeps [B, answer tokens, V]; full logits [B, T, V] in bf16, their fp32 copy
  and the log-softmax (10 bytes an element) are what it avoids.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field, replace
from pathlib import Path

GIB = 1024**3
# CUDA context, cuBLAS/NCCL workspaces and allocator fragmentation: reserved on every GPU
RUNTIME_RESERVE_BYTES = 2 * GIB
ANSWER_TOKENS = 32        # answer positions a sample, assumed for the answer-only head (short numeric answers)
TEXT_ALLOWANCE = 256      # text tokens beside the image when a config sets no max_length
DEFAULT_TEXT_LENGTH = 2048
LOGIT_BYTES = 10          # per [T, V] element: the bf16 logits, their fp32 copy, the fp32 log-softmax
DTYPE_BYTES = {"bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2, "fp32": 4, "float32": 4, "auto": 2}


class PlanError(ValueError):
    """A config the planner cannot size: one line naming the file and key."""


# -- the architecture -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Stack:
    """One stack of transformer blocks (the text decoder or the vision tower)."""

    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_width: int          # key/value heads x head dim
    gated: bool = True     # SwiGLU MLP (3 projections) rather than fc1 / GELU / fc2


@dataclass(frozen=True)
class Architecture:
    """What the plan needs of a model: its stacks, its vocabulary, how it turns pixels into tokens, and the
    parameter counts of its parts."""

    family: str                        # model_type
    text: Stack
    vocab: int
    vision: Stack | None = None
    patch: int = 14                    # pixels a patch side (Qwen VL)
    merge: int = 2                     # patches merged a token side (Qwen VL)
    tiles: int = 0                     # Mllama: tiles an image, each (tile / patch)^2 + 1 patches
    tile_patches: int = 0
    cross_layers: int = 0              # Mllama: text layers that cross-attend to the image
    params: dict = field(default_factory=dict)   # {"vision"|"projector"|"language": count}
    lora_widths: dict = field(default_factory=dict)  # {"language"|"vision": sum of in + out over LoRA targets}
    lora_text_targets: int = 0         # LoRA-wrapped Linears a text layer
    largest_module: int = 0            # parameters of the largest single module (DeepSpeed's largest layer)

    @property
    def total_params(self) -> int:
        return sum(self.params.values())


def _stack(config, *, vision=False) -> Stack:
    get = functools.partial(getattr, config)
    if vision:
        hidden = get("hidden_size", None) if get("embed_dim", None) is None else get("embed_dim")
        heads = get("num_heads", None) or get("attention_heads")
        inter = get("intermediate_size", None) or int(hidden * get("mlp_ratio", 4))
        gated = get("model_type", "") == "qwen2_5_vl_vision"  # Qwen2.5-VL's ViT MLP is SwiGLU; the others fc1/fc2
        layers = get("depth", None) or get("num_hidden_layers", 0) + get("num_global_layers", 0)
        return Stack(layers, hidden, inter, heads, hidden, gated)
    heads = get("num_attention_heads")
    head_dim = get("head_dim", None) or get("hidden_size") // heads
    return Stack(get("num_hidden_layers"), get("hidden_size"), get("intermediate_size"), heads,
                 (get("num_key_value_heads", None) or heads) * head_dim)


def architecture(model_config, family) -> Architecture:
    """The `Architecture` of a transformers config of `family`: counts from the model built on the meta device."""
    counts = _meta_counts(model_config, family)
    text_config = getattr(model_config, "text_config", model_config)
    vision_config = getattr(model_config, "vision_config", None)
    text = _stack(text_config)
    extra = {}
    if vision_config is not None:
        vision = _stack(vision_config, vision=True)
        if family.model_type == "mllama":
            side = vision_config.image_size // vision_config.patch_size
            extra = dict(tiles=vision_config.max_num_tiles, tile_patches=side * side + 1,
                         cross_layers=len(text_config.cross_attention_layers or []))
        else:
            extra = dict(patch=vision_config.patch_size, merge=vision_config.spatial_merge_size)
        extra["vision"] = vision
    return Architecture(family.model_type, text, text_config.vocab_size, **extra, **counts)


def _meta_counts(model_config, family) -> dict:
    """Parameter counts of the model built on the meta device: by part, LoRA target widths, largest module."""
    import torch

    from ..modeling import lora_target_modules

    with torch.device("meta"):
        model = family.model_class()(model_config)
    params, seen = {"vision": 0, "projector": 0, "language": 0}, set()
    for name, p in model.named_parameters():  # tied weights are listed once
        if id(p) not in seen:
            seen.add(id(p))
            params[family.parameter_part(name)] += p.numel()
    modules = dict(model.named_modules())
    widths = {"language": 0, "vision": 0}
    for name in lora_target_modules(model, vision=bool(family.lora_vision_suffixes)):
        m = modules[name]
        widths[family.parameter_part(name + ".weight")] += m.in_features + m.out_features
    text_layers = getattr(getattr(model_config, "text_config", model_config), "num_hidden_layers", 1)
    text_targets = len(lora_target_modules(model)) // max(text_layers, 1)
    largest = max(sum(p.numel() for p in m.parameters(recurse=False)) for m in modules.values())
    return dict(params=params, lora_widths=widths, lora_text_targets=text_targets, largest_module=largest)


# -- the training setup -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Setup:
    """What a config says about memory, beside the architecture."""

    zero_stage: int = 0                 # 0: no DeepSpeed
    offload_optimizer: bool = False
    offload_param: bool = False
    gpus: int = 1
    gpu_memory_gib: float = 80.0
    weight_bytes: int = 2               # the model's dtype
    lora: bool = False
    lora_r: int = 16
    lora_dropout: float = 0.05
    lora_vision: bool = False
    freeze_vision: bool = False
    freeze_merger: bool = False
    freeze_language: bool = False
    gradient_checkpointing: bool = False
    batch: int = 1                      # per-device micro-batch
    grad_accum: int = 1
    max_length: int | None = None
    max_pixels: int | None = None
    images_per_sample: int = 1
    answer_tokens: int = ANSWER_TOKENS
    device: str = "cuda"                # "cpu": dropout masks take the adapter dtype's bytes


# -- the plan ---------------------------------------------------------------------------------------

@dataclass
class Plan:
    """Bytes per GPU of each part, the verdict and what the figures assumed."""

    name: str
    arch: Architecture
    setup: Setup
    tokens_per_sample: int
    image_tokens: int
    vision_tokens: int                  # patches (Qwen VL) or tile patches (Mllama) a sample
    trainable_params: int
    weights: float
    gradients: float
    optimizer: float
    master: float
    activations: float                  # with the config's gradient checkpointing setting
    activations_checkpointed: float
    activations_full: float
    logits_answer_only: float
    logits_avoided: float
    runtime_reserve: float = RUNTIME_RESERVE_BYTES
    notes: list[str] = field(default_factory=list)
    suggestions: list[str] = field(default_factory=list)

    @property
    def model_states(self) -> float:
        return self.weights + self.gradients + self.optimizer + self.master

    @property
    def total(self) -> float:
        return self.model_states + self.activations + self.logits_answer_only + self.runtime_reserve

    @property
    def fits(self) -> bool:
        return self.total <= self.setup.gpu_memory_gib * GIB

    @property
    def tokens_per_step(self) -> int:
        """Tokens an optimizer step at most (every sample at its longest), over all GPUs."""
        return self.tokens_per_sample * self.setup.batch * self.setup.grad_accum * self.setup.gpus

    def as_dict(self) -> dict:
        gib = {k: round(getattr(self, k) / GIB, 3) for k in (
            "weights", "gradients", "optimizer", "master", "model_states", "activations", "activations_checkpointed",
            "activations_full", "logits_answer_only", "logits_avoided", "runtime_reserve", "total")}
        return {"config": self.name, "family": self.arch.family, "params": self.arch.total_params,
                "trainable_params": self.trainable_params, "gpus": self.setup.gpus,
                "gpu_memory_gib": self.setup.gpu_memory_gib, "zero_stage": self.setup.zero_stage,
                "offload_optimizer": self.setup.offload_optimizer, "offload_param": self.setup.offload_param,
                "lora": self.setup.lora, "gradient_checkpointing": self.setup.gradient_checkpointing,
                "batch": self.setup.batch, "tokens_per_sample": self.tokens_per_sample,
                "image_tokens": self.image_tokens, "vision_tokens": self.vision_tokens,
                "tokens_per_step": self.tokens_per_step, **{f"{k}_gib": v for k, v in gib.items()},
                "fits": self.fits, "suggestions": self.suggestions, "notes": self.notes,
                "deepspeed_estimate": deepspeed_estimate(self)}


def _trainable(arch: Architecture, s: Setup) -> int:
    if s.lora:
        width = arch.lora_widths.get("language", 0) + (arch.lora_widths.get("vision", 0) if s.lora_vision else 0)
        return s.lora_r * width
    frozen = {"vision": s.freeze_vision, "projector": s.freeze_merger, "language": s.freeze_language}
    return sum(n for part, n in arch.params.items() if not frozen[part])


def model_states(arch: Architecture, s: Setup, trainable: int) -> dict:
    """Bytes per GPU of weights, gradients, optimizer states and fp32 master weights (module docstring)."""
    n, total, largest, w = s.gpus, arch.total_params + trainable * s.lora, arch.largest_module, s.weight_bytes
    if s.zero_stage == 0:  # DDP / one GPU: the model's dtype throughout (torch AdamW keeps moments in it),
        # except LoRA adapters: peft keeps them in fp32 (autocast_adapter_dtype), so their gradients and moments too
        t = 4 if s.lora else w
        return dict(weights=w * arch.total_params + t * trainable * s.lora, gradients=t * trainable,
                    optimizer=2 * t * trainable, master=0.0)
    if s.zero_stage == 3:
        weights = 0.0 if s.offload_param else 2 * total / n
        weights += 2 * largest  # the module being computed, gathered
        gradients = 2 * largest + (0.0 if s.offload_optimizer else 4 * trainable / n)
    else:
        weights = 2 * total
        grads16 = 2 * trainable / (n if s.zero_stage == 2 else 1)
        gradients = 0.0 if s.offload_optimizer else grads16 + 4 * trainable / n
    master = 0.0 if s.offload_optimizer else 4 * trainable / n
    optimizer = 0.0 if s.offload_optimizer else 8 * trainable / n
    return dict(weights=weights, gradients=gradients, optimizer=optimizer, master=master)


def layer_bytes(stack: Stack, *, b: int, trains: bool, lora_targets: int = 0, lora_r: int = 0,
                mask_bytes: int = 1, adapter_bytes: int = 4, repeated_kv: bool = False) -> float:
    """Bytes one block saves for backward per token (module docstring), checked tensor by tensor against
    autograd's saved tensors in tests/test_plan.py. `trains`: its weights need gradients; otherwise only its
    LoRA adapters (`lora_targets` of the 7 projections, fp32 as peft keeps them: `adapter_bytes`) do.
    `mask_bytes`: a dropout mask element (1 on CUDA, the adapter dtype's on the CPU; 0: no dropout)."""
    h, inter, kv = stack.hidden, stack.intermediate, stack.kv_width
    kv_saved = h if repeated_kv else kv
    attention = b * (h + 2 * kv_saved) + b * h + 4 * stack.heads   # q, k, v, output (o_proj's input too), lse
    norm = 4 * h + 4                                                 # fp32 input and rsqrt
    mlp_saved = 3 if stack.gated else 1                              # act input; act output and up (gated)
    if trains:  # each norm also keeps its normalised input to the weight, and its output feeds the projections
        return 2 * (norm + 2 * b * h) + attention + b * inter * (mlp_saved + 1)  # + down's input
    adapters = 0.0
    if lora_targets:  # each adapter: its dropout mask and dropped input (fp32), and lora_A's output
        # q, k, v, o and the MLP's gate/up read width h; down reads I
        reads = h * (lora_targets - 1) + inter
        adapters = (mask_bytes + adapter_bytes) * reads + lora_targets * adapter_bytes * lora_r
    return 2 * norm + attention + b * inter * mlp_saved + adapters


def activations(arch: Architecture, s: Setup, tokens: int, vision_tokens: int, checkpointing: bool) -> float:
    """Bytes of activations a micro-batch keeps at the peak of backward, with or without checkpointing."""
    b, batch = 2 if s.weight_bytes == 2 else 4, s.batch
    text_trains = not s.lora and not s.freeze_language
    lora_targets = arch.lora_text_targets if s.lora else 0
    mask = 0 if s.lora_dropout <= 0 else (1 if s.device == "cuda" else 4)
    per_layer = layer_bytes(arch.text, b=b, trains=text_trains, lora_targets=lora_targets, lora_r=s.lora_r,
                            mask_bytes=mask, repeated_kv=batch > 1)
    if not text_trains and not s.lora:
        per_layer = 0.0  # nothing in the language model needs a gradient
    t = arch.text
    rows = batch * tokens
    if checkpointing:
        text = t.layers * b * t.hidden * rows + per_layer * rows
    else:
        text = t.layers * per_layer * rows
    # the final norm and the answer rows gathered for the head; the backward of one layer in flight
    text += (4 + b) * t.hidden * rows + b * rows * (3 * t.intermediate + 2 * t.hidden) if per_layer else 0.0
    vision = 0.0
    if arch.vision is not None and vision_tokens:
        patches = batch * vision_tokens
        v = arch.vision
        vision_trains = not s.freeze_vision and not s.lora
        if vision_trains:
            block = layer_bytes(v, b=b, trains=True)
            vision = (v.layers * b * v.hidden + block) * patches if checkpointing else v.layers * block * patches
        if vision_trains or (not s.freeze_merger and not s.lora):
            # the merger (Qwen: RMSNorm per patch, Linear-GELU-Linear over merged tokens) or Mllama's projector
            vision += (4 + b) * v.hidden * patches + 3 * b * v.hidden * patches
        if arch.cross_layers and per_layer:  # each cross-attention layer's k and v of the image tokens
            vision += arch.cross_layers * 2 * b * t.kv_width * patches + b * t.hidden * patches
    return text + vision


def _image_tokens(arch: Architecture, s: Setup, family) -> tuple[int, int]:
    """(placeholder tokens in the text, vision-tower tokens) of one sample's images."""
    if arch.vision is None:
        return 0, 0
    if arch.tiles:  # Mllama: one <|image|> in the text; the tiles go to the vision tower and cross-attention
        return s.images_per_sample, s.images_per_sample * arch.tiles * arch.tile_patches
    pixels = s.max_pixels or family.published_max_pixels
    factor = arch.patch * arch.merge
    tokens = pixels // (factor * factor)
    return s.images_per_sample * tokens, s.images_per_sample * tokens * arch.merge**2


def plan(arch: Architecture, setup: Setup, family, name: str = "", *, suggest: bool = True) -> Plan:
    """The `Plan` of `arch` trained as `setup` says; where it does not fit (and `suggest`), the single changes
    that make it fit."""
    image_tokens, vision_tokens = _image_tokens(arch, setup, family)
    notes = []
    if setup.max_length:
        tokens = setup.max_length
        if tokens < image_tokens:
            notes.append(f"max_length {tokens} is shorter than the {image_tokens} image tokens at max_pixels: "
                         "such samples are refused")
    else:
        tokens = image_tokens + TEXT_ALLOWANCE if arch.vision is not None else DEFAULT_TEXT_LENGTH
        notes.append(f"no max_length: planned at {tokens} tokens a sample")
    if arch.vision is not None and not setup.max_pixels and not arch.tiles:
        notes.append(f"no max_pixels: planned at the processor's bound, {family.published_max_pixels} pixels")
    trainable = _trainable(arch, setup)
    states = model_states(arch, setup, trainable)
    act = {ckpt: activations(arch, setup, tokens, vision_tokens, ckpt) for ckpt in (False, True)}
    v, answer = arch.vocab, min(setup.answer_tokens, tokens)
    p = Plan(name, arch, setup, tokens, image_tokens, vision_tokens, trainable, **states,
             activations=act[setup.gradient_checkpointing], activations_checkpointed=act[True],
             activations_full=act[False], logits_answer_only=LOGIT_BYTES * setup.batch * answer * v,
             logits_avoided=LOGIT_BYTES * setup.batch * (tokens - answer) * v, notes=notes)
    if suggest and not p.fits:
        p.suggestions = suggestions(arch, setup, family)
    return p


def suggestions(arch: Architecture, setup: Setup, family) -> list[str]:
    """Single changes that make the plan fit, cheapest first (the same math first: a smaller micro-batch with
    more accumulation, checkpointing; then more GPUs, ZeRO-3, offload; then a different run: LoRA, fewer pixels)."""
    tries = []
    if not setup.gradient_checkpointing:
        tries.append(("gradient_checkpointing: true", replace(setup, gradient_checkpointing=True)))
    batch = setup.batch // 2
    while batch >= 1:
        tries.append((f"per_device_train_batch_size: {batch} (gradient_accumulation_steps: "
                      f"{setup.grad_accum * setup.batch // batch})",
                      replace(setup, batch=batch, grad_accum=setup.grad_accum * setup.batch // batch)))
        batch //= 2
    if setup.zero_stage:
        for gpus in (2, 4, 8, 16, 32, 64, 128):
            if gpus > setup.gpus:
                tries.append((f"--gpus {gpus}", replace(setup, gpus=gpus)))
    if setup.zero_stage < 3:
        tries.append(("deepspeed: configs/deepspeed/zero3.json", replace(setup, zero_stage=3)))
    if not setup.offload_optimizer:
        tries.append(("deepspeed: configs/deepspeed/zero3_offload.json (optimizer and weights on the CPU)",
                      replace(setup, zero_stage=3, offload_optimizer=True, offload_param=True)))
    if not setup.lora:
        tries.append(("lora: true", replace(setup, lora=True)))
    if arch.vision is not None and not arch.tiles:
        pixels = setup.max_pixels or family.published_max_pixels
        for fraction in (2, 4, 8):
            tries.append((f"max_pixels: {pixels // fraction}", replace(setup, max_pixels=pixels // fraction)))
    fitting = [(label, s) for label, s in tries if plan(arch, s, family, suggest=False).fits]
    # several batch sizes or GPU counts may fit: keep the first (the largest batch, the fewest GPUs) of each kind
    out, kinds = [], set()
    for label, _ in fitting:
        kind = label.split(":")[0].split(" ")[0]
        if kind not in kinds:
            kinds.add(kind)
            out.append(label)
    return out


def deepspeed_estimate(p: Plan) -> dict | None:
    """DeepSpeed's own estimate of the model states per GPU (bytes) for this plan's parameter counts, or None
    where it has none (no DeepSpeed, ZeRO-1). Its estimators assume every parameter trains and 16-bit weights."""
    s = p.setup
    if s.zero_stage not in (2, 3):
        return None
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    if s.zero_stage == 2:
        _, gpu = estimate_zero2_model_states_mem_needs(p.trainable_params, num_gpus_per_node=s.gpus,
                                                       cpu_offload=s.offload_optimizer)
    else:
        _, gpu, _ = estimate_zero3_model_states_mem_needs(p.trainable_params, p.arch.largest_module,
                                                          num_gpus_per_node=s.gpus, cpu_offload=s.offload_optimizer,
                                                          cpu_offload_params=s.offload_param)
    frozen = p.arch.total_params + p.trainable_params * s.lora - p.trainable_params
    # what our count adds: the frozen parameters' 16-bit copy (replicated by ZeRO-2, sharded by ZeRO-3)
    ours_extra = 2 * frozen / (s.gpus if s.zero_stage == 3 else 1) * (not s.offload_param)
    return {"model_states_gib": round(gpu / GIB, 3), "frozen_weights_gib": round(ours_extra / GIB, 3),
            "call": f"estimate_zero{s.zero_stage}_model_states_mem_needs"}


# -- a config file ----------------------------------------------------------------------------------

def _truthy(value) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def deepspeed_settings(path, config_path) -> dict:
    """{zero_stage, offload_optimizer, offload_param} of a DeepSpeed JSON named by a config (as given, or
    relative to the config's folder and the folder above it)."""
    where = [Path(path), Path(config_path).parent / path, Path(config_path).parent.parent / path]
    found = next((p for p in where if p.is_file()), None)
    if found is None:
        raise PlanError(f"{config_path}: deepspeed: {path}: no such file")
    try:
        zero = json.loads(found.read_text()).get("zero_optimization", {})
    except (ValueError, AttributeError) as e:
        raise PlanError(f"{found}: not a DeepSpeed JSON config ({e})") from None

    def offloaded(key):
        return str((zero.get(key) or {}).get("device", "none")).lower() in ("cpu", "nvme")

    return dict(zero_stage=int(zero.get("stage", 0)), offload_optimizer=offloaded("offload_optimizer"),
                offload_param=offloaded("offload_param"))


@functools.lru_cache(maxsize=16)
def _architecture_of(name: str, scratch: tuple) -> tuple:
    """(Architecture, family) of a model name: a released hub id, a preset, scratch (with its sizes) or a local
    checkpoint folder; cached, since configs share models."""
    from ..families import family_for, presets, published_family, published_ids
    from ..modeling import SCRATCH, build_scratch

    if name == SCRATCH:
        family_name, sizes, merges, min_pixels, max_pixels = scratch
        family = family_for(family_name)
        config, _ = build_scratch(family, ["0 1 2 3 4 5 6 7 8 9"], sizes=dict(sizes), min_pixels=min_pixels,
                                  max_pixels=max_pixels, merges=merges)
        text = getattr(config, "text_config", config)
        text.vocab_size += merges  # the task vocabulary holds at most this many learned merges more
        return architecture(config, family), family
    if name in presets():
        family = presets()[name]
        return architecture(family.tiny_config(), family), family
    family = published_family(name)
    if family is not None:
        return architecture(family.published_config(name), family), family
    if (Path(name) / "config.json").is_file():  # an existing folder wins over a hub id of its spelling, as in training
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(name)
        family = family_for(config.model_type, where=name)
        return architecture(config, family), family
    raise PlanError(f"model_name_or_path {name!r}: not a preset, a local checkpoint or a released architecture "
                    f"known offline ({', '.join(published_ids())})")


def plan_config(path, overrides: dict | None = None, *, gpus: int = 1, gpu_memory_gib: float = 80.0) -> Plan:
    """The `Plan` of a training config (YAML + overrides) on `gpus` GPUs of `gpu_memory_gib` each."""
    from ..config import check_config

    model_args, data_args, _, train = check_config(path, overrides)
    settings = dict(zero_stage=0, offload_optimizer=False, offload_param=False)
    if train.get("deepspeed"):
        settings = deepspeed_settings(str(train["deepspeed"]), path)
    dtype = str(model_args.torch_dtype).lower()
    if dtype == "auto":  # a preset or scratch model starts in fp32 unless bf16 training casts it
        dtype = "bf16" if _truthy(train.get("bf16", False)) else "fp32"
    if dtype not in DTYPE_BYTES:
        raise PlanError(f"{path}: torch_dtype {model_args.torch_dtype!r}: expected bf16, fp16, fp32 or auto")
    scratch = (model_args.scratch_family, tuple(sorted(
        {k: getattr(model_args, f"scratch_{k}") for k in ("hidden_size", "layers", "heads", "vision_hidden_size",
                                                           "vision_depth", "vision_heads")}.items())),
        model_args.scratch_vocab_merges, model_args.min_pixels, model_args.max_pixels)
    arch, family = _architecture_of(model_args.model_name_or_path, scratch)
    setup = Setup(**settings, gpus=gpus, gpu_memory_gib=gpu_memory_gib, weight_bytes=DTYPE_BYTES[dtype],
                  lora=model_args.lora, lora_r=model_args.lora_r, lora_dropout=model_args.lora_dropout,
                  lora_vision=model_args.lora_vision, freeze_vision=model_args.freeze_vision,
                  freeze_merger=model_args.freeze_merger, freeze_language=model_args.freeze_language,
                  gradient_checkpointing=_truthy(train.get("gradient_checkpointing", False)),
                  batch=int(train.get("per_device_train_batch_size", 8)),
                  grad_accum=int(train.get("gradient_accumulation_steps", 1)),
                  max_length=data_args.max_length, max_pixels=model_args.max_pixels)
    return plan(arch, setup, family, name=str(path))


# -- as text ----------------------------------------------------------------------------------------

def _gib(value: float) -> str:
    return f"{value / GIB:8.2f} GiB"


def table(p: Plan) -> str:
    """The plan as the readable table `vlm-smmd plan` prints."""
    s, a = p.setup, p.arch
    stage = f"ZeRO-{s.zero_stage}" if s.zero_stage else "no DeepSpeed"
    if s.offload_optimizer or s.offload_param:
        stage += " (offload: " + ", ".join(k for k, on in (("optimizer", s.offload_optimizer),
                                                          ("weights", s.offload_param)) if on) + ")"
    lines = [f"{p.name}: {a.family}, {a.total_params / 1e9:.3f}B parameters, {p.trainable_params / 1e9:.3f}B "
             f"trainable{' (LoRA r=' + str(s.lora_r) + ')' if s.lora else ''}; {stage}; {s.gpus} GPU(s) of "
             f"{s.gpu_memory_gib:g} GiB",
             f"micro-batch {s.batch} x {p.tokens_per_sample} tokens"
             + (f" ({p.image_tokens} image tokens, {p.vision_tokens} vision-tower tokens a sample)"
                if a.vision is not None else "")
             + f"; tokens per optimizer step at most {p.tokens_per_step:,}", "", "per GPU:"]
    rows = [("weights", p.weights), ("gradients", p.gradients), ("optimizer states", p.optimizer),
            ("fp32 master weights", p.master), ("activations, " + ("checkpointed" if s.gradient_checkpointing
                                                                   else "not checkpointed"), p.activations),
            ("answer-only logits", p.logits_answer_only), ("CUDA context and reserve", p.runtime_reserve),
            ("total", p.total)]
    lines += [f"  {label:<30}{_gib(value)}" for label, value in rows]
    other = p.activations_full if s.gradient_checkpointing else p.activations_checkpointed
    lines.append(f"  (activations {'without' if s.gradient_checkpointing else 'with'} checkpointing "
                 f"{other / GIB:.2f} GiB; full logits would add {p.logits_avoided / GIB:.2f} GiB, which the "
                 "answer-only head avoids)")
    ds = deepspeed_estimate(p)
    if ds:
        lines.append(f"  model states: ours {p.model_states / GIB:.2f} GiB; DeepSpeed's {ds['call']} "
                     f"{ds['model_states_gib']:.2f} GiB for the trainable parameters"
                     + (f" + {ds['frozen_weights_gib']:.2f} GiB of frozen weights" if ds["frozen_weights_gib"] else ""))
    lines += [f"  note: {n}" for n in p.notes]
    if p.fits:
        lines.append(f"verdict: fits ({(s.gpu_memory_gib * GIB - p.total) / GIB:.1f} GiB to spare)")
    elif p.suggestions:
        lines.append(f"verdict: does not fit ({p.total / GIB:.1f} > {s.gpu_memory_gib:g} GiB); the smallest change "
                     f"that fits: {p.suggestions[0]}" + (f" (or: {'; '.join(p.suggestions[1:])})"
                                                         if len(p.suggestions) > 1 else ""))
    else:
        lines.append(f"verdict: does not fit ({p.total / GIB:.1f} > {s.gpu_memory_gib:g} GiB), and no single "
                     "change tried makes it fit")
    return "\n".join(lines)


def to_json(p: Plan) -> str:
    return json.dumps(p.as_dict(), indent=1)


__all__ = ["Architecture", "Plan", "PlanError", "Setup", "Stack", "activations", "architecture",
           "deepspeed_estimate", "deepspeed_settings", "layer_bytes", "model_states", "plan", "plan_config",
           "table", "to_json"]
