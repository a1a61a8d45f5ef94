#!/usr/bin/python3
"""How far each learning-rate rule holds, per built-in model (issue 35, item 2): the default
rate where it was tuned (0.05 at a global batch of 256, SGD Nesterov 0.9, cosine), then the
same data at 4x and 16x that batch under each rule — none, linear, sqrt — with the same warmup
(a quarter of the data). Prints each run's updates, final test accuracy (or the divergence) and
peak rate, and a table per model: what `--lr-scaling auto` and the plan's warnings are set from.

For gpt the reference is a small model on the fortunes corpus with AdamW at a global batch of
16 (its rate given with --gpt-lr), scaled 4x and 16x the same way.

Usage: bench/lr_limits_bench.py BUILD_DIR [--models mlp cnn cnn-bn cnn-gn gpt] [--epochs 2]
                                          [--threads 2] [--factors 4 16]
"""
import argparse
import json
import os
import subprocess
import tempfile

from bench_env import bigbatch_environment

ENV = bigbatch_environment()  # the same BLAS kernels and OpenMP policy on every side
FORTUNES = "/usr/share/games/fortunes"


def model_flags(model, a):
    """The model's flags, its reference batch and rate, and its micro-batch."""
    if model == "gpt":
        return (["--model", "gpt", "--dataset", f"text:{FORTUNES}", "--seq-len", "128", "--layers", "2",
                 "--d-model", "64", "--heads", "4", "--optimizer", "adamw", "--weight-decay", "0.01"],
                16, a.gpt_lr, 16)
    return ["--model", model], 256, 0.05, 128


def run_case(binary, workdir, name, flags):
    out = os.path.join(workdir, name.replace(" ", "_").replace(",", ""))
    result = subprocess.run([binary, "train", *flags, "--out", out], capture_output=True, text=True, env=ENV)
    if result.returncode == 4:  # diverged: non-finite or skipped updates in a row
        return {"name": name, "diverged": result.stderr.strip().splitlines()[-1]}
    if result.returncode != 0:
        raise SystemExit(f"{name}: bigbatch failed ({result.returncode}):\n{result.stderr}")
    with open(os.path.join(out, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f]
    updates = [r for r in records if "loss" in r and "event" not in r]
    final = [r for r in records if "test_accuracy" in r or "val_bpb" in r][-1]
    row = {"name": name, "updates": len(updates), "peak_lr": max(r["lr"] for r in updates),
           "skipped": updates[-1].get("skipped_updates", 0)}
    for key in ("test_accuracy", "val_bpb"):
        if key in final:
            row[key] = final[key]
    return row


def main():
    p = argparse.ArgumentParser()
    p.add_argument("build")
    p.add_argument("--models", nargs="+", default=["mlp", "cnn", "cnn-bn", "cnn-gn", "gpt"])
    p.add_argument("--epochs", type=float, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--factors", type=int, nargs="+", default=[4, 16])
    p.add_argument("--gpt-lr", type=float, default=1e-3)
    a = p.parse_args()
    binary = os.path.join(os.path.abspath(a.build), "bigbatch")
    workdir = tempfile.mkdtemp(prefix="bigbatch_lr_limits_")
    warmup = f"{a.epochs / 4:g}e"
    tables = []
    for model in a.models:
        flags, reference, lr, micro = model_flags(model, a)
        common = [*flags, "--lr", f"{lr:g}", "--lr-ref-batch", str(reference), "--epochs", f"{a.epochs:g}",
                  "--schedule", "cosine", "--threads", str(a.threads), "--progress", "off", "--no-tensorboard"]
        print(f"{model}: lr {lr:g} tuned at {reference}, {a.epochs:g} epochs, cosine, warmup {warmup} above the "
              f"reference, {a.threads} thread(s)", flush=True)
        rows = [run_case(binary, workdir, f"{model} {reference}",
                         common + ["--global-batch", str(reference), "--micro-batch", str(min(micro, reference)),
                                   "--lr-scaling", "none"])]
        print("raw:", json.dumps(rows[-1]), flush=True)
        for factor in a.factors:
            batch = reference * factor
            for rule in ("none", "linear", "sqrt"):
                rows.append(run_case(binary, workdir, f"{model} {batch} {rule}",
                                     common + ["--global-batch", str(batch), "--micro-batch", str(micro),
                                               "--lr-scaling", rule, "--warmup", warmup]))
                print("raw:", json.dumps(rows[-1]), flush=True)
        tables.append((model, rows))
    for model, rows in tables:
        metric = "val_bpb" if model == "gpt" else "test_accuracy"
        print(f"\n{model}\n\n| run | updates | peak lr | {'held-out bits per byte' if model == 'gpt' else 'test accuracy'} |")
        print("|---|---:|---:|---:|")
        for r in rows:
            if "diverged" in r:
                print(f"| {r['name']} | diverged | | |")
                continue
            value = f"{r[metric]:.3f}" if model == "gpt" else f"{r[metric]:.2%}"
            skipped = f" ({r['skipped']} skipped)" if r["skipped"] else ""
            print(f"| {r['name']} | {r['updates']}{skipped} | {r['peak_lr']:.3g} | {value} |")


if __name__ == "__main__":
    main()
