"""The light core install and the extras: what `pip install vlm-smmd` brings, what the light modules import,
what the commands say when their extra is missing, and the core alone beside an older transformers."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from data_synth.cli import SYNTH_MODULES
from tests.integrations.support import (
    BLOCKER,
    CHECKS,
    ROOT,
    Venv,
    checkout_copy,
    run_example,
    save_tiny_checkpoints,
    torch_links,
)
from tests.test_docker import parse_dockerfile, shell_commands
from vlm_smmd.cli import TRAIN_MODULES

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
# the newest transformers LLaMA-Factory's pins allow (main branch: transformers>=4.55.0,<=5.8.0,!=5.6.0), and
# the newest TRL they allow (trl<=0.24.0)
OLDER_TRANSFORMERS, OLDER_TRL = "5.8.0", "0.24.0"


def requirements(extra: str | None = None) -> list[Requirement]:
    """The core's requirements (extra None) or an extra's, with the extras it names of vlm-smmd itself expanded."""
    lines = PROJECT["dependencies"] if extra is None else PROJECT["optional-dependencies"][extra]
    found = []
    for req in map(Requirement, lines):
        if canonicalize_name(req.name) == "vlm-smmd":
            found += [r for name in sorted(req.extras) for r in requirements(name)]
        else:
            found.append(req)
    return found


def import_names(distribution_name: str) -> set[str]:
    """The top-level modules a distribution installed here provides."""
    wanted = canonicalize_name(distribution_name)
    return {module for module, dists in packages_distributions().items()
            if any(canonicalize_name(d) == wanted for d in dists)}


def run(args, env=None, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(args, env=env, cwd=cwd, text=True, capture_output=True, timeout=300)


# ---------------------------------------------------------------- the core and the extras, statically


def test_the_core_needs_torch_and_numpy_only():
    assert sorted(canonicalize_name(r.name) for r in requirements()) == ["numpy", "torch"]
    train = {canonicalize_name(r.name) for r in requirements("train")}
    assert {"transformers", "deepspeed", "peft", "pillow", "matplotlib", "pyyaml"} <= train
    dev = {canonicalize_name(r.name) for r in requirements("dev")}
    assert train <= dev and {"pytest", "trl"} <= dev


@pytest.mark.slow
@pytest.mark.parametrize("extra, modules", [("synth", SYNTH_MODULES), ("train", TRAIN_MODULES)])
def test_the_commands_know_the_modules_of_their_extra(extra, modules):
    """Each module the CLI names belongs to a distribution of the extra, and each distribution of the extra
    (but torch and numpy, which the core has) is known by one of its modules."""
    provided = {}
    for req in requirements(extra):
        names = import_names(req.name)
        assert names, f"{req.name} is not installed here"
        provided[canonicalize_name(req.name)] = names
    known = set().union(*provided.values())
    assert set(modules) <= known, f"modules outside the {extra} extra: {set(modules) - known}"
    unnamed = [name for name, names in provided.items() if not names & set(modules) and name not in ("torch", "numpy")]
    assert unnamed == [], f"distributions of the {extra} extra the commands would not recognise: {unnamed}"


def third_party_imports(package: str) -> dict[str, str]:
    """{top-level module: first file importing it} over every import statement of a package (function-level
    imports included), standard library and this project left out."""
    import ast

    found = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for top in {n.split(".")[0] for n in names} - set(sys.stdlib_module_names) - {"vlm_smmd", "data_synth"}:
                found.setdefault(top, str(path.relative_to(ROOT)))
    return found


# the peer trainers the adapters in vlm_smmd/integrations wrap: the user brings them
PEER_TRAINERS = {"swift", "llamafactory", "trl"}


@pytest.mark.slow  # tens of seconds on 2 cores: the full suite runs it, the fast tier not
@pytest.mark.parametrize("package, extra", [("data_synth", "synth"), ("vlm_smmd", "train")])
def test_every_module_the_code_imports_is_declared(package, extra):
    """A module the package imports comes from a distribution its extra declares, or from a hard requirement of
    one (transformers brings tokenizers and huggingface_hub): a user with only that extra never meets a
    ModuleNotFoundError on a path the code takes (a parquet folder once needed an undeclared pyarrow)."""
    from importlib.metadata import requires

    dists = {canonicalize_name(r.name) for r in requirements() + requirements(extra)}
    for name in list(dists):
        dists |= {canonicalize_name(Requirement(r).name) for r in requires(name) or [] if "extra ==" not in r}
    provided = set().union(*(import_names(d) for d in dists))
    undeclared = {m: f for m, f in third_party_imports(package).items() if m not in provided | PEER_TRAINERS}
    assert undeclared == {}, f"imported but not declared in the {extra} extra: {undeclared}"


def test_the_light_core_imports_nothing_of_the_pipeline():
    """The losses, the numeric vocabulary, the drop-in and the framework adapters, imported and run: no
    transformers, peft, deepspeed, PIL, yaml or matplotlib gets loaded."""
    result = run([sys.executable, CHECKS / "light_core_check.py"])
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["pipeline_modules"] == []
    assert found["loss"] > 0 and found["grad_norm"] > 0 and found["smmd"] > 0


def test_the_image_installs_the_core_and_the_train_extra_at_pinned_versions():
    """The Dockerfile's requirements step, run on pyproject.toml, lists the core and the train extra (synth
    included), and docker/constraints.txt pins each inside its range."""
    commands = [c for i in parse_dockerfile((ROOT / "docker" / "Dockerfile").read_text()) if i.keyword == "RUN"
                for c in shell_commands(i.args)]
    (step,) = [c for c in commands if c[:2] == ["python", "-c"] and "tomllib" in c[2]]
    listed = run([sys.executable, "-c", step[2]], cwd=ROOT).stdout.split()
    wanted = requirements() + requirements("train")
    assert {str(Requirement(r)) for r in listed} == {str(r) for r in wanted}
    pins = {}
    for line in (ROOT / "docker" / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            pins[canonicalize_name(req.name)] = next(iter(req.specifier)).version
    for req in wanted:
        name = canonicalize_name(req.name)
        assert name in pins and req.specifier.contains(pins[name]), f"{req} is not pinned inside its range"


# ---------------------------------------------------------------- the commands without their extra


def blocked(modules: str) -> dict:
    """The environment of a process in which `modules` (comma-separated) look uninstalled."""
    return {**os.environ, "PYTHONPATH": str(BLOCKER), "BLOCK_MODULES": modules}


@pytest.mark.parametrize("module, argv, line", [
    ("yaml", ["vlm-smmd", "train", "configs/tiny_cpu_arithmetic.yaml", "--output_dir", "{out}"],
     "vlm-smmd train: error: needs the training extra (missing module 'yaml'): pip install 'vlm-smmd[train]'"),
    ("transformers", ["vlm-smmd", "train", "configs/tiny_cpu_arithmetic.yaml", "--output_dir", "{out}"],
     "vlm-smmd train: error: needs the training extra (missing module 'transformers'): pip install "
     "'vlm-smmd[train]'"),
    ("PIL", ["data-synth", "clocks", "--num", "2", "--out", "{out}"],
     "data-synth clocks: error: needs the synth extra (missing module 'PIL'): pip install 'vlm-smmd[synth]'"),
    ("numpy", ["data-synth", "arithmetic", "--num", "2", "--out", "{out}"],
     "data-synth arithmetic: error: needs the synth extra (missing module 'numpy'): pip install 'vlm-smmd[synth]'"),
])
def test_a_command_without_its_extra_says_which_to_install(tmp_path, module, argv, line):
    out = tmp_path / "out"
    bin_dir = Path(sys.executable).parent
    result = run([bin_dir / argv[0], *(a.format(out=out) for a in argv[1:])], env=blocked(module), cwd=ROOT)
    assert (result.returncode, result.stderr) == (1, line + "\n")
    assert not out.exists()


def test_a_missing_module_outside_the_extras_keeps_its_traceback(tmp_path):
    """A missing standard-library module is a broken install or a bug, not a missing extra."""
    predictions = tmp_path / "predictions.jsonl"
    predictions.write_text("{}\n")
    result = run([Path(sys.executable).parent / "vlm-smmd", "analyze", predictions, "--out", tmp_path / "report"],
                 env=blocked("statistics"))
    assert result.returncode == 1
    assert "Traceback" in result.stderr and "No module named 'statistics'" in result.stderr
    assert "extra" not in result.stderr


# ---------------------------------------------------------------- the core alone, in a fresh venv


@pytest.mark.slow
def test_the_core_alone_then_beside_an_older_transformers(tmp_path):
    """`pip install <checkout>` into a fresh venv installs numpy and vlm-smmd beside torch, nothing else; the
    light core runs there and the commands name their extras; then with transformers 5.8.0 and TRL 0.24.0 (what
    LLaMA-Factory allows) the drop-in equals the formulas, accumulation keeps the update, and the README's HF
    Trainer and TRL examples train."""
    links = tmp_path / "torch"
    closure = torch_links(links)
    venv = Venv.create(tmp_path / "venv", links)
    venv.pip("install", checkout_copy(tmp_path / "src"))
    installed = venv.installed()
    assert set(installed) == set(closure) | {"vlm-smmd", "numpy", "pip"}, sorted(set(installed) - set(closure))

    found = venv.check("light_core_check.py")
    assert found["pipeline_modules"] == [] and found["loss"] > 0 and found["grad_norm"] > 0
    work = tmp_path / "work"
    work.mkdir()
    train = venv.run(["vlm-smmd", "train", ROOT / "configs" / "tiny_cpu_arithmetic.yaml"], cwd=work, check=False)
    missing = re.fullmatch(r"vlm-smmd train: error: needs the training extra \(missing module '(\w+)'\): "
                           r"pip install 'vlm-smmd\[train\]'\n", train.stderr)
    assert train.returncode == 1 and missing and missing.group(1) in TRAIN_MODULES, train.stderr[-2000:]
    synth = venv.run(["data-synth", "clocks", "--num", "2", "--out", work / "clocks"], check=False)
    missing = re.fullmatch(r"data-synth clocks: error: needs the synth extra \(missing module '(\w+)'\): "
                           r"pip install 'vlm-smmd\[synth\]'\n", synth.stderr)
    assert synth.returncode == 1 and missing and missing.group(1) in SYNTH_MODULES, synth.stderr[-2000:]
    assert not (work / "clocks").exists()

    venv.pip("install", f"transformers=={OLDER_TRANSFORMERS}", f"trl=={OLDER_TRL}")
    assert "vlm-smmd" in venv.installed()
    checkpoint = save_tiny_checkpoints(tmp_path / "tiny")["text"]
    found = venv.check("old_transformers_check.py", checkpoint, tmp_path / "runs")
    assert (found["transformers"], found["trl"]) == (OLDER_TRANSFORMERS, OLDER_TRL)
    assert found["numeric_tokens"] == 8 and abs(found["loss"] - found["reference"]) < 1e-9 * found["reference"]
    assert found["grad_norm"] > 0
    assert found["update_norm"] > 1.0 and found["accumulation_difference"] < 1e-5 * found["update_norm"]

    for name in ("hf-trainer", "trl-text"):
        calls = run_example(venv.run, name, tmp_path / name, checkpoint)
        assert [c["kind"] for c in calls] == ["drop-in", "drop-in"], name  # 4 examples, batches of 2, 1 epoch
    venv.remove()
