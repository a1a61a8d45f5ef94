"""bigbatch.Accumulator: your loop, the engine's mathematics.

The engine decides which samples each update (a *window*) and each micro-batch hold — the
epoch's order fixed by the seed, the window cut by the plan, this rank's share — and, once you
have back-propagated every micro-batch's summed loss, makes the update: one reduction over
micro-batches (and ranks), one division by the update's items, clipping, the optimizer at the
rate for this batch, the gradient noise scale. Your code never divides.
"""
import json

import torch

from . import _engine
from ._errors import Error
from ._options import option_texts
from ._plan import Plan


def _as_tensor(array):
    return array if isinstance(array, torch.Tensor) else torch.as_tensor(array)


def _gatherer(data, collate):
    """(size, gather): gather(indices) is the micro-batch those samples of `data` make."""
    if isinstance(data, tuple) and data and all(hasattr(x, "__len__") and hasattr(x, "shape")
                                                for x in data):
        arrays = [_as_tensor(x) for x in data]
        size = len(arrays[0])
        if any(len(a) != size for a in arrays):
            raise Error("data", "the arrays of the data hold " + ", ".join(str(len(a)) for a in arrays)
                        + " samples", "give inputs and targets with one row per sample")
        return size, lambda index: tuple(a[torch.as_tensor(index)] for a in arrays)
    if isinstance(data, dict) and data and all(hasattr(x, "shape") for x in data.values()):
        arrays = {k: _as_tensor(v) for k, v in data.items()}
        size = len(next(iter(arrays.values())))
        return size, lambda index: {k: a[torch.as_tensor(index)] for k, a in arrays.items()}
    if hasattr(data, "shape") and hasattr(data, "__len__"):
        array = _as_tensor(data)
        return len(array), lambda index: array[torch.as_tensor(index)]
    if hasattr(data, "__getitem__") and hasattr(data, "__len__"):
        if collate is None:
            from torch.utils.data import default_collate
            collate = default_collate
        return len(data), lambda index: collate([data[i] for i in index])
    if isinstance(data, torch.utils.data.IterableDataset) or hasattr(data, "__iter__"):
        raise Error("data", f"{type(data).__name__} has no length and no indices: the engine "
                    "picks each update's samples by index, so that any split of the batch and a "
                    "resume see the same ones", "give a map-style dataset (__len__ and "
                    "__getitem__), or (inputs, targets) arrays")
    raise Error("data", f"cannot read samples from a {type(data).__name__}",
                "give (inputs, targets) tensors or arrays, or a map-style torch Dataset")


class Window:
    """The micro-batches of one update, in order. Iterate over it, back-propagate each one's
    summed loss with Accumulator.backward, then call Accumulator.step."""

    def __init__(self, indices, gather):
        self.indices = indices  # each micro-batch's dataset indices (this rank's share)
        self._gather = gather
        self._current = -1
        self._backward_done = [False] * len(indices)

    def __len__(self):
        return len(self.indices)

    @property
    def samples(self):
        return sum(len(i) for i in self.indices)

    def __iter__(self):
        for position, index in enumerate(self.indices):
            self._current = position
            yield self._gather(index)


class Accumulator:
    """Trains `model` (any torch.nn.Module; its own parameters, updated in place) with the
    plan's batch in a loop you write.

    `plan`: a bigbatch.plan(...) (its keywords and dataset size), or none; `options`: any
    keyword of ``bigbatch train`` (optimizer, lr, lr_ref_batch, lr_scaling, warmup, schedule,
    epochs, max_updates, clip_norm, momentum, weight_decay, seed, no_shuffle, ...), overriding
    the plan's. The dataset's size comes from the plan, ``dataset_size=``, or the data given
    to windows().
    """

    def __init__(self, model, plan=None, *, dataset_size=None, **options):
        if isinstance(model, torch.nn.parallel.DistributedDataParallel):
            raise Error("usage", "the model is wrapped in DistributedDataParallel, whose gradients "
                        "would be reduced twice (by it and by the engine)",
                        "pass the module itself (model.module)")
        if plan is not None and not isinstance(plan, Plan):
            raise TypeError("Accumulator(model, plan): plan must come from bigbatch.plan(...)")
        merged = dict(plan.options) if plan is not None else {}
        merged.update(options)
        self._texts = option_texts("Accumulator", merged)
        self.model = model
        self._dataset_size = dataset_size if dataset_size is not None else (
            plan.dataset_size if plan is not None else None)
        self._loop = None
        self._window = None
        self._pending_state = None  # a state_dict loaded before the dataset's size was known
        if self._dataset_size is not None:
            self._start(self._dataset_size)

    def _start(self, dataset_size):
        named = [(name, p) for name, p in self.model.named_parameters()]
        if not named:
            raise Error("model", f"{type(self.model).__name__} has no parameters to train",
                        "pass the module whose parameters train")
        self._loop = _engine.Loop(self._texts, int(dataset_size), named)
        self._dataset_size = int(dataset_size)
        if self._pending_state is not None:
            state, self._pending_state = self._pending_state, None
            self.load_state_dict(state)

    @property
    def rank(self):
        """This process's rank in the data-parallel job (0 alone)."""
        self._require_loop()
        return self._loop.rank()

    @property
    def world_size(self):
        """The job's data-parallel ranks (1 alone)."""
        self._require_loop()
        return self._loop.world_size()

    @property
    def plan(self):
        """The plan this accumulator trains (the command line's ``plan --json``)."""
        self._require_loop()
        return Plan(json.loads(self._loop.plan_json()), {}, self._dataset_size)

    def describe(self):
        """The plan in words, as plan.txt of a run directory says it."""
        self._require_loop()
        return self._loop.plan_text()

    def _require_loop(self):
        if self._loop is None:
            raise Error("usage", "the dataset's size is not known yet",
                        "give dataset_size= (or a plan with one), or call windows(data) first")

    def complete(self):
        """The run's length (epochs, max_updates) is reached."""
        return self._loop is not None and self._loop.complete()

    def windows(self, data, *, collate=None):
        """The windows of the run over `data`, one per update, until its epochs or max_updates
        are done: (inputs, targets) tensors or arrays, a dict of them, one tensor, or a
        map-style dataset (its samples collated by `collate`, default torch's)."""
        size, gather = _gatherer(data, collate)
        if self._loop is None:
            self._start(size)
        elif size != self._dataset_size:
            raise Error("data", f"the data holds {size} samples; the plan is for {self._dataset_size}",
                        "plan with dataset_size=len(data)")
        while not self._loop.complete():
            self._window = Window(self._loop.next_window(), gather)
            yield self._window

    def backward(self, loss_sum, items=None):
        """Back-propagates the current micro-batch's summed loss; `items` is what it sums over
        (its samples by default; a language model's target tokens). Never divide: the update
        divides once, by all the window's items."""
        window = self._window
        if window is None or window._current < 0:
            raise Error("usage", "backward() outside a window's micro-batch",
                        "call it inside 'for batch in window', for each micro-batch")
        position = window._current
        if window._backward_done[position]:
            raise Error("usage", f"backward() twice for micro-batch {position + 1} of {len(window)}",
                        "call it once per micro-batch, with that micro-batch's summed loss")
        samples = len(window.indices[position])
        count = samples if items is None else int(items)
        if not isinstance(loss_sum, torch.Tensor):
            raise Error("usage", f"the loss must be a tensor, got {type(loss_sum).__name__}",
                        "pass the summed loss the model's outputs computed")
        self._loop.backward(loss_sum, samples, count, position + 1 == len(window))
        window._backward_done[position] = True

    def state_dict(self):
        """Where the run stands between updates — the engine's counters (the epoch and the
        position in its order, the noise scale's averages) and the optimizer's state — as a
        dict torch.save can write. Save the module's own state_dict beside it: a new
        Accumulator over the module with those weights, given this to load_state_dict, goes on
        bit for bit as this one would have."""
        self._require_loop()
        state = self._loop.state()
        return {"bigbatch_accumulator": 1, "progress": state["progress"],
                "optimizer": state["optimizer"]}

    def load_state_dict(self, state):
        """Puts back what state_dict() returned, before the first window."""
        if not isinstance(state, dict) or state.get("bigbatch_accumulator") != 1:
            raise Error("usage", "that is not an Accumulator's state_dict()",
                        "give what Accumulator.state_dict() returned")
        if self._loop is None:
            self._pending_state = state
            return
        self._loop.load_state(state["progress"], state["optimizer"])

    def step(self):
        """Makes the update from the window's gradients; returns its figures: step, epoch,
        samples, items, loss (mean per item), grad_norm, lr, skipped, noise_scale."""
        if self._loop is None:
            self._require_loop()
        stats = self._loop.step()
        self._window = None
        return stats
