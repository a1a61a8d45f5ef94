#!/usr/bin/python3
"""Data-parallel benchmark (issue 3): throughput of 1 rank x 1 thread, 2 ranks x 1 thread and
1 rank x 2 threads on the same global batch, measured alternately; and all-reduce calls and
bytes per update at accumulation 1, 4 and 16 against a naive loop that all-reduces after
every micro-step. Prints the machine, the settings, every raw figure and a markdown table.

With --slow-link RATE it measures what a slower link between hosts costs instead: two network
namespaces joined by a veth pair (tests/e2e/netns.py; root needed), one rank on each, the
same global batch at accumulation 1, 4 and 16, over the bare veth and over the link shaped to
RATE (tc's tbf, e.g. 50mbit): seconds per update and what the link adds to each. The
all-reduce runs once per update, so that cost is the same whatever the accumulation steps,
and per sample it shrinks with the batch.

Usage: bench/dist_bench.py BIGBATCH_BINARY [--repeats 3]
       bench/dist_bench.py BIGBATCH_BINARY --slow-link 50mbit
"""
import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def metrics(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def run(binary, workdir, name, ranks, threads, model, micro, subset, extra=()):
    out = os.path.join(workdir, name)
    train = [binary, "train", "--model", model, "--train-subset", str(subset), "--global-batch", "256",
             "--micro-batch", str(micro), "--epochs", "1", "--progress", "off", "--out", out, *extra]
    if ranks == 1:
        command = train + ["--threads", str(threads)]
    else:
        command = [binary, "launch", "--nproc", str(ranks), "--master-port", str(free_port()), "--"] + train + \
                  ["--threads", str(threads)]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    updates = [r for r in metrics(out) if "loss" in r]
    steady = updates[5:]  # the first updates warm caches and allocators
    seconds = sum(1 / r["updates_per_s"] for r in steady)
    return sum(r["items"] for r in steady) / seconds, updates


def run_on_two_hosts(binary, hosts, workdir, name, micro, port):
    """One rank per host (`launch --nproc 1 --nnodes 2` inside each namespace); returns the
    median seconds per update past the first two, and the all-reduce calls per update."""
    from netns import MASTER
    out = os.path.join(workdir, name)
    train = [binary, "train", "--model", "mlp", "--train-subset", "2560", "--global-batch", "256", "--micro-batch",
             str(micro), "--epochs", "1", "--threads", "1", "--progress", "off", "--dist-timeout", "60",
             "--out", out]
    launchers = []
    for node in (0, 1):
        env = dict(os.environ, GLOO_SOCKET_IFNAME=hosts.veth[node])
        launchers.append(subprocess.Popen(
            ["ip", "netns", "exec", hosts.ns[node], binary, "launch", "--nproc", "1", "--nnodes", "2",
             "--node-rank", str(node), "--master-addr", MASTER, "--master-port", str(port), "--", *train],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env))
    codes = [launcher.wait(timeout=600) for launcher in launchers]
    if codes != [0, 0]:
        raise SystemExit(f"{name}: the launchers exited {codes}; run it by hand to see why")
    updates = [r for r in metrics(out) if "loss" in r and "event" not in r]
    return statistics.median(1 / r["updates_per_s"] for r in updates[2:]), updates[-1]["allreduce_calls"]


def slow_link_table(binary, rate):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e"))
    from netns import two_hosts_for
    hosts = two_hosts_for("--slow-link")
    workdir = tempfile.mkdtemp(prefix="bigbatch_dist_bench_")
    rows = []
    try:
        port = 29600
        for accumulation in [1, 4, 16]:
            micro = 128 // accumulation  # per rank: 128 of the 256
            seconds = {}
            for link in ("veth", rate):
                if link != "veth":
                    why_not = hosts.slow_link(rate)
                    if why_not:
                        raise SystemExit(why_not)
                port += 1
                try:
                    seconds[link], calls = run_on_two_hosts(binary, hosts, workdir, f"{link}-{accumulation}", micro,
                                                            port)
                finally:
                    hosts.fast_link()
                print(f"raw: accumulation {accumulation}, {link}: {seconds[link]:.3f} s per update, "
                      f"{calls} all-reduce calls per update", flush=True)
            rows.append((accumulation, micro, calls, seconds["veth"], seconds[rate]))
    finally:
        hosts.remove()
    print(f"\nmlp (535k parameters, 2.1 MB of gradients), global batch 256 = 2 hosts x 1 rank x micro x "
          f"accumulation; median seconds per update:\n")
    print(f"| accumulation steps | micro | all-reduce calls per update | veth | {rate} | the link's cost per update "
          f"| an all-reduce per micro-step would pay |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for accumulation, micro, calls, fast, slow in rows:
        print(f"| {accumulation} | {micro} | {calls} | {fast:.3f} s | {slow:.3f} s | {slow - fast:+.3f} s | "
              f"{accumulation * (slow - fast):+.2f} s |")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--slow-link", metavar="RATE", help="what a link of this rate between two hosts costs")
    args = parser.parse_args()
    binary = os.path.abspath(args.binary)
    if args.slow_link:
        slow_link_table(binary, args.slow_link)
        return
    workdir = tempfile.mkdtemp(prefix="bigbatch_dist_bench_")
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}")

    cells = [("1 rank x 1 thread", 1, 1), ("2 ranks x 1 thread", 2, 1), ("1 rank x 2 threads", 1, 2)]
    table = []
    for model in ["mlp", "cnn"]:
        subset = 25600 if model == "mlp" else 6400
        samples = {name: [] for name, _, _ in cells}
        for repeat in range(args.repeats):  # alternate the cells so drift hits them alike
            for name, ranks, threads in cells:
                rate, _ = run(binary, workdir, f"{model}-{ranks}-{threads}-{repeat}", ranks, threads, model, 32, subset)
                samples[name].append(rate)
                print(f"raw: {model} {name} repeat {repeat}: {rate:.0f} samples/s")
        base = statistics.median(samples[cells[0][0]])
        for name, _, _ in cells:
            values = samples[name]
            table.append((model, name, statistics.median(values), min(values), max(values),
                          statistics.median(values) / base))

    print("\n| model | layout (global 256, micro 32) | samples/s median | min-max | vs 1 rank x 1 thread |")
    print("|---|---|---:|---:|---:|")
    for model, name, med, lo, hi, ratio in table:
        print(f"| {model} | {name} | {med:.0f} | {lo:.0f}-{hi:.0f} | {ratio:.2f}x |")

    print("\n| accumulation steps | micro | all-reduce calls per update | bytes per update | naive per-micro-step calls | naive bytes |")
    print("|---:|---:|---:|---:|---:|---:|")
    for accumulation in [1, 4, 16]:
        micro = 256 // (2 * accumulation)
        _, updates = run(binary, workdir, f"comm-{accumulation}", 2, 1, "mlp", micro, 2560)
        calls = updates[-1]["allreduce_calls"]
        # Bucket contents: every parameter in float32, plus 4 floats of window totals.
        params = 784 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10
        volume = 4 * (params + 4)
        print(f"| {accumulation} | {micro} | {calls} | {volume} | {calls * accumulation} | {volume * accumulation} |")


if __name__ == "__main__":
    main()
