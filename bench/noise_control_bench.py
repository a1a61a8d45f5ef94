#!/usr/bin/python3
"""--global-batch auto on a problem whose gradient noise scale is known (issue 34's control):
least squares without label noise, y = x . w*, x ~ N(0, I_d), trained by a linear module
(TorchScript, no bias) on the summed squared error. Per sample the gradient is
g = 2 x (x . d) with d = w - w*; its mean is G = 2 d and E|g|^2 = 4 (dim + 2) |d|^2, so
tr(Sigma) / |G|^2 = dim + 1 wherever the weights are: the noise scale is dim + 1 samples for the
whole run. With an update worth r samples of compute the goodput model's best batch is
sqrt(r (dim + 1)) (McCandlish et al., appendix D); the controller doubles while the predicted
gain at the band's low end is at least --growth-threshold. This prints, for each update cost,
the noise scale the run measured at its checks (value and the band's low end, which the
controller decides on) against the truth, and where the batch stopped against where the model
stops with the true noise scale and with the measured low end.

The prediction alone decides (--growth-test none): this controls the measurement and the
proposer, not the branch test. Nothing is asserted: it prints what happened.

Usage: bench/noise_control_bench.py BUILD_DIR [--dim 63] [--samples 32768] [--costs 256 1024 4096]
       [--seeds 42 1 2] [--epochs 2]
"""
import argparse
import json
import math
import os
import subprocess
import tempfile

import numpy as np
import torch

from bench_env import bigbatch_environment, libtorch_version

ENV = bigbatch_environment()


def goodput_gain(batch, noise, cost):
    """G(2B) / G(B) with G(B) ~ B / ((1 + B / B_noise) (r + B)): schedule/batch_growth.h's model."""
    def goodput(b):
        return b / ((1 + b / noise) * (cost + b))
    return goodput(2 * batch) / goodput(batch)


def stop_batch(start, noise, cost, threshold=0.05, largest=1 << 20):
    """Where doubling from `start` stops when the noise scale is `noise`."""
    batch = start
    while 2 * batch <= largest and goodput_gain(batch, noise, cost) >= 1 + threshold:
        batch *= 2
    return batch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("build")
    p.add_argument("--dim", type=int, default=63)
    p.add_argument("--samples", type=int, default=32768)
    p.add_argument("--costs", type=float, nargs="+", default=[256, 1024, 4096])
    p.add_argument("--seeds", type=int, nargs="+", default=[42, 1, 2])
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--micro-batch", type=int, default=16)
    p.add_argument("--lr", type=float, default=0.0002, help="the rate at the starting batch (linear rule)")
    a = p.parse_args()
    binary = os.path.join(os.path.abspath(a.build), "bigbatch")
    work = tempfile.mkdtemp(prefix="bigbatch_noise_control_")
    truth = a.dim + 1
    start = 2 * a.micro_batch
    print(f"least squares, dim {a.dim}, {a.samples} samples, no label noise: noise scale {truth} samples; "
          f"micro-batch {a.micro_batch}, start {start}, lr {a.lr} @ {start} (linear), {a.epochs} epochs, "
          f"--growth-test none, bigbatch {libtorch_version(a.build)}")
    print("| update cost r | sqrt(r B_noise) | stops at (true B_noise) | seed | noise scale measured at the checks "
          "(mean; band's low end mean) | stops at (that low end) | batches taken |")
    print("|---|---|---|---|---|---|---|")
    for seed in a.seeds:
        rng = np.random.default_rng(seed)
        data = os.path.join(work, f"data{seed}")
        os.makedirs(data)
        x = rng.standard_normal((a.samples, a.dim)).astype(np.float32)
        w = rng.standard_normal((a.dim, 1)).astype(np.float32) / math.sqrt(a.dim)
        np.save(os.path.join(data, "x_train.npy"), x)
        np.save(os.path.join(data, "y_train.npy"), (x @ w).astype(np.float32))
        torch.manual_seed(seed)
        module = os.path.join(work, f"linear{seed}.pt")
        torch.jit.script(torch.nn.Linear(a.dim, 1, bias=False)).save(module)
        for cost in a.costs:
            out = os.path.join(work, f"s{seed}-r{cost:g}")
            args = [binary, "train", "--dataset", f"npy:{data}", "--task", "regress", "--model",
                    f"torchscript:{module}", "--micro-batch", str(a.micro_batch), "--global-batch", "auto",
                    "--growth-test", "none", "--update-cost", f"{cost:g}", "--lr", str(a.lr), "--lr-scaling",
                    "linear", "--lr-ref-batch", str(start), "--schedule", "constant", "--warmup", "0u",
                    "--epochs", str(a.epochs), "--seed", str(seed), "--threads", "1", "--progress", "off",
                    "--out", out]
            result = subprocess.run(args, capture_output=True, text=True, env=ENV)
            if result.returncode != 0:
                raise SystemExit(f"{' '.join(args)} failed:\n{result.stderr}")
            with open(os.path.join(out, "metrics.jsonl")) as f:
                records = [json.loads(line) for line in f if line.strip()]
            checks = [r for r in records if r.get("event") == "batch_check"]
            batches = sorted({r["global_batch"] for r in records if "loss" in r and "event" not in r})
            measured = sum(c["noise_scale"] for c in checks) / len(checks) if checks else float("nan")
            low = sum(c["noise_scale_low"] for c in checks) / len(checks) if checks else float("nan")
            print(f"| {cost:g} | {math.sqrt(cost * truth):.0f} | {stop_batch(start, truth, cost)} | {seed} "
                  f"| {measured:.1f}; {low:.1f} ({len(checks)} checks) | {stop_batch(start, low, cost)} "
                  f"| {' -> '.join(map(str, batches))} |")


if __name__ == "__main__":
    main()
