#!/usr/bin/python3
"""Peak memory against micro-batch size and accumulation steps (issue 4), bigbatch beside
PyTorch in Python doing the same work (bench/peers/pytorch_loop.py: same model, SGD with
momentum, the standard accumulation loop).

For each cell it reports bigbatch's tracked tensor peak (every allocation through its CPU
allocator, per update, from metrics.jsonl) and, for both, the growth of the process's peak
resident set over its set-up (data and model in memory, before the first update): what training
itself added. bigbatch's set-up figure comes from the same command with --max-updates 0.

Usage: bench/memory_bench.py BUILD_DIR [--models mlp cnn] [--micros 16 64 256] [--accums 1 8]
"""
import argparse
import json
import os
import platform
import subprocess
import tempfile

ENV = dict(os.environ, OPENBLAS_CORETYPE=os.environ.get("OPENBLAS_CORETYPE", "SkylakeX"),
           OMP_WAIT_POLICY=os.environ.get("OMP_WAIT_POLICY", "PASSIVE"))
UPDATES = 4
MIB = 1 << 20


def bigbatch(binary, workdir, model, micro, accum, updates):
    out = os.path.join(workdir, f"{model}-{micro}-{accum}-{updates}")
    subprocess.run([binary, "train", "--model", model, "--micro-batch", str(micro), "--accum-steps", str(accum),
                    "--threads", "1", "--max-updates", str(updates), "--epochs", "1000", "--no-nesterov",
                    "--weight-decay", "0", "--schedule", "constant", "--progress", "off", "--out", out],
                   check=True, capture_output=True, env=ENV)
    with open(os.path.join(out, "metrics.jsonl")) as f:
        steps = [r for r in map(json.loads, f) if "loss" in r]
    return max(r["peak_bytes"] for r in steps), max(r["rss_peak_bytes"] for r in steps)


def bigbatch_setup_rss(binary, workdir, model):
    """Peak RSS of the set-up alone: the same command with --max-updates 0 exits after loading
    the data and building the model; wait4() gives that one child's peak."""
    out = os.path.join(workdir, f"{model}-setup")
    child = subprocess.Popen([binary, "train", "--model", model, "--max-updates", "0", "--threads", "1",
                              "--progress", "off", "--out", out],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    assert child.returncode == 0, f"set-up run failed ({child.returncode})"
    return usage.ru_maxrss * 1024


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

    setup = {model: bigbatch_setup_rss(binary, workdir, model) for model in args.models}
    for model, rss in setup.items():
        print(f"raw: bigbatch {model} set-up peak RSS {rss / MIB:.1f} MiB")
    rows = []
    for model in args.models:
        for micro in args.micros:
            for accum in args.accums:
                tensor_peak, rss_peak = bigbatch(binary, workdir, model, micro, accum, UPDATES)
                python = json.loads(subprocess.run(
                    ["/usr/bin/python3", python_peer, "--model", model, "--micro", str(micro), "--accum", str(accum),
                     "--threads", "1", "--updates", str(UPDATES)],
                    check=True, capture_output=True, text=True, env=ENV).stdout)
                row = {"model": model, "micro": micro, "accum": accum, "tensor_peak": tensor_peak,
                       "rss_growth": rss_peak - setup[model],
                       "python_rss_growth": python["rss_peak_bytes"] - python["rss_setup_bytes"]}
                print("raw: " + json.dumps(row))
                rows.append(row)

    print("\n| model | micro | accum | bigbatch tensor peak | bigbatch RSS growth | Python RSS growth | "
          "Python / bigbatch (RSS growth) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        ratio = r["python_rss_growth"] / r["rss_growth"] if r["rss_growth"] > 0 else float("nan")
        print(f"| {r['model']} | {r['micro']} | {r['accum']} | {r['tensor_peak'] / MIB:.1f} MiB | "
              f"{r['rss_growth'] / MIB:.1f} MiB | {r['python_rss_growth'] / MIB:.1f} MiB | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
