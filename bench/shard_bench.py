#!/usr/bin/python3
"""--shard-optimizer (issue 58): what it saves and what it costs. The gpt on fortunes with AdamW
(8 bytes of state per parameter) at 2 and 4 ranks, sharded and not, alternated in rounds:
rank 0's tensor peak (`peak_bytes`, the CPU allocator's high-water mark) and resident peak,
the median seconds per update past the first three (and past the preconditioner's settling,
from update 11, when the noise scale streams it from the owners), and whether the weights are
the same bytes. Prints the machine, every raw figure and a markdown table.

Usage: bench/shard_bench.py BIGBATCH_BINARY [--rounds 2] [--updates 16]
"""
import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import tempfile

CORPUS = "/usr/share/games/fortunes"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(binary, out, ranks, sharded, updates):
    train = [binary, "train", "--dataset", f"text:{CORPUS}", "--model", "gpt", "--seq-len", "128", "--global-batch",
             "32", "--micro-batch", "4", "--optimizer", "adamw", "--lr", "1e-3", "--max-updates", str(updates),
             "--threads", "1", "--progress", "off", "--no-tensorboard", "--out", out]
    if sharded:
        train.append("--shard-optimizer")
    subprocess.run([binary, "launch", "--nproc", str(ranks), "--master-port", str(free_port()), "--", *train],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(os.path.join(out, "metrics.jsonl")) as f:
        updates = [r for r in map(json.loads, f) if "loss" in r and "event" not in r]
    with open(os.path.join(out, "weights.safetensors"), "rb") as f:
        weights = f.read()
    return {
        "peak": max(r["peak_bytes"] for r in updates),
        "rss": max(r["rss_peak_bytes"] for r in updates),
        "seconds": [1 / r["updates_per_s"] for r in updates[3:]],
        "settled": [1 / r["updates_per_s"] for r in updates[10:]],
        "weights": weights,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("binary")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--updates", type=int, default=16)
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs; gpt 4 layers x d 128, seq 128, global 32 = "
          f"micro 4 x ranks x accumulation, adamw, {args.updates} updates, 1 thread per rank")
    results = {}
    with tempfile.TemporaryDirectory(prefix="bigbatch_shard_bench_") as workdir:
        for round_ in range(args.rounds):
            for ranks in [2, 4]:
                for sharded in [False, True]:
                    out = os.path.join(workdir, f"r{round_}-{ranks}-{sharded}")
                    result = run(args.binary, out, ranks, sharded, args.updates)
                    print(f"round {round_ + 1}, {ranks} ranks, {'sharded' if sharded else 'whole'}: "
                          f"peak {result['peak']} B, resident {result['rss']} B, median update "
                          f"{statistics.median(result['seconds']):.4f} s")
                    results.setdefault((ranks, sharded), []).append(result)
    print("\n| ranks | optimizer state | rank 0 tensor peak | saved | rank 0 resident peak | s per update (median "
          "of rounds) | from update 11 | vs whole | weights |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---|")
    for ranks in [2, 4]:
        whole = results[(ranks, False)]
        for sharded in [False, True]:
            rows = results[(ranks, sharded)]
            peak = max(r["peak"] for r in rows)
            saved = max(r["peak"] for r in whole) - peak
            seconds = statistics.median(s for r in rows for s in r["seconds"])
            settled = statistics.median(s for r in rows for s in r["settled"])
            ratio = seconds / statistics.median(s for r in whole for s in r["seconds"])
            same = all(r["weights"] == whole[0]["weights"] for r in rows)
            print(f"| {ranks} | {'sharded' if sharded else 'whole'} | {peak / 2**20:.2f} MiB | "
                  f"{saved / 2**20:.2f} MiB | {max(r['rss'] for r in rows) / 2**20:.0f} MiB | {seconds:.4f} s | "
                  f"{settled:.4f} s | {ratio:.3f}x | {'same bytes' if same else 'DIFFER'} |")


if __name__ == "__main__":
    main()
