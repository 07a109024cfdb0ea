"""Every aux loss, named once: name -> class, fixed arguments, and the options a config may set.

Imports neither torch nor the loss modules, so configs are checked before torch loads; a class is imported
when `loss_class` or `build_loss` first asks for it. Adding a loss costs its class and one entry here.

    AUX_NAMES                          the names, in table order ("none": CE alone)
    LOSSES[name].options               Option(name, kind, default, help, range text via .rule)
    SETTINGS                           every option of every loss by its config key (Option.setting)
    check_options(name, {opt: value})  range-checked options (ValueError naming option and value)
    options_from_settings(name, cfg)   the same, read from a flat {setting: value} config
    build_loss(name, values, **opts)   the loss module (None for "none"); NumericObjective builds with it
    AUX_LAMBDA                         the Option for the aux weight lambda (finite, >= 0)

Options shared by several losses (the SMMD family's kernel settings) are one Option object, so a flat config
with one key per `setting` is unambiguous; `setting` differs from the keyword only where a config key would
clash (the kernel's `seed` is `kernel_seed`, beside the training seed).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import import_module

KINDS = ("float", "int", "choice", "floats", "auto_or_float")


@dataclass(frozen=True)
class Option:
    """One loss option: its keyword `name`, `kind` (KINDS), `default`, a one-line `help` and its range.

    float / floats: finite numbers >= `low` (> `low` when `low_open`); floats is a non-empty list of them.
    choice: one of `choices`. int: any integer. auto_or_float: "auto" or a float in range.
    """

    name: str
    kind: str
    default: object
    help: str
    low: float | None = None
    low_open: bool = False
    choices: tuple[str, ...] = ()
    setting: str = ""  # the config key; defaults to name

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"option {self.name}: kind must be one of {KINDS}, got {self.kind!r}")
        if not self.setting:
            object.__setattr__(self, "setting", self.name)

    @property
    def rule(self) -> str:
        """The accepted values in words, e.g. "a finite number > 0"."""
        if self.kind == "choice":
            return "one of " + " | ".join(self.choices)
        if self.kind == "int":
            return "an integer"
        bound = "" if self.low is None else f" {'>' if self.low_open else '>='} {self.low:g}"
        number = f"a finite number{bound}"
        if self.kind == "floats":
            return f"a non-empty list of finite numbers{bound}"
        return f"'auto' or {number}" if self.kind == "auto_or_float" else number

    def check(self, value, loss: str = ""):
        """`value` as the loss takes it (floats: a tuple), or ValueError in one line naming option and value."""
        where = f" of aux {loss!r}" if loss else ""
        bad = ValueError(f"option {self.name}={value!r}{where} must be {self.rule}")
        if self.kind == "choice":
            if value not in self.choices:
                raise bad
            return value
        if self.kind == "int":
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise bad
            return int(value)
        if self.kind == "auto_or_float" and value == "auto":
            return value
        if self.kind == "floats":
            if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
                raise bad
            items = tuple(value)
            if not items or not all(self._in_range(x) for x in items):
                raise bad
            return tuple(float(x) for x in items)
        if not self._in_range(value):
            raise bad
        return float(value)

    def _in_range(self, x) -> bool:
        if isinstance(x, bool) or not isinstance(x, numbers.Real) or not math.isfinite(x):
            return False
        return self.low is None or (x > self.low if self.low_open else x >= self.low)


@dataclass(frozen=True)
class LossSpec:
    """A registered loss: `target` "module:Class" inside vlm_smmd.losses, keyword arguments it fixes, the
    options a config may set, and a one-line help. target None: no aux loss."""

    name: str
    target: str | None
    help: str
    options: tuple[Option, ...] = ()
    fixed: Mapping = field(default_factory=dict)

    def option(self, name: str) -> Option | None:
        return next((o for o in self.options if o.name == name), None)


AUX_LAMBDA = Option("aux_lambda", "float", 1.0, "weight lambda of the aux loss in CE + lambda * aux", low=0.0)

_KERNEL = (
    Option("kernel", "choice", "gaussian", "kernel on value distances", choices=("gaussian", "laplace")),
    Option("sigmas", "floats", (2.0,), "kernel widths; the kernel is the mean over them", low=0.0, low_open=True),
    Option("squash", "float", 9.0, "non-zero value distances are rescaled onto [1, squash]; 1: no rescaling",
           low=1.0),
    Option("alpha", "auto_or_float", "auto", "weight of the smoothness term; auto: 1 / (2 * mean kernel degree)",
           low=0.0),
    Option("kernel_mode", "choice", "value_distance", "the kernel, or the paper's random / shuffled controls",
           choices=("value_distance", "random", "shuffled")),
    Option("seed", "int", 42, "seed of the random and shuffled kernels", setting="kernel_seed"),
)
_NTIL = (
    Option("digit_exp", "float", 1.2, "place weight base: a token with d digits after it weighs digit_exp**d",
           low=0.0, low_open=True),
    Option("digit_alpha", "float", 1.0, "weight of the token-level (EMD) term", low=0.0),
    Option("abs_alpha", "float", 0.2, "weight of the relative difference of whole numbers", low=0.0),
    Option("mag_alpha", "float", 0.2, "weight of the order-of-magnitude difference of whole numbers", low=0.0),
    Option("temperature", "float", 0.1, "softmax temperature of the straight-through predicted digits",
           low=0.0, low_open=True, setting="ntil_temperature"),
)

LOSSES: dict[str, LossSpec] = {spec.name: spec for spec in (
    LossSpec("smmd", "smmd:SMMDLoss", "SMMD: MMD plus graph smoothness over V_num (the paper's loss)", _KERNEL,
             {"mode": "smmd"}),
    LossSpec("mmd", "smmd:SMMDLoss", "the MMD term of SMMD alone", _KERNEL, {"mode": "mmd"}),
    LossSpec("smooth", "smmd:SMMDLoss", "the smoothness term of SMMD alone", _KERNEL, {"mode": "smooth"}),
    LossSpec("ntl_mse", "baselines:NTLMSELoss", "NTL-MSE: squared error of the expected token value"),
    LossSpec("ntl_was", "baselines:NTLWASLoss", "NTL-WAS: Wasserstein-1 distance to the target value"),
    LossSpec("dist2", "baselines:DIST2Loss", "DIST2: KL to a Gaussian-smoothed target",
             (Option("tau", "float", 1.0, "width of the soft target exp(-d^2 / tau)", low=0.0, low_open=True),)),
    LossSpec("gce", "baselines:GaussianCELoss", "cross-entropy against a Gaussian-smoothed target",
             (Option("sigma", "float", 1.0, "width of the soft target exp(-d^2 / (2 sigma^2))", low=0.0,
                     low_open=True),)),
    LossSpec("ntil", "number_level:NTILLoss", "NTIL: place-weighted digit EMD plus whole-number terms", _NTIL),
    LossSpec("number_level", "number_level:NumberLevelLoss", "relative error of the whole predicted number's value"),
    LossSpec("none", None, "no aux loss: CE alone"),
)}
AUX_NAMES = tuple(LOSSES)
SETTINGS: dict[str, Option] = {o.setting: o for entry in LOSSES.values() for o in entry.options}


def spec(name: str) -> LossSpec:
    """The registered loss `name` (ValueError naming the choices otherwise)."""
    if name not in LOSSES:
        raise ValueError(f"aux must be one of {AUX_NAMES}, got {name!r}")
    return LOSSES[name]


def check_options(name: str, options: Mapping) -> dict:
    """Range-checked options for the loss `name`: {option: value} -> the same with values as the loss takes
    them. Unknown options, options the name fixes, and out-of-range values are a ValueError in one line."""
    entry = spec(name)
    checked = {}
    for key, value in options.items():
        option = entry.option(key)
        if option is None:
            if key in entry.fixed:
                raise ValueError(f"aux {name!r} fixes {key}={entry.fixed[key]!r}; choose the aux name instead")
            takes = ", ".join(o.name for o in entry.options) or "none"
            raise ValueError(f"aux {name!r} takes no option {key!r} (its options: {takes})")
        checked[key] = option.check(value, name)
    return checked


def options_from_settings(name: str, settings: Mapping) -> dict:
    """Range-checked options of the loss `name` read from flat config settings {Option.setting: value};
    settings it does not take are left alone, missing ones keep the loss's defaults."""
    entry = spec(name)
    return check_options(name, {o.name: settings[o.setting] for o in entry.options if o.setting in settings})


def loss_class(name: str):
    """The class of the loss `name`, imported now (None for "none")."""
    target = spec(name).target
    if target is None:
        return None
    module, cls = target.split(":")
    return getattr(import_module(f"{__package__}.{module}"), cls)


def build_loss(name: str, values, **options):
    """The loss module `name` on V_num values [N] with range-checked options (None for "none")."""
    checked = check_options(name, options)
    cls = loss_class(name)
    return None if cls is None else cls(values, **spec(name).fixed, **checked)
