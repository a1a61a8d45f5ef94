"""bigbatch.train (python/bigbatch/_train.py, docs/python.md): the command line's training run
over the user's own nn.Module and arrays. Against the Accumulator (the same engine under a loop
the user writes, itself checked against plain PyTorch in test_accumulator), against a plain
PyTorch loop over each update's whole batch, resumed bit for bit, and refusing bad input with
the command line's one-line errors and nothing left on disk.

    BIGBATCH_BINARY=build/bigbatch PYTHONPATH=build/python python3 -m unittest test_train
"""
import json
import os
import re
import signal
import struct
import subprocess
import sys
import tempfile
import time
import types
import unittest

import torch
import torch.nn.functional as F

import bigbatch
from test_accumulator import TinyLm, documents, pad

BINARY = os.environ.get("BIGBATCH_BINARY", "build/bigbatch")
QUIET = dict(progress="off", threads=1)


def mlp(dtype=torch.float32, seed=3):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.Tanh(),
                               torch.nn.Linear(32, 5)).to(dtype)


def classification_data(count=100, seed=7, dtype=torch.float32):
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(count, 12, generator=generator, dtype=torch.float64).to(dtype)
    return inputs, (inputs[:, :5].argmax(1) + (inputs[:, 5] > 1).long()) % 5


def relative_difference(a, b):
    worst = 0.0
    for x, y in zip(a.parameters(), b.parameters()):
        scale = max(x.detach().abs().max().item(), 1e-12)
        worst = max(worst, (x.detach() - y.detach()).abs().max().item() / scale)
    return worst


class Summed(torch.nn.Module):
    """A module with its own loss: forward(inputs, targets) -> (loss_sum, items)."""

    def __init__(self):
        super().__init__()
        self.net = mlp()

    def forward(self, inputs, targets):
        return F.cross_entropy(self.net(inputs), targets, reduction="sum"), targets.numel()


class Samples(torch.utils.data.Dataset):
    """A map-style dataset of (features, label) pairs, as numpy rows and Python ints; with
    `augment`, each read adds fresh noise."""

    def __init__(self, x, y, augment=False):
        self.x, self.y, self.augment = x.numpy(), y.tolist(), augment

    def __len__(self):
        return len(self.y)

    def __getitem__(self, index):
        row = self.x[index] + (torch.randn(12).numpy() if self.augment else 0)
        return row, self.y[index]


class HuggingFaceLm(torch.nn.Module):
    """A language model as Hugging Face writes them: forward(input_ids, attention_mask) returns
    an output with .logits."""

    def __init__(self):
        super().__init__()
        self.lm = TinyLm()

    def forward(self, input_ids, attention_mask):
        logits = self.lm(input_ids)
        return types.SimpleNamespace(logits=logits * attention_mask.unsqueeze(-1).to(logits.dtype))


class Stream(torch.utils.data.IterableDataset):
    def __iter__(self):
        return iter([])


class SlowMlp(torch.nn.Sequential):
    """An mlp that takes its time (`pause` seconds a micro-batch): a run of it lasts several of
    the records' once-a-second flushes, so it can be interrupted half-way."""

    pause = 0.02

    def forward(self, inputs):
        time.sleep(self.pause)
        return super().forward(inputs)


class WithHidden(torch.nn.Module):
    """Returns (outputs, hidden) as many modules do."""

    def __init__(self):
        super().__init__()
        self.net = mlp()

    def forward(self, inputs):
        return self.net(inputs), inputs.sum()


class HuggingFaceShaped(torch.nn.Module):
    """Returns an output object with .logits, as Hugging Face models do."""

    def __init__(self):
        super().__init__()
        self.net = mlp()

    def forward(self, inputs):
        return types.SimpleNamespace(logits=self.net(inputs), hidden_states=None)


class TrainTest(unittest.TestCase):
    def setUp(self):
        self.scratch = tempfile.TemporaryDirectory()
        self.addCleanup(self.scratch.cleanup)

    def out(self, name):
        return os.path.join(self.scratch.name, name)

    def test_the_same_updates_as_the_accumulator(self):
        # 100 samples in windows of 32 (the fourth of each epoch short), micro-batches of 8:
        # bigbatch.train and a loop over the Accumulator with the same options end at the same
        # weights, and the user's module is the one trained.
        data = classification_data()
        options = dict(global_batch=32, micro_batch=8, optimizer="sgd", lr=0.1, momentum=0.9,
                       clip_norm=0.5, epochs=2, seed=5)
        model = mlp()
        before = model[0].weight.detach().clone()
        run = bigbatch.train(model, data, out=self.out("run"), **options, **QUIET)
        self.assertEqual(run["updates"], 8)
        self.assertEqual(run["samples_seen"], 200)
        self.assertFalse(torch.equal(before, model[0].weight.detach()))

        reference = mlp()
        acc = bigbatch.Accumulator(reference, **options)
        for window in acc.windows(data):
            for x, y in window:
                acc.backward(F.cross_entropy(reference(x), y, reduction="sum"))
            acc.step()
        self.assertLess(relative_difference(model, reference), 1e-6)

        # The run directory is the command line's: config.toml names the module, and the
        # weights file holds its state_dict keys.
        with open(os.path.join(run.dir, "config.toml"), encoding="utf-8") as toml:
            config = toml.read()
        self.assertIn("model = 'python:Sequential'", config)
        self.assertEqual([r["step"] for r in run.updates], list(range(1, 9)))
        self.assertEqual(len(run.epochs), 2)
        shown = subprocess.run([BINARY, "report", run.dir], capture_output=True, text=True)
        self.assertEqual(shown.returncode, 0, shown.stderr)

    def oracle(self, optimizer, dtype, **extra):
        """10 updates of micro-batches of 8 in windows of 32 over 100 samples in file order
        (no_shuffle: the windows are 0-31, 32-63, 64-95, 96-99, ...) against a plain loop over
        each window as one batch; the rate for each update read from the run's records."""
        data = classification_data(dtype=dtype)
        model = mlp(dtype)
        run = bigbatch.train(model, data, global_batch=32, micro_batch=8, optimizer=optimizer,
                             lr=0.05, lr_scaling="none", schedule="constant", warmup="0u",
                             clip_norm=0.5, weight_decay=0.01, max_updates=10, epochs=5,
                             no_shuffle=True, out=self.out(optimizer + str(dtype)), **QUIET,
                             **extra)
        rates = [r["lr"] for r in run.updates]
        self.assertEqual(len(rates), 10)
        reference = mlp(dtype)
        if optimizer == "sgd":
            opt = torch.optim.SGD(reference.parameters(), lr=rates[0], momentum=0.9,
                                  nesterov=True, weight_decay=0.01)
        else:
            opt = torch.optim.AdamW(reference.parameters(), lr=rates[0], weight_decay=0.01)
        starts = [0, 32, 64, 96] * 3
        for update, rate in enumerate(rates):
            begin = starts[update]
            x, y = data[0][begin:begin + 32], data[1][begin:begin + 32]
            opt.zero_grad()
            F.cross_entropy(reference(x), y).backward()
            torch.nn.utils.clip_grad_norm_(reference.parameters(), 0.5)
            for group in opt.param_groups:
                group["lr"] = rate
            opt.step()
        return relative_difference(model, reference)

    def test_against_one_big_batch_sgd_float32(self):
        self.assertLess(self.oracle("sgd", torch.float32), 1e-5)

    def test_against_one_big_batch_adamw_float32(self):
        self.assertLess(self.oracle("adamw", torch.float32), 1e-5)

    def test_against_one_big_batch_sgd_float64(self):
        self.assertLess(self.oracle("sgd", torch.float64), 1e-12)

    def test_a_transformer_on_padded_documents_against_one_big_batch(self):
        # Labels per position ([N, T], -100 on padding): the mean is over the window's target
        # tokens, whatever the micro-batches hold of them.
        inputs, targets = pad(documents())
        # AdamW in float64: its first steps are near the sign of each gradient element, so
        # float32's summation order (micro-batches of 8 against one of 32) moves an element
        # whose gradient is near 0 by up to 2e-5 of its tensor on PyTorch 2.15 (4e-6 on 1.13);
        # in float64 what remains is the accumulation itself.
        for optimizer, lr, dtype, tolerance in (("sgd", 1e-2, torch.float32, 1e-5),
                                                ("adamw", 1e-3, torch.float64, 1e-10)):
            model = TinyLm().to(dtype)
            run = bigbatch.train(model, (inputs, targets), global_batch=32, micro_batch=8,
                                 optimizer=optimizer, lr=lr, lr_scaling="none",
                                 schedule="constant", warmup="0u", clip_norm=0.5,
                                 weight_decay=0.01, max_updates=6, epochs=5, no_shuffle=True,
                                 out=self.out("lm-" + optimizer), **QUIET)
            rates = [r["lr"] for r in run.updates]
            self.assertEqual(len(rates), 6)
            reference = TinyLm().to(dtype)
            settings = dict(lr=rates[0], weight_decay=0.01)
            opt = torch.optim.SGD(reference.parameters(), momentum=0.9, nesterov=True,
                                  **settings) if optimizer == "sgd" else \
                torch.optim.AdamW(reference.parameters(), **settings)
            for update, rate in enumerate(rates):
                begin = [0, 32] [update % 2]  # 60 documents: windows of 32 and 28
                x, y = inputs[begin:begin + 32], targets[begin:begin + 32]
                opt.zero_grad()
                logits = reference(x)
                F.cross_entropy(logits.flatten(0, 1), y.flatten(), ignore_index=-100).backward()
                torch.nn.utils.clip_grad_norm_(reference.parameters(), 0.5)
                for group in opt.param_groups:
                    group["lr"] = rate
                opt.step()
            self.assertLess(relative_difference(model, reference), tolerance, optimizer)
            tokens = int((targets != -100).sum())
            self.assertEqual(sum(r["items"] for r in run.updates[:2]), tokens)

    def test_the_same_module_through_torchscript_on_the_command_line(self):
        # One module, two doors: scripted and trained by `bigbatch train` on .npy files, and
        # trained from Python on the same arrays, end at the same weights.
        x, y = classification_data()
        folder = self.out("npy")
        os.makedirs(folder)
        numpy = __import__("numpy")
        numpy.save(os.path.join(folder, "x_train.npy"), x.numpy())
        numpy.save(os.path.join(folder, "y_train.npy"), y.numpy())
        scripted = os.path.join(self.scratch.name, "mlp.pt")
        torch.jit.script(mlp()).save(scripted)
        flags = ["--global-batch", "32", "--micro-batch", "8", "--optimizer", "adamw", "--lr",
                 "3e-3", "--epochs", "2", "--seed", "5", "--threads", "1", "--progress", "off"]
        cli = subprocess.run([BINARY, "train", "--model", "torchscript:" + scripted, "--dataset",
                              "npy:" + folder, "--out", self.out("cli"), *flags],
                             capture_output=True, text=True)
        self.assertEqual(cli.returncode, 0, cli.stderr)
        trained = torch.jit.load(os.path.join(self.out("cli"), "model.pt"))
        model = mlp()
        bigbatch.train(model, (x, y), global_batch=32, micro_batch=8, optimizer="adamw", lr=3e-3,
                       epochs=2, seed=5, out=self.out("python"), **QUIET)
        self.assertLess(relative_difference(model, trained), 1e-6)

    def test_dict_samples_go_to_forward_as_keywords(self):
        # Hugging Face's shape: a dict of arrays with 'labels', forward(**batch) -> .logits. The
        # mask is 1 on every labelled position, so the run is the plain transformer's.
        inputs, targets = pad(documents())
        mask = (inputs != 0).long()
        mask[:, 0] = 1
        options = dict(global_batch=32, micro_batch=8, optimizer="adamw", lr=1e-3, max_updates=4,
                       epochs=2, seed=1, **QUIET)
        plain = TinyLm()
        bigbatch.train(plain, (inputs, targets), out=self.out("plain"), **options)
        shaped = HuggingFaceLm()
        held_out = {"input_ids": inputs[:10], "attention_mask": mask[:10], "labels": targets[:10]}
        run = bigbatch.train(shaped, {"input_ids": inputs, "attention_mask": mask,
                                      "labels": targets}, test=held_out,
                             out=self.out("dict"), **options)
        self.assertLess(relative_difference(plain, shaped.lm), 1e-6)
        self.assertIn("test_loss", run.summary)
        self.assert_refused("data", "without 'labels'", lambda out: bigbatch.train(
            HuggingFaceLm(), {"input_ids": inputs, "attention_mask": mask}, out=out, **options))

    def test_a_loss_of_your_own_and_a_module_that_computes_its_own(self):
        data = classification_data()
        options = dict(global_batch=32, micro_batch=8, lr=0.05, max_updates=6, epochs=3, seed=2)
        plain = mlp()
        bigbatch.train(plain, data, out=self.out("plain"), **options, **QUIET)
        given = mlp()
        run = bigbatch.train(given, data, out=self.out("given"), **options, **QUIET,
                             loss=lambda out, y: F.cross_entropy(out, y, reduction="sum"))
        self.assertEqual(run["updates"], 6)
        self.assertLess(relative_difference(plain, given), 1e-6)
        own = Summed()
        bigbatch.train(own, data, out=self.out("own"), **options, **QUIET)
        self.assertLess(relative_difference(plain, own.net), 1e-6)

    def test_outputs_in_a_tuple_or_as_logits(self):
        data = classification_data()
        options = dict(global_batch=32, micro_batch=8, lr=0.05, max_updates=4, epochs=2, seed=2,
                       **QUIET)
        plain = mlp()
        bigbatch.train(plain, data, out=self.out("plain"), **options)
        for shaped in (WithHidden(), HuggingFaceShaped()):
            bigbatch.train(shaped, data, out=self.out(type(shaped).__name__), **options)
            self.assertLess(relative_difference(plain, shaped.net), 1e-6)

    @unittest.skipIf(int(torch.__version__.split(".")[0]) < 2, "torch.compile is PyTorch 2's")
    def test_a_torch_compiled_module_trains_as_the_eager_one(self):
        data = classification_data()
        options = dict(global_batch=32, micro_batch=8, lr=0.05, max_updates=6, epochs=3, seed=2,
                       **QUIET)
        eager = mlp()
        bigbatch.train(eager, data, out=self.out("eager"), **options)
        inner = mlp()
        run = bigbatch.train(torch.compile(inner), data, out=self.out("compiled"), **options)
        self.assertEqual(run["updates"], 6)
        self.assertLess(relative_difference(eager, inner), 1e-5)
        with open(os.path.join(run.dir, "config.toml"), encoding="utf-8") as toml:
            self.assertIn("model = 'python:Sequential'", toml.read())
        # The weights file names the module's own keys, as the eager module's state_dict.
        with open(os.path.join(run.dir, "weights.safetensors"), "rb") as weights:
            header = json.loads(weights.read(struct.unpack("<Q", weights.read(8))[0]))
        self.assertEqual(sorted(k for k in header if k != "__metadata__"),
                         sorted(inner.state_dict()))

    def test_resume_goes_on_bit_for_bit(self):
        data = classification_data()
        options = dict(global_batch=32, micro_batch=8, optimizer="adamw", lr=3e-3,
                       schedule="constant", epochs=3, seed=4, **QUIET)
        straight = mlp()
        bigbatch.train(straight, data, out=self.out("straight"), **options)
        first = mlp()
        bigbatch.train(first, data, out=self.out("cut"), max_updates=5, checkpoint_every="5u",
                       **options)
        resumed = mlp(seed=99)  # other weights: the checkpoint's must replace them
        # max_updates as the uninterrupted run's length (12): the run's config.toml says 5, and
        # the keywords override it as flags do on the command line.
        run = bigbatch.train(resumed, data, resume=self.out("cut"), max_updates=12, **options)
        self.assertEqual(run["updates"], 12)
        for a, b in zip(straight.parameters(), resumed.parameters()):
            self.assertTrue(torch.equal(a, b))

    def test_ctrl_c_stops_at_an_update_writes_a_checkpoint_and_raises_keyboard_interrupt(self):
        # A slow module in a child process; SIGINT once its first update is on record. The run
        # ends its update, writes its checkpoint and raises KeyboardInterrupt in the script; a
        # resume ends where the run that was never stopped ends.
        out = self.out("interrupted")
        options = dict(global_batch=32, micro_batch=8, optimizer="adamw", lr=3e-3,
                       schedule="constant", epochs=10, seed=6, **QUIET)
        script = f"""
import sys, time, torch, bigbatch
sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
from test_train import SlowMlp, classification_data, mlp
model = SlowMlp(*mlp())
try:
    bigbatch.train(model, classification_data(), out={out!r}, **{options!r})
except KeyboardInterrupt as stopped:
    print("KeyboardInterrupt:", stopped)
    sys.exit(3)
"""
        child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        metrics = os.path.join(out, "metrics.jsonl")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and child.poll() is None:
            if os.path.exists(metrics) and '"loss"' in open(metrics, encoding="utf-8").read():
                break
            time.sleep(0.02)
        child.send_signal(signal.SIGINT)
        stdout, stderr = child.communicate(timeout=60)
        self.assertEqual(child.returncode, 3, stdout + stderr)
        self.assertIn("KeyboardInterrupt:", stdout)
        self.assertTrue(os.listdir(os.path.join(out, "checkpoints")))

        SlowMlp.pause = 0  # the runs compared with it need not wait
        self.addCleanup(setattr, SlowMlp, "pause", 0.02)
        straight = SlowMlp(*mlp())
        bigbatch.train(straight, classification_data(), out=self.out("straight"), **options)
        resumed = SlowMlp(*mlp(seed=99))
        run = bigbatch.train(resumed, classification_data(), resume=out, **options)
        self.assertEqual(run["updates"], 40)
        for a, b in zip(straight.parameters(), resumed.parameters()):
            self.assertTrue(torch.equal(a, b))

    def test_micro_batch_auto_probes_copies_and_trains_the_module(self):
        # The memory fit probes a copy.deepcopy of the module; the run then trains the module
        # itself at the micro-batch it chose, as a run told that micro-batch does.
        generator = torch.Generator().manual_seed(3)
        data = (torch.randn(256, 12, generator=generator), torch.randint(0, 5, (256,),
                                                                          generator=generator))
        options = dict(global_batch=64, epochs=2, seed=1, **QUIET)
        model = mlp()
        run = bigbatch.train(model, data, micro_batch="auto", memory_budget="64MiB",
                             out=self.out("auto"), **options)
        with open(os.path.join(run.dir, "config.toml"), encoding="utf-8") as toml:
            chosen = int(re.search(r"^micro-batch = (\d+)$", toml.read(), re.M).group(1))
        told = mlp()
        bigbatch.train(told, data, micro_batch=chosen, out=self.out("told"), **options)
        for a, b in zip(model.parameters(), told.parameters()):
            self.assertTrue(torch.equal(a, b))

    def test_the_automatic_batch_is_deterministic(self):
        generator = torch.Generator().manual_seed(5)
        data = (torch.randn(2000, 12, generator=generator),
                torch.randint(0, 5, (2000,), generator=generator))
        # The cost of an update told (not timed): the decisions depend on the data alone.
        options = dict(global_batch="auto", micro_batch=16, update_cost=2000, epochs=3, seed=3,
                       growth_test_budget=0.5,
                       **QUIET)
        first, second = mlp(), mlp()
        run = bigbatch.train(first, data, out=self.out("auto-1"), **options)
        bigbatch.train(second, data, out=self.out("auto-2"), **options)
        # Its branch tests train the module at both batches from one point, putting its state
        # back in between (the run's snapshot of the module's own tensors).
        tests = [r for r in run.records if r.get("event") == "batch_test"]
        self.assertTrue(tests, "no branch test ran: the test shows nothing")
        for a, b in zip(first.parameters(), second.parameters()):
            self.assertTrue(torch.equal(a, b))

    def test_a_built_in_model_by_name_and_validation_arrays(self):
        data = classification_data()
        run = bigbatch.train("mlp", data, validation=classification_data(40, seed=8),
                             test=classification_data(40, seed=9), hidden=[16], global_batch=20,
                             epochs=1, out=self.out("mlp"), **QUIET)
        self.assertEqual(run["updates"], 5)
        self.assertIn("test_accuracy", run.summary)
        self.assertTrue(all("val_loss" in r for r in run.epochs))

    def test_a_map_style_dataset_trains_as_its_arrays_do(self):
        data = classification_data()
        options = dict(global_batch=32, micro_batch=8, lr=0.05, max_updates=6, epochs=3, seed=2,
                       **QUIET)
        arrays, dataset = mlp(), mlp()
        bigbatch.train(arrays, data, out=self.out("arrays"), **options)
        bigbatch.train(dataset, Samples(*data), test=Samples(*classification_data(40, seed=9)),
                       out=self.out("dataset"), **options)
        for a, b in zip(arrays.parameters(), dataset.parameters()):
            self.assertTrue(torch.equal(a, b))
        self.assert_refused("data", "changes from one read to the next", lambda out: (
            bigbatch.train(mlp(), Samples(*data, augment=True), out=out, **options)))
        self.assert_refused("data", "no length and no indices", lambda out: (
            bigbatch.train(mlp(), Stream(), out=out, **options)))

    def test_regression_on_float_targets(self):
        generator = torch.Generator().manual_seed(1)
        x = torch.randn(64, 12, generator=generator)
        y = x[:, :3].sum(1, keepdim=True)
        torch.manual_seed(0)
        model = torch.nn.Linear(12, 1)
        run = bigbatch.train(model, (x.numpy(), y.numpy()), test=(x, y), global_batch=16,
                             epochs=2, out=self.out("regress"), **QUIET)
        self.assertIn("test_rmse", run.summary)

    def test_verify_measures_your_module_on_copies(self):
        data = classification_data()
        model = mlp()
        before = [p.detach().clone() for p in model.parameters()]
        exact = bigbatch.verify(model, data, global_batch=32, micro_batch=8, **QUIET)
        self.assertEqual(exact["verdict"], "exact", exact["text"])
        self.assertLess(exact["largest_relative"], 1e-5)
        self.assertEqual(sorted(exact["tensors"]), ["0.bias", "0.weight", "2.bias", "2.weight"])
        for a, b in zip(before, model.parameters()):
            self.assertTrue(torch.equal(a, b))
        torch.manual_seed(1)
        normed = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.BatchNorm1d(16),
                                     torch.nn.ReLU(), torch.nn.Linear(16, 5))
        batch_norm = bigbatch.verify(normed, data, global_batch=32, micro_batch=8, **QUIET)
        self.assertEqual(batch_norm["verdict"], "batch_norm", batch_norm["text"])
        self.assertIn("nn.GroupNorm", batch_norm["text"])
        # Issue 59 item 3: dropout layers are found by type and turned off on every side (a
        # split draws its masks in another order); the user's module keeps them on.
        torch.manual_seed(1)
        dropped = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.Dropout(0.2), torch.nn.ReLU(),
                                      torch.nn.Dropout(0.0), torch.nn.Linear(16, 5))
        with_dropout = bigbatch.verify(dropped, data, global_batch=32, micro_batch=8, **QUIET)
        self.assertEqual(with_dropout["verdict"], "exact", with_dropout["text"])
        self.assertEqual(with_dropout["dropout_off"], ["1"])
        self.assertIn("dropout turned off on both sides (1)", with_dropout["text"])
        self.assertTrue(dropped.training and dropped[1].training)
        # The float64 reference: each side's gradient against the same update in float64.
        for row in exact["tensors"].values():
            self.assertLess(row["accumulated_vs_float64"], 1e-5)
            self.assertLess(row["whole_vs_float64"], 1e-5)

    def test_lr_find_reads_the_range_on_a_copy(self):
        generator = torch.Generator().manual_seed(8)
        x = torch.randn(640, 12, generator=generator)
        data = (x, (x[:, :5].argmax(1) + (x[:, 5] > 1).long()) % 5)
        model = mlp()
        before = [p.detach().clone() for p in model.parameters()]
        found = bigbatch.lr_find(model, data, global_batch=32, micro_batch=8, updates=60,
                                 lr_min=1e-4, lr_max=10.0, out=self.out("lr-find"), **QUIET)
        self.assertEqual(found["global_batch"], 32)
        self.assertTrue(1e-4 < found["suggested_lr"] < 10.0)
        self.assertIn("suggested: --lr", found["text"])
        self.assertTrue(os.path.exists(os.path.join(found["run_dir"], "lr_find.html")))
        for a, b in zip(before, model.parameters()):
            self.assertTrue(torch.equal(a, b))
        with self.assertRaises(bigbatch.Error) as caught:  # the test owns the schedule
            bigbatch.lr_find(model, data, global_batch=32, schedule="cosine", **QUIET)
        self.assertIn("does not take schedule", str(caught.exception))

    def assert_refused(self, kind, words, call):
        out = self.out("refused")
        with self.assertRaises(bigbatch.Error) as caught:
            call(out)
        self.assertEqual(caught.exception.kind, kind, str(caught.exception))
        self.assertIn(words, str(caught.exception))
        self.assertNotIn("\n", str(caught.exception))
        self.assertFalse(os.path.exists(out), "a refused run left its directory")
        return caught.exception

    def test_bad_input_is_one_clear_error_and_leaves_nothing(self):
        data = classification_data()
        common = dict(global_batch=32, micro_batch=8, epochs=1, **QUIET)
        mean = lambda out, y: F.cross_entropy(out, y)  # noqa: E731 (the default reduction)
        self.assert_refused("model", "returns the mean over its batch", lambda out: bigbatch.train(
            mlp(), data, loss=mean, out=out, **common))
        self.assert_refused("model", "has no parameters", lambda out: bigbatch.train(
            torch.nn.ReLU(), data, out=out, **common))
        self.assert_refused("model", "logits [batch, classes] for 9 classes",
                            lambda out: bigbatch.train(mlp(), (data[0], data[1] + 4), out=out,
                                                       **common))
        self.assert_refused("data", "label -1", lambda out: bigbatch.train(
            mlp(), (data[0], data[1] - 1), out=out, **common))
        self.assert_refused("data", "100 samples, the targets 99", lambda out: bigbatch.train(
            mlp(), (data[0], data[1][:99]), out=out, **common))
        self.assert_refused("model", "failed in forward()", lambda out: bigbatch.train(
            mlp(), (torch.randn(100, 7), data[1]), out=out, **common))
        error = self.assert_refused("config", "lr", lambda out: bigbatch.train(
            mlp(), data, lr=-1, epochs=1, out=out, **QUIET))
        self.assertNotIn("--", str(error))
        with self.assertRaises(TypeError) as caught:
            bigbatch.train(mlp(), data, global_bach=32)
        self.assertIn("global_batch", str(caught.exception))
        ddp = torch.nn.parallel.DistributedDataParallel.__new__(
            torch.nn.parallel.DistributedDataParallel)
        torch.nn.Module.__init__(ddp)
        self.assert_refused("usage", "DistributedDataParallel", lambda out: bigbatch.train(
            ddp, data, out=out, **common))
        self.assert_refused("config", "device=auto is not yet supported",
                            lambda out: bigbatch.train(mlp(), data, device="auto", out=out,
                                                       **common))
        self.assert_refused("usage", "layers=", lambda out: bigbatch.train(
            mlp(), data, layers=2, out=out, **common))
        self.assert_refused("usage", "torch.utils.checkpoint.checkpoint", lambda out: bigbatch.train(
            mlp(), data, recompute=True, out=out, **common))


if __name__ == "__main__":
    unittest.main()
