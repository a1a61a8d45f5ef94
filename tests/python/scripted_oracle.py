#!/usr/bin/python3
"""PyTorch in Python as the oracle for training a user's TorchScript module.

The module is a byte-level transformer with its output tied to its token embedding
(make_scripted_models.py: TinyLm), scripted and saved as a user would. bigbatch trains it from
the file (--model torchscript:FILE) on variable-length documents, cut into micro-batches and
accumulated; here the same file is loaded with torch.jit.load and trained on the same documents
with ONE batch per update (the per-token mean over the whole update), torch's clipping and
AdamW, the same warmup and cosine schedule. Then:
  - final weights and per-update losses agree to fp32 tolerance;
  - bigbatch's weights.safetensors loads into the module with load_state_dict(strict=True)
    (the tied weight's second name included) and the tied weight is still one tensor;
  - RUN/model.pt, the module written back by bigbatch, holds the trained weights.

Usage: scripted_oracle.py BIGBATCH_BINARY WORK_DIR
"""
import os
import subprocess
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bigbatch_oracle import read_safetensors, reference_training, run_records, verdict  # noqa: E402
from gpt_oracle import IGNORE, VOCAB, padded, training_rows, write_corpus  # noqa: E402


def relative(a, b):
    return (a - b).norm().item() / max(b.norm().item(), 1e-12)


def comparable(name, tensor):
    if name == "attn.in_proj_bias":
        # The key bias's exact gradient is zero (softmax cancels it); AdamW divides rounding
        # noise by its own size, so two correct implementations walk it apart (gpt_oracle.py).
        d = tensor.shape[0] // 3
        return torch.cat([tensor[:d], tensor[2 * d:]])
    return tensor


def main():
    binary, work_root = sys.argv[1], sys.argv[2]
    torch.set_num_threads(1)
    seq_len, global_batch, micro, epochs, seed, val_size = 48, 16, 3, 2, 42, 10
    lr, warmup, clip, weight_decay = 3e-3, 3, 0.5, 0.01
    os.makedirs(work_root, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="scripted-oracle-", dir=work_root)
    subprocess.run([sys.executable, os.path.join(HERE, "make_scripted_models.py"), workdir], check=True)
    module_path = os.path.join(workdir, "tiny_lm.pt")
    documents, corpus = write_corpus(workdir)
    run_dir = os.path.join(workdir, "run")
    subprocess.run([binary, "train", "--dataset", f"text:{corpus}", "--model", f"torchscript:{module_path}",
                    "--seq-len", str(seq_len), "--global-batch", str(global_batch), "--micro-batch", str(micro),
                    "--optimizer", "adamw", "--lr", str(lr), "--weight-decay", str(weight_decay),
                    "--clip-norm", str(clip), "--warmup", f"{warmup}u", "--schedule", "cosine",
                    "--epochs", str(epochs), "--seed", str(seed), "--val-size", str(val_size),
                    "--threads", "1", "--progress", "off", "--out", run_dir],
                   check=True, stdout=subprocess.DEVNULL)

    rows, train = training_rows(documents, seq_len, seed, val_size)
    model = torch.jit.load(module_path)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)

    def window_loss(window):  # the whole window in one batch (bigbatch: micro-batches of `micro`)
        inputs, targets = padded(rows, window)
        logits = model(inputs)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1),
                                                 ignore_index=IGNORE)  # one batch: the token mean
        loss.backward()
        return loss.item()

    losses, _, total = reference_training(model, optimizer, window_loss, train, global_batch, epochs, seed, lr, warmup,
                                          clip=clip)

    ours = read_safetensors(os.path.join(run_dir, "weights.safetensors"))
    worst = max(relative(comparable(k, ours[k]), comparable(k, v)) for k, v in model.state_dict().items())
    loaded = torch.jit.load(module_path)
    loaded.load_state_dict(ours, strict=True)
    still_tied = loaded.head.weight.data_ptr() == loaded.token.weight.data_ptr()
    written_back = torch.jit.load(os.path.join(run_dir, "model.pt"))
    back_equal = all(torch.equal(v, ours[k]) for k, v in written_back.state_dict().items())
    updates = [r for r in run_records(run_dir) if "loss" in r and "event" not in r]
    loss_diff = max(abs(a["loss"] - b) for a, b in zip(updates, losses))
    print(f"scripted tied lm: {len(losses)} updates (micro {micro} x accumulation vs one batch; AdamW, clipping, "
          f"warmup); max relative weight difference {worst:.3g}; max loss difference {loss_diff:.3g}; "
          f"strict load ok, tied {'yes' if still_tied else 'NO'}, model.pt {'equal' if back_equal else 'DIFFERS'}")
    ok = (len(updates) == len(losses) == total == 10 and worst < 1e-5 and loss_diff < 1e-5 and still_tied
          and back_equal)
    return verdict(ok, workdir)


if __name__ == "__main__":
    sys.exit(main())
