#!/usr/bin/python3
"""Time to accuracy (issue 6): bigbatch's default job (cnn, 256 = 32 x 8, SGD Nesterov, cosine
over 8 epochs) against PyTorch in Python with the same recipe (bench/peers/pytorch_train.py),
each stopping at the first epoch whose test accuracy reaches the target. Runs the two
alternately, once per seed (the seed sets initialisation and shuffling in both, so the epochs a
run needs vary between seeds as they would for a user); prints every raw figure, the medians
and the per-epoch training-time ratio, which does not depend on how many epochs a seed needed.

Several bigbatch builds are sides of their own; --python names the PyTorch of the Python side,
--compile adds it torch.compile'd (compilation inside its training time, as a user pays it).

Usage: bench/time_to_accuracy.py BUILD_DIR [BUILD_DIR...] [--python PYTHON] [--compile]
                                 [--target 0.9] [--threads 2] [--seeds 42 1 2]
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time

from bench_env import bigbatch_environment, libtorch_version, python_torch_version

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


def python_peer(python, script, target, threads, seed, compiled):
    start = time.perf_counter()
    out = subprocess.run([python, script, "--threads", str(threads), "--target", str(target), "--seed", str(seed)] +
                         (["--compile"] if compiled else []), check=True, capture_output=True, text=True,
                         env=ENV).stdout
    wall = time.perf_counter() - start
    epochs = [json.loads(line) for line in out.splitlines() if line.strip()]
    return {"reached": epochs[-1]["test_accuracy"] >= target, "epochs": len(epochs),
            "accuracy": epochs[-1]["test_accuracy"], "train_seconds": epochs[-1]["train_seconds"],
            "wall_seconds": wall}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("builds", nargs="+", help="bigbatch builds; the first is the one the ratios are of")
    p.add_argument("--python", default="/usr/bin/python3", help="the Python whose PyTorch is the peer")
    p.add_argument("--compile", action="store_true", help="torch.compile'd PyTorch as a peer too")
    p.add_argument("--target", type=float, default=0.9)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seeds", type=int, nargs="+", default=[42])
    a = p.parse_args()
    builds = [os.path.abspath(b) for b in a.builds]
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers", "pytorch_train.py")
    workdir = tempfile.mkdtemp(prefix="bigbatch_tta_")
    torch_version = python_torch_version(a.python)
    print(f"target {a.target:.0%} test accuracy, {a.threads} thread(s), seeds {a.seeds}")
    sides = {f"bigbatch {libtorch_version(b)}": lambda seed, b=b: bigbatch(
        os.path.join(b, "bigbatch"), workdir, a.target, a.threads, seed, f"seed{seed}-{os.path.basename(b)}")
        for b in builds}
    sides[f"PyTorch {torch_version} eager"] = lambda seed: python_peer(a.python, script, a.target, a.threads, seed,
                                                                        False)
    if a.compile:
        # Compilation happens in the first updates: inside the training time, as a user pays it.
        sides[f"PyTorch {torch_version} compiled"] = lambda seed: python_peer(a.python, script, a.target, a.threads,
                                                                               seed, True)
    runs = {name: [] for name in sides}
    for seed in a.seeds:
        for name, side in sides.items():
            runs[name].append(side(seed))
        print(f"raw seed {seed}:", json.dumps({k: v[-1] for k, v in runs.items()}), flush=True)
    print("\n| engine | reached (all seeds) | epochs per seed | test accuracy per seed | training time (median) | "
          "training time per epoch (median) | wall time (median) |")
    print("|---|---|---|---|---:|---:|---:|")
    per_epoch, wall = {}, {}
    for name, rs in runs.items():
        per_epoch[name] = statistics.median(r["train_seconds"] / r["epochs"] for r in rs)
        wall[name] = statistics.median(r["wall_seconds"] for r in rs)
        epochs = ", ".join(str(r["epochs"]) for r in rs)
        accuracies = ", ".join(f"{r['accuracy']:.2%}" for r in rs)
        print(f"| {name} | {all(r['reached'] for r in rs)} | {epochs} | {accuracies} | "
              f"{statistics.median(r['train_seconds'] for r in rs):.0f} s | {per_epoch[name]:.1f} s | "
              f"{wall[name]:.0f} s |")
    ours = next(iter(runs))
    for name in list(runs)[1:]:
        print(f"\n{ours} reaches the target {wall[name] / wall[ours]:.2f}x as fast as {name} (wall time, median "
              f"over seeds); per epoch of training {per_epoch[name] / per_epoch[ours]:.2f}x")


if __name__ == "__main__":
    main()
