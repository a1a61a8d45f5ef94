"""bigbatch from Python: your own ``nn.Module`` and loop, the engine's exact mathematics.

The C++ engine that ``bigbatch train`` runs owns the batch: which samples each update and
micro-batch holds, the one reduction and division per update, clipping, the optimizer at the
rate for the effective batch, and the gradient noise scale. Your code runs the forward pass and
returns each micro-batch's summed loss::

    import bigbatch
    plan = bigbatch.plan(global_batch=256, micro_batch=32, dataset_size=len(data))
    acc = bigbatch.Accumulator(model, plan, optimizer="adamw", lr=3e-4, lr_ref_batch=32)
    for window in acc.windows(data):            # one window: the micro-batches of one update
        for inputs, targets in window:
            acc.backward(F.cross_entropy(model(inputs), targets, reduction="sum"))
        stats = acc.step()

docs/python.md has the whole API.
"""
import torch as _torch

from . import _build_info


def _check_torch():
    built, running = _build_info.TORCH_VERSION, _torch.__version__
    if built.split("+")[0] != running.split("+")[0]:
        raise ImportError(
            f"bigbatch was built against torch {built}, and this Python imports torch {running}: "
            "rebuild it for this torch with 'pip install --no-build-isolation --force-reinstall "
            "./python' in bigbatch's checkout (docs/python.md)")


_check_torch()

from . import _engine  # noqa: E402  (after the version check: another torch's symbols would not load)
from ._errors import Error  # noqa: E402
from ._plan import Plan, plan  # noqa: E402
from ._accumulator import Accumulator, Window  # noqa: E402
from ._train import Run, lr_find, train, verify  # noqa: E402

__all__ = ["Accumulator", "Error", "Plan", "Run", "Window", "lr_find", "plan", "train", "verify"]
__version__ = "0.1.0"
