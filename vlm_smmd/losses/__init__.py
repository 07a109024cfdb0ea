"""Numeric-token losses (pure tensor math): SMMD, its baselines, the answer-only objective, the registry of
loss names, and the drop-in for the HF Trainer and TRL.

Importing this package loads neither torch nor transformers: the registry (`AUX_NAMES`, `LOSSES`,
`check_options`) is torch-free, and everything else is imported on first use.
"""

from importlib import import_module

from .registry import (
    AUX_LAMBDA,
    AUX_NAMES,
    LOSSES,
    SETTINGS,
    Option,
    build_loss,
    check_options,
    options_from_settings,
)

_LAZY = {
    "NumericLoss": ".base",
    "SMMDLoss": ".smmd",
    "NTLMSELoss": ".baselines",
    "NTLWASLoss": ".baselines",
    "DIST2Loss": ".baselines",
    "GaussianCELoss": ".baselines",
    "NTILLoss": ".number_level",
    "NumberLevelLoss": ".number_level",
    "build_kernel": ".kernels",
    "NumericObjective": ".objective",
    "answer_positions": ".objective",
    "numeric_loss_func": ".hf",
    "NumericLossMixin": ".hf",
}

__all__ = ["AUX_LAMBDA", "AUX_NAMES", "LOSSES", "SETTINGS", "Option", "build_loss", "check_options",
           "options_from_settings", *_LAZY]


def __getattr__(name):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
