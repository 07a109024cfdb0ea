"""What a comparison runs: its variants (aux loss or control kernel x grid point x seed) and each one's config
overrides."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

KERNEL_CONTROLS = ("random", "shuffled")
BASELINE = "none"  # the CE-only group every other group is paired with
# keys compare sets per variant: an override of one of them would make the variants differ in more ways
RESERVED = {"aux": "--aux", "kernel_mode": "--kernel-controls", "seed": "--seeds", "output_dir": "--out"}


@dataclass(frozen=True)
class Variant:
    group: str  # table row: the aux name, or "smmd-random" / "smmd-shuffled"
    aux: str
    kernel_mode: str
    seed: int
    overrides: tuple[tuple[str, str], ...] = ()  # its grid point or chosen values: ((key, raw value), ...)

    @property
    def name(self) -> str:
        return f"{self.group}-seed{self.seed}"


class GridError(ValueError):
    """A `--grid KEY=V1,V2,...` that cannot be expanded (its text; the config checks key and value types)."""


def parse_grid(texts: Sequence[str]) -> dict[str, list[str]]:
    """`["aux_lambda=0.1,0.3", ...]` -> {"aux_lambda": ["0.1", "0.3"]} (raw strings, typed by the config like
    any command-line override); GridError for a missing '=', no value, a value or key given twice, or a key
    compare sets per variant."""
    grid: dict[str, list[str]] = {}
    for text in texts:
        key, eq, values = text.partition("=")
        key = key.strip().removeprefix("--").replace("-", "_")
        items = [v.strip() for v in values.split(",") if v.strip()]
        if not eq or not key or not items:
            raise GridError(f"--grid {text!r}: expected KEY=V1,V2,... such as aux_lambda=0.1,0.3,1")
        if key in RESERVED:
            raise GridError(f"--grid {text!r}: {key} is set per variant by compare; use {RESERVED[key]}")
        if key in grid:
            raise GridError(f"--grid {text!r}: {key} has a grid already")
        if len(set(items)) != len(items):
            raise GridError(f"--grid {text!r}: a value is given twice")
        grid[key] = items
    return grid


def check_grid(grid: Mapping[str, Sequence[str]], config: Path, overrides: Mapping[str, str]) -> None:
    """Each grid value is checked as the config would take it on the command line (an unknown key gets a
    suggestion, a value of the wrong type its expected type): GridError naming the key, else None."""
    from ..config import ConfigError, check_config

    for key, values in grid.items():
        if key in overrides:
            raise GridError(f"--grid {key}: also given as --{key}; give it in one place")
        for value in values:
            try:
                check_config(config, {**overrides, key: value})
            except ConfigError as e:
                raise GridError(f"--grid {key}={','.join(values)}: {e}") from None


def grid_label(point: Sequence[tuple[str, str]]) -> str:
    """The group suffix of a grid point: "@aux_lambda=0.3" ("" without a grid)."""
    return "@" + ",".join(f"{k}={v}" for k, v in point) if point else ""


def plan_variants(auxes: Sequence[str], controls: Sequence[str], seeds: Sequence[int],
                  grid: Mapping[str, Sequence[str]] | None = None, ungridded: Sequence[str] = (),
                  chosen: Mapping[str, Mapping[str, str]] | None = None) -> list[Variant]:
    """Every (group, seed), seed-major: after each round of seeds every group has a result. With a grid each
    loss runs at every point of it (group "smmd@aux_lambda=0.3"); the keys in `ungridded` (the loss options)
    leave the CE-only baseline alone, which they do not change, so it stays one reference group.

    `chosen` (the confirmation, `compare --selection`): aux -> its own overrides ({key: raw value}); each group
    runs at its aux's values (a control kernel at smmd's) and keeps its plain name, so it pairs with `none` as
    in any comparison. A ValueError for an aux it lacks, or with a grid too."""
    grid = dict(grid or {})
    if grid and chosen is not None:
        raise ValueError("a grid (the selection stage) and chosen values (the confirmation) exclude each other")
    groups = [(a, a, "value_distance") for a in auxes] + [(f"smmd-{c}", "smmd", c) for c in controls]
    planned = []
    for g, aux, mode in groups:
        if chosen is not None:
            if aux not in chosen:
                raise ValueError(f"no chosen values for {aux!r} (group {g})")
            planned.append((g, aux, mode, tuple(chosen[aux].items())))
            continue
        keys = [k for k in grid if not (aux == BASELINE and k in ungridded)]
        for values in itertools.product(*(grid[k] for k in keys)):
            point = tuple(zip(keys, values))
            planned.append((g + grid_label(point), aux, mode, point))
    return [Variant(g, aux, mode, s, point) for s in seeds for g, aux, mode, point in planned]


def variant_overrides(base: Mapping, variant: Variant, run_dir: Path, base_kernel_seed: int) -> dict:
    """The config overrides of one variant: the shared ones, its grid point (or chosen values), aux, kernel, seed
    and output_dir."""
    overrides = {**base, **dict(variant.overrides), "aux": variant.aux, "kernel_mode": variant.kernel_mode, "seed": variant.seed,
                 "output_dir": str(run_dir / "model")}
    if variant.kernel_mode != "value_distance":
        overrides["kernel_seed"] = base_kernel_seed + variant.seed
    return overrides
