"""Data sources as Samples: charts (ChartQA, PlotQA, DVQA), synthetic clocks and grounding, RefCOCO-style referring
expressions, and the text tasks (GSM8K, SVAMP, DeepMind Mathematics, synthetic arithmetic and word problems;
`image=None`); the collator is `data.collator`."""

from importlib import import_module

from .sample import DataError, Sample, set_max_image_pixels
from .tasks import TASKS

# Readers (`read_<task>`, from the task registry) are imported on first use so `from vlm_smmd.data import
# Sample` stays light.
_READERS = {f"read_{name}": name for name in TASKS}

__all__ = ["DataError", "MixtureDataset", "Sample", "read_split", "set_max_image_pixels", *_READERS]


def __getattr__(name):
    if name in _READERS:
        from .tasks import reader

        return reader(_READERS[name])
    if name in ("MixtureDataset", "read_split"):  # torch and numpy: on first use
        return getattr(import_module(".mixture", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
