"""The clock renderer: exact hand angles read back from pixels, every style option, invalid arguments."""

import math
import random
from dataclasses import fields, replace

import numpy as np
import pytest
from PIL import Image

from data_synth.clock_gallery import gallery_main
from data_synth.clocks import (
    STYLE_FIELDS,
    ClockStyle,
    font_names,
    plain_style,
    random_style,
    render_clock,
    style_for_seed,
)

RED, BLUE, GREEN = (255, 0, 0), (0, 0, 255), (0, 160, 0)
SIZE = 256


def coloured_hands(**changes):
    return plain_style(hour_hand_color=RED, minute_hand_color=BLUE, second_hand_color=GREEN, center_cap=0.0,
                       **changes)


def expected_angles(h, m, s):
    """Clockwise degrees from 12: the issue's formulas, written out independently of the renderer."""
    s0 = 0 if s is None else s
    return (h % 12) * 30 + m * 0.5 + s0 / 120, m * 6 + s0 / 10, None if s is None else s * 6


def read_hand(img, color, r_lo, r_hi):
    """Circular mean direction (clockwise from 12, degrees) of the pixels of `color` in an annulus."""
    a = np.asarray(img).astype(float)
    ys, xs = np.nonzero(np.abs(a - np.array(color)).max(axis=2) < 80)
    centre = img.width / 2 - 0.5
    dx, dy = xs - centre, ys - centre
    r = np.hypot(dx, dy)
    keep = (r >= r_lo) & (r <= r_hi)
    assert keep.sum() > 20, f"hand of colour {color} not found"
    ang = np.arctan2(dx[keep], -dy[keep])
    return math.degrees(math.atan2(np.sin(ang).mean(), np.cos(ang).mean())) % 360


def angle_diff(a, b):
    return abs((a - b + 180) % 360 - 180)


TIMES = [(3, 0, 30), (10, 10, 40), (6, 45, 15), (1, 23, None), (8, 2, None), (11, 37, 5), (0, 50, None),
         (12, 20, None), (23, 50, 30), (17, 40, 55), (4, 30, None), (9, 14, 5)]


@pytest.mark.parametrize("rotation", [0.0, 7.5])
def test_hands_read_back_from_pixels_within_2_degrees(rotation):
    style = coloured_hands(dial_rotation=rotation)
    radius = style.face_radius * SIZE / 2 * (1 - style.border_width)
    for h, m, s in TIMES:
        angles = expected_angles(h, m, s)
        # hands at least 25 degrees apart, so none hides another inside the sampled rings
        shown = [a for a in angles if a is not None]
        assert all(angle_diff(a, b) >= 25 for i, a in enumerate(shown) for b in shown[i + 1:]), (h, m, s)
        img = render_clock(h, m, s, size=SIZE, style=style)
        rings = [(RED, 0.25, 0.45), (BLUE, 0.25, 0.7), (GREEN, 0.25, 0.8)]
        for (color, lo, hi), want in zip(rings, angles):
            if want is None:
                continue
            got = read_hand(img, color, lo * radius, hi * radius)
            assert angle_diff(got, want + rotation) <= 2.0, (h, m, s, color, got, want + rotation)


def test_seconds_advance_the_minute_hand_by_s_over_10_degrees():
    style = coloured_hands(second_hand=False)
    radius = style.face_radius * SIZE / 2 * (1 - style.border_width)
    at0 = read_hand(render_clock(2, 20, 0, size=SIZE, style=style), BLUE, 0.25 * radius, 0.7 * radius)
    at50 = read_hand(render_clock(2, 20, 50, size=SIZE, style=style), BLUE, 0.25 * radius, 0.7 * radius)
    assert abs((at50 - at0) - 50 / 10) < 0.4


def test_no_second_hand_without_second_and_minute_hand_on_the_minute():
    img = render_clock(4, 40, None, size=SIZE, style=coloured_hands())
    assert (np.abs(np.asarray(img).astype(int) - GREEN).max(axis=2) < 80).sum() == 0
    radius = 0.9 * SIZE / 2 * 0.97
    assert angle_diff(read_hand(img, BLUE, 0.25 * radius, 0.7 * radius), 240) <= 2.0


def test_second_hand_hidden_when_style_says_so():
    img = render_clock(4, 40, 12, size=SIZE, style=coloured_hands(second_hand=False))
    assert (np.abs(np.asarray(img).astype(int) - GREEN).max(axis=2) < 80).sum() == 0


def test_output_is_rgb_of_the_requested_size_and_deterministic():
    for seed in range(6):
        a, b = render_clock(7, 8, 9, size=96, seed=seed), render_clock(7, 8, 9, size=96, seed=seed)
        assert a.mode == "RGB" and a.size == (96, 96)
        assert a.tobytes() == b.tobytes()
    assert render_clock(7, 8, size=96, seed=1).tobytes() != render_clock(7, 8, size=96, seed=2).tobytes()


def test_style_none_equals_the_seeds_style():
    seed = 1234
    assert (render_clock(2, 22, size=96, seed=seed).tobytes()
            == render_clock(2, 22, size=96, style=style_for_seed(seed), seed=seed).tobytes())


# Non-default values for every attribute; `context` makes the attribute visible where it depends on another.
CHANGES = {
    "face_shape": ["square", "rounded_square"], "face_radius": [0.6], "face_fill": ["gradient", "noise", "texture"],
    "face_color": [(250, 240, 200)], "face_color2": [(120, 60, 60)], "background": ["gradient", "noise", "texture"],
    "background_color": [(40, 90, 40)], "background_color2": [(200, 40, 40)], "border_width": [0.0, 0.1],
    "border_color": [(0, 0, 200)], "ticks": ["none", "60"], "tick_length": [0.2], "tick_width": [0.05],
    "minor_tick_length": [0.1], "minor_tick_width": [0.02], "tick_color": [(0, 120, 0)],
    "numerals": ["none", "roman", "cardinal"], "numeral_font": ["DejaVuSerif-Bold"], "numeral_size": [0.25],
    "numeral_rotation": ["radial"], "numeral_color": [(200, 0, 200)], "hand_tip": ["tapered", "arrow", "diamond"],
    "hand_tail": [0.2], "hour_hand_length": [0.3], "hour_hand_width": [0.1], "hour_hand_color": [(90, 90, 0)],
    "minute_hand_length": [0.95], "minute_hand_width": [0.07], "minute_hand_color": [(0, 90, 90)],
    "second_hand": [False], "second_hand_length": [0.6], "second_hand_width": [0.03],
    "second_hand_color": [(0, 0, 255)], "center_cap": [0.0, 0.1], "center_cap_color": [(255, 0, 0)],
    "hand_shadow": [0.03], "am_pm": [True], "dial_rotation": [-9.0], "perspective_x": [0.15, -0.15],
    "perspective_y": [0.15, -0.15], "dial_squash": [0.6], "dial_skew": [-20.0, 20.0], "blur": [1.0], "noise": [6.0], "jpeg_quality": [30], "distractors": [3],
    "supersample": [1, 3],
}
CONTEXT = {"face_color2": {"face_fill": "gradient"}, "background_color2": {"background": "gradient"},
           "minor_tick_length": {"ticks": "60"}, "minor_tick_width": {"ticks": "60"}}


def test_changes_table_covers_every_style_attribute():
    assert set(CHANGES) == set(STYLE_FIELDS)


@pytest.mark.parametrize("name", sorted(CHANGES))
def test_every_style_option_renders_and_shows(name):
    base = replace(plain_style(), **CONTEXT.get(name, {}))
    before = render_clock(4, 50, 20, size=96, style=base, seed=3)
    for value in CHANGES[name]:
        img = render_clock(4, 50, 20, size=96, style=replace(base, **{name: value}).validate(), seed=3)
        assert img.mode == "RGB" and img.size == (96, 96)
        assert img.tobytes() != before.tobytes(), f"{name}={value!r} changed nothing"


def test_every_font_renders_roman_and_arabic_numerals():
    assert len(font_names()) >= 2
    for font in font_names():
        for numerals in ("arabic", "roman"):
            img = render_clock(10, 10, size=96, style=plain_style(numeral_font=font, numerals=numerals))
            assert img.size == (96, 96)


def test_random_styles_cover_every_choice_and_are_valid():
    seen = {f.name: set() for f in fields(ClockStyle) if "choices" in f.metadata}
    bools = {"second_hand": set(), "am_pm": set()}
    rng = random.Random(0)
    for _ in range(400):
        style = random_style(rng)
        for name in seen:
            seen[name].add(getattr(style, name))
        for name in bools:
            bools[name].add(getattr(style, name))
        assert style.hour_hand_length < style.minute_hand_length
        assert (style.dial_squash, style.dial_skew) == (1.0, 0.0)  # squash and skew: only in test_deformed
    for f in fields(ClockStyle):
        if f.name in seen:  # the diamond tip is drawn only in the robustness split test_hands
            assert seen[f.name] == set(f.metadata["choices"]) - {"diamond"}, f.name
    assert all(v == {False, True} for v in bools.values())


def test_overriding_one_attribute_leaves_independent_ones_unchanged():
    a = random_style(random.Random(5))
    b = random_style(random.Random(5), {"hand_tip": "arrow" if a.hand_tip != "arrow" else "plain"})
    assert {k: v for k, v in a.to_dict().items() if k != "hand_tip"} == \
        {k: v for k, v in b.to_dict().items() if k != "hand_tip"}


def test_style_dict_round_trip():
    style = style_for_seed(99)
    assert ClockStyle.from_dict(style.to_dict()) == style


@pytest.mark.parametrize("kwargs, name", [
    (dict(hour=24, minute=0), "hour"), (dict(hour=-1, minute=0), "hour"), (dict(hour=3.0, minute=0), "hour"),
    (dict(hour=True, minute=0), "hour"), (dict(hour=3, minute=60), "minute"), (dict(hour=3, minute=-1), "minute"),
    (dict(hour=3, minute=5, second=60), "second"), (dict(hour=3, minute=5, second=-1), "second"),
    (dict(hour=3, minute=5, size=63), "size"), (dict(hour=3, minute=5, size="448"), "size"),
    (dict(hour=3, minute=5, seed="x"), "seed"), (dict(hour=3, minute=5, style="plain"), "style"),
])
def test_invalid_arguments_raise_naming_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=rf"^{name} "):
        render_clock(**kwargs)


@pytest.mark.parametrize("name, value", [
    ("face_shape", "oval"), ("face_fill", "marble"), ("background", None), ("ticks", 12), ("numerals", "greek"),
    ("numeral_rotation", "sideways"), ("hand_tip", "round"), ("face_color", (256, 0, 0)),
    ("border_color", (0, 0)), ("tick_color", "black"), ("face_radius", 1.5), ("blur", -1.0),
    ("noise", True), ("jpeg_quality", 3), ("jpeg_quality", 50.0), ("supersample", 5), ("distractors", -1),
    ("second_hand", 1), ("numeral_font", "NoSuchFont"), ("hour_hand_length", 0.9), ("dial_rotation", 200.0),
])
def test_invalid_style_values_raise_naming_the_attribute(name, value):
    with pytest.raises(ValueError, match=rf"style\.{name}"):
        render_clock(3, 5, size=64, style=replace(plain_style(), **{name: value}))


def test_unknown_style_attributes_raise():
    with pytest.raises(ValueError, match="colour_scheme"):
        plain_style(colour_scheme="dark")
    with pytest.raises(ValueError, match="colour_scheme"):
        random_style(random.Random(0), {"colour_scheme": "dark"})


def test_am_pm_window_differs_between_morning_and_afternoon():
    style = plain_style(am_pm=True)
    assert render_clock(3, 0, size=128, style=style).tobytes() != render_clock(15, 0, size=128, style=style).tobytes()
    plain = plain_style()
    assert render_clock(3, 0, size=128, style=plain).tobytes() == render_clock(15, 0, size=128, style=plain).tobytes()


def test_gallery_writes_a_labelled_grid(tmp_path):
    out = tmp_path / "g.png"
    assert gallery_main(["--out", str(out), "--num", "5", "--size", "96", "--cols", "3"]) == 0
    img = Image.open(out)
    assert img.width == 3 * 96 and img.height > 2 * 96
