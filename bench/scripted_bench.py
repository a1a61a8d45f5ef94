#!/usr/bin/python3
"""A user's TorchScript module against the same network built in (issue 18), side by side in
one run: bigbatch training the built-in mlp / cnn, bigbatch training the same architecture
scripted in PyTorch (--model torchscript:FILE) with the graph executor's optimisation off (the
default) and on, and PyTorch in Python training that same scripted file (bench/peers/
pytorch_loop.py --torchscript). Same data, micro-batch, accumulation, SGD with momentum and
threads. Each cell runs the peers alternately --repeats times; the table shows median samples/s
and each peer's ratio to bigbatch's scripted run (the median of the repeats' own ratios).

Usage: bench/scripted_bench.py BUILD_DIR [--repeats 3] [--threads 1 2] [--models mlp cnn]
                               [--micros 16 64] [--accums 1 8] [--samples N]
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "peers"))
from pytorch_loop import make  # noqa: E402
from peer_bench import ENV, TARGET_SAMPLES, bigbatch  # noqa: E402

import torch  # noqa: E402


def python_peer(script, micro, accum, threads, updates, optimize):
    command = ["/usr/bin/python3", os.path.join(HERE, "peers", "pytorch_loop.py"), "--torchscript", script,
               "--micro", str(micro), "--accum", str(accum), "--threads", str(threads), "--updates", str(updates)]
    if not optimize:
        command.append("--no-jit-optimize")
    result = json.loads(subprocess.run(command, check=True, capture_output=True, text=True, env=ENV).stdout)
    return {"samples_per_s": result["samples_per_s"]}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--models", nargs="+", default=["mlp", "cnn"])
    parser.add_argument("--micros", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--accums", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--samples", type=int, default=0,
                        help="samples per run (default: the peers' TARGET_SAMPLES; fewer suffice "
                             "for the memory columns)")
    args = parser.parse_args()
    build = os.path.abspath(args.build)
    workdir = tempfile.mkdtemp(prefix="bigbatch_scripted_bench_")
    scripts = {}
    for model in args.models:
        scripts[model] = os.path.join(workdir, f"{model}.pt")
        torch.jit.script(make(model)).save(scripts[model])
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs; libtorch/PyTorch {torch.__version__}")
    print("\n| model | micro | accum | threads | built-in samples/s | scripted (optimise off) | "
          "scripted (optimise on) | Python, same script | scripted / built-in | scripted / Python | "
          "RSS growth built-in / optimise off / on (MiB) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for threads in args.threads:
        for model in args.models:
            for micro in args.micros:
                for accum in args.accums:
                    updates = max(10, (args.samples or TARGET_SAMPLES[model]) // (micro * accum))
                    runs = {"builtin": [], "scripted": [], "optimised": [], "python": []}
                    for repeat in range(args.repeats):
                        tag = f"{model}-{micro}-{accum}-{threads}-{repeat}"
                        runs["builtin"].append(bigbatch(build, workdir, model, micro, accum, threads, updates,
                                                        tag + "-b"))
                        runs["scripted"].append(bigbatch(build, workdir, f"torchscript:{scripts[model]}", micro,
                                                         accum, threads, updates, tag + "-s"))
                        os.environ["BIGBATCH_TORCHSCRIPT_OPTIMIZE"] = "1"
                        ENV["BIGBATCH_TORCHSCRIPT_OPTIMIZE"] = "1"
                        try:
                            runs["optimised"].append(bigbatch(build, workdir, f"torchscript:{scripts[model]}",
                                                              micro, accum, threads, updates, tag + "-o"))
                        finally:
                            del ENV["BIGBATCH_TORCHSCRIPT_OPTIMIZE"]
                            del os.environ["BIGBATCH_TORCHSCRIPT_OPTIMIZE"]
                        runs["python"].append(python_peer(scripts[model], micro, accum, threads, updates, True))
                    med = {k: statistics.median(r["samples_per_s"] for r in v) for k, v in runs.items()}
                    ratio = lambda a, b: statistics.median(  # noqa: E731
                        x["samples_per_s"] / y["samples_per_s"] for x, y in zip(runs[a], runs[b]))
                    # What training added to the resident set (the peak over the set-up's): the
                    # executor's optimisation keeps its specialised graphs.
                    rss = {k: statistics.median(r["rss_growth"] for r in runs[k]) / 2**20
                           for k in ("builtin", "scripted", "optimised")}
                    print(f"| {model} | {micro} | {accum} | {threads} | {med['builtin']:.0f} | {med['scripted']:.0f} | "
                          f"{med['optimised']:.0f} | {med['python']:.0f} | {ratio('scripted', 'builtin'):.2f}x | "
                          f"{ratio('scripted', 'python'):.2f}x | {rss['builtin']:.0f} / {rss['scripted']:.0f} / "
                          f"{rss['optimised']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
