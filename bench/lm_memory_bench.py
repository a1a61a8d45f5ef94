#!/usr/bin/python3
"""Peak memory of bigbatch's gpt against the token budget of its micro-batches: documents mode on
the fortunes corpus (variable lengths, padded to each micro-batch's longest), one run per
--micro-batch-tokens value, the same global batch of documents; the tensor peak (the tracking
allocator's, per update) and the resident peak, the padded fraction and tokens/s from
metrics.jsonl. The update is the same for every budget (tests pin it); only memory and speed move.

Usage: bench/lm_memory_bench.py BUILD_DIR [--budgets 1024 2048 4096 8192 16384] [--updates 8]
                                [--threads 2]
"""
import argparse
import json
import os
import subprocess
import tempfile

FORTUNES = "/usr/share/games/fortunes"
MIB = 1024 * 1024


def run(build, workdir, budget, updates, threads):
    out = os.path.join(workdir, f"tokens{budget}")
    subprocess.run([os.path.join(build, "bigbatch"), "train", "--dataset", f"text:{FORTUNES}", "--model", "gpt",
                    "--seq-len", "256", "--global-batch", "64", "--micro-batch-tokens", str(budget), "--optimizer",
                    "adamw", "--lr", "1e-3", "--schedule", "constant", "--max-updates", str(updates), "--threads",
                    str(threads), "--progress", "off", "--no-noise-scale", "--out", out],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(os.path.join(out, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f]
    updates = [r for r in records if "tokens_per_s" in r]
    steady = updates[2:] or updates
    padded = sum(r["padded_tokens"] for r in updates)
    items = sum(r["items"] for r in updates)
    return {
        "tensor_peak": max(r["peak_bytes"] for r in updates),
        "rss_peak": max(r["rss_peak_bytes"] for r in updates),
        "micro_steps": sum(r["micro_steps"] for r in updates) / len(updates),
        "padding": 1 - items / padded if padded else 0.0,
        "tokens_per_s": sum(r["items"] for r in steady) / sum(r["items"] / r["tokens_per_s"] for r in steady),
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build")
    parser.add_argument("--budgets", type=int, nargs="+", default=[1024, 2048, 4096, 8192, 16384])
    parser.add_argument("--updates", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="lm_memory_")
    print("| `--micro-batch-tokens` | micro-steps per update | padded positions | tensor peak | resident peak | "
          "tokens/s |")
    print("|---:|---:|---:|---:|---:|---:|")
    for budget in args.budgets:
        r = run(args.build, workdir, budget, args.updates, args.threads)
        print(f"| {budget} | {r['micro_steps']:.1f} | {100 * r['padding']:.1f}% | {r['tensor_peak'] / MIB:.0f} MiB | "
              f"{r['rss_peak'] / MIB:.0f} MiB | {r['tokens_per_s']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
