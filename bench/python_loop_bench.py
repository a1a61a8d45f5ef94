#!/usr/bin/env python3
"""bigbatch.Accumulator and bigbatch.train against the hand-written PyTorch loop they replace
and against Hugging Face Accelerate's accumulation (issue 55): the same module, micro-batches
and accumulation, AdamW with clipping, in one process, the sides alternated round by round. The
hand-written loop divides each micro-batch's summed loss by the window's items before its
backward (the exact way to write it), clips and steps; Accelerate's loop is its documented one
(`with accelerator.accumulate(model)`, the micro-batch's mean loss, `accelerator.backward`,
clipping when the gradients sync; on the CPU), present when the environment has accelerate; the
accumulator back-propagates the sums and makes the update in the engine; train() runs the whole
loop in the engine (its records and run directory included), calling the module for each
micro-batch. Samples per second of the steady updates, per side and round, and the ratios of
the medians.

Run with the Python the package is installed for, e.g.
  ~/.cache/bigbatch/python-debian/bin/python bench/python_loop_bench.py --rounds 3
"""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F


def cnn():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(64 * 7 * 7, 128), torch.nn.ReLU(),
        torch.nn.Linear(128, 10))


class Lm(torch.nn.Module):
    """A gpt-shaped causal transformer (pre-norm blocks of nn.TransformerEncoderLayer)."""

    def __init__(self, vocab=256, d=128, layers=4, heads=4, seq=128):
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(vocab, d)
        self.position = torch.nn.Parameter(0.02 * torch.randn(seq, d))
        layer = torch.nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True,
                                                 norm_first=True)
        self.blocks = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = torch.nn.Linear(d, vocab)
        self.register_buffer("mask", torch.triu(torch.full((seq, seq), float("-inf")), 1))

    def forward(self, tokens):
        n = tokens.size(1)
        return self.head(self.blocks(self.embed(tokens) + self.position[:n], mask=self.mask[:n, :n]))


def cells(samples):
    generator = torch.Generator().manual_seed(1)
    images = (torch.randn(samples, 1, 28, 28, generator=generator),
              torch.randint(0, 10, (samples,), generator=generator))
    tokens = torch.randint(0, 256, (samples // 8, 129), generator=generator)
    text = (tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous())

    def classify(model, x, y):
        return F.cross_entropy(model(x), y, reduction="sum"), y.numel()

    def lm(model, x, y):
        logits = model(x)
        return F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum"), y.numel()

    return [("cnn, 256 = 32 x 8", cnn, images, classify, 256, 32),
            ("gpt shape (4 x 128, seq 128), 32 = 8 x 4", Lm, text, lm, 32, 8)]


def timed_updates(data, global_batch, updates, one_update):
    """Samples per second of `one_update(window)` (a window: the sample indices of one update)
    over the steady updates; the first two warm the allocator and the kernels."""
    x, _ = data
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    timed = 0.0
    for update in range(updates):
        start = time.perf_counter()
        one_update(order[(update * global_batch) % len(x):][:global_batch])
        if update >= 2:
            timed += time.perf_counter() - start
    return (updates - 2) * global_batch / timed


def hand_written(make, data, summed_loss, global_batch, micro, updates):
    model = make()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=5e-4)
    x, y = data

    def one_update(window):
        items = y[window].numel()
        for begin in range(0, len(window), micro):
            part = window[begin:begin + micro]
            loss, _ = summed_loss(model, x[part], y[part])
            (loss / items).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return timed_updates(data, global_batch, updates, one_update)


def accelerate_loop(make, data, summed_loss, global_batch, micro, updates):
    """Accelerate's gradient accumulation as its documentation writes it: the micro-batch's
    mean loss (its summed loss over its items), divided by the steps by accelerator.backward."""
    from accelerate import Accelerator
    model = make()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=5e-4)
    accelerator = Accelerator(gradient_accumulation_steps=global_batch // micro, cpu=True)
    model, optimizer = accelerator.prepare(model, optimizer)
    x, y = data

    def one_update(window):
        for begin in range(0, len(window), micro):
            part = window[begin:begin + micro]
            with accelerator.accumulate(model):
                loss, items = summed_loss(model, x[part], y[part])
                accelerator.backward(loss / items)
                if accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)

    rate = timed_updates(data, global_batch, updates, one_update)
    accelerator.free_memory()
    return rate


def has_accelerate():
    try:
        import accelerate  # noqa: F401
        return True
    except ImportError:
        return False


def accumulator(make, data, summed_loss, global_batch, micro, updates):
    import bigbatch  # here: --help answers without the package
    model = make()
    acc = bigbatch.Accumulator(model, global_batch=global_batch, micro_batch=micro,
                               optimizer="adamw", lr=1e-3, lr_scaling="none", schedule="constant",
                               clip_norm=1.0, max_updates=updates, epochs=1000)
    timed, done = 0.0, 0
    start = time.perf_counter()
    for window in acc.windows(data):
        for x, y in window:
            loss, items = summed_loss(model, x, y)
            acc.backward(loss, items=items)
        acc.step()
        done += 1
        if done > 2:
            timed += time.perf_counter() - start
        start = time.perf_counter()
    return (updates - 2) * global_batch / timed


def engine_loop(make, data, summed_loss, global_batch, micro, updates):
    """bigbatch.train: the steady updates timed by the run's own record stamps (each record's
    time, written as its update ends), records and progress included."""
    import tempfile
    import bigbatch
    model = make()
    with tempfile.TemporaryDirectory() as scratch:
        run = bigbatch.train(model, data, global_batch=global_batch, micro_batch=micro,
                             optimizer="adamw", lr=1e-3, lr_scaling="none", schedule="constant",
                             clip_norm=1.0, max_updates=updates, epochs=1000, progress="off",
                             threads=torch.get_num_threads(), no_tensorboard=True,
                             out=scratch + "/run")
        stamps = [r["time"] for r in run.updates]
    return (updates - 2) * global_batch / (stamps[-1] - stamps[1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="alternated rounds per side")
    parser.add_argument("--updates", type=int, default=12, help="updates per round (2 warm-up)")
    parser.add_argument("--threads", type=int, default=2, help="torch's intra-op threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} threads, {args.rounds} rounds of "
          f"{args.updates} updates, AdamW, clip 1.0")
    loops = {"hand-written loop": hand_written}
    if has_accelerate():
        import accelerate
        loops[f"Accelerate {accelerate.__version__}"] = accelerate_loop
    else:
        print("(no accelerate in this environment: its side is left out; pip install accelerate)")
    loops.update({"bigbatch.Accumulator": accumulator, "bigbatch.train": engine_loop})
    for name, make, data, summed_loss, global_batch, micro in cells(4096):
        sides = {side: [] for side in loops}
        for _ in range(args.rounds):
            for side, loop in loops.items():
                sides[side].append(loop(make, data, summed_loss, global_batch, micro, args.updates))
        medians = {side: statistics.median(rates) for side, rates in sides.items()}
        print(f"\n{name}")
        for side, rates in sides.items():
            print(f"  {side:22s} {medians[side]:9.1f} samples/s  (rounds: "
                  + ", ".join(f"{r:.1f}" for r in rates) + ")")
        for side in list(loops)[1:]:
            print(f"  {side} / hand-written {medians[side] / medians['hand-written loop']:.3f}x")


if __name__ == "__main__":
    main()
