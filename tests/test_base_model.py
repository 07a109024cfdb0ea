"""The research base (issue 40 item 4): a mixture whose sources render themselves, a scratch run saved as a
folder that a fine-tune starts from (its weights loaded as saved, its identity in run_config.json), and the
base's task vocabulary guarding the fine-tune's texts."""

import hashlib
import json
from pathlib import Path

import pytest

from vlm_smmd.config import ConfigError, check_config

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
TINY = {"model_name_or_path": "scratch", "scratch_family": "qwen2_5_vl", "scratch_hidden_size": "32",
        "scratch_layers": "1", "scratch_heads": "2", "scratch_vision_hidden_size": "32", "scratch_vision_depth": "1",
        "scratch_vision_heads": "2", "min_pixels": "3136", "max_pixels": "12544", "use_cpu": "true", "max_steps": "2",
        "per_device_train_batch_size": "6", "learning_rate": "0.01", "disable_tqdm": "true", "report_to": "none",
        "logging_steps": "1", "system_prompt": "", "instruction": "", "train_split": "train", "eval_split": "val",
        "test_splits": "[val, test]", "aux": "none"}


def _sources(root: Path) -> list[dict]:
    """Two synthetic kinds of different image sizes (bars at 56 px, clocks at 112 px) and a text kind."""
    return [
        {"name": "chartqa", "root": str(root / "bars"), "synthesize": "bars", "synthesize_num": 12,
         "synthesize_seed": 1, "synthesize_size": 56},
        {"name": "clocks", "root": str(root / "clocks"), "synthesize": "clocks", "synthesize_num": 24,
         "synthesize_size": 112, "synthesize_options": {"splits": "train=0.5,val=0.25,test=0.25", "progress": False}},
        {"name": "arithmetic", "root": str(root / "arith"), "synthesize": "arithmetic", "synthesize_num": 24,
         "synthesize_options": {"operations": ["add", "sub"], "digits": 2, "splits": "train=0.5,val=0.25,test=0.25",
                                "progress": False}},
    ]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_base_and_fine_tune_configs_check_and_hold_out_what_they_say():
    _, base, base_loss, base_train = check_config(CONFIGS / "scratch_cpu_base.yaml")
    assert base.dataset == "mixture" and base_loss.aux == "none"
    entries = {e.get("label", e["name"]): e for e in base.mixture}
    assert all(e.get("synthesize") for e in entries.values())  # every source renders itself on first use
    roots = [e["root"] for e in entries.values()]
    assert len(set(roots)) == len(roots)  # each into its own root
    assert set(base.test_splits) == {"val", "test"}
    kinds = {e["name"] for e in entries.values()}
    assert {"chartqa", "clocks", "arithmetic"} <= kinds
    bar_axes = {(e.get("synthesize_options") or {}).get("bar_axis_max", 100)
                for e in entries.values() if e["synthesize"] == "bars"}
    clock_styles = [e["synthesize_options"]["style"] for e in entries.values() if e["name"] == "clocks"]
    digits = {e["synthesize_options"]["digits"] for e in entries.values() if e["name"] == "arithmetic"}

    fine_tunes = {}
    for setting in ("chart", "clock", "text"):
        model, data, _, train = check_config(CONFIGS / f"scratch_cpu_ft_{setting}.yaml")
        assert model.model_name_or_path == base_train["output_dir"]  # starts from the base's final model
        assert int(train["max_steps"]) <= 1000 and data.primary_metric and data.dev_seeds  # short: cheap seeds
        assert "test" in data.test_splits and "val" in data.test_splits and "test_unseen" in data.test_splits
        assert data.data_root not in roots
        # its from-scratch twin is the same file with the preset
        twin, *_ = check_config(CONFIGS / f"scratch_cpu_ft_{setting}.yaml", {"model_name_or_path": "scratch"})
        assert twin.model_name_or_path == "scratch" and twin.scratch_hidden_size == 64
        fine_tunes[setting] = data
    # what each fine-tune holds out of the base's data
    assert fine_tunes["chart"].synthesize == "bars"
    assert fine_tunes["chart"].synthesize_options["bar_axis_max"] not in bar_axes
    assert all(fine_tunes["clock"].synthesize_options["style"] != style for style in clock_styles)
    assert fine_tunes["text"].synthesize_options["digits"] not in digits


def test_mixture_entry_synthesis_keys_are_checked(tmp_path):
    sources = _sources(tmp_path)
    good = {**TINY, "dataset": "mixture", "mixture": json.dumps(sources)}
    check_config(None, good)
    bad_option = [dict(sources[0], synthesize_options={"bar_axis_mx": 50}), *sources[1:]]
    with pytest.raises(ConfigError, match=r"unknown key 'bar_axis_mx' in mixture entry 0 synthesize_options.*'bar_axis_max'"):
        check_config(None, {**good, "mixture": json.dumps(bad_option)})
    wrong_layout = [dict(sources[1], synthesize="bars"), *sources[1:]]
    with pytest.raises(ConfigError, match=r"mixture entry 0 \(clocks\): synthesize: bars writes the chartqa layout"):
        check_config(None, {**good, "mixture": json.dumps(wrong_layout)})
    with pytest.raises(ConfigError, match="mixture entry 2 .*synthesize_num must be an integer >= 1"):
        check_config(None, {**good, "mixture": json.dumps([*sources[:2], dict(sources[2], synthesize_num=0)])})


def test_base_vocabulary_refuses_a_character_it_never_saw(tmp_path):
    from vlm_smmd.data import DataError, Sample
    from vlm_smmd.families import family_for
    from vlm_smmd.modeling import build_scratch, load_processor
    from vlm_smmd.training.datasets import check_base_vocabulary

    config, processor = build_scratch(family_for("qwen2_5_vl"), ["What is 12 + 34?", "46", "What time is it?", "3:07"],
                                      sizes={"hidden_size": 32, "layers": 1, "heads": 2, "vision_hidden_size": 32,
                                             "vision_depth": 1, "vision_heads": 2})
    config.save_pretrained(tmp_path)  # as a trained scratch run saves them (the weights are not needed here)
    processor.save_pretrained(tmp_path)
    _, loaded = load_processor(str(tmp_path))
    _, data, *_ = check_config(None, {"dataset": "arithmetic", "data_root": "x", "instruction": ""})
    covered = [Sample(None, "What is 30 + 12?", "42", "arithmetic:train", "a0")]
    check_base_vocabulary(loaded.tokenizer, (covered, None), data, str(tmp_path))
    uncovered = [*covered, Sample(None, "Tom has 3 apples.", "3", "word_problems:train", "w7")]
    with pytest.raises(DataError) as caught:
        check_base_vocabulary(loaded.tokenizer, (uncovered, None), data, str(tmp_path))
    message = str(caught.value)
    assert "\n" not in message and "record 'w7' of word_problems:train" in message and "'T'" in message
    assert str(tmp_path) in message
    _, data, *_ = check_config(None, {"dataset": "arithmetic", "data_root": "x", "instruction": "Answer now."})
    with pytest.raises(ConfigError, match="^instruction: characters '.', 'A', 'n', 'o', 'r', 'w' not in the task vocabulary"):
        check_base_vocabulary(loaded.tokenizer, (covered, None), data, str(tmp_path))


@pytest.fixture(scope="module")
def base_run(tmp_path_factory):
    """A tiny base: a mixture of bars, clocks and arithmetic rendered on first use, trained 2 steps."""
    from vlm_smmd.config import load_config
    from vlm_smmd.training import run

    tmp = tmp_path_factory.mktemp("base")
    data = tmp / "data"
    configs = load_config(None, {**TINY, "dataset": "mixture", "mixture": json.dumps(_sources(data)),
                                 "output_dir": str(tmp / "base")})
    run(*configs)
    return tmp / "base", data


def test_mixture_renders_each_source_into_its_root_and_trains(base_run):
    from vlm_smmd.data import read_split
    from vlm_smmd.data.collator import VLMCollator
    from vlm_smmd.modeling import load_processor

    folder, data = base_run
    for name, source in (("chartqa", "bars"), ("clocks", "clocks"), ("arithmetic", "arith")):
        for split in ("train", "val", "test"):
            assert len(read_split(check_config(None, {"dataset": name, "data_root": str(data / source)})[1], split))
    state = json.loads((folder / "trainer_state.json").read_text())
    assert state["global_step"] == 2
    # images of both sizes and a text sample in one batch: each image keeps its own grid
    family, processor = load_processor(str(folder), min_pixels=3136, max_pixels=12544)
    bars = read_split(check_config(None, {"dataset": "chartqa", "data_root": str(data / "bars")})[1], "val")[0]
    clock = read_split(check_config(None, {"dataset": "clocks", "data_root": str(data / "clocks")})[1], "val")[0]
    text = read_split(check_config(None, {"dataset": "arithmetic", "data_root": str(data / "arith")})[1], "val")[0]
    batch = VLMCollator(processor, family=family, system_prompt="", instruction="")([bars, clock, text])
    assert sorted(batch["image_grid_thw"].tolist()) == [[1, 4, 4], [1, 8, 8]]


def test_fine_tune_starts_from_the_saved_base_and_records_its_hash(base_run, tmp_path):
    import torch
    from safetensors.torch import load_file

    from vlm_smmd.config import load_config
    from vlm_smmd.data import DataError
    from vlm_smmd.run_record import RunRecord, base_line
    from vlm_smmd.training import run

    folder, _ = base_run
    saved = load_file(folder / "model.safetensors")
    sha = _sha256(folder / "model.safetensors")
    checked = []

    def live_name(saved_name: str) -> str:  # Qwen2.5-VL checkpoints keep the released names of its parts
        if saved_name.startswith("visual."):
            return f"model.{saved_name}"
        if saved_name.startswith("model."):
            return f"model.language_model.{saved_name[len('model.'):]}"
        return saved_name

    def same_as_saved(model):  # the built model, before the Trainer wraps it (and before any step)
        state = model.state_dict()
        assert {live_name(n) for n in saved} == set(state)
        for name, tensor in saved.items():
            assert torch.equal(state[live_name(name)], tensor), name
        checked.append(len(saved))

    fine_tune = {**TINY, "model_name_or_path": str(folder), "dataset": "arithmetic",
                 "data_root": str(tmp_path / "arith3"), "synthesize": "arithmetic", "synthesize_num": "24",
                 "synthesize_options": json.dumps({"operations": ["add"], "digits": 3, "progress": False,
                                                   "splits": "train=0.5,val=0.25,test=0.25"}),
                 "output_dir": str(tmp_path / "ft")}
    run(*load_config(None, fine_tune), prepare_model=same_as_saved)
    assert checked and checked[0] > 0
    record = RunRecord.read(tmp_path / "ft" / "run_config.json")
    assert record.base["folder"] == str(folder) and record.base["sha256"] == sha
    assert record.base["files"] == {"model.safetensors": sha}
    assert base_line(record) == f"starts from {folder} (sha256 {sha[:12]})"
    assert json.loads((tmp_path / "ft" / "trainer_state.json").read_text())["global_step"] == 2

    # a fine-tune whose texts have letters the base never saw is refused before the model loads
    words = {**fine_tune, "dataset": "word_problems", "data_root": str(tmp_path / "words"),
             "synthesize": "word_problems",
             "synthesize_options": json.dumps({"progress": False, "splits": "train=0.5,val=0.25,test=0.25"}),
             "output_dir": str(tmp_path / "ft_words")}
    with pytest.raises(DataError, match=r"^record '.*' of word_problems: question characters? '.*' not in the "
                                        r"task vocabulary of the base"):
        run(*load_config(None, words))


def test_base_config_as_committed_trains_three_steps(tmp_path):
    """configs/scratch_cpu_base.yaml with each source rendered small into tmp_path (its roots and sizes
    otherwise as committed) and the preset narrower: every source renders, the mixed batch trains."""
    from vlm_smmd.config import load_config
    from vlm_smmd.training import run

    _, base, *_ = check_config(CONFIGS / "scratch_cpu_base.yaml")
    small = [{**e, "root": str(tmp_path / Path(e["root"]).name), "synthesize_num": 60 if e["name"] == "clocks" else 20}
             for e in base.mixture]
    metrics = run(*load_config(CONFIGS / "scratch_cpu_base.yaml", {
        "mixture": json.dumps(small), "output_dir": str(tmp_path / "out"), "max_steps": "3", "max_eval_samples": "8",
        "per_device_train_batch_size": "8", "save_strategy": "no", "logging_steps": "1", "disable_tqdm": "true",
        "report_to": "none"}))
    assert metrics["train_loss"] == metrics["train_loss"]  # finite
    for entry in small:
        assert Path(entry["root"]).is_dir()


@pytest.mark.parametrize("setting", ["chart", "clock", "text"])
def test_fine_tune_config_as_committed_trains_from_a_base(base_run, tmp_path, setting):
    """Each fine-tune config, from the tiny base in place of outputs/scratch_cpu_base, its data rendered small."""
    from vlm_smmd.config import load_config
    from vlm_smmd.run_record import RunRecord
    from vlm_smmd.training import run

    folder, _ = base_run
    path = CONFIGS / f"scratch_cpu_ft_{setting}.yaml"
    _, data, *_ = check_config(path)
    options = {**(data.synthesize_options or {}), "progress": False} if data.synthesize != "bars" else None
    run(*load_config(path, {
        "model_name_or_path": str(folder), "data_root": str(tmp_path / "data"), "output_dir": str(tmp_path / "out"),
        "synthesize_num": "200" if setting == "clock" else "40", "max_steps": "2", "per_device_train_batch_size": "4",
        "logging_steps": "1", "disable_tqdm": "true", "report_to": "none",
        **({"synthesize_options": json.dumps(options)} if options else {})}))
    record = RunRecord.read(tmp_path / "out" / "run_config.json")
    assert record.base["sha256"] == _sha256(folder / "model.safetensors")
