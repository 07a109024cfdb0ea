"""The architecture: no import cycle, the task and loss names written in one place each, and every
registered task and loss trains a step through the real collator and objective."""

import ast
import json
from pathlib import Path

import pytest
import torch

from vlm_smmd.data.tasks import TASKS, read
from vlm_smmd.losses import AUX_NAMES

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("vlm_smmd", "data_synth")


def _import_graph() -> dict[str, set[str]]:
    """module -> modules of our packages it imports, at module or function level (grimp reads every import)."""
    grimp = pytest.importorskip("grimp")
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)  # a stale cache would hide a new cycle
    return {m: {n for n in graph.find_modules_directly_imported_by(m) if n.partition(".")[0] in PACKAGES}
            for m in graph.modules if m.partition(".")[0] in PACKAGES}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), plus self-imports."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.get(v, ()):
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_cycle_finder_finds_a_planted_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle():
    graph = _import_graph()
    # a package's __init__ importing its own submodules (re-exports) is not a cycle of code
    graph = {m: {n for n in deps if not m.startswith(n + ".")} for m, deps in graph.items()}
    assert _cycles(graph) == []


def test_library_never_imports_the_command_line():
    for module, deps in _import_graph().items():
        if module.startswith(("vlm_smmd.cli", "vlm_smmd.commands")):
            continue
        assert not {d for d in deps if d.startswith(("vlm_smmd.cli", "vlm_smmd.commands"))}, module


def _name_lists(names: set[str], skip: set[Path]) -> list[str]:
    """Literal tuples, lists, sets and dict keys in vlm_smmd/ holding three or more of `names`."""
    found = []
    for path in sorted((REPO / "vlm_smmd").rglob("*.py")):
        if path in skip:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            items = node.keys if isinstance(node, ast.Dict) else node.elts if isinstance(
                node, (ast.Tuple, ast.List, ast.Set)) else []
            strings = {i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)}
            if len(strings & names) >= 3:
                found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    return found


@pytest.mark.slow
def test_task_names_are_written_once():
    assert _name_lists(set(TASKS), {REPO / "vlm_smmd" / "data" / "tasks.py"}) == []


@pytest.mark.slow
def test_loss_names_are_written_once():
    from vlm_smmd.losses import registry

    smmd = REPO / "vlm_smmd" / "losses" / "smmd.py"  # SMMDLoss's own modes mmd | smooth | smmd
    assert _name_lists(set(AUX_NAMES) - {"none"}, {Path(registry.__file__).resolve(), smmd}) == []


# ---------------------------------------------------------------------------------------------------------
# Every task and every loss through one training step


def _jsonl(path: Path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _clocks(root):
    from data_synth.writer import write_clock_dataset

    write_clock_dataset(root, 4, 0, size=64, splits="train=1")


def _charts(layout):
    def write(root):
        from data_synth.charts import write_chart_dataset

        write_chart_dataset(root, layout, 2, seed=0, split="train", questions_per_chart=2)
    return write


def _grounding(root):
    from data_synth.grounding import write_grounding_dataset

    write_grounding_dataset(root, 4, 0, width=84, height=56, objects=1, splits="train=1", progress=False)


def _arithmetic(root):
    from data_synth.arithmetic import write_arithmetic_dataset

    write_arithmetic_dataset(root, 4, 0, splits="train=1")


def _word_problems(root):
    from data_synth.word_problems import write_word_problem_dataset

    write_word_problem_dataset(root, 4, 0, splits="train=1", progress=False)


def _gsm8k(root):
    _jsonl(root / "train.jsonl", [{"question": f"Ann has {k} apples and gets 3 more. How many?",
                                   "answer": f"{k}+3=<<{k}+3={k + 3}>>{k + 3}\n#### {k + 3}"} for k in range(4)])


def _svamp(root):
    root.mkdir(parents=True)
    (root / "SVAMP.json").write_text(json.dumps([
        {"ID": f"chal-{k}", "Body": f"Dan had {k + 4} apples.", "Question": "He ate 3. How many are left?",
         "Equation": f"( {k + 4}.0 - 3.0 )", "Answer": float(k + 1), "Type": "Subtraction"} for k in range(4)]))


def _deepmind_math(root):
    folder = root / "mathematics_dataset-v1.0" / "train"
    folder.mkdir(parents=True)
    (folder / "arithmetic__add_or_sub.txt").write_text("What is 12 + 7?\n19\nSum 3 and 45.\n48\n")


def _refcoco(root):
    from PIL import Image

    (root / "images").mkdir(parents=True)
    Image.new("RGB", (84, 56), "white").save(root / "images" / "1.png")
    (root / "instances.json").write_text(json.dumps({
        "images": [{"id": 1, "file_name": "1.png", "width": 84, "height": 56}],
        "annotations": [{"id": 7, "image_id": 1, "bbox": [4.5, 3, 20, 12.25], "category_id": 1}]}))
    (root / "refs(unc).json").write_text(json.dumps([{"ref_id": 1, "ann_id": 7, "image_id": 1, "split": "train",
                                                       "sentences": [{"sent": "left box"}, {"sent": "box"}]}]))


def _itsabouttime(root):
    from PIL import Image

    root.mkdir(parents=True)
    Image.new("RGB", (84, 56), "white").save(root / "1.jpg")
    Image.new("RGB", (84, 56), "gray").save(root / "2.jpg")
    (root / "coco_final.csv").write_text('img_id,file_name,bbox_gt,hour,minute,bbox_det\n'
                                         '1,1.jpg,"[[4, 3, 20, 12]]",12,5,"[4, 3, 20, 12]"\n'
                                         '2,2.jpg,"[[4, 3, 20, 12]]",3,40,"[5, 4, 30, 30]"\n')


def _clock_parquet(kind):
    def write(root):
        import io

        import pyarrow as pa
        import pyarrow.parquet as pq
        from PIL import Image

        root.mkdir(parents=True)
        buf = io.BytesIO()
        Image.new("RGB", (42, 42), "white").save(buf, "PNG")
        image = [{"bytes": buf.getvalue(), "path": None}] * 2
        if kind == "clockqa":
            table = {"image": image, "question": ["What time is it?"] * 2, "answer": ["3:07:15", "12:40:00"],
                     "type": ["roman", "arrow"]}
        else:
            table = {"id": ["a_1", "b_1"], "image": image, "question_time": ["What time is it?"] * 2,
                     "target_time": ['{"valid": true, "hours": 3, "minutes": 7, "seconds": false}'] * 2}
        pq.write_table(pa.table(table), root / "train-0.parquet")
    return write


# a small training split of every registered task (It's About Time has only a test split), written as its users' files are laid out
TINY_DATA = {"clocks": _clocks, "chartqa": _charts("chartqa"), "plotqa": _charts("plotqa"), "dvqa": _charts("dvqa"),
             "arithmetic": _arithmetic, "word_problems": _word_problems, "gsm8k": _gsm8k, "svamp": _svamp,
             "deepmind_math": _deepmind_math, "grounding": _grounding, "refcoco": _refcoco,
             "itsabouttime": _itsabouttime, "clockqa": _clock_parquet("clockqa"),
             "clockbench": _clock_parquet("clockbench")}


@pytest.fixture(scope="module")
def tiny():
    from vlm_smmd.data.collator import VLMCollator
    from vlm_smmd.modeling import load_model_and_processor

    model, processor = load_model_and_processor("tiny", dtype="fp32", seed=0, verbose=False)
    return model, VLMCollator(processor)


def _one_step(model, collator, samples, aux: str) -> float:
    """One SGD step of CE + aux on `samples`; returns the loss (asserting it is finite and moved the weights)."""
    from vlm_smmd.losses.objective import NumericObjective, answer_positions

    batch = collator(list(samples))
    labels = batch.pop("labels")
    batch.pop("numeric_mask")
    batch_idx, pos_idx, targets = answer_positions(labels)
    objective = NumericObjective.from_vocab(collator.numeric_vocab, aux=aux)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    logits = model(**batch).logits[batch_idx, pos_idx]
    loss = objective(logits, targets, batch_idx=batch_idx, pos_idx=pos_idx)["loss"]
    loss.backward()
    optimizer.step()
    moved = any(not torch.equal(before[n], p) for n, p in model.named_parameters())
    with torch.no_grad():  # leave the shared model as it was
        for n, p in model.named_parameters():
            p.copy_(before[n])
    model.zero_grad(set_to_none=True)
    assert torch.isfinite(loss) and moved, aux
    return loss.item()


def test_every_task_has_tiny_data():
    assert set(TINY_DATA) == set(TASKS)


@pytest.mark.slow  # tens of seconds on 2 cores: the full suite runs it, the fast tier not
@pytest.mark.parametrize("name", sorted(TASKS))
def test_every_task_trains_a_step(name, tiny, tmp_path):
    TINY_DATA[name](tmp_path / name)
    samples = read(name, tmp_path / name, {"svamp": "all", "itsabouttime": "test"}.get(name, "train"))  # one set
    assert len(samples) >= 2 and all(s.source == name for s in samples)
    assert all((s.image is None) != TASKS[name].image for s in samples)
    _one_step(*tiny, [samples[0], samples[1]], "smmd")


@pytest.mark.parametrize("aux", AUX_NAMES)
def test_every_loss_trains_a_step(aux, tiny, tmp_path):
    _arithmetic(tmp_path / "a")
    samples = read("arithmetic", tmp_path / "a", "train")
    _one_step(*tiny, [samples[0], samples[1], samples[2]], aux)
