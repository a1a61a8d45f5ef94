"""bigbatch from Python (python/, docs/python.md): the plan as the command line makes it, the
keywords from the command line's option table, its errors, and bigbatch.Accumulator against a
plain PyTorch loop that trains each update on its whole window at once (the oracle).

Run with the Python whose torch the package was built for, the package on its path:
    BIGBATCH_BINARY=build/bigbatch PYTHONPATH=build/python python3 -m unittest test_accumulator
"""
import contextlib
import io
import json
import os
import re
import subprocess
import tempfile
import unittest

import torch
import torch.nn.functional as F

import bigbatch

BINARY = os.environ.get("BIGBATCH_BINARY", "build/bigbatch")


def relative_difference(a, b):
    """The largest difference between two models' weights, relative to the weights' scale."""
    worst = 0.0
    for (name, x), (_, y) in zip(a.named_parameters(), b.named_parameters()):
        scale = max(x.detach().abs().max().item(), 1e-12)
        worst = max(worst, (x.detach() - y.detach()).abs().max().item() / scale)
    return worst


class PlanTest(unittest.TestCase):
    def test_the_plan_is_the_command_lines(self):
        plan = bigbatch.plan(global_batch=256, micro_batch=32, lr=0.02, lr_ref_batch=64,
                             lr_scaling="sqrt", warmup="2e", dataset_size=60000)
        cli = subprocess.run([BINARY, "plan", "--json", "--global-batch", "256", "--micro-batch",
                              "32", "--lr", "0.02", "--lr-ref-batch", "64", "--lr-scaling", "sqrt",
                              "--warmup", "2e", "--dataset-size", "60000"],
                             capture_output=True, text=True, check=True)
        self.assertEqual(dict(plan), json.loads(cli.stdout))
        self.assertEqual((plan.global_batch, plan.micro_batch, plan.accumulation_steps), (256, 32, 8))

    def test_a_keyword_that_is_no_option_names_the_nearest(self):
        with self.assertRaises(TypeError) as caught:
            bigbatch.plan(global_batch=256, micro_bach=32, dataset_size=1000)
        self.assertIn("unexpected keyword argument 'micro_bach'; did you mean 'micro_batch'?",
                      str(caught.exception))

    def test_a_bad_value_is_the_command_lines_error_spelled_for_python(self):
        with self.assertRaises(bigbatch.Error) as caught:
            bigbatch.plan(global_batch=64, micro_batch=16, accum_steps=2, dataset_size=1000)
        error = caught.exception
        self.assertEqual(error.kind, "plan")
        self.assertEqual(error.problem, "global batch 64 != micro 16 x accumulation 2 x world 1 = 32")
        self.assertEqual(error.hint, "drop one of the three flags to have it derived, or use accum_steps=4")
        with self.assertRaises(bigbatch.Error) as caught:
            bigbatch.plan(global_batch=64, micro_batch=128, dataset_size=1000)
        self.assertTrue(str(caught.exception).endswith("use micro_batch=64 or less"), caught.exception)
        with self.assertRaises(bigbatch.Error) as caught:
            bigbatch.plan(global_batch=256, micro_batch=32, lr=-1, dataset_size=1000)
        self.assertEqual(caught.exception.kind, "config")


def mlp():
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.Tanh(), torch.nn.Linear(32, 5))


class TinyLm(torch.nn.Module):
    """A causal transformer over right-padded documents: a padded position sees only what comes
    before it, so the real positions' outputs do not depend on how far a batch is padded."""

    def __init__(self, vocab=40, d=32):
        super().__init__()
        torch.manual_seed(5)
        self.embed = torch.nn.Embedding(vocab, d)
        self.position = torch.nn.Parameter(0.02 * torch.randn(24, d))
        layer = torch.nn.TransformerEncoderLayer(d, 4, 64, dropout=0.0, batch_first=True)
        self.blocks = torch.nn.TransformerEncoder(layer, 2)
        self.head = torch.nn.Linear(d, vocab)
        # The keys' bias adds the same number to every logit of a query, which softmax cancels:
        # its true gradient is 0, and what autograd computes is rounding noise (~1e-9), which
        # AdamW's division by its root mean square turns into steps of the full rate, different
        # noise in any two summation orders. Its gradient is set to the exact 0 here, in both
        # loops, so that the comparison measures the accumulation, not that noise.
        for block in self.blocks.layers:
            keys = torch.zeros(3 * d)
            keys[d:2 * d] = 1
            block.self_attn.in_proj_bias.register_hook(lambda g, keys=keys: g * (1 - keys))

    def forward(self, tokens):
        n = tokens.size(1)
        mask = torch.triu(torch.full((n, n), float("-inf")), diagonal=1)
        return self.head(self.blocks(self.embed(tokens) + self.position[:n], mask=mask))


def documents(count=60, vocab=40, seed=11):
    """Variable-length token documents (4 to 20 tokens), as a map-style dataset of tensors."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(4, 21, (count,), generator=generator)
    return [torch.randint(1, vocab, (int(n),), generator=generator) for n in lengths]


def pad(docs):
    """Inputs and next-token targets, right-padded to the longest (targets -100 there)."""
    width = max(len(d) for d in docs) - 1
    inputs = torch.zeros(len(docs), width, dtype=torch.long)
    targets = torch.full((len(docs), width), -100, dtype=torch.long)
    for row, doc in enumerate(docs):
        inputs[row, :len(doc) - 1] = doc[:-1]
        targets[row, :len(doc) - 1] = doc[1:]
    return inputs, targets


def classify_sum(model, batch):
    inputs, targets = batch
    return F.cross_entropy(model(inputs), targets, reduction="sum"), targets.numel()


def lm_sum(model, batch):
    inputs, targets = batch
    logits = model(inputs)
    loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1),
                           ignore_index=-100, reduction="sum")
    return loss, int((targets != -100).sum())


class AccumulatorOracleTest(unittest.TestCase):
    """10 updates through the Accumulator (micro-batches of 8 in windows of 32, the last window
    of each epoch short) against a plain loop over each window as one batch, at the rates the
    engine chose: max relative weight difference 1e-5 in float32."""

    def train_both(self, make_model, data, summed_loss, optimizer, collate=None, **options):
        model = make_model()
        acc = bigbatch.Accumulator(model, global_batch=32, micro_batch=8, optimizer=optimizer,
                                   lr_scaling="none", schedule="constant", clip_norm=0.5,
                                   max_updates=10, epochs=5, **options)
        windows, rates = [], []
        for window in acc.windows(data, collate=collate):
            for batch in window:
                loss, items = summed_loss(model, batch)
                acc.backward(loss, items=items)
            stats = acc.step()
            self.assertFalse(stats["skipped"])
            windows.append([i for micro in window.indices for i in micro])
            rates.append(stats["lr"])
        self.assertEqual(len(windows), 10)
        self.assertIn(4, [len(w) for w in windows])  # 100 samples: windows 32, 32, 32, 4

        reference = make_model()
        settings = dict(lr=rates[0], weight_decay=options.get("weight_decay", 5e-4))
        if optimizer == "sgd":
            opt = torch.optim.SGD(reference.parameters(), momentum=0.9, nesterov=True, **settings)
        else:
            opt = torch.optim.AdamW(reference.parameters(), **settings)
        gather = (lambda index: collate([data[i] for i in index])) if collate else \
            (lambda index: tuple(a[torch.tensor(index)] for a in data))
        for window, rate in zip(windows, rates):
            opt.zero_grad()
            loss, items = summed_loss(reference, gather(window))
            (loss / items).backward()
            torch.nn.utils.clip_grad_norm_(reference.parameters(), 0.5)
            for group in opt.param_groups:
                group["lr"] = rate
            opt.step()
        return relative_difference(model, reference)

    def classification_data(self):
        generator = torch.Generator().manual_seed(7)
        inputs = torch.randn(100, 12, generator=generator)
        return inputs, (inputs[:, :5].argmax(1) + (inputs[:, 5] > 1).long()) % 5

    def test_mlp_sgd_with_momentum(self):
        difference = self.train_both(mlp, self.classification_data(), classify_sum, "sgd", lr=0.1)
        self.assertLess(difference, 1e-5)

    def test_mlp_adamw(self):
        difference = self.train_both(mlp, self.classification_data(), classify_sum, "adamw", lr=3e-3)
        self.assertLess(difference, 1e-5)

    def test_transformer_on_padded_documents_sgd(self):
        docs = documents(100)
        difference = self.train_both(TinyLm, docs, lm_sum, "sgd", collate=pad, lr=1e-2)
        self.assertLess(difference, 1e-5)

    def test_transformer_on_padded_documents_adamw(self):
        docs = documents(100)
        difference = self.train_both(TinyLm, docs, lm_sum, "adamw", collate=pad, lr=1e-3)
        self.assertLess(difference, 1e-5)


class AccumulatorUseTest(unittest.TestCase):
    def test_a_plan_trains_and_the_weights_are_the_modules_own(self):
        model = mlp()
        first = model[0].weight.detach().clone()
        inputs = torch.randn(64, 12)
        targets = torch.randint(0, 5, (64,))
        plan = bigbatch.plan(global_batch=32, micro_batch=16, dataset_size=64)
        acc = bigbatch.Accumulator(model, plan, optimizer="adamw", lr=1e-2, epochs=1)
        steps = []
        for window in acc.windows((inputs.numpy(), targets.numpy())):
            self.assertEqual(len(window), 2)
            for x, y in window:
                acc.backward(F.cross_entropy(model(x), y, reduction="sum"))
            steps.append(acc.step())
        self.assertEqual([s["step"] for s in steps], [1, 2])
        self.assertEqual([s["samples"] for s in steps], [32, 32])
        self.assertFalse(torch.equal(first, model[0].weight.detach()))
        self.assertTrue(acc.complete())
        self.assertEqual(acc.plan["accumulation_steps"], 2)

    def test_state_dict_resumes_bit_for_bit(self):
        # Kept in memory as a file would keep it (torch.save / torch.load), between updates 4
        # and 5 of 10 in windows of 32 over 100 samples: a new module and accumulator go on
        # exactly where the uninterrupted run goes.
        generator = torch.Generator().manual_seed(2)
        data = (torch.randn(100, 12, generator=generator), torch.randint(0, 5, (100,), generator=generator))
        options = dict(global_batch=32, micro_batch=8, optimizer="adamw", lr=3e-3, clip_norm=0.5,
                       max_updates=10, epochs=5)

        def train(model, acc, stop_after=None):
            last = None
            for window in acc.windows(data):
                for x, y in window:
                    acc.backward(F.cross_entropy(model(x), y, reduction="sum"))
                last = acc.step()
                if stop_after is not None and last["step"] == stop_after:
                    break
            return last

        straight = mlp()
        end = train(straight, bigbatch.Accumulator(straight, **options))
        first = mlp()
        acc = bigbatch.Accumulator(first, **options)
        train(first, acc, stop_after=4)
        saved = io.BytesIO()
        torch.save({"model": first.state_dict(), "acc": acc.state_dict()}, saved)
        saved.seek(0)
        loaded = torch.load(saved)
        resumed = mlp()
        torch.manual_seed(99)
        for p in resumed.parameters():  # other weights first: the file's must replace them
            torch.nn.init.normal_(p)
        resumed.load_state_dict(loaded["model"])
        again = bigbatch.Accumulator(resumed, **options)
        again.load_state_dict(loaded["acc"])
        end_again = train(resumed, again)
        self.assertEqual(end_again["step"], 10)
        for a, b in zip(straight.parameters(), resumed.parameters()):
            self.assertTrue(torch.equal(a, b))
        self.assertEqual(end["noise_scale"], end_again["noise_scale"])
        # A state of another plan is refused, naming what differs.
        other = bigbatch.Accumulator(mlp(), **dict(options, global_batch=64))
        with self.assertRaises(bigbatch.Error) as caught:
            other.load_state_dict(loaded["acc"])
            next(other.windows(data))
        self.assertIn("global_batch 32", str(caught.exception))

    def test_misuse_is_one_clear_error(self):
        model = mlp()
        data = (torch.randn(40, 12), torch.randint(0, 5, (40,)))
        acc = bigbatch.Accumulator(model, global_batch=20, micro_batch=10, epochs=1)
        with self.assertRaises(bigbatch.Error):
            acc.backward(model(data[0]).sum())  # outside a window
        windows = acc.windows(data)
        window = next(windows)
        batches = iter(window)
        x, y = next(batches)
        loss = F.cross_entropy(model(x), y, reduction="sum")
        acc.backward(loss)
        with self.assertRaises(bigbatch.Error) as caught:
            acc.backward(F.cross_entropy(model(x), y, reduction="sum"))
        self.assertIn("twice", str(caught.exception))
        with self.assertRaises(bigbatch.Error) as caught:
            acc.step()  # one micro-batch of two back-propagated
        self.assertIn("2 micro-batches and 1 backward", str(caught.exception))
        with self.assertRaises(bigbatch.Error):
            bigbatch.Accumulator(torch.nn.ReLU(), global_batch=20, dataset_size=40)
        with self.assertRaises(bigbatch.Error) as caught:
            bigbatch.Accumulator(model, global_batch_schedule="0:16 100s:32", dataset_size=40)
        self.assertIn("bigbatch.train", str(caught.exception))
        with self.assertRaises(TypeError):
            bigbatch.Accumulator(model, global_bach=20)
        with self.assertRaises(bigbatch.Error) as caught:
            next(bigbatch.Accumulator(model, global_batch=20, epochs=1).windows(iter([1, 2])))
        self.assertEqual(caught.exception.kind, "data")


ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def python_blocks(path):
    with open(os.path.join(ROOT, path)) as f:
        return re.findall(r"```python\n(.*?)```", f.read(), re.S)


class DocsExamplesTest(unittest.TestCase):
    """The Python of docs/python.md and of the README, run as written; the printed values are
    the ones their comments give."""

    def run_block(self, code):
        printed = io.StringIO()
        here = os.getcwd()
        with tempfile.TemporaryDirectory() as scratch, contextlib.redirect_stdout(printed):
            os.chdir(scratch)  # what a block writes lands outside the checkout
            try:
                exec(compile(code, "<docs>", "exec"), {})
            finally:
                os.chdir(here)
        return printed.getvalue()

    def test_docs_python_md(self):
        blocks = python_blocks("docs/python.md")
        self.assertGreaterEqual(len(blocks), 2)
        for block in blocks:
            printed = self.run_block(block)
            expected = [line.split("# ")[1].split(" (")[0] for line in block.splitlines()
                        if line.startswith("print(") and "# " in line]
            self.assertEqual(printed.split("\n")[:len(expected)], expected)

    def test_readme_from_python(self):
        blocks = [b for b in python_blocks("README.md") if "bigbatch.Accumulator" in b]
        self.assertEqual(len(blocks), 1)
        self.run_block(blocks[0])


if __name__ == "__main__":
    unittest.main()
