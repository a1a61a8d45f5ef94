#!/usr/bin/python3
"""Writes the TorchScript modules the tests train (and the broken ones they must refuse).

Each is what a user would write: an nn.Module scripted with torch.jit.script(...).save(...).
Python makes them; bigbatch never runs Python.

Usage: make_scripted_models.py OUT_DIR
"""
import math
import os
import sys
from typing import Tuple

import torch
from torch import nn



def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 32), nn.ReLU(), nn.Linear(32, 10))


class SmallCnnBn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 5, stride=2)
        self.bn = nn.BatchNorm2d(4)
        self.head = nn.Linear(4 * 12 * 12, 10)

    def forward(self, x):
        return self.head(torch.relu(self.bn(self.conv(x))).flatten(1))


class TinyLm(nn.Module):
    """A byte-level causal transformer with its output tied to the token embedding."""

    def __init__(self, vocab: int = 257, d: int = 32, seq_len: int = 64):
        super().__init__()
        self.token = nn.Embedding(vocab, d)
        self.position = nn.Embedding(seq_len, d)
        self.attn = nn.MultiheadAttention(d, 2, batch_first=True)
        self.ln = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.token.weight  # tied: one parameter under two names
        nn.init.normal_(self.token.weight, std=0.02)

    def forward(self, tokens):
        t = tokens.shape[1]
        x = self.token(tokens) + self.position(torch.arange(t, device=tokens.device))
        mask = torch.ones(t, t, dtype=torch.bool, device=tokens.device).triu(1)
        h = self.ln(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        x = x + self.mlp(self.ln(x))
        return self.head(x)


class OwnLoss(nn.Module):
    """An image classifier with its own loss (label smoothing): forward(x, y) -> (sum, count)."""

    def __init__(self, net: nn.Module, smoothing: float):
        super().__init__()
        self.net = net
        self.smoothing = smoothing

    def forward(self, images, labels):
        logits = self.net(images)
        loss = nn.functional.cross_entropy(logits, labels, reduction="sum", label_smoothing=self.smoothing)
        return loss, labels.numel()


class OwnTokenLoss(nn.Module):
    """A language model with its own per-token loss: padding (-100) neither counts nor adds."""

    def __init__(self):
        super().__init__()
        self.lm = TinyLm()

    def forward(self, tokens, targets):
        logits = self.lm(tokens)
        loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                           ignore_index=-100, reduction="sum")
        return loss, (targets != -100).sum()


class MeanLoss(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(784, 10)

    def forward(self, x, y):
        return nn.functional.cross_entropy(self.fc(x.flatten(1)), y)  # the mean: refused


class ThreeResults(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(784, 10)

    def forward(self, x, y):
        loss = nn.functional.cross_entropy(self.fc(x.flatten(1)), y, reduction="sum")
        return loss, y.numel(), 0


class WrongArguments(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(784, 10)

    def forward(self, x, y, z):
        return self.fc(x.flatten(1)) + y + z


class Throws(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(784, 10)

    def forward(self, x):
        if x.shape[0] > 0:
            raise RuntimeError("this module refuses every batch")
        return self.fc(x.flatten(1))


class ThrowsLater(nn.Module):
    """Trains for a few micro-batches of 16, then breaks: an error found mid-run."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(784, 10)
        self.batches = 0

    def forward(self, x):
        if self.training and x.shape[0] == 16:
            self.batches += 1
            if self.batches > 4:
                raise RuntimeError("this module refuses its fifth batch")
        return self.fc(x.flatten(1))


class ReturnsTuple(nn.Module):
    """A tuple that does not start with the logits: refused (one that does trains)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(784, 10)

    def forward(self, x) -> Tuple[int, torch.Tensor]:
        return x.shape[0], self.fc(x.flatten(1))


class LossMethod(nn.Module):
    """forward(x) -> (logits, probabilities) and an exported loss(outputs, targets): bigbatch
    scores the logits and trains on the module's loss, label-smoothed here."""

    def __init__(self, net: nn.Module, smoothing: float, reduction: str = "sum"):
        super().__init__()
        self.net = net
        self.smoothing = smoothing
        self.reduction = reduction

    def forward(self, x) -> Tuple[torch.Tensor, torch.Tensor]:
        logits = self.net(x)
        return logits, logits.softmax(-1)

    @torch.jit.export
    def loss(self, outputs: Tuple[torch.Tensor, torch.Tensor], targets):
        return nn.functional.cross_entropy(outputs[0], targets, reduction=self.reduction,
                                           label_smoothing=self.smoothing)


class LossArity(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(784, 10)

    def forward(self, x):
        return self.fc(x.flatten(1))

    @torch.jit.export
    def loss(self, outputs):
        return outputs.sum()


class Shifted(nn.Module):
    """Shifts its inputs before the network: in place (x.mul_(0.5).add_(1)) or not. Both must
    train alike: a module writing into its batch must never reach the dataset's memory."""

    def __init__(self, net: nn.Module, in_place: bool):
        super().__init__()
        self.net = net
        self.in_place = in_place

    def forward(self, x):
        if self.in_place:
            x.mul_(0.5).add_(1)
            return self.net(x)
        return self.net(x * 0.5 + 1)


class ClearsTargets(nn.Module):
    """Its own loss, then y.fill_(0) after use (when `clears`): the next epoch's labels must not
    change."""

    def __init__(self, net: nn.Module, clears: bool):
        super().__init__()
        self.net = net
        self.clears = clears

    def forward(self, x, y):
        loss = nn.functional.cross_entropy(self.net(x), y, reduction="sum")
        count = y.numel()
        if self.clears:
            y.fill_(0)
        return loss, count


class ClearsTokens(nn.Module):
    """A language model that zeroes its token batch after reading it (when `clears`)."""

    def __init__(self, lm: nn.Module, clears: bool):
        super().__init__()
        self.lm = lm
        self.clears = clears

    def forward(self, tokens):
        logits = self.lm(tokens)
        if self.clears:
            tokens.zero_()
        return logits


class Detached(nn.Module):
    """Outputs (or, with targets, a loss) cut from the parameters: nothing could train."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(784, 10)

    def forward(self, x):
        return self.fc(x.flatten(1)).detach()


class DetachedLoss(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(784, 10)

    def forward(self, x, y):
        loss = nn.functional.cross_entropy(self.fc(x.flatten(1)), y, reduction="sum")
        return loss.detach(), y.numel()


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    save = lambda module, name: torch.jit.script(module).save(os.path.join(out, name))  # noqa: E731
    save(mlp(), "mlp.pt")
    torch.manual_seed(0)  # the same initial weights as mlp.pt, under "net."
    save(OwnLoss(mlp(), 0.0), "own_loss_mlp.pt")
    save(OwnLoss(mlp(), 0.1), "smoothed_mlp.pt")
    # Label smoothing three ways from mlp.pt's initial weights (with --label-smoothing 0.1).
    torch.manual_seed(0)
    save(OwnLoss(mlp(), 0.1), "smoothed_own_loss.pt")
    torch.manual_seed(0)
    save(LossMethod(mlp(), 0.1), "loss_method.pt")
    save(LossMethod(mlp(), 0.0, "mean"), "mean_loss_method.pt")
    save(LossArity(), "loss_arity.pt")
    save(OwnTokenLoss(), "own_loss_lm.pt")
    save(MeanLoss(), "mean_loss.pt")
    save(ThreeResults(), "three_results.pt")
    save(SmallCnnBn(), "cnn_bn.pt")
    save(TinyLm(), "tiny_lm.pt")
    save(nn.Sequential(nn.Flatten(), nn.Linear(784, 7)), "seven_classes.pt")
    save(nn.Sequential(nn.Embedding(257, 8), nn.Linear(8, 100)), "small_vocabulary.pt")
    save(WrongArguments(), "wrong_arguments.pt")
    save(Throws(), "throws.pt")
    save(ThrowsLater(), "throws_later.pt")
    save(ReturnsTuple(), "returns_tuple.pt")
    for in_place in (True, False):
        torch.manual_seed(1)  # the same weights in both
        save(Shifted(mlp(), in_place), "shifts_in_place.pt" if in_place else "shifts.pt")
    for clears in (True, False):
        torch.manual_seed(2)
        save(ClearsTargets(mlp(), clears), "clears_targets.pt" if clears else "keeps_targets.pt")
        torch.manual_seed(3)
        save(ClearsTokens(TinyLm(), clears), "clears_tokens.pt" if clears else "keeps_tokens.pt")
    frozen = mlp()
    frozen.requires_grad_(False)
    save(frozen, "frozen.pt")
    save(Detached(), "detached.pt")
    save(DetachedLoss(), "detached_loss.pt")
    with open(os.path.join(out, "not_torchscript.pt"), "wb") as f:
        torch.save(mlp().state_dict(), f)  # a state_dict, not a scripted module
    return 0


if __name__ == "__main__":
    sys.exit(main())
