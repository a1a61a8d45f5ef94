#!/usr/bin/python3
"""The peer a PyTorch user would write: nn.Sequential, SGD with momentum, the standard
accumulation loop (loss / accum; backward; step every accum), in-memory data: Fashion-MNIST
normalised as bigbatch does, or random data with --data random. Prints JSON.
Benchmarks only; never part of the product.

Usage: pytorch_loop.py --model cnn --micro 64 --accum 8 --threads 1 --updates 30
       pytorch_loop.py --torchscript mlp.pt ...   (a scripted module, as bigbatch trains it)
"""
import argparse
import gzip
import json
import statistics
import struct
import time

import numpy as np
import torch

FASHION = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530  # Fashion-MNIST's; bigbatch measures 0.286041, 0.353024 on it


def read_idx(name):
    with gzip.open(f"{FASHION}/{name}.gz", "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def images(name):
    x = torch.from_numpy(read_idx(name).astype(np.float32) / 255.0)
    return ((x - MEAN) / STD).unsqueeze(1)


def make(name):
    nn = torch.nn
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                             nn.Linear(256, 10))
    bn = name == "cnn-bn"
    layers = [nn.Conv2d(1, 32, 3, bias=not bn)] + ([nn.BatchNorm2d(32)] if bn else []) + [nn.ReLU(), nn.MaxPool2d(2)]
    layers += [nn.Conv2d(32, 64, 3, bias=not bn)] + ([nn.BatchNorm2d(64)] if bn else []) + [nn.ReLU(), nn.MaxPool2d(2)]
    layers += [nn.Flatten(), nn.Linear(1600, 128), nn.ReLU(), nn.Linear(128, 10)]
    return nn.Sequential(*layers)


def status_bytes(name):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(name + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{name} not in /proc/self/status")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="cnn")
    p.add_argument("--micro", type=int, default=64)
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--updates", type=int, default=30)
    p.add_argument("--data", choices=["fashion", "random"], default="fashion")
    p.add_argument("--torchscript", help="train this scripted module (torch.jit.load) instead of --model")
    p.add_argument("--no-jit-optimize", action="store_true", help="the graph executor's optimisation off")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile the model (PyTorch 2.x; inductor's C++/OpenMP kernels on the CPU)")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    if a.no_jit_optimize:
        torch._C._jit_set_graph_executor_optimize(False)
    net = torch.jit.load(a.torchscript) if a.torchscript else make(a.model)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    if a.compile:
        net = torch.compile(net)  # compiled on the first update (inside the warm-up, timed apart)
    if a.data == "random":
        inputs, labels = torch.randn(60000, 1, 28, 28), torch.randint(0, 10, (60000,))
    else:
        inputs = images("train-images-idx3-ubyte")
        labels = torch.from_numpy(read_idx("train-labels-idx1-ubyte").astype(np.int64))
    n = inputs.shape[0]
    order = torch.randperm(n)
    position = 0

    def update():
        nonlocal position
        for _ in range(a.accum):
            if position + a.micro > n:
                position = 0
            index = order[position:position + a.micro]
            position += a.micro
            loss = torch.nn.functional.cross_entropy(net(inputs[index]), labels[index]) / a.accum
            loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    # Training's resident peak, as bigbatch reports it: reset the high-water mark after set-up.
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    rss_setup = status_bytes("VmRSS")
    warmup_start = time.perf_counter()
    for _ in range(3):
        update()
    warmup_seconds = time.perf_counter() - warmup_start
    # Each update's duration too: its median is not moved by the machine's slow streaks.
    durations = []
    start = time.perf_counter()
    for _ in range(a.updates):
        begin = time.perf_counter()
        update()
        durations.append(time.perf_counter() - begin)
    seconds = time.perf_counter() - start
    print(json.dumps({"samples_per_s": a.updates * a.accum * a.micro / seconds, "updates_per_s": a.updates / seconds,
                      "update_ms_median": 1e3 * statistics.median_high(durations),
                      "warmup_s": warmup_seconds,  # the first 3 updates: torch.compile's compilation
                      "rss_setup_bytes": rss_setup,
                      "rss_peak_bytes": status_bytes("VmHWM")}))


if __name__ == "__main__":
    main()
