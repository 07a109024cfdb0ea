"""The manual: the reference pages match the code both ways, and the README stays a landing page."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "reference"


def load_generator():
    spec = importlib.util.spec_from_file_location("gen_reference", ROOT / "docs" / "gen_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def gen():
    return load_generator()


def documented(text: str) -> dict[str, set[str]]:
    """Section title -> the names in the first column of its tables (`a, b` cells give both)."""
    out, section = {}, ""
    for line in text.splitlines():
        if line.startswith("## "):
            section = line[3:].strip().strip("`")
            out.setdefault(section, set())
        elif line.startswith("| `"):
            first = line.split(" | ")[0][2:]
            out.setdefault(section, set()).update(n.strip().strip("`") for n in first.split(", "))
    return out


def missing_both_ways(in_code: dict[str, set[str]], in_page: dict[str, set[str]]) -> list[str]:
    problems = []
    for section in sorted(set(in_code) | set(in_page)):
        code, page = in_code.get(section, set()), in_page.get(section, set())
        problems += [f"{section}: {n} in the code, not in the reference" for n in sorted(code - page)]
        problems += [f"{section}: {n} in the reference, not in the code" for n in sorted(page - code)]
    return problems


def code_config_keys(gen) -> dict[str, set[str]]:
    return {cls: {k for k, *_ in keys} for cls, keys in gen.config_keys().items()}


def code_flags(gen) -> dict[str, set[str]]:
    out = {}
    for name, (_, parser, _) in gen.commands().items():
        names = set()
        for flag, *_ in gen.flags(parser) if parser else []:
            names.update(flag.split(", "))
        out[name] = names
    return out


def test_every_config_key_is_documented_and_nothing_else(gen):
    problems = missing_both_ways(code_config_keys(gen), documented((REFERENCE / "config.md").read_text()))
    assert not problems, "rerun python docs/gen_reference.py: " + "; ".join(problems)


def test_every_flag_is_documented_and_nothing_else(gen):
    problems = missing_both_ways(code_flags(gen), documented((REFERENCE / "commands.md").read_text()))
    assert not problems, "rerun python docs/gen_reference.py: " + "; ".join(problems)
    assert {"--out", "--model", "--data"} <= code_flags(gen)["vlm-smmd eval"]  # the parsers were really read


def test_every_task_and_loss_is_documented_and_nothing_else(gen):
    from vlm_smmd.data.tasks import TASKS
    from vlm_smmd.losses.registry import LOSSES, SETTINGS

    tasks = documented((REFERENCE / "tasks.md").read_text())
    assert missing_both_ways({"": set(TASKS)}, tasks) == []
    losses = documented((REFERENCE / "losses.md").read_text())
    assert missing_both_ways({"": set(LOSSES), "Options": set(SETTINGS)}, losses) == []


def test_an_undocumented_key_is_caught(gen):
    """A key added to the code without rerunning the generator fails the check, and so does a stale one."""
    page = documented((REFERENCE / "config.md").read_text())
    code = code_config_keys(gen)
    code["DataArguments"] = code["DataArguments"] | {"brand_new_key"}
    assert missing_both_ways(code, page) == ["DataArguments: brand_new_key in the code, not in the reference"]
    page["LossArguments"] = page["LossArguments"] | {"gone_key"}
    assert "LossArguments: gone_key in the reference, not in the code" in missing_both_ways(code, page)


def test_reference_pages_are_what_the_generator_writes(gen):
    """Help texts and defaults too, not only names: the committed pages are the generator's output."""
    stale = [name for name, text in gen.render().items() if (REFERENCE / name).read_text() != text]
    assert not stale, f"docs/reference/{stale} differ from the code; run python docs/gen_reference.py"


def test_readme_is_a_landing_page():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    for line in ("pip install -e '.[dev]'", "vlm-smmd demo", "pytest -n 2"):
        assert line in text
    blocks = [" ".join(b.replace("\\\n", " ").split()) for b in re.findall(r"```bash\n(.*?)```", text, re.S)]
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line.startswith("python3 -m venv")]
    assert len(ci) == 1 and ci[0].replace(" -q ", " ") in blocks  # the test command exactly as .ci/run runs it


def runnable_blocks(text: str) -> list[tuple[str, str]]:
    """The fenced blocks marked `<!-- runnable -->` on the line above: (language, code)."""
    return re.findall(r"^<!-- runnable -->\n```(\w+)\n(.*?)^```$", text, re.M | re.S)


def test_the_readme_drop_in_runs():
    blocks = runnable_blocks((ROOT / "README.md").read_text())
    assert [language for language, _ in blocks] == ["python"]
    exec(compile(blocks[0][1], "README.md drop-in", "exec"), {})  # its assert checks the loss orders answers


def shell_commands(text: str) -> list[str]:
    """Each `vlm-smmd ...` / `data-synth ...` invocation in the bash blocks of a page, continuation lines joined."""
    out = []
    for block in re.findall(r"```(?:bash|sh)\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            for part in re.split(r"&&|\|\||;|\|", line.split(" #")[0]):
                words = part.split()
                if len(words) >= 2 and words[0] in ("vlm-smmd", "data-synth"):
                    out.append(" ".join(words))
    return out


def pages():
    return [p for p in sorted((ROOT / "docs").rglob("*.md")) if "results" not in p.parts] + [ROOT / "README.md"]


def test_every_command_in_the_manual_exists_with_its_flags(gen):
    """Shell examples name commands that exist, flags their parser has, config keys that exist (train and
    compare overrides), and config files that are in the repository."""
    from vlm_smmd import config

    parsers = {name: parser for name, (_, parser, _) in gen.commands().items()}
    keys = {f.name for cls in config.CONFIG_CLASSES for f in __import__("dataclasses").fields(cls)}
    problems, seen = [], 0
    for page in pages():
        for command in shell_commands(page.read_text()):
            seen += 1
            words = command.split()
            name = " ".join(words[:2])
            where = f"{page.relative_to(ROOT)}: {command}"
            if words[1] in ("-h", "--help"):
                continue
            if name not in parsers:
                problems.append(f"{where}: no command {name}")
                continue
            options = {o for a in (parsers[name]._actions if parsers[name] else []) for o in a.option_strings}
            for word in words[2:]:
                if word.startswith("configs/") and not (ROOT / word).exists():
                    problems.append(f"{where}: no file {word}")
                if not word.startswith("--") or word in ("--overwrite", "--dry-run", "--help"):
                    continue
                flag = word.split("=")[0]
                spelt = {flag, flag.replace("_", "-")}
                if parsers[name] is not None and spelt & options:
                    continue
                if name in ("vlm-smmd train", "vlm-smmd compare") and flag[2:].replace("-", "_") in keys:
                    continue
                problems.append(f"{where}: no flag or config key {flag}")
    assert seen > 30, seen  # the pages were really read
    assert not problems, "\n".join(problems)


def lists_glued_to_a_paragraph(text: str) -> list[int]:
    """Line numbers of list items that directly follow paragraph text: Python-Markdown (mkdocs) renders
    those as part of the paragraph ("...says: - SMMD beats CE ..."), GitHub as a list."""
    lines, found, fence = text.split("\n"), [], False
    for i, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            fence = not fence
        elif not fence and i and re.match(r"(- |\d+\. )", line):
            prev = lines[i - 1]
            if prev.strip() and not re.match(r"\s*(- |\d+\. |\||#)", prev) and not prev.startswith("  "):
                found.append(i + 1)
    return found


def test_lists_render_as_lists_on_the_site():
    assert lists_glued_to_a_paragraph("Metrics:\n- exact\n- hour\n") == [2]
    assert lists_glued_to_a_paragraph("Metrics:\n\n- exact\n- hour\n```\ntext\n- not a list\n```\n") == []
    problems = [f"{p.relative_to(ROOT)}:{n}" for p in pages() if p.name != "README.md"
                for n in lists_glued_to_a_paragraph(p.read_text())]
    assert not problems, "add a blank line before the list: " + ", ".join(problems)
