"""The field's evaluation harnesses: this tool's tasks out to them, their prediction files back in.

- `export`: `export_lmms_eval` writes a task folder lmms-eval loads with `--include_path` (records, images,
  YAML, a self-contained utils.py); `export_vlmevalkit` writes a VLMEvalKit benchmark TSV.
- `scorer`: the text of that utils.py, rendered from the source of `vlm_smmd.metrics` and of eval's answer
  extraction and scoring, so the harness scores exactly as `vlm-smmd eval` does.
- `predictions`: lmms-eval `--log_samples` files and VLMEvalKit prediction files (TSV, xlsx) read as this
  tool's prediction records, for `vlm-smmd analyze`.
"""

from .export import export_lmms_eval, export_vlmevalkit
from .predictions import FORMATS, read_any_predictions

__all__ = ["FORMATS", "export_lmms_eval", "export_vlmevalkit", "read_any_predictions"]
