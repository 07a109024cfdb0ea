"""What a comparison runs: its variants (aux loss or control kernel x seed) and each one's config overrides."""

from __future__ import annotations

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

    @property
    def name(self) -> str:
        return f"{self.group}-seed{self.seed}"


def plan_variants(auxes: Sequence[str], controls: Sequence[str], seeds: Sequence[int]) -> list[Variant]:
    """Every (group, seed), seed-major: after each round of seeds every group has a result."""
    groups = [(a, a, "value_distance") for a in auxes] + [(f"smmd-{c}", "smmd", c) for c in controls]
    return [Variant(g, aux, mode, s) for s in seeds for g, aux, mode in groups]


def variant_overrides(base: Mapping, variant: Variant, run_dir: Path, base_kernel_seed: int) -> dict:
    """The config overrides of one variant: the shared ones plus aux, kernel, seed and output_dir."""
    overrides = {**base, "aux": variant.aux, "kernel_mode": variant.kernel_mode, "seed": variant.seed,
                 "output_dir": str(run_dir / "model")}
    if variant.kernel_mode != "value_distance":
        overrides["kernel_seed"] = base_kernel_seed + variant.seed
    return overrides
