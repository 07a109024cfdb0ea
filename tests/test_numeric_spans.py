"""Numeric spans: only the coordinates of a grounding answer take the aux loss, on real Qwen2.5 and Llama-3
tokenizers; the objective's numeric_mask against independent per-position loops; misaligned spans refused."""

import pytest
import torch
import torch.nn.functional as F

from tests.conftest import make_image
from vlm_smmd.data import DataError, Sample
from vlm_smmd.data.collator import VLMCollator
from vlm_smmd.data.grounding import coordinate_spans
from vlm_smmd.losses import SMMDLoss
from vlm_smmd.losses.objective import NumericObjective
from vlm_smmd.modeling import load_processor

POINT = '{"point_2d": [34, 21], "label": "object 2"}'
BOX = '{"bbox_2d": [412, 7, 1000, 21], "label": "red 2 square"}'
# the answer tokens the numeric mask must mark, by hand: Qwen writes one digit a token, Llama-3 up to three
EXPECTED = {
    "qwen": {POINT: ["3", "4", "2", "1"], BOX: ["4", "1", "2", "7", "1", "0", "0", "0", "2", "1"]},
    "llama": {POINT: ["34", "21"], BOX: ["412", "7", "100", "0", "21"]},
}
PRESETS = {"tiny": "qwen", "tiny-qwen2.5": "qwen", "tiny-llama3": "llama", "tiny-mllama": "llama"}


@pytest.fixture(scope="module", params=list(PRESETS))
def processor(request):
    family, processor = load_processor(request.param)
    return request.param, family.vision, processor


def grounding(answer, vision, i=0, spans="auto"):
    image = make_image(84, 56, seed=i) if vision else None
    return Sample(image, "Where is it?", answer, "grounding", f"g{i}",
                  numeric_spans=coordinate_spans(answer) if spans == "auto" else spans)


def marked(collator, batch, row):
    """The decoded tokens the numeric mask marks in one row."""
    ids = batch["input_ids"][row][batch["numeric_mask"][row]]
    return [collator.tokenizer.decode([int(i)]) for i in ids]


def test_coordinate_spans_by_hand():
    assert coordinate_spans(POINT) == ((14, 16), (18, 20))
    assert [BOX[a:b] for a, b in coordinate_spans(BOX)] == ["412", "7", "1000", "21"]
    several = '[{"bbox_2d": [1, 2.5, 30, -4], "label": "x 9"}, {"point_2d":[7,8]}]'
    assert [several[a:b] for a, b in coordinate_spans(several)] == ["1", "2.5", "30", "4", "7", "8"]
    assert coordinate_spans('{"label": "object 2", "size_2d": [3, 4]}') == ()


def test_mask_marks_exactly_the_coordinate_tokens(processor):
    name, vision, proc = processor
    collator = VLMCollator(proc)
    other = Sample(make_image(56, 56, seed=9) if vision else None, "What time is it?", "10:07 or 2", "test", "t")
    batch = collator([grounding(POINT, vision), grounding(BOX, vision, 1), other])
    assert marked(collator, batch, 0) == EXPECTED[PRESETS[name]][POINT]
    assert marked(collator, batch, 1) == EXPECTED[PRESETS[name]][BOX]
    everything = collator.numeric_vocab.mask(batch["labels"])
    # the sample without spans keeps today's mask: every numeric answer token
    assert torch.equal(batch["numeric_mask"][2], everything[2])
    # the key's "2" and the label's "2" are numeric tokens: the spans are what leaves them out
    for row in (0, 1):
        extra = everything[row] & ~batch["numeric_mask"][row]
        assert [collator.tokenizer.decode([int(i)]) for i in batch["input_ids"][row][extra]] == ["2", "2"]
    # the rows joined from the row cache give the same masks
    again = collator([grounding(POINT, vision), grounding(BOX, vision, 1), other])
    assert torch.equal(again["numeric_mask"], batch["numeric_mask"])


def test_without_spans_the_mask_is_unchanged(processor):
    _, vision, proc = processor
    collator = VLMCollator(proc, cache_mb=0)
    batch = collator([grounding(POINT, vision, spans=None), grounding(BOX, vision, 1, spans=None)])
    assert torch.equal(batch["numeric_mask"], collator.numeric_vocab.mask(batch["labels"]))


def test_reader_sets_the_coordinate_spans(tmp_path):
    import json

    from data_synth.grounding import write_grounding_dataset
    from vlm_smmd.data.grounding import read_grounding

    for task in ("point", "box"):
        write_grounding_dataset(tmp_path / task, 4, 0, width=300, height=200, splits="train=1", task=task,
                                progress=False)
        samples = read_grounding(tmp_path / task, "train")
        assert len(samples) == 4
        for s in samples:
            assert [s.answer[a:b] for a, b in s.numeric_spans] == [str(v) for v in s.meta["answer_coords"]]
            assert json.loads(s.answer)[{"point": "point_2d", "box": "bbox_2d"}[task]] == s.meta["answer_coords"]


@pytest.mark.parametrize("spans, shown", [
    (((14, 16),), "'12'"),  # the end of "412": one Llama-3 token (aligned on Qwen: '[412' instead below)
    (((2, 4),), "'bb'"),     # half of the token "bbox" on both
    (((40, 99),), "not [start, end) inside the answer"),
    (((5, 5),), "not [start, end) inside the answer"),
])
def test_misaligned_span_is_a_data_error_naming_the_record(processor, spans, shown):
    name, vision, proc = processor
    if spans == ((14, 16),) and PRESETS[name] == "qwen":
        spans, shown = ((12, 16),), "'[412'"  # ' [' is one Qwen token: the span cuts it
    collator = VLMCollator(proc, cache_mb=0)
    bad = Sample(make_image(84, 56) if vision else None, "Where?", BOX, "grounding", "rec-7", numeric_spans=spans)
    with pytest.raises(DataError, match=r"record 'rec-7' of grounding") as info:
        collator([grounding(POINT, vision), bad])
    assert shown in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(DataError, match=r"record 'rec-7' of grounding"):  # preflight's measure refuses it too
        collator.measure(bad)


def test_llama_template_trims_the_answer_and_spans_still_fit():
    _, proc = load_processor("tiny-llama3")
    collator = VLMCollator(proc, cache_mb=0)
    answer = "  " + POINT + " "
    spans = tuple((a + 2, b + 2) for a, b in coordinate_spans(POINT))
    batch = collator([Sample(None, "Where?", answer, "grounding", "p", numeric_spans=spans)])
    assert marked(collator, batch, 0) == ["34", "21"]


# -- the objective --------------------------------------------------------------------------------------

V, DIGITS = 40, torch.arange(20, 30)  # a vocabulary whose ids 20..29 are the digits 0..9


def make_batch(seed=0, m=14):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(m, V, generator=g, dtype=torch.float64)
    targets = torch.tensor([5, 21, 23, 7, 29, 20, 8, 24, 24, -100, 22, 9, 26, 3])[:m]
    batch_idx = torch.tensor([0] * 7 + [1] * 7)[:m]
    pos_idx = torch.tensor(list(range(3, 10)) + list(range(2, 9)))[:m]
    return logits, targets, batch_idx, pos_idx


def objective(aux):
    return NumericObjective(DIGITS, torch.arange(10.0), aux=aux, lam=0.5, numeric_texts=[str(d) for d in range(10)])


@pytest.mark.parametrize("aux", ["smmd", "mmd", "ntl_mse", "dist2", "ntil", "number_level"])
def test_mask_of_every_numeric_position_changes_nothing(aux):
    logits, targets, b, p = make_batch()
    loss = objective(aux)
    numeric = torch.isin(targets, DIGITS)
    plain = loss(logits, targets, batch_idx=b, pos_idx=p)
    for mask in (numeric, torch.ones_like(numeric)):  # non-numeric positions never take the aux anyway
        masked = loss(logits, targets, batch_idx=b, pos_idx=p, numeric_mask=mask)
        assert set(masked) == set(plain)
        for key in plain:
            assert torch.equal(masked[key], plain[key]), key


@pytest.mark.parametrize("aux", ["smmd", "ntl_mse", "ntl_was", "dist2", "gce"])
def test_excluded_positions_take_no_aux_token_level(aux):
    logits, targets, b, p = make_batch()
    loss = objective(aux)
    numeric = torch.isin(targets, DIGITS)
    mask = numeric.clone()
    mask[[2, 7]] = False  # two numeric targets ("3" and "4") left out
    parts = loss(logits, targets, 3, 4, batch_idx=b, pos_idx=p, numeric_mask=mask)
    # independent slow loop: each kept position's aux alone
    total = sum(float(loss(logits[i:i + 1], targets[i:i + 1])["aux_sum"]) for i in range(len(targets))
                if numeric[i] and mask[i])
    assert int(parts["n_numeric"]) == int(mask.sum()) == int(numeric.sum()) - 2
    assert float(parts["aux_sum"]) == pytest.approx(total, rel=1e-12)
    assert float(parts["aux"]) == pytest.approx(total / 4, rel=1e-12)
    full = loss(logits, targets, batch_idx=b, pos_idx=p)
    assert float(full["aux_sum"]) > total + 1e-9  # the excluded positions did carry aux
    assert torch.equal(parts["ce_sum"], full["ce_sum"]) and torch.equal(parts["n_tokens"], full["n_tokens"])
    if aux == "smmd":  # and against the public SMMDLoss, one position at a time
        smmd = SMMDLoss(torch.arange(10.0)).double()
        keep = [i for i in range(len(targets)) if mask[i]]
        by_hand = sum(float(smmd(logits[i:i + 1, DIGITS], targets[i:i + 1] - 20)) for i in keep)
        assert float(parts["aux_sum"]) == pytest.approx(by_hand, rel=1e-9)
        # gradients reach only the kept positions through the aux
        lg = logits.clone().requires_grad_()
        loss(lg, targets, batch_idx=b, pos_idx=p, numeric_mask=mask)["aux"].backward()
        assert lg.grad[[2, 7]].abs().sum() == 0 and lg.grad[keep].abs().sum() > 0


@pytest.mark.parametrize("aux", ["ntil", "number_level"])
def test_excluded_number_takes_no_aux_number_level(aux):
    """Number-level losses score whole numbers: leaving out every digit of one number removes exactly that
    number's aux (the number alone, scored by itself)."""
    logits, targets, b, p = make_batch()
    loss = objective(aux)
    mask = torch.isin(targets, DIGITS)
    number = [7, 8]  # "44" in row 1 (positions 2, 3), a number of its own
    mask[number] = False
    parts = loss(logits, targets, batch_idx=b, pos_idx=p, numeric_mask=mask)
    full = loss(logits, targets, batch_idx=b, pos_idx=p)
    alone = loss(logits[number], targets[number], batch_idx=b[number], pos_idx=p[number])
    assert float(alone["aux_sum"]) > 0
    assert float(parts["aux_sum"]) == pytest.approx(float(full["aux_sum"]) - float(alone["aux_sum"]), rel=1e-9)
    assert int(parts["n_numeric"]) == int(full["n_numeric"]) - 2


def test_mask_of_the_wrong_shape_is_refused():
    logits, targets, b, p = make_batch()
    with pytest.raises(ValueError, match="numeric_mask must be"):
        objective("smmd")(logits, targets, numeric_mask=torch.ones(3, dtype=torch.bool))


# -- the trainer ----------------------------------------------------------------------------------------

def test_trainer_applies_aux_at_the_coordinates_only(tiny_model_and_processor, tmp_path):
    """compute_loss on a grounding batch equals CE over every answer token + lambda * SMMD over the
    coordinate tokens alone, computed from the full logits."""
    from vlm_smmd.config import LossArguments, VLMTrainingArguments
    from vlm_smmd.training import NumericTrainer, build_objective

    model, proc = tiny_model_and_processor
    model.eval()
    collator = VLMCollator(proc)
    args = VLMTrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none", max_steps=1,
                                per_device_train_batch_size=2, save_strategy="no", disable_tqdm=True)
    samples = [grounding(POINT, True), grounding(BOX, True, 1)]
    trainer = NumericTrainer(model=model, args=args, train_dataset=samples, data_collator=collator, processing_class=proc,
                             objective=build_objective(LossArguments(aux="smmd", aux_lambda=0.7), collator.numeric_vocab))
    batch = collator(samples)
    with torch.no_grad():
        loss = trainer.compute_loss(model, dict(batch))
        inputs = {k: v for k, v in batch.items() if k not in ("labels", "numeric_mask")}
        logits = model(**inputs).logits.double()
    shift_logits, shift_labels = logits[:, :-1], batch["labels"][:, 1:]
    keep = shift_labels != -100
    ce = F.cross_entropy(shift_logits[keep], shift_labels[keep])
    digit_ids = torch.arange(15, 25)  # "0".."9" on Qwen2.5
    coords = batch["numeric_mask"][:, 1:]
    assert int(coords.sum()) == 4 + 10  # the coordinate digits, not the two "2"s of each answer
    aux = SMMDLoss(torch.arange(10.0)).double()(shift_logits[coords][:, digit_ids], shift_labels[coords] - 15)
    assert torch.allclose(loss.double(), ce + 0.7 * aux, atol=1e-5)
    every = keep & torch.isin(shift_labels, digit_ids)
    aux_every = SMMDLoss(torch.arange(10.0)).double()(shift_logits[every][:, digit_ids], shift_labels[every] - 15)
    assert not torch.allclose(ce + 0.7 * aux, ce + 0.7 * aux_every, atol=1e-4)  # the test tells them apart


def test_a_span_marks_its_own_tokens_and_no_neighbour(processor):
    """One digit of "412" on Qwen (its own token), the whole "412" on Llama-3 (one token): nothing else."""
    name, vision, proc = processor
    collator = VLMCollator(proc, cache_mb=0)
    spans, want = (((14, 15),), ["1"]) if PRESETS[name] == "qwen" else (((13, 16),), ["412"])
    batch = collator([grounding(BOX, vision, spans=spans)])
    assert marked(collator, batch, 0) == want
