#!/usr/bin/python3
"""The PyTorch-Python peer of bigbatch's default job, for time-to-accuracy (issue 6): the same
cnn, Fashion-MNIST normalised the same way, 256 = 32 x 8 with the standard accumulation loop
(loss / accum; backward; step every accum), SGD with Nesterov momentum 0.9 and weight decay
5e-4, lr 0.05 on a per-update cosine schedule over 8 epochs, a test evaluation after every
epoch. Stops at the first epoch whose test accuracy reaches --target. Prints JSON per epoch.
Benchmarks only; never part of the product.

Usage: pytorch_train.py --threads 2 --target 0.9 [--seed 42] [--compile]
"""
import argparse
import json
import math
import time

import numpy as np
import torch

from pytorch_loop import images, make, read_idx  # the same model and data as the throughput peer

def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--target", type=float, default=0.9)
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--compile", action="store_true", help="torch.compile the model (PyTorch 2.x)")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)  # initialisation and shuffling
    start = time.perf_counter()
    train_x, train_y = images("train-images-idx3-ubyte"), torch.from_numpy(
        read_idx("train-labels-idx1-ubyte").astype(np.int64))
    test_x, test_y = images("t10k-images-idx3-ubyte"), torch.from_numpy(
        read_idx("t10k-labels-idx1-ubyte").astype(np.int64))
    nn = torch.nn
    net = make("cnn")
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4)
    if a.compile:
        net = torch.compile(net)  # compiled during the first updates, inside the timed training
    micro, accum = 32, 8
    n = train_x.shape[0]
    updates_per_epoch = math.ceil(n / (micro * accum))
    total = updates_per_epoch * a.epochs
    step, train_seconds = 0, 0.0
    for epoch in range(a.epochs):
        net.train()
        order = torch.randperm(n)
        epoch_start = time.perf_counter()
        for u in range(updates_per_epoch):
            window = order[u * micro * accum:(u + 1) * micro * accum]
            for group in opt.param_groups:
                group["lr"] = 0.05 * 0.5 * (1 + math.cos(math.pi * step / total))
            for k in range(0, len(window), micro):
                index = window[k:k + micro]
                loss = nn.functional.cross_entropy(net(train_x[index]), train_y[index], reduction="sum")
                (loss / len(window)).backward()
            opt.step()
            opt.zero_grad()
            step += 1
        train_seconds += time.perf_counter() - epoch_start
        net.eval()
        with torch.inference_mode():
            correct = sum((net(test_x[i:i + 1000]).argmax(1) == test_y[i:i + 1000]).sum().item()
                          for i in range(0, test_x.shape[0], 1000))
        accuracy = correct / test_x.shape[0]
        print(json.dumps({"epoch": epoch + 1, "step": step, "test_accuracy": accuracy,
                          "train_seconds": train_seconds, "wall_seconds": time.perf_counter() - start}),
              flush=True)
        if accuracy >= a.target:
            break


if __name__ == "__main__":
    main()
