"""Shared fixtures: the real Qwen2.5 tokenizer (offline) and the tiny Qwen2.5-VL preset."""

import os
import signal

import pytest
from PIL import Image, ImageDraw

# The Ctrl-C tests send SIGINT to the commands they start. A suite started in the background of a shell
# script inherits SIGINT as ignored, and an ignored signal stays ignored across exec, so those children
# would never see it: give this process a handler, which exec turns back into the default in its children.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def qwen_tokenizer():
    from vlm_smmd.families.tokenizers import build_qwen_tokenizer

    return build_qwen_tokenizer()


@pytest.fixture(scope="session")
def tiny_processor():
    from vlm_smmd.families.qwen2_5_vl import build_processor
    from vlm_smmd.families.tokenizers import build_qwen_tokenizer

    return build_processor(build_qwen_tokenizer())


@pytest.fixture
def tiny_model_and_processor():
    """A fresh tiny model (seed 0) per test, so tests may train or freeze it freely."""
    from vlm_smmd.modeling import load_model_and_processor

    return load_model_and_processor("tiny", verbose=False)


def make_image(width=120, height=90, seed=0):
    img = Image.new("RGB", (width, height), (255, 255, 255))
    draw = ImageDraw.Draw(img)
    draw.line((seed % width, 0, width - 1, height - 1), fill=(200, 30, 30), width=3)
    draw.ellipse((10, 10, 50, 50), outline=(0, 0, 0), width=2)
    return img


def pytest_configure(config):
    """One torch thread in each xdist worker: `-n 2` workers with torch's default of a thread per core would
    run 4 spinning threads on 2 cores (the commands' thread plan is tested with its inputs given, and the
    tests that start commands give them OMP_NUM_THREADS themselves)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items):
    """The slow (end-to-end) tests first, the rest in their files' order: under `-n 2` a test of minutes that
    starts near the end keeps one worker busy while the other has nothing left (the tail was minutes)."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
