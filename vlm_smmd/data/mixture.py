"""A weighted mixture of Sample sources as one map-style dataset for the Trainer.

Semantics:
- `limit` caps the distinct records used from a source: a random subset (by seed) when it has more.
- `weights` set each source's share of the mixture; without them each source contributes its (limited)
  records once, i.e. a shuffled concatenation. With weights, the mixture has `size` items (default: the
  total of the limited sources) split by weight (largest remainder, so counts add up to `size` exactly).
  A source asked for more items than it has repeats them in whole passes, each a fresh permutation, so no
  record appears twice before every record appeared once.
- The order is a permutation by seed: same sources, arguments and seed give the same sequence.
Only two small integer arrays are kept ([size] each); `__getitem__` asks the source for the record, so
images stay lazy.

`read_split(data_args, split)`: the configured dataset of one split, one task or this mixture (training,
compare and the dry run read it).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from torch.utils.data import Dataset

from .sample import Sample
from .tasks import TASKS, read


def _per_source(value, names: list[str], what: str) -> list:
    if value is None:
        return [None] * len(names)
    if isinstance(value, Mapping):
        unknown = set(value) - set(names)
        if unknown:
            raise ValueError(f"{what} given for unknown sources {sorted(unknown)}; sources are {names}")
        return [value.get(n) for n in names]
    value = list(value)
    if len(value) != len(names):
        raise ValueError(f"{len(value)} {what} for {len(names)} sources")
    return value


def _allocate(total: int, weights: np.ndarray) -> np.ndarray:
    """Integer counts proportional to weights summing to total (largest remainder, ties to lower index)."""
    exact = weights / weights.sum() * total
    counts = np.floor(exact).astype(np.int64)
    order = np.argsort(-(exact - counts), kind="stable")
    counts[order[: total - counts.sum()]] += 1
    return counts


class MixtureDataset(Dataset):
    """Map-style dataset over several Sample sequences: `len(mix)` items, `mix[i]` a Sample.

    sources: a list of sequences (named "0", "1", ...) or a {name: sequence} mapping.
    weights, limits: per source, as a list in source order or a {name: value} mapping (missing -> None).
    `counts` gives the items per source; `skipped` the records the sources' readers skipped.
    """

    def __init__(self, sources, weights=None, limits=None, *, size: int | None = None, seed: int = 0):
        if isinstance(sources, Mapping):
            self.names, self.sources = [str(n) for n in sources], list(sources.values())
        else:
            self.sources = list(sources)
            self.names = [str(i) for i in range(len(self.sources))]
        if not self.sources:
            raise ValueError("a mixture needs at least one source")
        self.seed = seed
        limits = _per_source(limits, self.names, "limits")
        weights = _per_source(weights, self.names, "weights")
        rng = np.random.default_rng(seed)

        pools = []  # per source: the record indices it may use
        for name, source, limit in zip(self.names, self.sources, limits):
            n = len(source)
            if limit is not None and (isinstance(limit, bool) or not isinstance(limit, (int, np.integer)) or limit < 0):
                raise ValueError(f"limit for source {name!r} must be a non-negative integer, got {limit!r}")
            if limit is not None and limit < n:
                pools.append(np.sort(rng.choice(n, size=int(limit), replace=False)))
            else:
                pools.append(np.arange(n))
        available = np.array([len(p) for p in pools], dtype=np.int64)

        if all(w is None for w in weights):
            if size is not None and size != available.sum():
                raise ValueError(f"size={size} needs weights (without them the mixture is every record once)")
            counts = available
        else:
            w = np.array([1.0 if x is None else x for x in weights], dtype=np.float64)
            if (w < 0).any() or not np.isfinite(w).all() or w.sum() <= 0:
                raise ValueError(f"weights must be finite, >= 0 and not all 0, got {list(w)}")
            total = int(available.sum() if size is None else size)
            if total < 0:
                raise ValueError(f"size must be >= 0, got {size}")
            counts = _allocate(total, w)
            for name, c, a in zip(self.names, counts, available):
                if c > 0 and a == 0:
                    raise ValueError(f"source {name!r} has weight > 0 but no records")
        self.counts = dict(zip(self.names, (int(c) for c in counts)))

        source_ids, record_ids = [], []
        for k, (pool, count) in enumerate(zip(pools, counts)):
            if count == 0:
                continue
            passes, rest = divmod(int(count), len(pool))
            picks = [pool[rng.permutation(len(pool))] for _ in range(passes)]
            if rest:
                picks.append(pool[rng.permutation(len(pool))[:rest]])
            record_ids.append(np.concatenate(picks))
            source_ids.append(np.full(int(count), k, dtype=np.int16))
        order = rng.permutation(int(counts.sum()))
        self._source = np.concatenate(source_ids)[order] if source_ids else np.zeros(0, np.int16)
        self._record = np.concatenate(record_ids)[order] if record_ids else np.zeros(0, np.int64)

    @classmethod
    def from_spec(cls, spec, *, size: int | None = None, seed: int = 0, on_error: str = "raise"):
        """Read each source of a spec and mix them.

        spec: a list of dicts {"name": a task of `tasks.TASKS`, "root": ..., "split": "train", "weight": ...,
        "limit": ..., "label": ..., "on_error": ...}; any other key is passed to the reader (e.g. "version",
        "round_digits", "verify_images", "max_records"; GSM8K "target"; DeepMind Mathematics "modules",
        "numeric_only"). Text sources yield text-only Samples (image None). "label" names the source in the
        mixture (default "name:split"). Weights are used when any entry gives one (others default to 1).
        Keys synthesize* (`synthesize`, `synthesize_num`, ...) say how the source's root is rendered
        (training.datasets.synthesize_if_missing), not how it is read: they are not passed to the reader.
        """
        sources, weights, limits = {}, {}, {}
        any_weight = any("weight" in entry for entry in spec)
        for k, entry in enumerate(spec):
            entry = {key: value for key, value in entry.items() if not key.startswith("synthesize")}
            name = entry.pop("name", None)
            if name not in TASKS:
                raise ValueError(f"mixture spec entry {k}: name must be one of {tuple(TASKS)}, got {name!r}")
            if "root" not in entry:
                raise ValueError(f"mixture spec entry {k} ({name}): missing 'root'")
            root, split = entry.pop("root"), entry.pop("split", "train")
            label = str(entry.pop("label", f"{name}:{split}"))
            if label in sources:
                raise ValueError(f"mixture spec entry {k}: duplicate source {label!r}; give it a 'label'")
            weights[label] = entry.pop("weight", 1.0)
            limits[label] = entry.pop("limit", None)
            sources[label] = read(name, root, split, on_error=entry.pop("on_error", on_error), **entry)
        return cls(sources, weights if any_weight else None, limits, size=size, seed=seed)

    @property
    def skipped(self) -> int:
        return sum(int(getattr(s, "skipped", 0)) for s in self.sources)

    def summary(self) -> str:
        lines = [f"{'source':<24} {'records':>10} {'items':>10} {'skipped':>8}"]
        for name, source in zip(self.names, self.sources):
            lines.append(f"{name:<24} {len(source):>10} {self.counts[name]:>10} {getattr(source, 'skipped', 0):>8}")
        lines.append(f"{'total':<24} {sum(map(len, self.sources)):>10} {len(self):>10} {self.skipped:>8}")
        return "\n".join(lines)

    def __len__(self) -> int:
        return len(self._source)

    def __getitem__(self, i) -> Sample:
        n = len(self._source)
        i = int(i)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"index {i} out of range for a mixture of {n} items")
        return self.sources[int(self._source[i])][int(self._record[i])]


def read_split(data_args, split: str):
    """The dataset named by `data_args` (a DataArguments) for one split: its task's reader with
    `reader_options`, or the mixture of `mixture`'s sources (a sequence of Samples)."""
    if data_args.dataset == "mixture":
        # entries may name their training split; evaluation reads eval_split of every source
        spec = [entry if "split" in entry and split != data_args.eval_split else {**entry, "split": split}
                for entry in data_args.mixture]
        return MixtureDataset.from_spec(spec, seed=data_args.synthesize_seed, on_error=data_args.on_error)
    return read(data_args.dataset, data_args.data_root, split, on_error=data_args.on_error,
                **(data_args.reader_options or {}))
