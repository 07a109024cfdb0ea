"""The dry run of every ready config (or those named), one at a time, each in a process of its own:
`vlm-smmd train CONFIG --dry-run` with one thread; per config its depth, parameters built and trainable,
step times, peak RSS of that process (os.wait4's resource usage), total time, and pass / fail / skip with the
one-line reason. A config is skipped, not run, when less than --min-free-gb is available (psutil), because a
7B-wide dry run takes 8-15 GiB on a machine others share.

    python bench/dry_run_all.py                               # every ready config
    python bench/dry_run_all.py qwen3_vl_8b_refcoco --json    # one, as one JSON object
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
READY = ["qwen2_5_vl_3b_clock_smmd", "qwen2_5_vl_7b_chartqa_smmd", "qwen2_5_vl_7b_chartqa_smmd_lora",
         "qwen2_5_vl_7b_chartqa_gsm8k_mix", "qwen2_5_vl_7b_refcoco", "qwen3_vl_8b_clock_smmd", "qwen3_vl_8b_refcoco",
         "llama3_2_11b_vision_chartqa_smmd", "qwen2_5_7b_gsm8k_smmd"]


def parse_summary(text: str) -> dict:
    """Depth, parameters and step times from the dry run's printed summary (`dry_run.summary`)."""
    out = {}
    if m := re.search(r"^dry run passed: .*\((.*)\)$", text, re.M):
        out["depth"] = m.group(1)
    if m := re.search(r"parameters built ([\d,]+), trainable ([\d,]+)", text):
        out["parameters"], out["trainable_parameters"] = (int(g.replace(",", "")) for g in m.groups())
    if m := re.search(r"steps of 1 sample: ([^;]*);", text):
        out["step_s"] = [float(s.removesuffix(" s")) for s in m.group(1).split(", ")]
    return out


def reason(returncode: int, stderr: str, stdout: str) -> str:
    """Why a run failed: the signal that killed it (9: most likely the kernel's out-of-memory killer), the
    CLI's one error line, else the last exception line of a traceback, else the last line printed."""
    if returncode < 0:
        return f"killed by signal {-returncode}" + (" (out of memory?)" if returncode == -9 else "")
    lines = [line.strip() for line in (stderr + "\n" + stdout).splitlines() if line.strip()]
    for pattern in (r"^vlm-smmd train: error:", r"^(\[rank\d+\]: )?[\w.]+(Error|Exception)\b"):
        found = [line for line in lines if re.search(pattern, line)]
        if found:
            return found[-1]
    return lines[-1] if lines else "no output"


def run_one(name: str, min_free_gb: float, timeout_s: float) -> dict:
    import psutil

    free_gb = psutil.virtual_memory().available / 2**30
    row = {"config": name, "free_gb_before": round(free_gb, 1)}
    if free_gb < min_free_gb:
        return {**row, "status": "skip", "reason": f"only {free_gb:.1f} GiB available (< {min_free_gb:g})"}
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    cli = str(Path(sys.executable).with_name("vlm-smmd"))
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        started = time.perf_counter()
        proc = subprocess.Popen([cli, "train", f"configs/{name}.yaml", "--dry-run"], cwd=REPO, env=env,
                                stdout=out, stderr=err, text=True)
        # os.wait4 gives this child's own resource usage (RUSAGE_CHILDREN is a maximum over all of them)
        while (waited := os.wait4(proc.pid, os.WNOHANG))[0] == 0:
            if time.perf_counter() - started > timeout_s:
                proc.kill()
                os.wait4(proc.pid, 0)
                return {**row, "status": "fail", "reason": f"timed out after {timeout_s:.0f} s"}
            time.sleep(0.5)
        proc.returncode = os.waitstatus_to_exitcode(waited[1])
        row["total_s"] = round(time.perf_counter() - started, 1)
        row["peak_rss_mb"] = round(waited[2].ru_maxrss / 1024)  # Linux: kilobytes
        out.seek(0), err.seek(0)
        stdout, stderr = out.read(), err.read()
    row.update(parse_summary(stdout))
    if proc.returncode == 0 and "dry run passed" in stdout:
        return {**row, "status": "pass"}
    return {**row, "status": "fail", "reason": reason(proc.returncode, stderr, stdout)}


def table(rows: list[dict]) -> str:
    head = f"{'config':34} {'status':6} {'depth':26} {'params built':>14} {'trainable':>12} {'steps (s)':>12} " \
           f"{'peak RSS MB':>11} {'total s':>7}"
    lines = [head, "-" * len(head)]
    for r in rows:
        steps = ", ".join(f"{s:.1f}" for s in r.get("step_s", []))
        lines.append(f"{r['config']:34} {r['status']:6} {r.get('depth', ''):26} {r.get('parameters', 0):>14,} "
                     f"{r.get('trainable_parameters', 0):>12,} {steps:>12} {r.get('peak_rss_mb') or '':>11} "
                     f"{r.get('total_s', ''):>7}")
        if r.get("reason"):
            lines.append(f"  {r['reason']}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("configs", nargs="*", help="config names under configs/ (default: every ready config)")
    parser.add_argument("--min-free-gb", type=float, default=16.0, help="skip a config below this much free memory")
    parser.add_argument("--timeout-s", type=float, default=1800.0, help="per config")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    args = parser.parse_args(argv)
    names = args.configs or READY
    unknown = [n for n in names if not (REPO / "configs" / f"{n}.yaml").is_file()]
    if unknown:
        parser.error(f"no configs/{unknown[0]}.yaml")
    rows = []
    for name in names:
        rows.append(run_one(name, args.min_free_gb, args.timeout_s))
        r = rows[-1]  # progress, on stderr so that --json stays one object
        print(f"{name}: {r['status']} {r.get('total_s', '')} s {r.get('reason', '')}", file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps({"runs": rows, "passed": sum(r["status"] == "pass" for r in rows),
                          "failed": sum(r["status"] == "fail" for r in rows),
                          "skipped": sum(r["status"] == "skip" for r in rows)}))
    else:
        print("\n" + table(rows))
    return 0 if all(r["status"] != "fail" for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
