#!/usr/bin/python3
"""The learning-rate rules at a large batch (issue 7): the same budget of data trained at a
reference batch, then at a 16x larger one under each rule — none, linear (with warmup), sqrt,
AdaScale — and as batch ramps (Smith et al.'s constant rate, and the linear rule). Prints each
run's updates, samples, final test accuracy and training time, and the raw records.

Usage: bench/lr_rules_bench.py BUILD_DIR [--model mlp] [--epochs 2] [--threads 2]
"""
import argparse
import json
import os
import subprocess
import tempfile

from bench_env import bigbatch_environment

ENV = bigbatch_environment()  # the same BLAS kernels and OpenMP policy on every side


def cases(epochs):
    reference = ["--global-batch", "64", "--micro-batch", "64"]
    large = ["--global-batch", "1024", "--micro-batch", "128"]
    # The ramp: 64 for the first quarter of the data, 256 for the next quarter, then 1024.
    quarter = f"{epochs / 4:g}e"
    half = f"{epochs / 2:g}e"
    ramp = ["--micro-batch", "64", "--global-batch-schedule", f"0:64 {quarter}:256 {half}:1024"]
    return [
        ("reference: 64, lr 0.05", reference + ["--lr-scaling", "none"]),
        ("1024, no scaling", large + ["--lr-scaling", "none"]),
        ("1024, linear + warmup 0.25e", large + ["--lr-scaling", "linear", "--warmup", "0.25e"]),
        ("1024, sqrt", large + ["--lr-scaling", "sqrt"]),
        ("1024, AdaScale", large + ["--lr-scaling", "adascale"]),
        ("ramp 64 -> 256 -> 1024, lr constant (Smith)", ramp + ["--lr-scaling", "none"]),
        ("ramp 64 -> 256 -> 1024, linear", ramp + ["--lr-scaling", "linear"]),
    ]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("build")
    p.add_argument("--model", default="mlp")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    binary = os.path.join(os.path.abspath(a.build), "bigbatch")
    workdir = tempfile.mkdtemp(prefix="bigbatch_lr_rules_")
    common = ["--model", a.model, "--lr", "0.05", "--lr-ref-batch", "64", "--epochs", str(a.epochs),
              "--schedule", "cosine", "--threads", str(a.threads), "--progress", "off"]
    print(f"{a.model}, lr 0.05 tuned at 64, {a.epochs} epochs of data (AdaScale: of reference updates), "
          f"cosine, {a.threads} thread(s)\n")
    rows = []
    for i, (name, args) in enumerate(cases(a.epochs)):
        out = os.path.join(workdir, f"run{i}")
        result = subprocess.run([binary, "train", *common, *args, "--out", out], capture_output=True, text=True,
                                env=ENV)
        if result.returncode == 4:  # diverged: non-finite updates in a row
            row = {"name": name, "diverged": result.stderr.strip().splitlines()[-1]}
            print("raw:", json.dumps(row), flush=True)
            rows.append(row)
            continue
        if result.returncode != 0:
            raise SystemExit(f"{name}: bigbatch failed ({result.returncode}):\n{result.stderr}")
        with open(os.path.join(out, "metrics.jsonl")) as f:
            records = [json.loads(line) for line in f]
        updates = [r for r in records if "loss" in r]
        last_epoch = [r for r in records if "test_accuracy" in r][-1]
        gains = [r["lr_gain"] for r in updates if "lr_gain" in r]
        row = {"name": name, "updates": len(updates), "samples": updates[-1]["samples_seen"],
               "test_accuracy": last_epoch["test_accuracy"], "train_seconds": last_epoch["train_seconds"],
               "peak_lr": max(r["lr"] for r in updates),
               "mean_gain": sum(gains) / len(gains) if gains else None}
        print("raw:", json.dumps(row), flush=True)
        rows.append(row)
    print("\n| run | updates | samples | test accuracy | peak lr | training time |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        if "diverged" in r:
            print(f"| {r['name']} | diverged | | | | |")
            continue
        gain = f" (mean gain {r['mean_gain']:.2f})" if r["mean_gain"] else ""
        print(f"| {r['name']}{gain} | {r['updates']} | {r['samples']} | {r['test_accuracy']:.2%} | "
              f"{r['peak_lr']:.3g} | {r['train_seconds']:.0f} s |")


if __name__ == "__main__":
    main()
