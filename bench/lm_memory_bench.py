#!/usr/bin/python3
"""Peak memory of bigbatch's gpt against the token budget of its micro-batches: documents mode on
the fortunes corpus (variable lengths, padded to each micro-batch's longest), one run per
--micro-batch-tokens value, the same global batch of documents; the tensor peak (the tracking
allocator's, per update) and the resident peak, the padded fraction and tokens/s from
metrics.jsonl. The update is the same for every budget (tests pin it); only memory and speed move.

With --epochs N it measures memory over a long run instead: documents-mode gpt for N epochs at
one budget, with the host block cache (the default) and without it (BIGBATCH_HOST_BLOCK_CACHE=0,
every block left to glibc's malloc), and prints the resident peak after each epoch and tokens/s
of both, side by side (issue 36: memory that stays flat over epochs).

Usage: bench/lm_memory_bench.py BUILD_DIR [--budgets 1024 2048 4096 8192 16384] [--updates 8]
                                [--threads 2]
       bench/lm_memory_bench.py BUILD_DIR --epochs 10 [--documents 1000] [--threads 1]
"""
import argparse
import json
import math
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


def run_epochs(build, workdir, name, epochs, documents, threads, cache):
    out = os.path.join(workdir, name)
    env = dict(os.environ, BIGBATCH_HOST_BLOCK_CACHE="1" if cache else "0")
    subprocess.run([os.path.join(build, "bigbatch"), "train", "--dataset", f"text:{FORTUNES}", "--model", "gpt",
                    "--seq-len", "256", "--global-batch", "64", "--micro-batch-tokens", "4096", "--optimizer",
                    "adamw", "--lr", "1e-3", "--train-subset", str(documents), "--val-size", "100", "--sequences",
                    "documents", "--epochs", str(epochs), "--threads", str(threads), "--progress", "off",
                    "--no-noise-scale", "--out", out],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    with open(os.path.join(out, "metrics.jsonl")) as f:
        updates = [r for r in map(json.loads, f) if "loss" in r and "event" not in r]
    resident = {}
    for r in updates:
        epoch = math.ceil(r["epoch"] - 1e-9)  # the epoch an update belongs to, from 1
        resident[epoch] = max(resident.get(epoch, 0), r["rss_peak_bytes"])
    seconds = sum(r["items"] / r["tokens_per_s"] for r in updates)
    return {"resident": [resident[e] for e in sorted(resident)],
            "tensor_peak": max(r["peak_bytes"] for r in updates),
            "tokens_per_s": sum(r["items"] for r in updates) / seconds}


def epochs_table(args, workdir):
    # One run each, cache first; the machine is noisy, so the throughput is a ratio of one sitting.
    cached = run_epochs(args.build, workdir, "cache", args.epochs, args.documents, args.threads, True)
    malloc = run_epochs(args.build, workdir, "malloc", args.epochs, args.documents, args.threads, False)
    print(f"{args.documents} documents, {args.epochs} epochs, --threads {args.threads}; tensor peak "
          f"{cached['tensor_peak'] / MIB:.0f} MiB (cache) / {malloc['tensor_peak'] / MIB:.0f} MiB (malloc)\n")
    print("| epoch | resident peak, host block cache | resident peak, malloc only |")
    print("|---:|---:|---:|")
    for epoch, (a, b) in enumerate(zip(cached["resident"], malloc["resident"]), start=1):
        print(f"| {epoch} | {a / MIB:.0f} MiB | {b / MIB:.0f} MiB |")
    for name, r in (("host block cache", cached), ("malloc only", malloc)):
        after2 = r["resident"][1:]
        print(f"\n{name}: from epoch 2 to {len(r['resident'])} {after2[0] / MIB:.0f} -> {after2[-1] / MIB:.0f} MiB "
              f"({100 * (max(after2) / after2[0] - 1):+.1f}% at most), {r['tokens_per_s']:.0f} tokens/s", end="")
    print(f"\nthroughput ratio cache/malloc: {cached['tokens_per_s'] / malloc['tokens_per_s']:.2f}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build")
    parser.add_argument("--budgets", type=int, nargs="+", default=[1024, 2048, 4096, 8192, 16384])
    parser.add_argument("--updates", type=int, default=8)
    parser.add_argument("--threads", type=int, default=None, help="2, or 1 with --epochs")
    parser.add_argument("--epochs", type=int, default=0, help="memory over this many epochs instead")
    parser.add_argument("--documents", type=int, default=1000, help="training documents with --epochs")
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="lm_memory_")
    if args.epochs:
        args.threads = args.threads or 1
        epochs_table(args, workdir)
        return
    args.threads = args.threads or 2
    print("| `--micro-batch-tokens` | micro-steps per update | padded positions | tensor peak | resident peak | "
          "tokens/s |")
    print("|---:|---:|---:|---:|---:|---:|")
    for budget in args.budgets:
        r = run(args.build, workdir, budget, args.updates, args.threads)
        print(f"| {budget} | {r['micro_steps']:.1f} | {100 * r['padding']:.1f}% | {r['tensor_peak'] / MIB:.0f} MiB | "
              f"{r['rss_peak'] / MIB:.0f} MiB | {r['tokens_per_s']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
