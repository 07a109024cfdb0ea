"""Robustness splits of a clock dataset (`data-synth clocks --robustness`): clocks drawn outside the range
the dataset's own splits were drawn from, so a score there says whether a fine-tune reads clocks or has
learned the renderer (fine-tuned readers collapse on deformed dials and modified hands, Fu et al. 2025).

- test_deformed: one deformation per image, beyond every value the other splits hold: "squash" (the dial's
  width over its height below their lowest `dial_squash`), "skew" (a horizontal shear of the dial beyond
  their largest |`dial_skew`|), "warp" (a perspective beyond their largest |`perspective_x`|, |`perspective_y`|).
- test_hands: one hand change per image: "equal_length" (the hour hand as long as the minute hand; the other
  splits' hour hands are always shorter), "new_tip" (a tip shape they never use: arrow, else diamond),
  "thin" / "thick" (both hands narrower than their narrowest / wider than their widest hand of that kind).

`training_ranges(styles)` measures the other splits' styles; `deform` and `change_hands` apply one change to
a style drawn as for a test image. Both return the kind, which the writer keeps in the metadata
(`robustness`), so eval breaks each split down by it. ValueError when the other splits already use a
parameter's whole range (nothing is left beyond it).
"""

from __future__ import annotations

import math
import random
from dataclasses import replace

from .clocks import ClockStyle

DEFORMED, HANDS = "test_deformed", "test_hands"
SPLITS = (DEFORMED, HANDS)
DEFORMATIONS = ("squash", "skew", "warp")
HAND_CHANGES = ("equal_length", "new_tip", "thin", "thick")
NEW_TIPS = ("arrow", "diamond")  # a new_tip takes the first of these the other splits never use
_MEASURED = ("dial_squash", "dial_skew", "perspective_x", "perspective_y", "hour_hand_width", "minute_hand_width")


def training_ranges(styles) -> dict:
    """{attribute: [min, max]} over `styles` for the attributes the robustness splits go beyond, with
    "length_ratio" (largest hour / minute hand length) and "tips" (the hand tips used, sorted)."""
    lo = {name: math.inf for name in _MEASURED}
    hi = {name: -math.inf for name in _MEASURED}
    ratio, tips = 0.0, set()
    for style in styles:
        for name in _MEASURED:
            value = getattr(style, name)
            lo[name], hi[name] = min(lo[name], value), max(hi[name], value)
        ratio = max(ratio, style.hour_hand_length / style.minute_hand_length)
        tips.add(style.hand_tip)
    if not tips:
        raise ValueError("robustness: no styles to measure the training range from")
    return {**{name: [lo[name], hi[name]] for name in _MEASURED}, "length_ratio": ratio, "tips": sorted(tips)}


def _beyond(low: float, high: float, what: str, rng: random.Random) -> float:
    """A value drawn uniformly from [low, high]; ValueError when the range is empty."""
    if low > high:
        raise ValueError(f"robustness: the other splits already use {what}; nothing is left beyond it")
    return round(rng.uniform(low, high), 3)


def check_room(style: ClockStyle, ranges: dict) -> None:
    """ValueError unless every deformation and hand change has room beyond `ranges` (before any drawing)."""
    for kind in DEFORMATIONS:
        deform(style, ranges, random.Random(0), kind)
    for kind in HAND_CHANGES:
        change_hands(style, ranges, random.Random(0), kind)


def deform(style: ClockStyle, ranges: dict, rng: random.Random, kind: str | None = None) -> tuple[ClockStyle, str]:
    """`style` with one deformation (`kind`, else one of DEFORMATIONS drawn from `rng`) beyond `ranges`, and
    its kind. The face shrinks where the deformation would push the dial out of the picture."""
    kind = kind or DEFORMATIONS[rng.randrange(len(DEFORMATIONS))]
    if kind == "squash":  # well below the lowest squash used (1.0 unless the user fixed one)
        squash = _beyond(0.5, min(0.7, ranges["dial_squash"][0] - 0.15), "dial_squash down to 0.65", rng)
        return replace(style, dial_squash=squash), kind
    if kind == "skew":
        used = max(abs(v) for v in ranges["dial_skew"])
        skew = _beyond(max(20.0, used + 10), 35.0, "dial_skew beyond 25 degrees", rng) * rng.choice((-1, 1))
        shear = math.tan(math.radians(abs(skew)))  # a sheared circle is sqrt(1 + shear^2) times as wide
        return replace(style, dial_skew=skew, face_radius=round(min(style.face_radius, 0.95 / math.hypot(1, shear)),
                                                                 3)), kind
    used = max(abs(v) for v in ranges["perspective_x"] + ranges["perspective_y"])
    strong = _beyond(max(0.2, used + 0.05), 0.3, "perspective beyond 0.25", rng) * rng.choice((-1, 1))
    other = round(rng.uniform(-0.3, 0.3), 3)
    px, py = (strong, other) if rng.random() < 0.5 else (other, strong)
    return replace(style, perspective_x=px, perspective_y=py, face_radius=min(style.face_radius, 0.7)), kind


def change_hands(style: ClockStyle, ranges: dict, rng: random.Random, kind: str | None = None
                 ) -> tuple[ClockStyle, str]:
    """`style` with one hand change (`kind`, else one of HAND_CHANGES drawn from `rng`) outside `ranges`, and
    its kind."""
    kind = kind or HAND_CHANGES[rng.randrange(len(HAND_CHANGES))]
    if kind == "equal_length":
        return replace(style, hour_hand_length=style.minute_hand_length), kind
    if kind == "new_tip":
        unused = [tip for tip in NEW_TIPS if tip not in ranges["tips"]]
        if not unused:
            raise ValueError(f"robustness: the other splits already use the hand tips {', '.join(NEW_TIPS)}")
        return replace(style, hand_tip=unused[0]), kind
    hour_lo, hour_hi = ranges["hour_hand_width"]
    minute_lo, minute_hi = ranges["minute_hand_width"]
    if kind == "thin":  # 0.3 to 0.6 times the narrowest of each hand, never below the renderer's 0.005
        f = rng.uniform(0.3, 0.6)
        hour, minute = max(0.005, hour_lo * f), max(0.005, minute_lo * f)
        if hour >= hour_lo or minute >= minute_lo:
            raise ValueError("robustness: the other splits' hands are already as thin as the renderer draws them")
    else:  # 1.5 to 1.8 times the widest of each hand, at most the renderer's 0.3
        f = rng.uniform(1.5, 1.8)
        hour, minute = min(0.3, hour_hi * f), min(0.3, minute_hi * f)
        if hour <= hour_hi or minute <= minute_hi:
            raise ValueError("robustness: the other splits' hands are already as thick as the renderer draws them")
    return replace(style, hour_hand_width=round(hour, 4), minute_hand_width=round(minute, 4)), kind
