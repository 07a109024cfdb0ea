"""Issue 45 item 9 (and 5's duplicates): two renders of one data_root, bounded meta fields in predictions,
duplicated records counted, one digit rule at train time."""

from __future__ import annotations

import threading


def test_second_render_of_one_data_root_waits_then_reuses(tmp_path, capsys, monkeypatch):
    """Two trains rendering one new data_root at once: the second waits for the first (a lock beside the
    root, "waiting for pid N"), then reuses what it rendered; nothing is rendered twice or resumed."""
    from vlm_smmd.config import DataArguments
    from vlm_smmd.training import datasets

    real = datasets.synth_writer
    renders, inside, release = [], threading.Event(), threading.Event()

    def gated(kind):
        def write(*args, **kwargs):
            renders.append(kwargs.get("resume"))
            inside.set()
            assert release.wait(30)  # the first render stays in progress until the second is waiting
            return real(kind)(*args, **kwargs)
        return write

    monkeypatch.setattr(datasets, "synth_writer", gated)
    root = tmp_path / "clocks"
    args = DataArguments(data_root=str(root), synthesize="clocks", synthesize_num=10, synthesize_size=64)
    errors = []

    def train():
        try:
            datasets.synthesize_if_missing(args)
        except Exception as e:  # noqa: BLE001 (reported by the assertion below)
            errors.append(e)

    first = threading.Thread(target=train)
    first.start()
    assert inside.wait(30)
    second = threading.Thread(target=train)
    second.start()
    seen = ""
    for _ in range(300):  # until the second says it waits (it must, before the first is released)
        seen += capsys.readouterr().out
        if "waiting for pid" in seen:
            break
        second.join(0.1)
    release.set()
    first.join(60)
    second.join(60)
    seen += capsys.readouterr().out
    assert not errors, errors
    assert renders == [False]  # rendered once, never resumed by the second
    assert seen.count(f"which is rendering {root}") == 1
    assert "reusing the synthetic data" in seen
    assert len(list((root / "train").rglob("*.png"))) == 9
    assert not (tmp_path / "clocks.lock").exists()  # removed by its holder on exit
