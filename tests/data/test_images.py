"""Images as the model gets them: the pixel limit as a DataError, high-bit-depth greyscale scaled to 8 bits."""

import io
import json
import struct
import zlib
from fractions import Fraction
from math import floor

import numpy as np
import pytest
from PIL import Image

from tests.conftest import make_image
from vlm_smmd.data import DataError, Sample, read_plotqa, set_max_image_pixels
from vlm_smmd.data.chartqa import EncodedImage, EncodedImageSample
from vlm_smmd.data.leakage import pixel_hash
from vlm_smmd.data.sample import PILLOW_MAX_IMAGE_PIXELS


@pytest.fixture(autouse=True)
def _restore_pixel_limit(monkeypatch):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", Image.MAX_IMAGE_PIXELS)  # undone after each test


def png_header(width: int, height: int) -> bytes:
    """A tiny greyscale PNG whose IHDR claims width x height (its pixel data is 16 bytes: never decoded)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(bytes(16))) + chunk(b"IEND", b"")


# ------------------------------------------------------------------------------------------ pixel limit


@pytest.mark.parametrize("width, height", [(100_000, 100_000), (16_000, 12_000)])
def test_oversized_header_is_one_line_naming_file_and_record(tmp_path, width, height):
    path = tmp_path / "scan.png"
    path.write_bytes(png_header(width, height))
    assert path.stat().st_size < 100
    with pytest.raises(DataError) as err:
        Sample(str(path), "q", "3", "chartqa", "val/human/7").load_image()
    message = str(err.value)
    assert message.startswith(f"{path}: image too large (record 'val/human/7' of chartqa): ")
    assert f"{width * height:,} pixels, more than the limit of {PILLOW_MAX_IMAGE_PIXELS:,}" in message
    assert "\n" not in message


def test_between_the_limit_and_twice_it_is_refused_too(tmp_path):
    """Pillow only warns there (DecompressionBombWarning) and decodes the image; loading refuses it."""
    path = tmp_path / "small.png"
    make_image(11, 10).save(path)  # 110 pixels
    sample = Sample(str(path), "q", "3", "clocks", "c-1")
    set_max_image_pixels(100)
    with pytest.raises(DataError, match=r"small\.png: image too large \(record 'c-1' of clocks\): 110 pixels, "
                                        r"more than the limit of 100"):
        sample.load_image()
    set_max_image_pixels(110)
    assert sample.load_image().size == (11, 10)


def test_set_max_image_pixels_semantics(tmp_path):
    assert PILLOW_MAX_IMAGE_PIXELS == 1024 * 1024 * 1024 // 4 // 3  # Pillow's documented default
    path = tmp_path / "small.png"
    make_image(11, 10).save(path)
    set_max_image_pixels(5)
    assert Image.MAX_IMAGE_PIXELS == 5
    set_max_image_pixels(0)  # no limit
    assert Image.MAX_IMAGE_PIXELS is None
    assert Sample(str(path), "q", "3", "clocks", "c-1").load_image().size == (11, 10)
    set_max_image_pixels(None)
    assert Image.MAX_IMAGE_PIXELS == PILLOW_MAX_IMAGE_PIXELS
    for bad in (-1, 1.5, True, "100"):
        with pytest.raises(ValueError, match="max_image_pixels"):
            set_max_image_pixels(bad)


def test_every_image_path_reports_the_limit(tmp_path):
    """Encoded bytes (parquet), the pixel hash of the leakage check, and PIL verify at read time."""
    data = png_header(16_000, 12_000)
    encoded = EncodedImageSample(EncodedImage(data), "q", "3", "chartqa", "test/a.parquet#4",
                                 origin="a.parquet row 4")
    with pytest.raises(DataError, match=r"^a\.parquet row 4: image too large \(record 'test/a\.parquet#4' of chartqa\)"):
        encoded.load_image()
    path = tmp_path / "big.png"
    path.write_bytes(data)
    with pytest.raises(DataError, match=r"big\.png: image too large: 192,000,000 pixels"):
        pixel_hash(path)


def test_plotqa_verify_images_raises_or_counts_the_oversized_image(tmp_path):
    png = tmp_path / "test" / "png"
    png.mkdir(parents=True)
    make_image(40, 30).save(png / "0.png")
    (png / "1.png").write_bytes(png_header(100_000, 100_000))
    pairs = [{"image_index": i, "question_string": "q", "answer": i} for i in (0, 1, 0)]
    path = tmp_path / "test" / "qa_pairs_V2.json"
    path.write_text(json.dumps({"qa_pairs": pairs}))
    with pytest.raises(DataError) as err:
        read_plotqa(tmp_path, "test", verify_images=True)
    assert f"{png / '1.png'}: image too large" in str(err.value) and f"record #1 in {path}" in str(err.value)
    with pytest.warns(UserWarning, match="skipped 1 records"):
        ds = read_plotqa(tmp_path, "test", verify_images=True, on_error="skip")
    assert len(ds) == 2 and ds.skip_log.counts == {"image too large": 1}


def test_preflight_skips_and_counts_the_oversized_image(tiny_processor, tmp_path):
    from vlm_smmd.data.collator import VLMCollator
    from vlm_smmd.data.preflight import preflight

    good, big = tmp_path / "good.png", tmp_path / "big.png"
    make_image(64, 64).save(good)
    big.write_bytes(png_header(16_000, 12_000))
    records = [Sample(str(good), "q", "3", "test", "r0"), Sample(str(big), "q", "4", "test", "r1")]
    collator = VLMCollator(tiny_processor)
    result = preflight(records, collator, name="train", on_error="skip", cache_dir=tmp_path / "c", progress=False)
    assert result.kept == [0] and result.skipped == {"image too large": 1}
    with pytest.raises(DataError, match=r"big\.png: image too large \(record 'r1' of test\)"):
        preflight(records, collator, name="train", cache_dir=tmp_path / "c2", progress=False)


# ------------------------------------------------------------------------------------- high bit depth


def _nearest(x: Fraction) -> int:
    return floor(x + Fraction(1, 2))


def _saved(tmp_path, array, fmt: str):
    path = tmp_path / f"grey.{fmt.lower()}"
    Image.fromarray(array).save(path, fmt)
    return path


def _pixels(path) -> np.ndarray:
    rgb = np.asarray(Sample(str(path), "q", "3", "chartqa", "g").load_image())
    assert (rgb[..., 0] == rgb[..., 1]).all() and (rgb[..., 0] == rgb[..., 2]).all()  # grey stays grey
    return rgb[..., 0]


SIXTEEN_BIT = [0, 1, 128, 129, 255, 256, 257, 385, 386, 32767, 32768, 32896, 65278, 65279, 65535]


@pytest.mark.parametrize("fmt, dtype, mode", [("PNG", "<u2", "I;16"), ("TIFF", "<u2", "I;16"),
                                              ("TIFF", ">u2", "I;16B")])
def test_16_bit_greyscale_scaled_by_the_full_range(tmp_path, fmt, dtype, mode):
    rng = np.random.default_rng(0)
    values = np.array(SIXTEEN_BIT + rng.integers(0, 65536, 49 - len(SIXTEEN_BIT)).tolist()).reshape(7, 7)
    path = _saved(tmp_path, values.astype(dtype), fmt)
    with Image.open(path) as img:
        assert img.mode == mode
    expected = np.array([[_nearest(Fraction(int(v) * 255, 65535)) for v in row] for row in values])
    got = _pixels(path)
    assert got.tolist() == expected.tolist()
    # by hand: v / 257 rounded to nearest (128 / 257 = 0.498, 129 / 257 = 0.502, 32768 / 257 = 127.502)
    assert got.reshape(-1)[:len(SIXTEEN_BIT)].tolist() == [0, 0, 0, 1, 1, 1, 1, 1, 2, 127, 128, 128, 254, 254, 255]
    in_memory = Sample(Image.fromarray(values.astype(dtype)), "q", "3", "chartqa", "m").load_image()
    assert np.asarray(in_memory)[..., 0].tolist() == expected.tolist()


def test_32_bit_integer_greyscale(tmp_path):
    within = np.array([[0, 257, 40000, 65535]], dtype=np.int32)  # 16-bit values held in mode I
    assert _pixels(_saved(tmp_path, within, "TIFF")).tolist() == [[0, 1, _nearest(Fraction(40000, 257)), 255]]
    wide = np.array([[-70000, -5, 0, 1_000_000, 123_456]], dtype=np.int32)  # its own range, stretched
    lo, hi = -70000, 1_000_000
    expected = [[_nearest(Fraction((int(v) - lo) * 255, hi - lo)) for v in wide[0]]]
    assert _pixels(_saved(tmp_path, wide, "TIFF")).tolist() == expected


def test_float_greyscale_stretched_and_nan_refused(tmp_path):
    rng = np.random.default_rng(1)
    values = np.concatenate([[-1.5, 3.0, 0.0, 0.25], rng.uniform(-1.5, 3.0, 21)]).astype(np.float32).reshape(5, 5)
    lo, hi = Fraction(float(values.min())), Fraction(float(values.max()))
    expected = [[_nearest((Fraction(float(v)) - lo) * 255 / (hi - lo)) for v in row] for row in values]
    path = _saved(tmp_path, values, "TIFF")
    with Image.open(path) as img:
        assert img.mode == "F"
    assert _pixels(path).tolist() == expected
    flat = np.full((2, 2), 0.4, dtype=np.float32)  # one value throughout: kept, clipped to 0..255
    assert _pixels(_saved(tmp_path, flat, "TIFF")).tolist() == [[0, 0], [0, 0]]
    assert _pixels(_saved(tmp_path, np.full((2, 2), 300.0, np.float32), "TIFF")).tolist() == [[255, 255]] * 2
    bad = values.copy()
    bad[2, 2] = np.nan
    path = _saved(tmp_path, bad, "TIFF")
    with pytest.raises(DataError, match=r"grey\.tiff: unreadable image \(record 'g' of chartqa\): .*NaN"):
        _pixels(path)


def test_8_bit_images_unchanged(tmp_path):
    rgb = make_image(20, 10, seed=3)
    rgb.save(tmp_path / "rgb.png")
    assert np.array_equal(np.asarray(Sample(str(tmp_path / "rgb.png"), "q", "1", "s", "i").load_image()),
                          np.asarray(rgb))
    grey = Image.fromarray(np.arange(200, dtype=np.uint8).reshape(10, 20))
    buf = io.BytesIO()
    grey.save(buf, "PNG")
    out = EncodedImageSample(EncodedImage(buf.getvalue()), "q", "1", "s", "i", origin="o").load_image()
    assert np.asarray(out)[..., 1].tolist() == np.asarray(grey).tolist()
