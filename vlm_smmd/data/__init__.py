"""Data sources as Samples: charts (ChartQA, PlotQA, DVQA), synthetic clocks, and the text tasks (GSM8K,
SVAMP, DeepMind Mathematics, synthetic arithmetic; `image=None`); the collator is `data.collator`."""

from importlib import import_module

from .sample import DataError, Sample

# Readers are imported on first use so `from vlm_smmd.data import Sample` stays light.
_LAZY = {
    "read_chartqa": ".chartqa",
    "read_plotqa": ".plotqa",
    "read_dvqa": ".dvqa",
    "read_clocks": ".clocks",
    "read_gsm8k": ".gsm8k",
    "read_svamp": ".svamp",
    "read_deepmind_math": ".deepmind_math",
    "read_arithmetic": ".arithmetic",
    "MixtureDataset": ".mixture",
}

__all__ = ["DataError", "Sample", *_LAZY]


def __getattr__(name):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
