"""Synthesis throughput: clocks at 448 px (random styles) and "bars_axis" charts at 56-112 px, images per
second per core, PNG encoding included.

    python bench/clocks.py [--num 400] [--size 448] [--workers 1,2] [--bars-num 3000] [--json]

Clocks, four measurements:
  in-process   render_clock + encode_png in this process (no files): per-image cost split into render and
               encode, and Pillow's PNG encoder for comparison;
  plain 64 px  the research setting's style (plain, coloured hands) at 64 px, with and without the
               per-image variation (vary_style) the writer applies by default;
  warm pool    K worker processes, caches warmed, rendering + encoding + writing files exactly as the
               writer does: steady-state img/s, per core, and the scaling efficiency against one worker;
  writer       write_clock_dataset end to end (process start-up, warm-up, metadata, rename included).
"img/s/core (cpu)" divides by the CPU seconds the workers used instead of wall time; on a shared machine
it is the figure less depressed by other jobs (wall figures fall when other processes compete).
Bars (target >= 200 img/s/core): make_bar_chart + render_bar_chart + encode_png in this process at 56, 64
and 112 px (default options and 1-3 labelled bars), and write_chart_dataset end to end (ChartQA layout,
56 px, one process: files, record files and tables included). `--bars-num 0` skips them.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from data_synth import writer  # noqa: E402
from data_synth.clocks import render_clock  # noqa: E402

_PLAN = None


def _init(cfg: dict, scratch: str) -> None:
    """Worker start: build the plan and warm the caches (fonts, textures) on a few images."""
    global _PLAN
    _PLAN = writer._Plan(cfg)
    for i in range(cfg["num"] - 8, cfg["num"]):
        writer._render_item(_PLAN, i, Path(scratch))


def _task(args: tuple[str, list[int]]) -> float:
    """Render, encode and write the given images; return the CPU seconds used."""
    root, indices = args
    c0 = time.process_time()
    for i in indices:
        writer._render_item(_PLAN, i, Path(root))
    return time.process_time() - c0


def in_process(num: int, size: int) -> dict:
    from PIL import Image  # noqa: F401  (Pillow's encoder below)

    for i in range(20):  # warm caches
        writer.encode_png(render_clock(i % 24, i % 60, size=size, seed=10_000 + i))
    t_render = t_png = t_pil = 0.0
    nbytes = 0
    c0, w0 = time.process_time(), time.perf_counter()
    for i in range(num):
        a = time.perf_counter()
        img = render_clock(i % 24, (7 * i) % 60, size=size, seed=i)
        b = time.perf_counter()
        data = writer.encode_png(img)
        c = time.perf_counter()
        t_render, t_png, nbytes = t_render + b - a, t_png + c - b, nbytes + len(data)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    for i in range(min(num, 100)):  # Pillow's encoder on the same kind of images, for comparison
        img = render_clock(i % 24, (7 * i) % 60, size=size, seed=i)
        a = time.perf_counter()
        img.save(io.BytesIO(), "PNG")
        t_pil += time.perf_counter() - a
    return {"render_ms": 1000 * t_render / num, "png_encode_ms": 1000 * t_png / num,
            "pillow_png_encode_ms": 1000 * t_pil / min(num, 100), "png_kb": nbytes / num / 1024,
            "inproc_img_per_s": num / wall, "inproc_cpu_img_per_s": num / cpu}


def plain_small(num: int) -> dict:
    """img/s of the research clock style at 64 px (render + encode), fixed and varied per image."""
    from data_synth.clocks import plain_style, vary_style

    style = plain_style(numerals="none", hour_hand_color=(220, 0, 0), hour_hand_width=0.12,
                        minute_hand_color=(0, 0, 220), minute_hand_width=0.07)
    res = {}
    for name, vary in (("plain64", False), ("plain64_varied", True)):
        for i in range(20):  # warm caches
            writer.encode_png(render_clock(i % 24, i % 60, size=64, style=style, seed=i))
        c0, w0 = time.process_time(), time.perf_counter()
        for i in range(num):
            drawn = vary_style(style, i) if vary else style
            writer.encode_png(render_clock(i % 24, (7 * i) % 60, size=64, style=drawn, seed=i))
        res[f"{name}_img_per_s"] = num / (time.perf_counter() - w0)
        res[f"{name}_cpu_img_per_s"] = num / (time.process_time() - c0)
    return res


def warm_pool(num: int, size: int, workers: int) -> dict:
    import multiprocessing as mp

    cfg = writer._config(num + 8, 0, size, "train=1", "h:mm", with_seconds=False, style=None, plain=False,
                         variation=True, unseen_fraction=0.0, unseen_seed=0, unseen_num=None, times=None,
                         questions=None, system_font_pool=False)
    with tempfile.TemporaryDirectory() as tmp:
        tasks = [(tmp, list(range(k, min(k + 16, num)))) for k in range(0, num, 16)]
        with mp.get_context("spawn").Pool(workers, _init, (cfg, tmp)) as pool:
            pool.map(_task, [(tmp, [num + j]) for j in range(workers)])  # all workers up and warm
            w0 = time.perf_counter()
            cpu = sum(pool.map(_task, tasks, chunksize=1))
            wall = time.perf_counter() - w0
    return {"img_per_s": num / wall, "img_per_s_per_core": num / wall / workers, "cpu_img_per_s_per_core": num / cpu}


def end_to_end(num: int, size: int, workers: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        w0 = time.perf_counter()
        writer.write_clock_dataset(Path(tmp) / "ds", num, seed=1, size=size, workers=workers, progress=False)
        return num / (time.perf_counter() - w0)


def bars_throughput(num: int) -> dict:
    """img/s of the bars_axis kind: in-process per size and option set, and the dataset writer."""
    import random

    from data_synth import bars
    from data_synth.charts import write_chart_dataset

    res = {}
    for size in (56, 64, 112):
        for name, options in (("1bar", {}), ("3bars", {"bars": (1, 3)})):
            rng = random.Random(0)
            c0, w0 = time.process_time(), time.perf_counter()
            for _ in range(num):
                writer.encode_png(bars.render_bar_chart(bars.make_bar_chart(rng, **options), (size, size)))
            res[f"bars_{size}px_{name}_img_per_s"] = num / (time.perf_counter() - w0)
            res[f"bars_{size}px_{name}_cpu_img_per_s"] = num / (time.process_time() - c0)
    with tempfile.TemporaryDirectory() as tmp:
        w0 = time.perf_counter()
        write_chart_dataset(Path(tmp) / "bars", "chartqa", num, seed=0, size=(56, 56), kinds=("bars_axis",))
        res["bars_writer_56px_img_per_s"] = num / (time.perf_counter() - w0)
    return res


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--num", type=int, default=400, help="images per measurement (default 400)")
    p.add_argument("--size", type=int, default=448)
    p.add_argument("--workers", default="1,2", help="worker counts, comma-separated (default 1,2)")
    p.add_argument("--bars-num", type=int, default=3000, help="bar charts per measurement (default 3000; 0 skips)")
    p.add_argument("--json", action="store_true", help="print one JSON object of the figures")
    args = p.parse_args(argv)
    counts = [int(w) for w in args.workers.split(",")]

    res = {"size_px": args.size, "num_images": args.num, "cpu_count": os.cpu_count(),
           "load_avg_1min": os.getloadavg()[0]}
    res.update(in_process(args.num, args.size))
    res.update(plain_small(4 * args.num))
    for k in counts:
        for key, value in warm_pool(args.num, args.size, k).items():
            res[f"pool_w{k}_{key}"] = value
        res[f"writer_w{k}_img_per_s"] = end_to_end(args.num, args.size, k)
    base = res.get("pool_w1_img_per_s")
    for k in counts:
        if base and k > 1:
            res[f"pool_w{k}_scaling_efficiency"] = res[f"pool_w{k}_img_per_s"] / (k * base)
    if args.bars_num > 0:
        res["bars_num_images"] = args.bars_num
        res.update(bars_throughput(args.bars_num))
    res["load_avg_1min_after"] = os.getloadavg()[0]

    if args.json:
        print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in res.items()}))
        return 0
    print(f"clock synthesis at {args.size} px, default random styles, {args.num} images per row "
          f"({res['cpu_count']} CPUs, load average {res['load_avg_1min']:.1f} -> {res['load_avg_1min_after']:.1f})")
    print(f"  in-process: render {res['render_ms']:.2f} ms + PNG {res['png_encode_ms']:.2f} ms "
          f"(Pillow's encoder: {res['pillow_png_encode_ms']:.2f} ms), {res['png_kb']:.0f} KB/image")
    print(f"  in-process: {res['inproc_img_per_s']:.0f} img/s wall, {res['inproc_cpu_img_per_s']:.0f} img/s per CPU second")
    print(f"  plain style at 64 px ({4 * args.num} images): {res['plain64_img_per_s']:.0f} img/s fixed "
          f"({res['plain64_cpu_img_per_s']:.0f} per CPU s), {res['plain64_varied_img_per_s']:.0f} img/s varied per "
          f"image ({res['plain64_varied_cpu_img_per_s']:.0f} per CPU s)")
    print()
    print(f"  {'workers':>7} | {'img/s':>7} | {'img/s/core':>10} | {'img/s/core (cpu)':>16} | {'scaling':>7} | "
          f"{'writer end-to-end img/s':>23}")
    print(f"  {'-' * 7}-+-{'-' * 7}-+-{'-' * 10}-+-{'-' * 16}-+-{'-' * 7}-+-{'-' * 23}")
    for k in counts:
        eff = res.get(f"pool_w{k}_scaling_efficiency")
        print(f"  {k:>7} | {res[f'pool_w{k}_img_per_s']:>7.0f} | {res[f'pool_w{k}_img_per_s_per_core']:>10.0f} | "
              f"{res[f'pool_w{k}_cpu_img_per_s_per_core']:>16.0f} | {'' if eff is None else f'{eff:.0%}':>7} | "
              f"{res[f'writer_w{k}_img_per_s']:>23.0f}")
    if args.bars_num > 0:
        print(f"\n  bars_axis charts, one process, {args.bars_num} images per row (target >= 200 img/s/core):")
        print(f"  {'size':>6} | {'bars':>5} | {'img/s':>7} | {'img/s (cpu)':>11}")
        print(f"  {'-' * 6}-+-{'-' * 5}-+-{'-' * 7}-+-{'-' * 11}")
        for size in (56, 64, 112):
            for name in ("1bar", "3bars"):
                print(f"  {size:>4}px | {'1-3' if name == '3bars' else '1':>5} | "
                      f"{res[f'bars_{size}px_{name}_img_per_s']:>7.0f} | {res[f'bars_{size}px_{name}_cpu_img_per_s']:>11.0f}")
        print(f"  write_chart_dataset end to end (ChartQA layout, 56 px): {res['bars_writer_56px_img_per_s']:.0f} img/s")
    if res["load_avg_1min"] > 0.5 * (res["cpu_count"] or 1):
        print("\n  note: other processes were running; wall-clock figures are depressed by contention.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
