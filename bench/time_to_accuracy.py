#!/usr/bin/python3
"""Time to accuracy (issue 6): bigbatch's default job (cnn, 256 = 32 x 8, SGD Nesterov, cosine
over 8 epochs) against PyTorch in Python with the same recipe (bench/peers/pytorch_train.py),
each stopping at the first epoch whose test accuracy reaches the target. Runs the two
alternately --repeats times; prints every raw figure and the medians.

Usage: bench/time_to_accuracy.py BUILD_DIR [--target 0.9] [--threads 2] [--repeats 1]
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time

ENV = dict(os.environ, OPENBLAS_CORETYPE=os.environ.get("OPENBLAS_CORETYPE", "SkylakeX"),
           OMP_WAIT_POLICY=os.environ.get("OMP_WAIT_POLICY", "PASSIVE"))


def bigbatch(binary, workdir, target, threads, tag):
    out = os.path.join(workdir, tag)
    start = time.perf_counter()
    subprocess.run([binary, "train", "--target-accuracy", str(target), "--threads", str(threads),
                    "--progress", "off", "--out", out], check=True, capture_output=True, env=ENV)
    wall = time.perf_counter() - start
    with open(os.path.join(out, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f]
    reached = [r for r in records if r.get("event") == "target_reached"]
    epochs = [r for r in records if "test_accuracy" in r]
    return {"reached": bool(reached), "epochs": len(epochs), "accuracy": epochs[-1]["test_accuracy"],
            "train_seconds": epochs[-1]["train_seconds"], "wall_seconds": wall}


def python_peer(script, target, threads):
    start = time.perf_counter()
    out = subprocess.run(["/usr/bin/python3", script, "--threads", str(threads), "--target", str(target)],
                         check=True, capture_output=True, text=True, env=ENV).stdout
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
    p.add_argument("--repeats", type=int, default=1)
    a = p.parse_args()
    binary = os.path.join(os.path.abspath(a.build), "bigbatch")
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers", "pytorch_train.py")
    workdir = tempfile.mkdtemp(prefix="bigbatch_tta_")
    print(f"target {a.target:.0%} test accuracy, {a.threads} thread(s), {a.repeats} repeat(s)")
    runs = {"bigbatch": [], "python": []}
    for repeat in range(a.repeats):
        runs["bigbatch"].append(bigbatch(binary, workdir, a.target, a.threads, f"run{repeat}"))
        runs["python"].append(python_peer(script, a.target, a.threads))
        print("raw:", json.dumps({k: v[-1] for k, v in runs.items()}))
    print("\n| engine | reached | epochs | test accuracy | training time (median) | wall time (median) |")
    print("|---|---|---:|---:|---:|---:|")
    for name, rs in runs.items():
        print(f"| {name} | {all(r['reached'] for r in rs)} | {rs[-1]['epochs']} | {rs[-1]['accuracy']:.2%} | "
              f"{statistics.median(r['train_seconds'] for r in rs):.0f} s | "
              f"{statistics.median(r['wall_seconds'] for r in rs):.0f} s |")
    b = statistics.median(r["wall_seconds"] for r in runs["bigbatch"])
    py = statistics.median(r["wall_seconds"] for r in runs["python"])
    print(f"\nbigbatch reaches the target {py / b:.2f}x as fast as PyTorch-Python (wall time, median)")


if __name__ == "__main__":
    main()
