"""data_synth's import graph, read from the source with `ast`: imports at module level, inside functions
and in any other block, and module names given to importlib as strings (cli.COMMANDS). The graph has no
cycle, the argument parser and the interrupt handling are leaves, the dataset machinery imports only them,
and nothing imports vlm_smmd."""

import ast
import re
from pathlib import Path

import data_synth

PACKAGE = Path(data_synth.__file__).parent
LEAVES = ("data_synth.args", "data_synth.interrupts")


def module_of(path: Path) -> str:
    return "data_synth" if path.name == "__init__.py" else f"data_synth.{path.stem}"


def imported(source: str) -> set[str]:
    """Absolute names of every module `source` (a module directly inside data_synth) imports anywhere,
    and of every data_synth module it names in a string."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level <= 1, "data_synth is a flat package"
            base = "data_synth" if node.level else ""
            module = ".".join(p for p in (base, node.module or "") if p)
            names.add(module)
            if module == "data_synth":  # `from . import bars`: the names may be modules
                names |= {f"data_synth.{a.name}" for a in node.names}
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and re.fullmatch(r"data_synth(\.\w+)+", node.value):
            names.add(node.value)
    return names


def graph() -> dict[str, set[str]]:
    modules = {module_of(p): p for p in PACKAGE.glob("*.py")}
    return {name: {m for m in imported(path.read_text()) if m in modules and m != name}
            for name, path in modules.items()}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """A cycle as [a, b, ..., a], or None (depth-first search with three colours)."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(edges):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_reader_sees_function_level_relative_and_dynamic_imports():
    source = ("import os\nfrom . import bars\nfrom .dataset import x\n"
              "def f():\n    from .cli import Parser\n    import vlm_smmd.data\n"
              "TABLE = {'a': ('data_synth.writer', 'main')}\n")
    assert imported(source) == {"os", "data_synth", "data_synth.bars", "data_synth.dataset", "data_synth.cli",
                                "vlm_smmd.data", "data_synth.writer"}


def test_the_cycle_finder_finds_cycles():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"a"}}) == ["a", "a"]


def test_data_synth_imports_no_cycle():
    edges = graph()
    assert {"data_synth.cli", "data_synth.writer", "data_synth.clocks", "data_synth.charts"} <= set(edges)
    assert edges["data_synth.cli"] >= {"data_synth.args", "data_synth.writer"}  # dynamic names are seen
    assert find_cycle(edges) is None, find_cycle(edges)


def test_parser_and_dataset_machinery_are_leaves():
    edges = graph()
    for leaf in LEAVES:
        assert edges[leaf] == set(), (leaf, edges[leaf])
    assert edges["data_synth.dataset"] <= set(LEAVES), edges["data_synth.dataset"]


def test_data_synth_never_imports_vlm_smmd():
    for path in PACKAGE.glob("*.py"):
        bad = sorted(m for m in imported(path.read_text()) if m.split(".")[0] == "vlm_smmd")
        assert not bad, (path, bad)


def test_documented_import_paths_still_work():
    from data_synth.cli import Parser
    from data_synth.writer import encode_png, write_clock_dataset

    assert callable(write_clock_dataset) and callable(encode_png) and issubclass(Parser, object)
