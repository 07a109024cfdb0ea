"""Per-digit error analysis of predictions.jsonl files: tables, plots, report, run-vs-run comparison.

`vlm-smmd analyze PRED.jsonl [PRED2.jsonl ...] --out DIR [--names a,b] [--run-dir MODEL_DIR ...]` writes
DIR/report.md, DIR/analysis.json and PNG plots. The pure parts (`align_digits`, `analyze_records`,
`headline`, `compare_runs`, `write_report`) are what the demo and the `compare` command call; every public
name is importable from here. One module a part, each importing only those listed before it:
- formatting: figures as text, markdown tables, PNG figures on the Agg canvas (shared by the reports);
- digits: digits aligned by place, their tally and its chance; chance: the pairs of records chance uses;
- numbers, clocks, grounding, collapse: the figures of numeric answers, of clock answers, of points and
  boxes, of a run repeating itself;
- records: reading and checking records, their kind, `analyze_records`;
- headline_figures: `headline`, `compare_runs`; runinfo: the run behind a predictions file;
- plots, report: the PNGs; report.md and analysis.json.
Constants are re-exported here to be read; code reads them from their own module, so a changed value goes
there (`vlm_smmd.analysis.chance.PAIR_LIMIT`).

Input records: one JSON object a line with id, source, question, prediction (string) and target (string)
or targets (non-empty list of strings); of the other keys, meta gives grounding its geometry and image
the example plot its picture; raw_output and scores are ignored. Exact match takes
the max over all targets, relaxed accuracy too (over chart-source records: chartqa, plotqa, dvqa); the
digit and clock analyses use the first target. Sources match the task registry case-insensitively
("ChartQA" is chartqa); a source that names no task is scored by exact match only, counted in
`unknown_sources` and named in the report.

Every record falls in exactly one kind, all counted in the report:
- "grounding": source "grounding" or a target that is a JSON point or box answer ({"point_2d": [x, y], ...}
  or {"bbox_2d": [x1, y1, x2, y2], ...}), and the record gives a task and its geometry (below);
- "grounding_bad_target": source "grounding" but no task or geometry could be read;
- "clock": source "clocks" or a target that is exactly a time ("10:07"), and the target holds a time;
- "clock_non_time_target": source "clocks" but the target holds no time;
- "numeric": the target parses with `metrics.parse_decimal` ("1,234", "-3.5", "45%", "$12", "1.5k", ...; ASCII
  digits only, as everywhere: "１２" is non_numeric_target);
- "non_numeric_target": everything else (words such as "Democrat" or "three").

Digits (numeric records whose prediction also parses). Both numbers are written canonically: absolute
value, integer part without leading zeros (at least "0": "0.07" has a units digit 0), fraction without
trailing zeros ("2.50" -> "2.5"); the sign is compared separately (sign error). Digits are aligned by place
value via the decimal point: place 0 = units, 1 = tens, -1 = tenths, ... For each place:
- target_digits: the target has a digit there; correct / wrong: the prediction has the same / another digit;
  missing: the prediction has no digit there (a length error); accuracy = correct / target_digits,
- extra: the prediction has a digit where the target has none (not in the accuracy denominator).
The confusion matrix [target digit][predicted digit] and the |digit error| histogram use the places where
both have a digit. The first wrong place is the most significant place where the two differ (a missing or
extra digit counts as differing). Length errors compare the number of integer digits (too many / too few)
and of fraction digits; a magnitude error is a different order of magnitude (position of the most
significant non-zero digit; 0 against a non-zero number is one too). Numeric records whose prediction does
not parse are counted (non_numeric_predictions) and left out of the digit statistics and of the mean
absolute error; "within ±k" and "within relative tolerance" count them as failures (their denominator is
every numeric record). Relative error |p - t| / |t| over numeric records with a non-zero target; its CDF
counts non-numeric predictions as larger than every threshold, so it tops out below 1 when there are any.

Clocks (12-hour dial, `metrics.parse_time`): the gap is `metrics.dial_gap`; hour correct means hour mod 12
equal, minute correct means minute equal; predictions holding no time are counted (no_time) and fail every
accuracy. The mean gap is over the predictions that hold a time (the report says how many); the worst-case
mean gap counts each of the others as WORST_GAP (360 minutes, the largest gap on a 12-hour dial). Clock
digits (`clock_digit_pairs`): each field as the answer writes it (hour on the 12-hour dial "1".."12",
minute and second "00".."59"), aligned from the units digit: hour tens / units, minute tens / units, and
second tens / units when the target has seconds; the same per-place table, confusion and |digit error|
histogram as numbers, over the predictions holding a time. Swapped hands: the prediction read the minute
hand as the hour hand and the hour hand as the minute hand, i.e. predicted hour mod 12 == target minute // 5
and the predicted minute is within `swap_tolerance` (default 5.0) minutes, circularly on the 60-minute
dial, of where the hour hand points, (target hour mod 12) * 5 + target minute / 12; a prediction that is
right on hour and minute is never counted as swapped.

Grounding (`metrics.parse_grounding`; coordinates as the answer writes them, pixels of the resized image
or 0..1000). The task (point | box) and the target come from the record's meta as the grounding reader
writes it (task, target_box, target_point, in the answer's coordinates), else from the first target's JSON
answer (then a point question has no object box and is left out of point-in-box). Box questions: IoU with
the target box, averaged over every box record (an answer giving no valid box scores 0), the share with
IoU >= 0.5 (IOU_THRESHOLD), and the corner error (mean Euclidean distance of the two corners) over the
answers giving a box. Point questions: point-in-box (the object's box, edges inside; no valid point is a
miss) and the centre error (distance to the target point) over the answers giving a point. "No valid
answer": the share of grounding records whose answer gives no point or box for its task (malformed or
truncated JSON, the wrong key, a box with x2 < x1 or y2 < y1). Each coordinate (x, y of points; x1, y1,
x2, y2 of boxes), over the answers giving a valid point or box: its exact share and mean / median |error|,
and its digits aligned by place as for numbers ("x tens", "y units", ...; `point_digits`, `box_digits`).
The first EXAMPLES records (with the image path eval writes) feed the predicted-vs-true plot. Chance pairs
records of the same task only (a box answer scored against another box record's box). Best constant, point
questions only: the one point inside the most target boxes (point in box) and the geometric median of the
target points (centre error); box figures have none.

Chance (`chance` entries): the expected score of a predictor that ignores the input but knows the target
distribution, i.e. each record's target scored against the answer of another record (that record's first
target), averaged over every ordered pair of distinct records. Computed exactly over the distinct answers
with their multiplicities (at most PAIR_LIMIT distinct pairs; above that, estimated from PAIR_SAMPLES
random pairs drawn with seed PAIR_SEED, and the method says so). Records are distinct by (source, id), so
pooling several seeds of one evaluation set does not pair a record with its own copy. Per-place digit
chance and its |digit error| histogram are computed exactly from the per-place digit counts.
Best constant (`constant` entries): the single answer that scores best on these very targets (the most
common answer for exact figures, the median for the mean absolute error, the target time with the least
mean gap), in-sample: a model that always gives one answer scores at most this.

Collapse (`collapse`): distinct predictions, the most common one and its share. A run is flagged as
collapsed when the most common prediction is more than COLLAPSE_SHARE (half) of the answers and more than
twice as common as the most common target, or when there are at least 10 distinct targets and fewer
distinct predictions than COLLAPSE_DISTINCT (a tenth) of the distinct targets.
"""

from .chance import PAIR_LIMIT, PAIR_SAMPLES, PAIR_SEED
from .clocks import GAP_BIN, GAP_BUCKETS, SWAP_TOLERANCE, WITHIN_MINUTES, WORST_GAP, swapped_hands
from .collapse import COLLAPSE_DISTINCT, COLLAPSE_SHARE, collapse_check
from .digits import (
    CLOCK_PLACES,
    DigitPair,
    align_digits,
    canonical_digits,
    clock_digit_pairs,
    digit_places,
    place_name,
)
from .grounding import GroundingTarget, grounding_target
from .headline_figures import Metric, compare_runs, headline
from .numbers import ABS_WITHIN, REL_THRESHOLDS, REL_TOLERANCES
from .records import CHART_SOURCES, KINDS, TEXT_SOURCES, analyze_records, load_predictions, record_kind
from .report import CHANCE_TEXT, IDENTITY_KEYS, write_report
from .runinfo import curve_series, find_run_dir, load_run_info

__all__ = [
    "ABS_WITHIN", "CHANCE_TEXT", "CHART_SOURCES", "CLOCK_PLACES", "COLLAPSE_DISTINCT", "COLLAPSE_SHARE", "GAP_BIN",
    "GAP_BUCKETS", "IDENTITY_KEYS", "KINDS", "PAIR_LIMIT", "PAIR_SAMPLES", "PAIR_SEED", "REL_THRESHOLDS",
    "REL_TOLERANCES", "SWAP_TOLERANCE", "TEXT_SOURCES", "WITHIN_MINUTES", "WORST_GAP",
    "DigitPair", "GroundingTarget", "Metric", "align_digits", "analyze_records", "canonical_digits", "clock_digit_pairs",
    "collapse_check", "compare_runs", "curve_series", "digit_places", "find_run_dir", "grounding_target", "headline", "load_predictions",
    "load_run_info", "place_name", "record_kind", "swapped_hands", "write_report",
]
