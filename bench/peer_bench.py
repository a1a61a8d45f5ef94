#!/usr/bin/python3
"""bigbatch against its peers (issue 6), side by side in one run: PyTorch in Python and a
hand-written libtorch loop doing the same work (model, Fashion-MNIST data normalised alike,
micro-batch, accumulation, SGD with momentum, thread count), and the machine's fp32 GEMM
ceiling. Each cell runs the three peers
alternately, --repeats times (the order rotating); the table shows medians, min-max and the
ratios, each the median of the repeats' own ratios (the three runs of a repeat follow one
another, so their ratio is not thrown by the machine's slower drifts) with its min-max, and
the same ratio taken between the runs' median update times (the typical update, which the
streaks of slow updates this machine has at random moments do not move).

The peers run with the environment bigbatch gives itself (OpenBLAS kernels for this CPU,
passive OpenMP waiting), so the ratios measure the engines, not the environment.

With --in-process it instead runs bench/engine_overhead.cpp over the same cells: the
hand-written loop and bigbatch's engine alternating in blocks inside one process, which resolves
the engine's own overhead (a few percent) far below this machine's run-to-run noise.

Several builds (Debian's libtorch 1.13 and a PyTorch 2.x wheel's) are sides of their own,
beside PyTorch in Python (--python: the interpreter of the PyTorch to measure) eager and, with
--compile, torch.compile'd (its compilation falls in the warm-up updates, which no side counts;
the raw lines give its seconds).

Usage: bench/peer_bench.py BUILD_DIR [BUILD_DIR...] [--python PYTHON] [--compile] [--no-handwritten]
                           [--repeats 3] [--threads 1 2] [--models mlp cnn cnn-bn]
                           [--micros 16 64 256] [--accums 1 8] [--in-process]
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import tempfile

from bench_env import bigbatch_environment, libtorch_version, python_torch_version, side_names

TARGET_SAMPLES = {"mlp": 40000, "cnn": 6000, "cnn-bn": 5000}
ENV = bigbatch_environment()  # the same BLAS kernels and OpenMP policy on every side


def bigbatch(build, workdir, model, micro, accum, threads, updates, tag):
    out = os.path.join(workdir, tag)
    subprocess.run([os.path.join(build, "bigbatch"), "train", "--model", model, "--micro-batch", str(micro),
                    "--accum-steps", str(accum), "--threads", str(threads), "--max-updates", str(updates + 3),
                    "--epochs", "1000", "--lr", "0.05", "--no-nesterov", "--weight-decay", "0", "--schedule",
                    "constant", "--progress", "off", "--out", out],
                   check=True, capture_output=True, env=ENV)
    with open(os.path.join(out, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f]
    start = next(r for r in records if r.get("event") == "train_start")
    updates = [r for r in records if "loss" in r]
    # The peers warm up 3 updates too; then wall-clock time, so that everything bigbatch does
    # between updates (metrics, progress, memory readings) counts as it does for the peers.
    steady = updates[3:]
    durations = [b["wall_s"] - a["wall_s"] for a, b in zip(updates[2:], steady)]
    return {"samples_per_s": sum(r["items"] for r in steady) / (steady[-1]["wall_s"] - updates[2]["wall_s"]),
            "update_ms_median": 1e3 * statistics.median_high(durations),
            "rss_growth": max(r["rss_peak_bytes"] for r in updates) - start["rss_bytes"]}


def peer(command):
    """samples/s and what training added to the resident set (peak over the set-up's)."""
    result = json.loads(subprocess.run(command, check=True, capture_output=True, text=True, env=ENV).stdout)
    return {"samples_per_s": result["samples_per_s"], "update_ms_median": result["update_ms_median"],
            "rss_growth": result["rss_peak_bytes"] - result["rss_setup_bytes"]}


def flops_per_sample(model):
    """Exact training FLOPs of one sample (2 per multiply-add): forward, weight gradients, and
    input gradients for every layer but the first (nothing needs the gradient of the data)."""
    if model == "mlp":
        layers = [784 * 512, 512 * 256, 256 * 10]
    else:
        layers = [26 * 26 * 32 * 9, 11 * 11 * 64 * 32 * 9, 1600 * 128, 128 * 10]
    return 2 * (2 * sum(layers) + sum(layers[1:]))


def in_process(build, args):
    """The engine against the hand-written loop in one process, per cell."""
    print("\n| model | micro | accum | threads | hand-written update ms | engine update ms | "
          "engine / hand-written speed (min-max over rounds) | engine overhead per micro-step µs |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for threads in args.threads:
        for model in args.models:
            for micro in args.micros:
                for accum in args.accums:
                    # Blocks of about a quarter of the peer runs' samples, 10 rounds of both.
                    block = max(1, TARGET_SAMPLES[model] // 4 // (micro * accum))
                    r = json.loads(subprocess.run(
                        [os.path.join(build, "bench", "engine_overhead"), "--model", model, "--micro", str(micro),
                         "--accum", str(accum), "--threads", str(threads), "--rounds", "10", "--block", str(block)],
                        check=True, capture_output=True, text=True, env=ENV).stdout)
                    print(f"| {model} | {micro} | {accum} | {threads} | {r['handwritten_update_us'] / 1e3:.2f} | "
                          f"{r['engine_update_us'] / 1e3:.2f} | {r['engine_speed_ratio']:.3f}x "
                          f"({r['ratio_min']:.2f}-{r['ratio_max']:.2f}) | {r['overhead_per_micro_step_us']:.1f} |",
                          flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("builds", nargs="+", help="bigbatch builds; the first is the one the ratios are of")
    parser.add_argument("--python", default="/usr/bin/python3", help="the Python whose PyTorch is the peer")
    parser.add_argument("--compile", action="store_true", help="torch.compile'd PyTorch as a peer too")
    parser.add_argument("--no-handwritten", action="store_true", help="leave out the hand-written libtorch loop")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--models", nargs="+", default=["mlp", "cnn", "cnn-bn"])
    parser.add_argument("--micros", type=int, nargs="+", default=[16, 64, 256])
    parser.add_argument("--accums", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--in-process", action="store_true",
                        help="engine against the hand-written loop inside one process (bench/engine_overhead)")
    args = parser.parse_args()
    builds = [os.path.abspath(b) for b in args.builds]
    handwritten = os.path.join(builds[0], "bench", "handwritten_loop")
    python_peer = os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers", "pytorch_loop.py")
    workdir = tempfile.mkdtemp(prefix="bigbatch_peer_bench_")
    torch_version = python_torch_version(args.python)
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs; PyTorch {torch_version} ({args.python}); "
          f"bigbatch builds: {', '.join(f'{b} (libtorch {libtorch_version(b)})' for b in builds)}; "
          f"OPENBLAS_CORETYPE={ENV.get('OPENBLAS_CORETYPE', '(OpenBLAS chooses)')} OMP_WAIT_POLICY={ENV['OMP_WAIT_POLICY']}")
    if args.in_process:
        in_process(builds[0], args)
        return
    ceilings = {}
    for threads in args.threads:
        gemms = [json.loads(subprocess.run([handwritten, "--gemm", "--threads", str(threads)], check=True,
                                           capture_output=True, text=True, env=ENV).stdout) for _ in range(3)]
        ceilings[threads] = statistics.median(g["gemm_gflops"] for g in gemms)
        bf16 = statistics.median(g["gemm_bf16_gflops"] for g in gemms)
        # The runs below are fp32, so the fp32 rate is their ceiling; bf16's says whether
        # --precision bf16 could pay on this CPU.
        print(f"raw: GEMM 2048^3, {threads} thread(s): fp32 {ceilings[threads]:.1f} GFLOP/s, "
              f"bf16 {bf16:.1f} GFLOP/s")

    # The sides: every bigbatch build, PyTorch eager (and compiled), the hand-written loop.
    names = side_names(builds, torch_version, args.compile, not args.no_handwritten)
    ours, others = names[0], names[1:]
    rows = []
    tag = 0
    for threads in args.threads:
        for model in args.models:
            for micro in args.micros:
                for accum in args.accums:
                    updates = max(5, TARGET_SAMPLES[model] // (micro * accum))
                    runs = {name: [] for name in names}
                    common = ["--model", model, "--micro", str(micro), "--accum", str(accum), "--threads",
                              str(threads), "--updates", str(updates)]
                    for repeat in range(args.repeats):
                        tag += 1
                        launch = [lambda b=b: bigbatch(b, workdir, model, micro, accum, threads, updates,
                                                       f"run{tag}-{os.path.basename(b)}") for b in builds]
                        launch.append(lambda: peer([args.python, python_peer, *common]))
                        if args.compile:
                            launch.append(lambda: peer([args.python, python_peer, *common, "--compile"]))
                        if not args.no_handwritten:
                            launch.append(lambda: peer([handwritten, *common]))
                        # The order rotates, so no side always runs first (or right after another).
                        order = list(range(len(names)))
                        order = order[repeat % len(order):] + order[:repeat % len(order)]
                        for i in order:
                            runs[names[i]].append(launch[i]())
                        print(f"raw: {model} micro {micro} x{accum} {threads}t repeat {repeat}: " +
                              ", ".join(f"{k} {v[-1]['samples_per_s']:.0f} samples/s "
                                        f"+{v[-1]['rss_growth'] / 2**20:.1f} MiB" +
                                        (f" (warm-up {v[-1]['warmup_s']:.1f} s)" if "warmup_s" in v[-1] else "")
                                        for k, v in runs.items()),
                              flush=True)
                    med = {k: statistics.median(r["samples_per_s"] for r in v) for k, v in runs.items()}
                    memory = {k: statistics.median(r["rss_growth"] for r in v) / 2**20 for k, v in runs.items()}
                    speeds = {k: [r["samples_per_s"] for r in v] for k, v in runs.items()}
                    # Each repeat's runs follow one another: their ratio cancels the machine's
                    # slower drifts, so the median of per-repeat ratios is the steadier figure.
                    paired = {k: [b / p for b, p in zip(speeds[ours], speeds[k])] for k in others}
                    # The same pairs by their median update time: the typical update, not moved by
                    # the streaks of slow updates this machine has at random moments.
                    typical = {k: [p["update_ms_median"] / b["update_ms_median"]
                                   for b, p in zip(runs[ours], runs[k])] for k in others}
                    mfu = med[ours] * flops_per_sample(model) / (ceilings[threads] * 1e9)
                    rows.append((model, micro, accum, threads, med, speeds, paired, typical, mfu, memory))

    print(f"\nRatios are {ours}'s speed over each other side's: median of repeats (min-max), then by median update.")
    print("\n| model | micro | accum | threads | " + " | ".join(f"{k} samples/s" for k in names) + " | " +
          " | ".join(f"/ {k}" for k in others) + f" | {ours} of GEMM ceiling | training RSS growth MiB: " +
          " / ".join(names) + " |")
    print("|---|---:|---:|---:|" + "---:|" * (len(names) + len(others) + 2))
    for model, micro, accum, threads, med, speeds, paired, typical, mfu, memory in rows:
        cells = [f"{med[k]:.0f} ({min(speeds[k]):.0f}-{max(speeds[k]):.0f})" for k in names]
        ratios = [f"{statistics.median(paired[k]):.2f}x ({min(paired[k]):.2f}-{max(paired[k]):.2f}), "
                  f"{statistics.median(typical[k]):.2f}x" for k in others]
        print(f"| {model} | {micro} | {accum} | {threads} | " + " | ".join(cells + ratios) +
              f" | {100 * mfu:.0f}% | " + " / ".join(f"{memory[k]:.0f}" for k in names) + " |")


if __name__ == "__main__":
    main()
