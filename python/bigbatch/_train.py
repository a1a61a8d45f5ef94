"""bigbatch.train: the engine drives, you hand it objects.

One call runs what ``bigbatch train`` runs — the plan, the rates for the effective batch, the
exact mean over every update, checkpoints and bit-identical resume, evaluations, records,
the run directory — over your own ``nn.Module`` and samples. The engine calls your module's
forward with each gathered micro-batch; its parameters are your module's own tensors, so when
train() returns your module holds the trained weights.
"""
import inspect
import json
import os

import torch

from . import _engine
from ._errors import Error
from ._options import option_texts

# The built-in models' own keywords: they shape a model bigbatch builds, not yours.
_BUILTIN_MODEL_KEYWORDS = ("hidden", "layers", "d_model", "heads", "dropout", "norm")


class Run:
    """A finished run: ``dir`` is its run directory (the command line's: ``bigbatch report``,
    TensorBoard, ``resume=``), ``summary`` what it reached (updates, samples_seen, test_loss,
    test_accuracy, samples_per_s, ...), ``records`` the lines of its metrics.jsonl, and of them
    ``updates`` and ``epochs``."""

    def __init__(self, summary):
        self.summary = dict(summary)
        self.dir = self.summary.pop("run_dir")

    @property
    def records(self):
        """Every record of metrics.jsonl, in order, as dicts (``"type"`` says which)."""
        path = os.path.join(self.dir, "metrics.jsonl")
        if not os.path.exists(path):
            return []
        with open(path, encoding="utf-8") as lines:
            return [json.loads(line) for line in lines if line.strip()]

    @property
    def updates(self):
        """The records of the updates, one each (step, loss, lr, grad_norm, samples, ...)."""
        return [r for r in self.records if "event" not in r and "loss" in r]

    @property
    def epochs(self):
        """The records of the epochs (epoch, train_loss, and the held-out splits' figures)."""
        return [r for r in self.records
                if "event" not in r and "loss" not in r and "train_loss" in r]

    def __getitem__(self, key):
        return self.summary[key]

    def __repr__(self):
        return f"Run({self.dir!r}, {self.summary!r})"


def _own_loss(model):
    """Whether forward takes (inputs, targets) and returns (loss_sum, items) itself."""
    try:
        parameters = inspect.signature(model.forward).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                  and p.default is p.empty]
    return len(positional) == 2


def _same(a, b):
    """Whether two collated samples hold the same values (tensors compared exactly)."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


def _read_dataset(data, what, collate):
    """A map-style dataset read once into (inputs, targets) tensors: every sample, collated.
    Its samples must be the same at every read — the engine holds them as arrays, and a resume
    must see what the interrupted run saw; random augmentation is refused with the way round."""
    if collate is None:
        from torch.utils.data import default_collate
        collate = default_collate
    size = len(data)
    if size == 0:
        raise Error("data", f"the {what} dataset holds no samples", "give at least one sample")
    batch = collate([data[i] for i in range(size)])
    if isinstance(batch, dict) and "labels" in batch:
        pass  # Hugging Face's samples: the dict path
    elif not (isinstance(batch, (tuple, list)) and len(batch) == 2
              and all(isinstance(t, torch.Tensor) for t in batch)):
        raise Error("data", f"the {what} dataset's samples collate to a {type(batch).__name__}"
                    + (f" of {', '.join(map(str, batch))}" if isinstance(batch, dict) else "")
                    + ", not (inputs, targets) tensors or a dict with 'labels'",
                    "return (inputs, targets) from __getitem__ (tensors, numbers or arrays), or "
                    "a dict of the module's inputs and 'labels'")
    for index in sorted({0, size // 2, size - 1}):
        if not _same(collate([data[index]]), collate([data[index]])):
            raise Error("data", f"sample {index} of the {what} dataset changes from one read to "
                        "the next (random augmentation?): bigbatch.train reads a dataset once "
                        "into memory, so every epoch and a resume would see the first read",
                        "train it with bigbatch.Accumulator, which reads each micro-batch's "
                        "samples when it needs them, or augment inside the module")
    return batch if isinstance(batch, dict) else tuple(batch)


def _samples(data, what, collate):
    """`data` as arrays: a map-style dataset read (and collated) once, anything else as given."""
    if data is None or isinstance(data, (str, dict)) or (
            isinstance(data, (tuple, list)) and len(data) == 2
            and all(hasattr(a, "shape") for a in data)):
        return data
    if isinstance(data, torch.utils.data.IterableDataset) or (
            not hasattr(data, "__getitem__") and hasattr(data, "__iter__")):
        raise Error("data", f"the {what} data is a {type(data).__name__}, which has no length "
                    "and no indices: the engine picks each update's samples by index, so "
                    "that any split of the batch and a resume see the same ones",
                    "give a map-style dataset (__len__ and __getitem__), or (inputs, "
                    "targets) arrays")
    if hasattr(data, "__getitem__") and hasattr(data, "__len__"):
        return _read_dataset(data, what, collate)
    raise Error("data", f"cannot read {what} samples from a {type(data).__name__}",
                "give (inputs, targets) tensors or numpy arrays, a dict of them with 'labels', "
                "a map-style dataset, or a dataset's name such as 'fashion-mnist'")


def _split(data, what, dtype):
    """(inputs, targets) tensors of a split, floating-point ones in the module's dtype."""
    if data is None:
        return None
    if not (isinstance(data, (tuple, list)) and len(data) == 2
            and all(hasattr(a, "shape") for a in data)):
        raise Error("data", f"the {what} samples are a {type(data).__name__}, not "
                    "(inputs, targets) like the training samples",
                    "give every split in the same form")
    inputs, targets = (a if isinstance(a, torch.Tensor) else torch.as_tensor(a) for a in data)
    if inputs.is_floating_point():
        inputs = inputs.to(dtype)
    if targets.is_floating_point():
        targets = targets.to(dtype)
    return inputs.detach(), targets.detach()


class _Program:
    """What the engine is handed of the user's program (python/src/engine_module.cpp reads these
    attributes): the module (None: a built-in model named in the options), its loss, whether its
    forward computes the loss itself, its name, the splits as (inputs, targets) tensors (None: a
    dataset named in the options) and, for dict samples, inputs_of(indices) -> the batch."""

    def __init__(self, module, loss, computes_loss, name, splits, inputs_of):
        self.module, self.loss, self.computes_loss, self.name = module, loss, computes_loss, name
        self.train, self.validation, self.test = splits
        self.data_name = "python:arrays"
        self.inputs_of = inputs_of


def _dict_split(data, what, number, dtype):
    """Dict samples ({"input_ids": ..., "attention_mask": ..., "labels": ...}, Hugging Face's
    shape): the engine holds each sample's (split, index) as its inputs and the labels as its
    targets; the other arrays stay here, gathered by inputs_of for each micro-batch."""
    if not isinstance(data, dict) or "labels" not in data:
        raise Error("data", f"the {what} samples are "
                    + (f"a dict of {', '.join(map(str, data))} without 'labels'"
                       if isinstance(data, dict) else f"a {type(data).__name__}, not a dict like "
                       "the training samples"),
                    "give the targets under 'labels' (per sample [N] or per position [N, T], "
                    "-100 on padding), the module's inputs under its forward's argument names")
    tensors = {k: (v if isinstance(v, torch.Tensor) else torch.as_tensor(v)).detach()
               for k, v in data.items()}
    targets = tensors.pop("labels")
    if not tensors:
        raise Error("data", f"the {what} dict holds only 'labels'",
                    "give the module's inputs beside them, under its forward's argument names")
    tensors = {k: v.to(dtype) if v.is_floating_point() else v for k, v in tensors.items()}
    size = len(targets)
    uneven = [k for k, v in tensors.items() if len(v) != size]
    if uneven:
        raise Error("data", f"the {what} dict's '{uneven[0]}' holds {len(tensors[uneven[0]])} "
                    f"samples, its 'labels' {size}", "give every array one row per sample")
    if targets.is_floating_point():
        targets = targets.to(dtype)
    indices = torch.stack([torch.full((size,), number, dtype=torch.int64),
                           torch.arange(size, dtype=torch.int64)], 1)
    return indices, targets, tensors


def _program(function, model, data, validation, test, loss, options, collate=None):
    """The engine's _Program for the user's model and data; a built-in model's or a dataset's
    name goes into `options` instead."""
    module = None
    if isinstance(model, str):
        options["model"] = model
        if loss is not None:
            raise Error("usage", "loss= is for a module of your own; the built-in model "
                        f"'{model}' trains with bigbatch's loss", "drop loss=")
    elif isinstance(model, torch.nn.Module):
        if isinstance(model, torch.nn.parallel.DistributedDataParallel):
            raise Error("usage", "the model is wrapped in DistributedDataParallel, whose "
                        "gradients would be reduced twice (by it and by the engine)",
                        "pass the module itself (model.module)")
        if options.get("recompute"):
            raise Error("usage", "recompute= recomputes the built-in gpt's blocks; your "
                        f"{type(model).__name__} recomputes its own where its forward says so",
                        "drop recompute=, and call torch.utils.checkpoint.checkpoint(block, x, "
                        "use_reentrant=False) around the blocks in its forward")
        given = [k for k in _BUILTIN_MODEL_KEYWORDS if k in options]
        if given:
            raise Error("usage", f"{given[0]}= shapes a built-in model, and this model is your "
                        f"{type(model).__name__}", f"drop {given[0]}=")
        if not any(True for _ in model.parameters()):
            raise Error("model", f"{type(model).__name__} has no parameters to train",
                        "pass the module whose parameters train")
        module = model
    else:
        raise TypeError(f"{function}(model, data): model must be a torch.nn.Module or a built-in "
                        f"model's name, got {type(model).__name__}")
    if loss is not None and not callable(loss):
        raise TypeError(f"{function}(): loss must be callable, got {type(loss).__name__}")

    dtype = next(module.parameters()).dtype if module is not None else torch.float32
    if isinstance(data, str):
        options["dataset"] = data
        splits = (None, None, None)
        if validation is not None or test is not None:
            raise Error("usage", f"the dataset '{data}' brings its own held-out splits",
                        "drop validation= and test= (val_size= holds out training samples)")
    data, validation, test = (_samples(split, what, collate) for split, what in
                              ((data, "training"), (validation, "validation"), (test, "test")))
    # Dict samples go to forward(**batch), which returns outputs; otherwise forward(inputs,
    # targets) computes the loss itself.
    computes_loss = module is not None and not isinstance(data, dict) and _own_loss(module)
    if computes_loss and loss is not None:
        raise Error("usage", f"{type(module).__name__}.forward(inputs, targets) computes its "
                    "own loss, and loss= gives another",
                    "keep one: forward(inputs) with loss=fn, or forward(inputs, targets) "
                    "returning (loss_sum, items)")
    inputs_of = None
    if isinstance(data, dict):
        if module is None:
            raise Error("usage", "dict samples are passed to a module's forward(**batch), and a "
                        "built-in model takes one tensor", "give (inputs, targets) arrays")
        splits, lookup = [], {}
        for number, (split, what) in enumerate(((data, "training"), (validation, "validation"),
                                                (test, "test"))):
            if split is None:
                splits.append(None)
                continue
            indices, targets, lookup[number] = _dict_split(split, what, number, dtype)
            splits.append((indices, targets))
        splits = tuple(splits)

        def inputs_of(index):
            """A micro-batch's arrays by its samples' (split, row): all of one split."""
            rows = index[:, 1]
            return {key: value[rows] for key, value in lookup[int(index[0, 0])].items()}
    elif not isinstance(data, str):
        splits = (_split(data, "training", dtype), _split(validation, "validation", dtype),
                  _split(test, "test", dtype))
    # A torch.compile'd module is named after the module it compiled.
    named = getattr(module, "_orig_mod", module)
    name = "python:" + type(named).__name__ if module is not None else ""
    return _Program(module, loss, computes_loss, name, splits, inputs_of)


def train(model, data, *, validation=None, test=None, loss=None, collate=None, **options):
    """Trains `model` on `data` as ``bigbatch train`` would, and returns the :class:`Run`.

    ``model``: any ``torch.nn.Module`` (trained in place), or a built-in model's name
    (``"mlp"``, ``"cnn"``, ``"gpt"``; then its keywords such as ``layers`` apply).
    ``data``: ``(inputs, targets)`` tensors or numpy arrays — integer targets are class labels,
    per sample ``[N]`` or per position ``[N, T]`` (-100: padding), floating-point ones
    regression values — or a dataset's name as the command line takes it
    (``"fashion-mnist"``, ``"npy:DIR"``, ``"text:FILE"``); ``validation`` and ``test`` the same
    way as arrays; or a map-style ``Dataset`` of ``(inputs, targets)`` samples with fixed values,
    read once into memory (``collate`` as a DataLoader's ``collate_fn``; random augmentation is
    refused: the Accumulator reads samples as it needs them). ``loss``: ``fn(outputs, targets)`` returning the loss **summed** over the
    batch's items (default: cross-entropy for labels, squared error for values); or a module
    whose ``forward(inputs, targets)`` returns ``(loss_sum, items)`` itself. Every other keyword
    is a ``bigbatch train`` option with ``-`` as ``_`` (global_batch, micro_batch, lr, epochs,
    optimizer, out, resume, ...).
    """
    program = _program("train", model, data, validation, test, loss, options, collate)
    return Run(_engine.train(option_texts("train", options), program))


def verify(model, data, *, loss=None, **options):
    """``bigbatch verify`` on your module: the plan's first update computed twice from the same
    weights — as its micro-batches with accumulation, and as one batch of the same samples — on
    copies of `model` (left untouched). Returns ``verdict`` (``"exact"``: to float32's
    tolerance; ``"batch_norm"``; ``"unexpected"``), ``largest_relative``, ``tensors`` (per
    parameter: ``gradient_max_abs``, ``gradient_relative``, ``weight_max_abs``,
    ``weight_relative``) and the command line's ``text``. `model`, `data`, `loss` and the
    keywords as for :func:`train`."""
    program = _program("verify", model, data, None, None, loss, options)
    return _engine.verify(option_texts("verify", options), program)


def lr_find(model, data, *, lr_min=1e-6, lr_max=1.0, updates=100, validation=None, loss=None,
            **options):
    """``bigbatch lr-find`` on your module: a short run at the plan's global batch whose rate
    rises exponentially from `lr_min` to `lr_max` over `updates` updates, trained on a copy of
    `model` (left untouched), then the curve read. Returns what the run's lr_find.json holds —
    ``suggested_lr`` (the smoothed loss's steepest descent, taken as tuned at ``global_batch``;
    None when the loss fell by less than 10%: ``fall``, ``fell_clearly``),
    ``lowest_loss_lr``, ``lowest_loss_lr_over_10``, ``diverged``, ``diverged_lr``,
    ``smoothed`` (the curve) — with ``run_dir`` and the command line's ``text``. `model`,
    `data`, `loss` and the keywords as for :func:`train` (its lr, warmup and schedule are the
    test's own)."""
    program = _program("lr_find", model, data, validation, None, loss, options)
    return _engine.lr_find(option_texts("lr_find", options), program, float(lr_min),
                           float(lr_max), int(updates))
