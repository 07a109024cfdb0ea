"""Reader of RefCOCO-style referring expressions (RefCOCO, RefCOCO+, RefCOCOg): COCO images, a box per
referred object, and phrases naming it, as box-grounding samples scored like the `grounding` task.

Layout under `root` (one dataset, as github.com/lichengunc/refer lays out data/refcoco, data/refcoco+ and
data/refcocog, with the refs in JSON):
    instances.json      COCO format: "images" [{id, file_name, width, height}], "annotations" [{id, image_id,
                        bbox: [x, y, w, h] in pixels, category_id}], "categories" [{id, name}] (optional)
    refs*.json          a JSON list of refs {ref_id, ann_id, image_id, split, sentences: [{sent, ...}], ...},
                        the fields of refer's refs(unc).p / refs(umd).p / refs(google).p; with several
                        refs*.json in root, `refs=` names one
    images/             the COCO images named by instances.json's file_name (train2014 for all three);
                        `image_dir=` names another folder (absolute, or relative to root)
Splits are the refs' `split` values (refcoco, refcoco+: train, val, testA, testB; refcocog umd: train, val,
test). refer's pickles are refused unless `allow_pickle=True`: unpickling runs whatever code the file
holds, so only load pickles you trust, or convert once where you trust it:
    python -c "import json, pickle; json.dump(pickle.load(open('refs(unc).p', 'rb')), open('refs(unc).json', 'w'))"

Samples: one per (ref, sentence) by default (`sentences="all"`, as RefCOCO is evaluated), or one per ref
with its first sentence (`sentences="first"`). image = the image path (opened lazily), question = `question`
with "{expression}" replaced by the sentence (default Qwen2.5-VL's grounding prompt), answer =
'{"bbox_2d": [x1, y1, x2, y2], "label": "<sentence>"}', source "refcoco", id "<ref_id>_<sentence index>".
meta as `read_grounding` writes it (task "box", coords, label, answer_coords, target {box, point} in
original pixels, width, height, target_box, target_point in the answer's coordinates; for absolute also
resized_width / resized_height, factor, min_pixels, max_pixels) plus ref_id, ann_id, image_id, sent_id,
category, dataset (the root folder's name unless `dataset=`) and split.

Coordinates (`coords`): the COCO box [x, y, w, h] is [x, y, x + w, y + h] in original pixels, then
    absolute   pixels of the image as Qwen2-VL / Qwen2.5-VL see it: scaled by resized / original, the size
               `data_synth.grounding_format.smart_resize(height, width, factor, min_pixels, max_pixels)` gives,
               as the collator resizes. The run's min_pixels / max_pixels do not reach the reader: pass the
               same values here (reader_options). Defaults: factor 28 and qwen-vl-utils' 3136 / 12845056,
               the stock Qwen2.5-VL processor's (what `vlm-smmd eval` reads with).
    norm1000   0..1000 across the image (Qwen3-VL): x * 1000 / width, y * 1000 / height.
Box corners round outward and points half up, as `data-synth grounding` writes them. Image sizes are those
of instances.json, checked against each image's header (`check_sizes=False` skips the check). A box that
overshoots the image by at most one pixel (float noise in COCO) is clipped to it.

Errors: a missing or unparseable instances.json or refs file, a missing image folder, or a split no ref
has, raises DataError. A bad ref raises DataError naming the refs file and the ref (its index and ref_id):
a missing field, an ann_id or image_id absent from instances.json, a degenerate box (w <= 0 or h <= 0) or
one outside the image, an image path leaving the image folder, a missing image, or a size that disagrees.
With on_error="skip" each such ref (or blank sentence) is skipped, counted once and reported.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from PIL import Image

from data_synth.grounding_format import (
    COORDS,
    box_coords,
    coord_scale,
    format_answer,
    point_coords,
    smart_resize,
)

from .grounding import coordinate_spans
from .records import SampleList
from .sample import DataError, Sample, SkipLog, check_on_error, image_problem, is_blank, resolve_in_root

SOURCE = "refcoco"
QUESTION = "Locate the {expression} in the image and output its bbox coordinates in JSON format."
SENTENCES = ("all", "first")
FACTOR, MIN_PIXELS, MAX_PIXELS = 28, 4 * 28 * 28, 16384 * 28 * 28  # qwen-vl-utils' defaults


def read_refcoco(root, split: str, on_error: str = "raise", *, coords: str = "absolute", factor: int = FACTOR,
                 min_pixels: int = MIN_PIXELS, max_pixels: int = MAX_PIXELS, sentences: str = "all",
                 question: str = QUESTION, refs: str | None = None, instances: str = "instances.json",
                 image_dir: str = "images", dataset: str | None = None, check_sizes: bool = True,
                 allow_pickle: bool = False) -> SampleList:
    """Samples of the refs of `split` under `root`, in refs-file order (module docstring)."""
    check_on_error(on_error)
    if coords not in COORDS:
        raise ValueError(f"coords must be one of {', '.join(COORDS)}, got {coords!r}")
    if sentences not in SENTENCES:
        raise ValueError(f"sentences must be one of {', '.join(SENTENCES)}, got {sentences!r}")
    if "{expression}" not in question:
        raise ValueError(f"question must hold '{{expression}}', got {question!r}")
    if coords == "absolute":
        smart_resize(factor, factor, factor, min_pixels, max_pixels)  # ValueError for bad options
    root = Path(root)
    images, annotations, categories = _instances(_under(root, instances))
    refs_path = _refs_path(root, refs, allow_pickle)
    all_refs = _load_refs(refs_path)
    found = sorted({str(r.get("split")) for r in all_refs if isinstance(r, dict)})
    if split not in found:
        raise DataError(f"{refs_path}: no refs of split {split!r} (splits found: {', '.join(found) or 'none'})")
    image_root = _under(root, image_dir)
    if not image_root.is_dir():
        raise DataError(f"{image_root}: no such image folder (the COCO images; reader option image_dir names "
                        "another)")
    reader = _Reader(coords=coords, resize=(factor, min_pixels, max_pixels), question=question,
                     image_root=image_root, images=images, annotations=annotations,
                     categories=categories, dataset=dataset or root.resolve().name, split=split,
                     check_sizes=check_sizes)
    skipped = SkipLog(SOURCE)
    samples = []
    for index, ref in enumerate(all_refs):
        if not isinstance(ref, dict) or ref.get("split") != split:
            continue
        where = f"{refs_path}: ref {index} (ref_id {ref.get('ref_id')!r})"
        try:
            base, sents = reader.ref(ref, where)
        except DataError as e:
            if on_error == "raise":
                raise
            skipped.add(e)
            continue
        for k, sent in enumerate(sents[:1] if sentences == "first" else sents):
            try:
                samples.append(reader.sample(base, k, sent, where))
            except DataError as e:
                if on_error == "raise":
                    raise
                skipped.add(e)
    skipped.report()
    return SampleList(samples, skipped)


def _under(root: Path, name: str) -> Path:
    path = Path(name)
    return path if path.is_absolute() else root / path


def _load_json(path: Path):
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    try:
        with open(path, "rb") as f:
            return json.load(f)
    except (ValueError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: not valid JSON ({e})") from None


def _instances(path: Path) -> tuple[dict, dict, dict]:
    """({image id: image}, {ann id: annotation}, {category id: name}) of a COCO instances file."""
    data = _load_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("images"), list) \
            or not isinstance(data.get("annotations"), list):
        raise DataError(f"{path}: not COCO instances (a mapping with 'images' and 'annotations' lists)")
    by_id = {}
    for key in ("images", "annotations"):
        by_id[key] = {item["id"]: item for item in data[key] if isinstance(item, dict) and _ident(item.get("id"))}
    categories = {c["id"]: c.get("name") for c in data.get("categories") or []
                  if isinstance(c, dict) and _ident(c.get("id"))}
    return by_id["images"], by_id["annotations"], categories


def _refs_path(root: Path, refs: str | None, allow_pickle: bool) -> Path:
    if refs is not None:
        path = _under(root, refs)
    else:
        found = sorted(root.glob("refs*.json"))
        if len(found) > 1:
            raise DataError(f"{root}: several refs files ({', '.join(p.name for p in found)}); name one with refs=")
        pickles = sorted(root.glob("refs*.p"))
        if not found and not pickles:
            raise DataError(f"{root}: no refs*.json (referring expressions) found")
        if not found and (not allow_pickle or len(pickles) > 1):
            name = pickles[0].name
            raise DataError(f"{root / name}: a pickle; convert it to JSON once (python -c \"import json, pickle; "
                            f"json.dump(pickle.load(open('{name}', 'rb')), open('{Path(name).stem}.json', 'w'))\") "
                            "or, for a file you trust, pass allow_pickle=True (unpickling runs code from the file)")
        path = found[0] if found else pickles[0]
    if path.suffix == ".p" and not allow_pickle:
        raise DataError(f"{path}: a pickle; convert it to JSON or pass allow_pickle=True for a file you trust")
    return path


def _load_refs(path: Path) -> list:
    if path.suffix == ".p":
        import pickle

        if not path.is_file():
            raise DataError(f"{path}: no such file")
        with open(path, "rb") as f:
            refs = pickle.load(f)  # noqa: S301 - opt-in (allow_pickle), documented as running the file's code
    else:
        refs = _load_json(path)
    if not isinstance(refs, list):
        raise DataError(f"{path}: expected a list of refs")
    return refs


def _ident(value) -> bool:
    return isinstance(value, (int, str)) and not isinstance(value, bool)


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _positive_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


class _Reader:
    """Turns refs into Samples; an image that passes its checks is checked once."""

    def __init__(self, *, coords, resize, question, image_root, images, annotations, categories, dataset, split,
                 check_sizes):
        self.coords, self.resize, self.question = coords, resize, question
        self.image_root, self.images, self.annotations, self.categories = image_root, images, annotations, categories
        self.dataset, self.split, self.check_sizes = dataset, split, check_sizes
        self.checked: dict = {}  # image id -> path, for images that passed

    def _image(self, image_id, where: str) -> Path:
        """The checked path of an image; a failed check is made again for each ref, so its error names the ref."""
        if image_id not in self.checked:
            self.checked[image_id] = self._check_image(image_id, where)
        return self.checked[image_id]

    def _check_image(self, image_id, where: str) -> Path:
        image = self.images[image_id]
        name = image.get("file_name")
        if not isinstance(name, str) or is_blank(name):
            raise DataError(f"{where}: malformed record (image {image_id} has no file_name in instances.json)")
        if not (_positive_int(image.get("width")) and _positive_int(image.get("height"))):
            raise DataError(f"{where}: malformed record (image {image_id} has no positive integer width and "
                            "height in instances.json)")
        path = resolve_in_root(self.image_root, name, record=where, source=SOURCE)
        if not path.is_file():
            raise DataError(f"{path}: image missing (record {where!r} of {SOURCE})")
        if self.check_sizes:
            try:
                with Image.open(path) as img:
                    size = img.size
            except Exception as e:  # Pillow raises many types for bad files
                raise DataError(f"{path}: {image_problem(e)} (record {where!r} of {SOURCE})") from None
            if size != (image["width"], image["height"]):
                raise DataError(f"{where}: malformed record (image {path} is {size[0]}x{size[1]}, instances.json "
                                f"says {image['width']}x{image['height']})")
        return path

    def ref(self, ref: dict, where: str) -> tuple[dict, list[str | None]]:
        """(the sample fields shared by the ref's sentences, the sentences' texts as given)."""
        def bad(what: str):
            return DataError(f"{where}: malformed record ({what})")

        for key in ("ref_id", "ann_id", "image_id"):
            if not _ident(ref.get(key)):
                raise bad(f"{key!r} missing or not an integer or string")
        ann = self.annotations.get(ref["ann_id"])
        if ann is None:
            raise bad(f"annotation {ref['ann_id']!r} is not in instances.json")
        image_id = ref["image_id"]
        if ann.get("image_id") != image_id:
            raise bad(f"annotation {ref['ann_id']!r} belongs to image {ann.get('image_id')!r}, the ref to {image_id!r}")
        if image_id not in self.images:
            raise bad(f"image {image_id!r} is not in instances.json")
        sents = ref.get("sentences")
        if not isinstance(sents, list) or not sents:
            raise bad("'sentences' missing or empty")
        bbox = ann.get("bbox")
        if not (isinstance(bbox, list) and len(bbox) == 4 and all(_number(v) for v in bbox)):
            raise bad(f"annotation {ref['ann_id']!r}: bbox must be [x, y, w, h], got {bbox!r}")
        x, y, w, h = bbox
        if w <= 0 or h <= 0:
            raise bad(f"annotation {ref['ann_id']!r}: degenerate box {bbox} (w <= 0 or h <= 0)")
        path = self._image(image_id, where)
        width, height = self.images[image_id]["width"], self.images[image_id]["height"]
        box = [max(x, 0), max(y, 0), min(x + w, width), min(y + h, height)]  # overshoot up to 1 px clipped
        if x < -1 or y < -1 or x + w > width + 1 or y + h > height + 1 or box[2] <= box[0] or box[3] <= box[1]:
            raise bad(f"annotation {ref['ann_id']!r}: box {bbox} lies outside the {width}x{height} image")
        point = [(box[0] + box[2]) / 2, (box[1] + box[3]) / 2]
        meta = {"task": "box", "coords": self.coords, "width": width, "height": height}
        resized = None
        if self.coords == "absolute":
            factor, min_pixels, max_pixels = self.resize
            try:
                rh, rw = smart_resize(height, width, factor, min_pixels, max_pixels)
            except ValueError as e:
                raise bad(f"image {image_id!r}: unusable image size {width}x{height}: {e}") from None
            resized = (rw, rh)
            meta.update(resized_width=rw, resized_height=rh, factor=factor, min_pixels=min_pixels,
                        max_pixels=max_pixels)
        scale = coord_scale(width, height, self.coords, resized)
        target_box = box_coords(box, scale)
        category = self.categories.get(ann["category_id"]) if _ident(ann.get("category_id")) else None
        meta.update(target={"box": box, "point": point, "category": category},
                    target_box=target_box, target_point=point_coords(point, scale), answer_coords=target_box,
                    ref_id=ref["ref_id"], ann_id=ref["ann_id"], image_id=image_id,
                    category=category, dataset=self.dataset, split=self.split)
        texts = [s.get("sent") if isinstance(s, dict) else None for s in sents]
        ids = [s.get("sent_id") if isinstance(s, dict) else None for s in sents]
        return {"image": str(path), "meta": meta, "sent_ids": ids}, texts

    def sample(self, base: dict, k: int, sent, where: str) -> Sample:
        if not isinstance(sent, str) or is_blank(sent):
            raise DataError(f"{where}: malformed record (sentence {k}: 'sent' missing or blank)")
        sent = " ".join(sent.split())
        meta = {**base["meta"], "label": sent, "sent_id": base["sent_ids"][k], "sentence": k}
        answer = format_answer("box", meta["target_box"], sent)
        # the aux loss sees the box's numbers only, not digits of the expression ("guy 2nd from left")
        return Sample(image=base["image"], question=self.question.replace("{expression}", sent), answer=answer,
                      source=SOURCE, id=f"{meta['ref_id']}_{k}", meta=meta, numeric_spans=coordinate_spans(answer))
