#!/usr/bin/python3
"""bigbatch's gpt against the same model trained by PyTorch in Python and by a hand-written
libtorch loop (bench/peers/handwritten_loop.cpp --model gpt), side by side in one run:
tokens per second of training at --seq-len 256 on packed fortune blocks (no padding on either
side, so both compute the same shapes), AdamW with clipping, the mean over each update's tokens.
The Python side is the oracle's twin (tests/python/gpt_oracle.py: GptTwin) in the accumulation
loop a user would write for the exact mean; both sides run alternately per cell with the same
thread count and the environment bigbatch gives itself (OpenBLAS kernels, passive OpenMP).

Several bigbatch builds (Debian's libtorch 1.13, a PyTorch 2.x wheel's) are sides of their own;
--python names the PyTorch of the Python side, --compile adds it torch.compile'd (compilation
falls in the two warm-up updates no side counts; the row ends with its seconds).

Usage: bench/lm_peer_bench.py BUILD_DIR [BUILD_DIR...] [--python PYTHON] [--compile] [--no-handwritten]
                              [--micros 8 32] [--accums 1 8] [--threads 1 2] [--updates 6] [--repeats 2]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from bench_env import bigbatch_environment, python_torch_version, side_names

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
FORTUNES = "/usr/share/games/fortunes"
ENV = bigbatch_environment()  # the same BLAS kernels and OpenMP policy on every side
SEQ, LAYERS, D, HEADS = 256, 4, 128, 4


def bigbatch(build, workdir, micro, accum, threads, updates):
    out = tempfile.mkdtemp(dir=workdir)
    os.rmdir(out)
    subprocess.run([os.path.join(build, "bigbatch"), "train", "--dataset", f"text:{FORTUNES}", "--model", "gpt",
                    "--sequences", "packed", "--seq-len", str(SEQ), "--layers", str(LAYERS), "--d-model", str(D),
                    "--heads", str(HEADS), "--micro-batch", str(micro), "--accum-steps", str(accum),
                    "--optimizer", "adamw", "--lr", "1e-3", "--clip-norm", "1", "--schedule", "constant",
                    "--max-updates", str(updates + 2), "--threads", str(threads), "--progress", "off",
                    "--no-noise-scale", "--out", out],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    with open(os.path.join(out, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f if '"tokens_seen"' in line and '"epoch":' in line]
    records = [r for r in records if "loss" in r]
    steady = records[2:]  # the first updates warm the allocator and the caches
    seconds = steady[-1]["wall_s"] - records[1]["wall_s"]
    return sum(r["items"] for r in steady) / seconds


def python_peer(python, compiled, micro, accum, threads, updates):
    """tokens/s of the steady updates, and the seconds of the two warm-up updates (with
    torch.compile: its compilation, paid once per run)."""
    code = f"""
import time, torch, sys
sys.path.insert(0, {os.path.join(ROOT, 'tests', 'python')!r})
from gpt_oracle import GptTwin
torch.set_num_threads({threads})
torch.manual_seed(0)
model = torch.nn.Sequential(GptTwin({SEQ}, {LAYERS}, {D}, {HEADS}))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=5e-4)
if {compiled}:
    model = torch.compile(model)
data = torch.randint(0, 257, ({micro} * {accum} * {updates + 2}, {SEQ} + 1))
row, times = 0, []
for update in range({updates + 2}):
    start = time.perf_counter()
    tokens = {micro} * {accum} * {SEQ}
    for _ in range({accum}):
        block = data[row:row + {micro}]; row += {micro}
        logits = model(block[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 257), block[:, 1:].reshape(-1), reduction="sum")
        (loss / tokens).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad()
    times.append(time.perf_counter() - start)
print({micro} * {accum} * {SEQ} * {updates} / sum(times[2:]), sum(times[:2]))
"""
    result = subprocess.run([python, "-c", code], check=True, capture_output=True, text=True, env=ENV)
    speed, warmup = result.stdout.strip().splitlines()[-1].split()
    return float(speed), float(warmup)


def handwritten(build, micro, accum, threads, updates):
    """bench/peers/handwritten_loop.cpp --model gpt: the same model and loop in plain libtorch."""
    result = subprocess.run([os.path.join(build, "bench", "handwritten_loop"), "--model", "gpt", "--seq-len", str(SEQ),
                             "--layers", str(LAYERS), "--d-model", str(D), "--heads", str(HEADS), "--micro",
                             str(micro), "--accum", str(accum), "--threads", str(threads), "--updates", str(updates)],
                            check=True, capture_output=True, text=True, env=ENV)
    return json.loads(result.stdout)["tokens_per_s"]


def gemm_gflops(build, threads):
    """The machine's fp32 GEMM ceiling at this thread count (2048^3, libtorch's kernel)."""
    result = subprocess.run([os.path.join(build, "bench", "handwritten_loop"), "--gemm", "--threads", str(threads)],
                            check=True, capture_output=True, text=True, env=ENV)
    return json.loads(result.stdout)["gemm_gflops"]


def training_flops_per_token(vocab=257):
    """6 x the matmul parameters (per layer 12 d^2; the tied output head V d) plus attention's
    scores and values (4 T d per layer forward, the whole T x T computed), x3 with backward."""
    return 6 * (12 * LAYERS * D * D + vocab * D) + 12 * LAYERS * SEQ * D


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("builds", nargs="+", help="bigbatch builds; the first is the one the ratios are of")
    parser.add_argument("--python", default="/usr/bin/python3", help="the Python whose PyTorch is the peer")
    parser.add_argument("--compile", action="store_true", help="torch.compile'd PyTorch as a peer too")
    parser.add_argument("--no-handwritten", action="store_true", help="leave out the hand-written libtorch loop")
    parser.add_argument("--micros", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--accums", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--updates", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    builds = [os.path.abspath(b) for b in args.builds]
    workdir = tempfile.mkdtemp(prefix="lm_peer_")
    flops = training_flops_per_token()
    torch_version = python_torch_version(args.python)
    names = side_names(builds, torch_version, args.compile, not args.no_handwritten)
    ours, others = names[0], names[1:]
    print(f"model FLOPs per token (training): {flops / 1e6:.2f}M; PyTorch {torch_version} ({args.python}); "
          f"ratios are {ours}'s tokens/s over each other side's, median of repeats (min-max)")
    print("| micro | accum | threads | " + " | ".join(f"{k} tokens/s" for k in names) + " | " +
          " | ".join(f"/ {k}" for k in others) + f" | {ours} MFU (GEMM ceiling) |")
    print("|---:|---:|---:|" + "---:|" * (len(names) + len(others) + 1))
    for threads in args.threads:
        ceiling = gemm_gflops(builds[0], threads)
        for micro in args.micros:
            for accum in args.accums:
                speeds = {name: [] for name in names}
                warmups = []
                launch = [lambda b=b: bigbatch(b, workdir, micro, accum, threads, args.updates) for b in builds]
                launch.append(lambda: python_peer(args.python, False, micro, accum, threads, args.updates)[0])
                if args.compile:
                    def compiled():
                        speed, warmup = python_peer(args.python, True, micro, accum, threads, args.updates)
                        warmups.append(warmup)
                        return speed
                    launch.append(compiled)
                if not args.no_handwritten:
                    launch.append(lambda: handwritten(builds[0], micro, accum, threads, args.updates))
                for repeat in range(args.repeats):
                    # Rotate which side runs first: this machine drifts over minutes.
                    order = list(range(len(names)))
                    for i in order[repeat % len(order):] + order[:repeat % len(order)]:
                        speeds[names[i]].append(launch[i]())
                    print("raw: " + ", ".join(f"{k} {v[-1]:.0f}" for k, v in speeds.items()) +
                          (f"; compiled warm-up {warmups[-1]:.1f} s" if warmups else ""), file=sys.stderr, flush=True)
                ratios = {k: [a / b for a, b in zip(speeds[ours], speeds[k])] for k in others}
                mfu = statistics.median(speeds[ours]) * flops / (ceiling * 1e9)
                print(f"| {micro} | {accum} | {threads} | " +
                      " | ".join(f"{statistics.median(speeds[k]):.0f}" for k in names) + " | " +
                      " | ".join(f"{statistics.median(r):.2f}x ({min(r):.2f}-{max(r):.2f})" for r in ratios.values()) +
                      f" | {100 * mfu:.0f}% ({ceiling:.0f} GFLOP/s) |" +
                      (f" compile {statistics.median(warmups):.0f} s" if warmups else ""), flush=True)


if __name__ == "__main__":
    main()
