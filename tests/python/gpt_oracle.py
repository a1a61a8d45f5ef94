#!/usr/bin/python3
"""PyTorch in Python as the oracle for bigbatch's language-model training.

bigbatch writes its gpt's initial weights; then the same model is trained twice on the same
variable-length documents: by the bigbatch binary (micro-batches of documents, each padded to
its longest, accumulated into an effective batch), and here by the PyTorch twin below
(`GptTwin`, the documented layout of src/models/gpt.h, loaded with strict=True) doing what a
user would write for the exact mathematics: the summed token loss of every micro-batch divided
by the update's total target tokens, torch's gradient clipping and AdamW, the same warmup and
cosine schedule, and the same documents per update (bigbatch's sampler and hold-out are
reproduced here). Final weights and per-update losses must agree to fp32 tolerance.

Usage: gpt_oracle.py BIGBATCH_BINARY WORK_DIR
"""
import math
import os
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bigbatch_oracle import (accumulate, epoch_order, read_safetensors, reference_training, run_records,  # noqa: E402
                             verdict)

END_OF_TEXT, VOCAB, IGNORE = 256, 257, -100


class Block(torch.nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.ln2 = torch.nn.LayerNorm(d)
        self.fc = torch.nn.Linear(d, 4 * d)
        self.out = torch.nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        split = lambda z: z.view(b, t, self.heads, d // self.heads).transpose(1, 2)  # noqa: E731
        q, k, v = split(q) * (1.0 / math.sqrt(d // self.heads)), split(k), split(v)
        scores = q @ k.transpose(-2, -1)
        scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
        y = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, t, d)
        h = x + self.proj(y)
        return h + self.out(torch.nn.functional.gelu(self.fc(self.ln2(h))))


class GptTwin(torch.nn.Module):
    """src/models/gpt.h in PyTorch: the output layer is the token embedding (tied)."""

    def __init__(self, seq_len, layers, d, heads):
        super().__init__()
        self.token = torch.nn.Embedding(VOCAB, d)
        self.position = torch.nn.Embedding(seq_len, d)
        self.blocks = torch.nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = torch.nn.LayerNorm(d)

    def forward(self, tokens):
        x = self.token(tokens) + self.position(torch.arange(tokens.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x) @ self.token.weight.t()


def document_row(document, seq_len):
    """data/text_corpus.h: [eot, bytes..., eot] cut at seq_len + 1, shifted."""
    tokens = ([END_OF_TEXT] + list(document.encode()) + [END_OF_TEXT])[: seq_len + 1]
    return tokens[:-1], tokens[1:]


def write_corpus(workdir):
    """90 documents of 3 to 95 bytes (some cut at a row of 49 tokens) as a fortune-format corpus.
    Returns the documents and the corpus file."""
    documents = [("abc %d xyz " % i) * (1 + (i * 7) % 9) for i in range(90)]
    corpus = os.path.join(workdir, "corpus.txt")
    with open(corpus, "w") as f:
        f.write("\n%\n".join(documents) + "\n")
    return documents, corpus


def training_rows(documents, seq_len, seed, val_size):
    """The split bigbatch makes: documents as text_corpus.cpp cuts them ("\n" kept), held out by
    the seed's order with epoch -1, the rest in corpus order. Returns every document's row and
    the training documents' indices."""
    docs = [doc + "\n" for doc in documents]
    rows = [document_row(doc, seq_len) for doc in docs]
    held = epoch_order(seed, -1, len(rows))
    return rows, sorted(held[val_size:])


def padded(rows, part):
    """Inputs and targets of these documents' rows, padded to the longest (targets with IGNORE)."""
    longest = max(len(rows[r][1]) for r in part)
    inputs = torch.tensor([rows[r][0] + [END_OF_TEXT] * (longest - len(rows[r][0])) for r in part])
    targets = torch.tensor([rows[r][1] + [IGNORE] * (longest - len(rows[r][1])) for r in part])
    return inputs, targets


def main():
    binary, work_root = sys.argv[1], sys.argv[2]
    torch.set_num_threads(1)
    seq_len, layers, d, heads = 48, 2, 32, 2
    global_batch, micro, epochs, seed, val_size = 16, 4, 2, 42, 10
    lr, warmup, clip, weight_decay = 3e-3, 3, 0.5, 0.01
    os.makedirs(work_root, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="gpt-oracle-", dir=work_root)
    documents, corpus = write_corpus(workdir)

    common = [binary, "train", "--dataset", f"text:{corpus}", "--model", "gpt", "--seq-len", str(seq_len),
              "--layers", str(layers), "--d-model", str(d), "--heads", str(heads),
              "--global-batch", str(global_batch), "--micro-batch", str(micro), "--optimizer", "adamw",
              "--lr", str(lr), "--weight-decay", str(weight_decay), "--clip-norm", str(clip),
              "--warmup", f"{warmup}u", "--schedule", "cosine", "--epochs", str(epochs), "--seed", str(seed),
              "--val-size", str(val_size), "--threads", "1", "--progress", "off"]
    init_dir, run_dir = os.path.join(workdir, "init"), os.path.join(workdir, "run")
    subprocess.run(common + ["--max-updates", "0", "--out", init_dir], check=True, stdout=subprocess.DEVNULL)
    init_path = os.path.join(init_dir, "weights.safetensors")
    subprocess.run(common + ["--init-weights", init_path, "--out", run_dir], check=True,
                   stdout=subprocess.DEVNULL)

    rows, train = training_rows(documents, seq_len, seed, val_size)

    model = torch.nn.Sequential(GptTwin(seq_len, layers, d, heads))
    model.load_state_dict(read_safetensors(init_path), strict=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)

    def summed_loss(part):  # a micro-batch's token losses, summed
        inputs, targets = padded(rows, part)
        logits = model(inputs)
        return torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1), reduction="sum",
                                                 ignore_index=IGNORE)

    def window_loss(window):  # the mean over the update's target tokens, not per micro-batch
        items = sum(len(rows[r][1]) for r in window)
        return accumulate(window, micro, items, summed_loss)

    losses, updates_per_epoch, total = reference_training(model, optimizer, window_loss, train, global_batch, epochs,
                                                          seed, lr, warmup, clip=clip)

    ours = read_safetensors(os.path.join(run_dir, "weights.safetensors"))
    worst = 0.0
    for name, reference in model.state_dict().items():
        mine = ours[name]
        if name.endswith("qkv.bias"):
            # The key bias adds q.b_k to every score of a query alike, which softmax cancels: its
            # gradient is zero in exact arithmetic, rounding noise in fp32, and AdamW divides that
            # noise by its own size. Two correct implementations walk it apart; leave it out.
            keep = torch.cat([torch.arange(0, d), torch.arange(2 * d, 3 * d)])
            mine, reference = mine[keep], reference[keep]
        diff = (mine - reference).norm().item() / max(reference.norm().item(), 1e-12)
        worst = max(worst, diff)
        if os.environ.get("ORACLE_VERBOSE"):
            print(f"  {name}: {diff:.3g} (norm {reference.norm().item():.3g})")
    updates = [r for r in run_records(run_dir) if "loss" in r and "event" not in r]
    loss_diff = max(abs(a["loss"] - b) for a, b in zip(updates, losses))
    items_ok = all(r["items"] == sum(len(rows[x][1]) for x in
                                     [train[i] for i in epoch_order(seed, k // updates_per_epoch, len(train))
                                      [(k % updates_per_epoch) * global_batch:
                                       (k % updates_per_epoch + 1) * global_batch]])
                   for k, r in enumerate(updates))
    print(f"gpt: {len(losses)} updates (AdamW, clipping, warmup); max relative weight difference {worst:.3g}; "
          f"max loss difference {loss_diff:.3g}; token counts per update {'equal' if items_ok else 'DIFFER'}")
    ok = len(updates) == len(losses) == total == 10 and worst < 1e-5 and loss_diff < 1e-5 and items_ok
    return verdict(ok, workdir)


if __name__ == "__main__":
    sys.exit(main())
