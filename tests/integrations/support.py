"""Helpers for the install and integration tests: fresh virtual environments that see this environment's torch,
the checkout as an installable folder, tiny checkpoints, and the README's runnable examples.

A fresh venv would copy torch (a 5 GB CUDA build) on every run, so `torch_links` mirrors exactly torch's
distribution and its requirements (markers and extras followed) as a tree of symlinks, file by file, that a
`.pth` file puts on the venv's path: pip sees torch installed and installs nothing else in its place, and a
file pip removes there is a link, never this environment's file. Nothing else of this environment is visible.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from importlib.metadata import distribution
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "docs" / "guide" / "own-trainer.md"  # the page the runnable trainer examples live on
CHECKS = Path(__file__).resolve().parent  # the scripts run inside the venvs
BLOCKER = CHECKS / "blocker"  # a sitecustomize that makes named modules look uninstalled

# the one line of each example that names the model (Python, shell, LLaMA-Factory YAML) and how the tests
# rewrite it to a tiny checkpoint
MODEL_LINES = ((re.compile(r'^MODEL = "[^"\n]*"$', re.M), 'MODEL = "{}"'),
               (re.compile(r"^MODEL=\S+$", re.M), "MODEL={}"),
               (re.compile(r"^model_name_or_path: \S+$", re.M), "model_name_or_path: {}"))
MARKER = re.compile(r"^<!-- example: ([\w-]+)(?: file: (\S+))? -->\n```(\w+)\n(.*?)^```$", re.M | re.S)
# language of the block to run -> (file it is written to, command that runs it)
RUNNERS = {"python": ("example.py", ["python", "example.py"]),
           "bash": ("example.sh", ["bash", "-eo", "pipefail", "example.sh"])}


def distribution_closure(name: str) -> dict:
    """Canonical name -> Distribution of `name` and everything it requires here (markers evaluated, extras of
    requirements followed), read from the running environment."""
    found, done, todo = {}, set(), [(name, "")]
    while todo:
        dist_name, extra = todo.pop()
        key = (canonicalize_name(dist_name), extra)
        if key in done:
            continue
        done.add(key)
        dist = found.setdefault(key[0], distribution(key[0]))
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": extra}):
                todo += [(req.name, "")] + [(req.name, e) for e in req.extras]
    return found


def torch_links(folder: Path) -> list[str]:
    """A symlink per file of torch's distribution closure under `folder`; returns the closure's names."""
    closure = distribution_closure("torch")
    for dist in closure.values():
        for file in dist.files or []:
            if file.parts[0] == "..":  # console scripts: not needed to import torch
                continue
            source = Path(file.locate())
            if source.exists():
                target = folder.joinpath(*file.parts)
                target.parent.mkdir(parents=True, exist_ok=True)
                if not target.is_symlink():
                    target.symlink_to(source)
    return sorted(closure)


def checkout_copy(folder: Path) -> Path:
    """The files `pip install` needs from this checkout, copied (building in the checkout would write there)."""
    folder.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, folder / name)
    for package in ("vlm_smmd", "data_synth"):
        shutil.copytree(ROOT / package, folder / package, ignore=shutil.ignore_patterns("__pycache__"))
    return folder


@dataclass
class Venv:
    """A virtual environment at `path` that sees `links` (a torch_links folder) and nothing of ours."""

    path: Path
    env: dict = field(default_factory=dict)

    @classmethod
    def create(cls, path: Path, links: Path) -> Venv:
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
        (site,) = path.glob("lib/python*/site-packages")
        (site / "torch_links.pth").write_text(f"{links}\n")
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
        env.update(PATH=f"{path / 'bin'}{os.pathsep}{env.get('PATH', '')}", VIRTUAL_ENV=str(path),
                   HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", CUDA_VISIBLE_DEVICES="", TOKENIZERS_PARALLELISM="false",
                   PIP_DISABLE_PIP_VERSION_CHECK="1")
        return cls(path, env)

    def run(self, args, cwd=None, timeout=900, env=None, check=True) -> subprocess.CompletedProcess:
        """`args` with this venv's bin first on PATH; a failure shows the output's tail."""
        result = subprocess.run([str(a) for a in args], cwd=cwd, env={**self.env, **(env or {})}, text=True,
                                capture_output=True, timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(f"{' '.join(map(str, args))} exited {result.returncode}\n"
                                 f"{result.stdout[-3000:]}\n{result.stderr[-6000:]}")
        return result

    def pip(self, *args, timeout=1500) -> subprocess.CompletedProcess:
        """`pip ARGS` for this venv, through uv's pip interface where the dev install has it: the same
        resolution from the same metadata (checked: identical package sets for ms-swift), in about a third of
        pip's time, which is most of these tests' time. pip's config (this machine's torch cap) is not read, but
        torch is installed here already, as links."""
        python = self.path / "bin" / "python"
        uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
        if uv:
            return self.run([uv, "pip", *args, "--python", python, "-q"], timeout=timeout, env={"UV_NO_PROGRESS": "1"})
        return self.run([python, "-m", "pip", *args, "-q"], timeout=timeout)

    def installed(self) -> dict[str, str]:
        """Canonical name -> version of every distribution this venv sees (its own and the links)."""
        out = self.run([self.path / "bin" / "python", "-m", "pip", "list", "--format", "json"]).stdout
        return {canonicalize_name(d["name"]): d["version"] for d in json.loads(out)}

    def remove(self) -> None:
        """Delete the venv (a GB or so): done when its test passed; a failed test leaves it to look into."""
        shutil.rmtree(self.path)

    def check(self, script: str, *args, cwd=None, env=None, timeout=900) -> dict:
        """Run tests/integrations/SCRIPT here; its last stdout line is a JSON object."""
        out = self.run([self.path / "bin" / "python", CHECKS / script, *args], cwd=cwd, env=env, timeout=timeout)
        return json.loads(out.stdout.strip().splitlines()[-1])


def save_tiny_checkpoints(folder: Path) -> dict[str, Path]:
    """The tiny random presets saved as checkpoints a framework loads by path: "text" (Qwen2.5, the real
    152k-token tokenizer) and "vlm" (Qwen2.5-VL with its processor)."""
    from vlm_smmd.modeling import load_model_and_processor

    paths = {}
    for kind, preset in (("text", "tiny-qwen2.5"), ("vlm", "tiny")):
        model, processor = load_model_and_processor(preset, verbose=False)
        paths[kind] = folder / kind
        model.save_pretrained(paths[kind])
        processor.save_pretrained(paths[kind])
    return paths


@dataclass
class Example:
    """A README example: `code` in `language` to run, and the files it expects beside it."""

    name: str
    language: str = ""
    code: str = ""
    files: dict = field(default_factory=dict)


def readme_examples(text: str | None = None) -> dict[str, Example]:
    """The examples marked `<!-- example: NAME -->` (the code to run) and `<!-- example: NAME file: PATH -->`
    (a file it reads) in README.md, each followed by its fenced block."""
    examples = {}
    for name, path, language, code in MARKER.findall(README.read_text() if text is None else text):
        example = examples.setdefault(name, Example(name))
        if path:
            assert path not in example.files, f"README example {name}: {path} given twice"
            example.files[path] = code
        else:
            assert not example.code, f"README example {name}: two blocks to run"
            assert language in RUNNERS, f"README example {name}: no runner for {language}"
            example.language, example.code = language, code
    return examples


def write_example(example: Example, folder: Path, model: Path) -> list[str]:
    """Write the example and its files into `folder` with its model line pointing at `model`; returns the
    command that runs it there."""
    assert example.code, f"README example {example.name} has files but no block to run"
    texts = {**example.files, RUNNERS[example.language][0]: example.code}
    hits = [(path, pattern, line) for path, text in texts.items() for pattern, line in MODEL_LINES
            for _ in pattern.finditer(text)]
    assert len(hits) == 1, f"README example {example.name}: need exactly one model line, found {len(hits)}"
    path, pattern, line = hits[0]
    texts[path] = pattern.sub(lambda _: line.format(model), texts[path])
    for rel, text in texts.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    return RUNNERS[example.language][1]


def run_example(run, name: str, folder: Path, model: Path) -> list[dict]:
    """Run README example `name` in `folder` (on `model`) with `run(command, cwd=, env=)`, which must fail on a
    failing command; returns the numeric-loss calls it made ({"kind", "loss"}), at least one, each finite."""
    folder.mkdir()
    command = write_example(readme_examples()[name], folder, model)
    record = folder / "losses.jsonl"
    run(command, cwd=folder, env={"PYTHONPATH": str(CHECKS / "recorder"), "SMMD_RECORD": str(record)})
    calls = [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []
    assert calls and all(0 < c["loss"] < 100 for c in calls), f"README example {name}: loss calls {calls}"
    return calls
