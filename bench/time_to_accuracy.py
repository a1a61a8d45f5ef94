#!/usr/bin/python3
"""Time to accuracy (issue 6): bigbatch's default job (cnn, 256 = 32 x 8, SGD Nesterov, cosine
over 8 epochs) against PyTorch in Python with the same recipe (bench/peers/pytorch_train.py),
each stopping at the first epoch whose test accuracy reaches the target. Runs the two
alternately, once per seed (the seed sets initialisation and shuffling in both, so the epochs a
run needs vary between seeds as they would for a user); prints every raw figure, the medians
and the per-epoch training-time ratio, which does not depend on how many epochs a seed needed.

Usage: bench/time_to_accuracy.py BUILD_DIR [--target 0.9] [--threads 2] [--seeds 42 1 2]
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time

from bench_env import bigbatch_environment

ENV = bigbatch_environment()  # the same BLAS kernels and OpenMP policy on every side


def bigbatch(binary, workdir, target, threads, seed, tag):
    out = os.path.join(workdir, tag)
    start = time.perf_counter()
    subprocess.run([binary, "train", "--target-accuracy", str(target), "--threads", str(threads),
                    "--seed", str(seed), "--progress", "off", "--out", out], check=True,
                   capture_output=True, env=ENV)
    wall = time.perf_counter() - start
    with open(os.path.join(out, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f]
    reached = [r for r in records if r.get("event") == "target_reached"]
    epochs = [r for r in records if "test_accuracy" in r]
    return {"reached": bool(reached), "epochs": len(epochs), "accuracy": epochs[-1]["test_accuracy"],
            "train_seconds": epochs[-1]["train_seconds"], "wall_seconds": wall}


def python_peer(script, target, threads, seed):
    start = time.perf_counter()
    out = subprocess.run(["/usr/bin/python3", script, "--threads", str(threads), "--target", str(target),
                          "--seed", str(seed)], check=True, capture_output=True, text=True, env=ENV).stdout
    wall = time.perf_counter() - start
    epochs = [json.loads(line) for line in out.splitlines() if line.strip()]
    return {"reached": epochs[-1]["test_accuracy"] >= target, "epochs": len(epochs),
            "accuracy": epochs[-1]["test_accuracy"], "train_seconds": epochs[-1]["train_seconds"],
            "wall_seconds": wall}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("build")
    p.add_argument("--target", type=float, default=0.9)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seeds", type=int, nargs="+", default=[42])
    a = p.parse_args()
    binary = os.path.join(os.path.abspath(a.build), "bigbatch")
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers", "pytorch_train.py")
    workdir = tempfile.mkdtemp(prefix="bigbatch_tta_")
    print(f"target {a.target:.0%} test accuracy, {a.threads} thread(s), seeds {a.seeds}")
    runs = {"bigbatch": [], "python": []}
    for seed in a.seeds:
        runs["bigbatch"].append(bigbatch(binary, workdir, a.target, a.threads, seed, f"seed{seed}"))
        runs["python"].append(python_peer(script, a.target, a.threads, seed))
        print(f"raw seed {seed}:", json.dumps({k: v[-1] for k, v in runs.items()}), flush=True)
    print("\n| engine | reached (all seeds) | epochs per seed | test accuracy per seed | training time (median) | "
          "training time per epoch (median) | wall time (median) |")
    print("|---|---|---|---|---:|---:|---:|")
    per_epoch = {}
    for name, rs in runs.items():
        per_epoch[name] = statistics.median(r["train_seconds"] / r["epochs"] for r in rs)
        epochs = ", ".join(str(r["epochs"]) for r in rs)
        accuracies = ", ".join(f"{r['accuracy']:.2%}" for r in rs)
        print(f"| {name} | {all(r['reached'] for r in rs)} | {epochs} | {accuracies} | "
              f"{statistics.median(r['train_seconds'] for r in rs):.0f} s | {per_epoch[name]:.1f} s | "
              f"{statistics.median(r['wall_seconds'] for r in rs):.0f} s |")
    b = statistics.median(r["wall_seconds"] for r in runs["bigbatch"])
    py = statistics.median(r["wall_seconds"] for r in runs["python"])
    print(f"\nbigbatch reaches the target {py / b:.2f}x as fast as PyTorch-Python (wall time, median over seeds); "
          f"per epoch of training {per_epoch['python'] / per_epoch['bigbatch']:.2f}x")


if __name__ == "__main__":
    main()
