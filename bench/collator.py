"""Throughput of VLMCollator alone on 448 px images, one thread (= one DataLoader worker core).

Target: >= 100 samples/s/core, so data loading never starves a GPU. Cases: PNG files on disk (decode
included) and in-memory PIL images, sized as Qwen2.5-VL's default processor sizes them (448 px stays
448 px, 256 image tokens), plus the tiny preset's limit (resized to 224 px). Clock-like drawings stand in
for real data. Prints a table; `--json` prints one JSON object instead.

    python bench/collator.py [--num 64] [--batch-size 8] [--repeats 5] [--json]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch
from PIL import Image, ImageDraw

from vlm_smmd.data import Sample
from vlm_smmd.data.collator import VLMCollator
from vlm_smmd.families.qwen2_5_vl import build_processor
from vlm_smmd.families.tokenizers import build_qwen_tokenizer

QWEN25_VL_MIN_PIXELS = 56 * 56
QWEN25_VL_MAX_PIXELS = 12845056  # the released Qwen2.5-VL preprocessor_config.json
TARGET = 100.0


def clock_like(i: int, size: int = 448) -> Image.Image:
    """A dial with ticks, two hands and a caption (some texture for PNG, no dependency on data_synth)."""
    img = Image.new("RGB", (size, size), (245 - i % 40, 240, 230 + i % 20))
    d = ImageDraw.Draw(img)
    c, r = size / 2, size * 0.42
    d.ellipse((c - r, c - r, c + r, c + r), outline=(20, 20, 20), width=6, fill=(255, 255, 250))
    for k in range(60):
        a = math.radians(k * 6)
        inner = r * (0.85 if k % 5 == 0 else 0.93)
        d.line((c + inner * math.sin(a), c - inner * math.cos(a), c + r * math.sin(a), c - r * math.cos(a)),
               fill=(0, 0, 0), width=4 if k % 5 == 0 else 1)
    for length, angle, width in ((0.5, (i % 12) * 30 + 15, 9), (0.8, (i * 7) % 60 * 6, 5)):
        a = math.radians(angle)
        d.line((c, c, c + r * length * math.sin(a), c - r * length * math.cos(a)), fill=(30, 30, 90), width=width)
    d.text((10, 10), f"clock {i}", fill=(0, 0, 0))
    return img


def make_samples(num: int, folder: Path | None) -> list[Sample]:
    samples = []
    for i in range(num):
        img = clock_like(i)
        if folder is not None:
            path = folder / f"{i:05d}.png"
            img.save(path)
            img = str(path)
        samples.append(Sample(img, "What time does the clock show?", f"{1 + i % 12}:{(i * 7) % 60:02d}",
                              "bench", str(i)))
    return samples


def time_collator(collator, samples, batch_size: int, repeats: int) -> tuple[float, float, float, dict]:
    """Samples/s over `repeats` passes: best and median wall-clock, best per CPU-second; the last batch.

    Per CPU-second (user + system time of this process) is what one free core would give; wall-clock
    also counts the time other jobs on this shared machine hold the CPU.
    """
    batches = [samples[i:i + batch_size] for i in range(0, len(samples), batch_size)]
    collator(batches[0])  # warm-up
    rates, cpu_rates = [], []
    for _ in range(repeats):
        start, cpu_start = time.perf_counter(), time.process_time()
        for b in batches:
            out = collator(b)
        rates.append(len(samples) / (time.perf_counter() - start))
        cpu_rates.append(len(samples) / (time.process_time() - cpu_start))
    return max(rates), statistics.median(rates), max(cpu_rates), out


def time_stage(fn, items, repeats: int) -> float:
    """Best CPU milliseconds per item of `fn` over `items`."""
    best = math.inf
    for _ in range(repeats):
        start = time.process_time()
        for item in items:
            fn(item)
        best = min(best, (time.process_time() - start) / len(items))
    return best * 1e3


def run_cases(cases, args, suffix: str, results: dict, rows: list) -> None:
    for key, label, coll, samples in cases:
        best, median, cpu, out = time_collator(coll, samples, args.batch_size, args.repeats)
        tokens = float(out["attention_mask"].sum(1).float().mean())
        results[f"{key}{suffix}_samples_per_s"] = round(best, 1)
        results[f"{key}{suffix}_median_samples_per_s"] = round(median, 1)
        results[f"{key}{suffix}_samples_per_cpu_s"] = round(cpu, 1)
        results[f"{key}_tokens_per_sample"] = round(tokens, 1)
        rows.append((label + (" [malloc tuned]" if suffix else ""), best, median, cpu, 1e3 / cpu, tokens))


def keep_freed_memory() -> bool:
    """Ask glibc to keep freed buffers up to 1 GiB for reuse (no mmap/munmap per batch); False if unsupported."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3
    return bool(libc.mallopt(m_mmap_threshold, 1 << 30)) and bool(libc.mallopt(m_trim_threshold, 1 << 30))


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num", type=int, default=64, help="samples per pass")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    torch.set_num_threads(1)
    tokenizer = build_qwen_tokenizer()
    processor = build_processor(tokenizer, QWEN25_VL_MIN_PIXELS, QWEN25_VL_MAX_PIXELS)
    collator = VLMCollator(processor, instruction="Answer with the time as H:MM.")
    small = VLMCollator(processor, numeric_vocab=collator.numeric_vocab, max_pixels=224 * 224,
                           instruction=collator.instruction)

    results, rows = {}, []
    with tempfile.TemporaryDirectory() as tmp:
        on_disk = make_samples(args.num, Path(tmp))
        in_memory = make_samples(args.num, None)
        cases = [("png_448", "PNG files, 448 px kept (256 image tokens)", collator, on_disk),
                 ("pil_448", "PIL images in memory, 448 px kept", collator, in_memory),
                 ("png_448_to_224", "PNG files, resized to 224 px (tiny preset)", small, on_disk)]
        run_cases(cases, args, "", results, rows)

        # Where the time goes (CPU ms per sample): PNG decode, resize + chat text, the processor call.
        load_ms = time_stage(lambda s: s.load_image(), on_disk, args.repeats)
        images = [s.load_image() for s in on_disk]
        prep_ms = time_stage(lambda s: collator._prepare(s, True), in_memory, args.repeats)
        texts = [collator._prepare(s, True)[0] for s in in_memory]
        chunks = [(texts[i:i + args.batch_size], images[i:i + args.batch_size])
                  for i in range(0, args.num, args.batch_size)]
        proc_ms = time_stage(lambda c: collator._process(*c), chunks, args.repeats) / args.batch_size

        # Most of the processor's time is page faults: glibc returns each freed multi-MB buffer to the
        # OS, so every batch faults its pixel buffers in afresh. Same cases with freed memory kept.
        tuned = keep_freed_memory()
        if tuned:
            run_cases(cases, args, "_malloc_tuned", results, rows)
    results.update(load_png_cpu_ms_per_sample=round(load_ms, 3), prepare_cpu_ms_per_sample=round(prep_ms, 3),
                   processor_cpu_ms_per_sample=round(proc_ms, 3), target_samples_per_s_per_core=TARGET,
                   threads=1, batch_size=args.batch_size, num_samples=args.num,
                   load_avg_1min=round(os.getloadavg()[0], 2), cpu_count=os.cpu_count())

    if args.json:
        print(json.dumps(results))
        return results
    print(f"VLMCollator, 1 thread, batch {args.batch_size}, {args.num} samples x {args.repeats} passes "
          f"(target >= {TARGET:.0f} samples/s/core)")
    print(f"{'case':<61} {'best/s':>8} {'median/s':>9} {'per CPU-s':>10} {'CPU ms':>7} {'tokens':>7}")
    for label, best, median, cpu, ms, tokens in rows:
        print(f"{label:<61} {best:>8.1f} {median:>9.1f} {cpu:>10.1f} {ms:>7.2f} {tokens:>7.0f}")
    print(f"CPU per sample: PNG decode {load_ms:.2f} ms, PIL image to chat text {prep_ms:.2f} ms, "
          f"processor call {proc_ms:.2f} ms (default malloc)")
    if tuned:
        print("[malloc tuned]: glibc mallopt(M_MMAP_THRESHOLD, M_TRIM_THRESHOLD = 1 GiB), as the environment "
              "MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_ would set it for DataLoader workers")
    print(f"load average {results['load_avg_1min']} on {results['cpu_count']} cores "
          "(other jobs share the CPU: 'per CPU-s' is what one free core gives)")
    return results


if __name__ == "__main__":
    main()
