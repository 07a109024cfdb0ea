"""Put this folder on PYTHONPATH with SMMD_RECORD=FILE: every call of the drop-in loss (`NumericLossFunction`)
and of `NumericLossMixin.compute_loss` appends one JSON line {"kind", "loss"} to FILE, so a test sees that a
program it runs (a README example, swift, LLaMA-Factory) trained with the numeric loss. The module is patched
when it is first imported; nothing is loaded before."""

import json
import os
import sys

RECORD = os.environ.get("SMMD_RECORD")
TARGET = "vlm_smmd.losses.hf"


def _recorded(kind, method):
    def call(*args, **kwargs):
        out = method(*args, **kwargs)
        loss = out[0] if isinstance(out, tuple) else out
        with open(RECORD, "a") as f:
            f.write(json.dumps({"kind": kind, "loss": float(loss)}) + "\n")
        return out

    return call


def _patch(module):
    module.NumericLossFunction.__call__ = _recorded("drop-in", module.NumericLossFunction.__call__)
    module.NumericLossMixin.compute_loss = _recorded("mixin", module.NumericLossMixin.compute_loss)


class _PatchOnImport:
    def find_spec(self, name, path=None, target=None):
        if name != TARGET:
            return None
        for finder in sys.meta_path:
            spec = None if finder is self else finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            _patch(module)

        spec.loader.exec_module = exec_module
        return spec


if RECORD:
    sys.meta_path.insert(0, _PatchOnImport())
