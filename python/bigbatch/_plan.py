"""bigbatch.plan: the batch plan as ``bigbatch plan --json`` prints it."""
import json

from . import _engine
from ._options import option_texts


class Plan(dict):
    """The plan's data (the command line's ``plan --json``), with the keywords it was made from
    (``options``) and the dataset size it was planned over, so an Accumulator can train it."""

    def __init__(self, data, options, dataset_size):
        super().__init__(data)
        self.options = dict(options)
        self.dataset_size = dataset_size

    @property
    def global_batch(self):
        return self["global_batch_size"]

    @property
    def micro_batch(self):
        return self["micro_batch_size"]

    @property
    def accumulation_steps(self):
        return self["accumulation_steps"]


def plan(*, dataset_size=None, world_size=1, **options):
    """The plan for `options` (any keyword of ``bigbatch train``: global_batch, micro_batch,
    accum_steps, lr, lr_ref_batch, lr_scaling, warmup, schedule, epochs, ...) over
    `dataset_size` samples, or over the dataset that ``dataset=`` names (loaded as the command
    line loads it), on `world_size` data-parallel ranks."""
    texts = option_texts("plan", options, command="plan")
    size = 0 if dataset_size is None else int(dataset_size)
    if dataset_size is not None and size <= 0:
        from ._errors import Error
        raise Error("usage", f"dataset_size must be a positive number of samples, got {dataset_size}",
                    "e.g. dataset_size=len(dataset)")
    data = json.loads(_engine.plan_json(texts, size, int(world_size)))
    return Plan(data, options, dataset_size)
