#!/usr/bin/python3
"""Time to quality on fortunes: held-out bits per byte after the same token budget and after the
same training time, bigbatch's gpt against the same model trained by PyTorch in Python with the
same recipe, in one run.

Both sides start from the same weights (bigbatch's initial safetensors, loaded into the PyTorch
twin of tests/python/gpt_oracle.py with strict=True), see the same documents in the same order
per update (bigbatch's sampler and hold-out reproduced), pad each micro-batch to its longest
document, divide the summed token loss by the update's target tokens, clip, and step AdamW on
the same warmup and cosine schedule. Both evaluate the same held-out documents at the same
updates; the Python side's clock runs during its updates only, as bigbatch's train_seconds does.

The corpus is the fortunes package cut into documents here (files in name order, the "%" lines
between them) and written as one file in the fortune format, so both sides read exactly the same
documents: bigbatch's count is checked against this script's.

A third side trains the same updates with --micro-batch-tokens (micro x seq-len padded tokens
per micro-batch, the fixed micro-batch's own bound at its longest): the same mathematics with
less padding, which is what bigbatch offers beyond the loop a user would write.

Usage: bench/lm_time_to_quality.py BUILD_DIR [--updates 200] [--eval-every 25] [--threads 2]
                                   [--seq-len 256] [--global-batch 64] [--micro-batch 16]
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

from bench_env import bigbatch_environment

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FORTUNES = "/usr/share/games/fortunes"
ENV = bigbatch_environment()  # the same BLAS kernels and OpenMP policy on every side
END_OF_TEXT, IGNORE = 256, -100
SEED = 42


def fortune_documents(directory):
    """data/text_corpus.h's cut of a fortune directory: regular files in name order (links to
    files already read and binary files skipped), documents between lines holding only "%",
    whitespace-only documents dropped, newlines kept."""
    documents, seen = [], set()
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        real = os.path.realpath(path)
        if not os.path.isfile(real) or real in seen:
            continue
        seen.add(real)
        with open(real, "rb") as f:
            data = f.read()
        if b"\0" in data:
            continue
        current = []
        for line in data.splitlines(keepends=True):
            if line.rstrip(b"\r\n") == b"%":
                documents.append(b"".join(current))
                current = []
            else:
                current.append(line)
        documents.append(b"".join(current))
    documents = [d if d.endswith(b"\n") else d + b"\n" for d in documents if d.strip()]
    return documents


def bigbatch_side(args, workdir, common, name, batching):
    init_dir, run_dir = os.path.join(workdir, "init"), os.path.join(workdir, name)
    if not os.path.exists(init_dir):
        subprocess.run(common + ["--micro-batch", str(args.micro_batch), "--max-updates", "0", "--out", init_dir],
                       check=True, capture_output=True, env=ENV)
    start = time.perf_counter()
    result = subprocess.run(common + batching + ["--max-updates", str(args.updates), "--eval-every",
                                                 f"{args.eval_every}u", "--init-weights",
                                                 os.path.join(init_dir, "weights.safetensors"), "--out", run_dir],
                            check=True, capture_output=True, text=True, env=ENV)
    wall = time.perf_counter() - start
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    held_out = {r["step"]: r for r in records if "val_bpb" in r}  # intervals and the last epoch
    curve = [(step, held_out[step]["train_seconds"], held_out[step]["tokens_seen"], held_out[step]["val_bpb"])
             for step in sorted(held_out)]
    updates = [r for r in records if "loss" in r and "event" not in r]
    data_line = [line for line in result.stderr.splitlines() if line.startswith("data: ")]
    return {"curve": curve, "lrs": [u["lr"] for u in updates], "losses": [u["loss"] for u in updates],
            "wall": wall, "data": data_line[0] if data_line else "",
            "init": os.path.join(init_dir, "weights.safetensors")}


PEER = r"""
import json, math, sys, time
import torch
sys.path.insert(0, TESTS_PYTHON)
from bigbatch_oracle import epoch_order, lr_at, read_safetensors
from gpt_oracle import GptTwin, VOCAB

spec = json.loads(sys.argv[1])
torch.set_num_threads(spec["threads"])
with open(spec["corpus_docs"], "rb") as f:
    documents = [bytes(d) for d in json.load(f)["documents_latin1"].encode("latin-1").split(b"\x00")]
seq = spec["seq_len"]
rows = []
for d in documents:
    tokens = ([256] + list(d) + [256])[: seq + 1]
    rows.append((tokens[:-1], tokens[1:]))
held = epoch_order(spec["seed"], -1, len(rows))
val, train = held[: spec["val_size"]], sorted(held[spec["val_size"]:])

model = torch.nn.Sequential(GptTwin(seq, spec["layers"], spec["d_model"], spec["heads"]))
model.load_state_dict(read_safetensors(spec["init"]), strict=True)
optimizer = torch.optim.AdamW(model.parameters(), lr=spec["lr"], weight_decay=spec["weight_decay"])


def batch(part):
    longest = max(len(rows[r][1]) for r in part)
    inputs = torch.tensor([rows[r][0] + [256] * (longest - len(rows[r][0])) for r in part])
    targets = torch.tensor([rows[r][1] + [-100] * (longest - len(rows[r][1])) for r in part])
    return inputs, targets


def bits_per_byte():
    model.eval()
    nats, text_bytes = 0.0, 0
    with torch.no_grad():
        for begin in range(0, len(val), 32):
            part = val[begin:begin + 32]
            inputs, targets = batch(part)
            logits = model(inputs)
            nats += torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1),
                                                      reduction="sum", ignore_index=-100).item()
            text_bytes += sum(sum(1 for t in rows[r][1] if t != 256) for r in part)
    model.train()
    return nats / math.log(2) / text_bytes


G, micro, total = spec["global_batch"], spec["micro_batch"], spec["updates"]
order = epoch_order(spec["seed"], 0, len(train))
curve, losses, lrs, trained, tokens_seen = [], [], [], 0.0, 0
for step in range(total):
    start = time.perf_counter()
    window = [train[i] for i in order[step * G:(step + 1) * G]]
    items = sum(len(rows[r][1]) for r in window)
    loss_sum = 0.0
    for begin in range(0, len(window), micro):
        inputs, targets = batch(window[begin:begin + micro])
        logits = model(inputs)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1),
                                                 reduction="sum", ignore_index=-100)
        (loss / items).backward()
        loss_sum += loss.item()
    torch.nn.utils.clip_grad_norm_(model.parameters(), spec["clip"])
    lr = lr_at(step, spec["lr"], spec["warmup"], total)
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    trained += time.perf_counter() - start
    tokens_seen += items
    losses.append(loss_sum / items)
    lrs.append(lr)
    if (step + 1) % spec["eval_every"] == 0 or step + 1 == total:
        curve.append((step + 1, trained, tokens_seen, bits_per_byte()))
print(json.dumps({"curve": curve, "losses": losses, "lrs": lrs}))
"""


def python_side(args, workdir, documents, init):
    docs_path = os.path.join(workdir, "documents.json")
    with open(docs_path, "w") as f:
        json.dump({"documents_latin1": b"\x00".join(documents).decode("latin-1")}, f)
    spec = {"threads": args.threads, "corpus_docs": docs_path, "seq_len": args.seq_len, "seed": SEED,
            "val_size": args.val_size, "layers": 4, "d_model": 128, "heads": 4, "lr": args.lr,
            "weight_decay": 5e-4, "global_batch": args.global_batch, "micro_batch": args.micro_batch,
            "updates": args.updates, "clip": 1.0, "warmup": args.warmup, "eval_every": args.eval_every,
            "init": init}
    code = PEER.replace("TESTS_PYTHON", repr(os.path.join(ROOT, "tests", "python")))
    start = time.perf_counter()
    result = subprocess.run(["/usr/bin/python3", "-c", code, json.dumps(spec)], check=True, capture_output=True,
                            text=True, env=ENV)
    out = json.loads(result.stdout.strip().splitlines()[-1])
    out["wall"] = time.perf_counter() - start
    return out


def at_time(curve, seconds):
    """Bits per byte at `seconds` of training, linear between evaluations (None past the end)."""
    previous = (0.0, None)
    for _, t, _, bpb in curve:
        if t >= seconds:
            if previous[1] is None:
                return bpb
            share = (seconds - previous[0]) / (t - previous[0])
            return previous[1] + share * (bpb - previous[1])
        previous = (t, bpb)
    return None


def time_to(curve, bpb_goal):
    """Training seconds until the curve first reaches `bpb_goal`, linear between evaluations."""
    previous = None
    for _, t, _, bpb in curve:
        if bpb <= bpb_goal:
            if previous is None:
                return t
            share = (previous[1] - bpb_goal) / (previous[1] - bpb)
            return previous[0] + share * (t - previous[0])
        previous = (t, bpb)
    return None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build")
    parser.add_argument("--updates", type=int, default=200)
    parser.add_argument("--eval-every", type=int, default=25)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--global-batch", type=int, default=64)
    parser.add_argument("--micro-batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--val-size", type=int, default=300)
    args = parser.parse_args()

    workdir = tempfile.mkdtemp(prefix="bigbatch_ttq_")
    documents = fortune_documents(FORTUNES)
    corpus = os.path.join(workdir, "fortunes.txt")
    with open(corpus, "wb") as f:
        f.write(b"".join(d + b"%\n" for d in documents))
    common = [os.path.join(args.build, "bigbatch"), "train", "--dataset", f"text:{corpus}", "--model", "gpt",
              "--seq-len", str(args.seq_len), "--global-batch", str(args.global_batch), "--optimizer", "adamw", "--lr", str(args.lr), "--lr-scaling", "none",
              "--warmup", f"{args.warmup}u", "--schedule", "cosine", "--clip-norm", "1", "--val-size",
              str(args.val_size), "--seed", str(SEED), "--threads", str(args.threads), "--progress", "off"]
    ours = bigbatch_side(args, workdir, common, "bigbatch", ["--micro-batch", str(args.micro_batch)])
    if f"{len(documents)} documents" not in ours["data"]:
        sys.exit(f"the corpus differs: bigbatch read '{ours['data']}', this script cut {len(documents)} documents")
    peer = python_side(args, workdir, documents, ours["init"])
    # The same updates with micro-batches cut by padded tokens (at most micro x seq-len, the fixed
    # micro-batch's own bound at its longest): less padding, the same mathematics.
    by_tokens = bigbatch_side(args, workdir, common, "tokens",
                              ["--micro-batch-tokens", str(args.micro_batch * args.seq_len)])

    lr_gap = max(abs(a - b) / b for a, b in zip(ours["lrs"], peer["lrs"]) if b > 0)
    loss_gap = max(abs(a - b) for side in (ours, by_tokens) for a, b in zip(side["losses"], peer["losses"]))
    print(f"fortunes: {len(documents)} documents, {args.val_size} held out; gpt 4x128, seq {args.seq_len}, "
          f"global batch {args.global_batch} = micro {args.micro_batch} x {args.global_batch // args.micro_batch}, "
          f"AdamW lr {args.lr} warmup {args.warmup}u cosine over {args.updates} updates, clip 1, "
          f"{args.threads} thread(s); per-update rate equal to {lr_gap:.1g}, training losses within {loss_gap:.2g}")
    print()
    sides = [("bigbatch", ours), (f"bigbatch --micro-batch-tokens {args.micro_batch * args.seq_len}", by_tokens),
             ("PyTorch-Python", peer)]
    print("| update | tokens | " + " | ".join(f"{name} train s" for name, _ in sides) + " | " +
          " | ".join(f"{name} bpb" for name, _ in sides) + " |")
    print("|---:" * (2 + 2 * len(sides)) + "|")
    for points in zip(*(side["curve"] for _, side in sides)):
        print(f"| {points[0][0]} | {points[0][2]} | " + " | ".join(f"{p[1]:.1f}" for p in points) + " | " +
              " | ".join(f"{p[3]:.4f}" for p in points) + " |")
    print()
    final_peer = peer["curve"][-1]
    budget = min(side["curve"][-1][1] for _, side in sides)
    goal = max(side["curve"][-1][3] for _, side in sides)  # the quality every side reaches
    print(f"same token budget ({final_peer[2]} tokens, {args.updates} updates) and same training time "
          f"({budget:.1f} s, the fastest side's whole run); time to {goal:.4f} bpb (the worst final):")
    print()
    print("| engine | bpb after the budget | training s | wall s | bpb at the same time | time to the goal | "
          "speed-up over Python |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, side in sides:
        final = side["curve"][-1]
        reached = time_to(side["curve"], goal)
        print(f"| {name} | {final[3]:.4f} | {final[1]:.1f} | {side['wall']:.1f} | "
              f"{at_time(side['curve'], budget):.4f} | {reached:.1f} s | "
              f"{time_to(peer['curve'], goal) / reached:.2f}x |")
    shutil.rmtree(workdir)


if __name__ == "__main__":
    main()
