#!/usr/bin/python3
"""Peak memory against micro-batch size and accumulation steps (issue 4), bigbatch beside
PyTorch in Python doing the same work (bench/peers/pytorch_loop.py: same model, SGD with
momentum, the standard accumulation loop).

For each cell it reports what training adds to what set-up left in memory (data and model):
bigbatch's tracked tensor peak over the tensors alive when training starts (every allocation
goes through its CPU allocator; per update in metrics.jsonl), and for both engines the peak
resident set during training over the resident set when training starts (both reset Linux's
high-water mark after set-up, so the data loader's transient buffers do not count).

Usage: bench/memory_bench.py BUILD_DIR [--models mlp cnn] [--micros 16 64 256] [--accums 1 8]
"""
import argparse
import json
import os
import platform
import subprocess
import tempfile

from bench_env import bigbatch_environment

ENV = bigbatch_environment()  # the same BLAS kernels and OpenMP policy on every side
UPDATES = 4
MIB = 1 << 20


def bigbatch(binary, workdir, model, micro, accum, updates):
    out = os.path.join(workdir, f"{model}-{micro}-{accum}")
    subprocess.run([binary, "train", "--model", model, "--micro-batch", str(micro), "--accum-steps", str(accum),
                    "--threads", "1", "--max-updates", str(updates), "--epochs", "1000", "--no-nesterov",
                    "--weight-decay", "0", "--schedule", "constant", "--progress", "off", "--out", out],
                   check=True, capture_output=True, env=ENV)
    with open(os.path.join(out, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f]
    start = next(r for r in records if r.get("event") == "train_start")
    steps = [r for r in records if "loss" in r]
    return (max(r["peak_bytes"] for r in steps) - start["tensor_bytes"],
            max(r["rss_peak_bytes"] for r in steps) - start["rss_bytes"])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build")
    parser.add_argument("--models", nargs="+", default=["mlp", "cnn"])
    parser.add_argument("--micros", type=int, nargs="+", default=[16, 64, 256, 1024])
    parser.add_argument("--accums", type=int, nargs="+", default=[1, 8])
    args = parser.parse_args()
    binary = os.path.join(os.path.abspath(args.build), "bigbatch")
    python_peer = os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers", "pytorch_loop.py")
    workdir = tempfile.mkdtemp(prefix="bigbatch_memory_bench_")
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs; 1 thread; {UPDATES} updates per cell")

    rows = []
    for model in args.models:
        for micro in args.micros:
            for accum in args.accums:
                tensor_growth, rss_growth = bigbatch(binary, workdir, model, micro, accum, UPDATES)
                python = json.loads(subprocess.run(
                    ["/usr/bin/python3", python_peer, "--model", model, "--micro", str(micro), "--accum", str(accum),
                     "--threads", "1", "--updates", str(UPDATES)],
                    check=True, capture_output=True, text=True, env=ENV).stdout)
                row = {"model": model, "micro": micro, "accum": accum, "tensor_growth": tensor_growth,
                       "rss_growth": rss_growth,
                       "python_rss_growth": python["rss_peak_bytes"] - python["rss_setup_bytes"]}
                print("raw: " + json.dumps(row))
                rows.append(row)

    print("\n| model | micro | accum | bigbatch tensor growth | bigbatch RSS growth | Python RSS growth | "
          "Python / bigbatch (RSS growth) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        ratio = r["python_rss_growth"] / r["rss_growth"] if r["rss_growth"] > 0 else float("nan")
        print(f"| {r['model']} | {r['micro']} | {r['accum']} | {r['tensor_growth'] / MIB:.1f} MiB | "
              f"{r['rss_growth'] / MIB:.1f} MiB | {r['python_rss_growth'] / MIB:.1f} MiB | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
