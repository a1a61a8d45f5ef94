#!/usr/bin/python3
"""End-to-end tests of a user's own model through the real CLI: TorchScript modules made in
PyTorch (tests/python/make_scripted_models.py) trained with --model torchscript:FILE — on
images and on text, across 2 ranks, resumed, written back — and the broken modules that must
be one-line errors that leave nothing behind.
Usage: test_scripted.py BIGBATCH_BINARY [unittest arguments]."""
import atexit
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
from bigbatch_oracle import read_safetensors  # noqa: E402
import e2e_common  # noqa: E402
from e2e_common import CliTestCase, free_port, run  # noqa: E402

MODELS = None  # the directory the modules are written to, once


def module(name):
    return f"torchscript:{os.path.join(MODELS, name)}"


def images(*extra):
    # 600 samples at 64: 9 full updates and a short one of 24 per epoch.
    return ["--train-subset", "600", "--global-batch", "64", "--epochs", "1", "--progress", "off",
            "--threads", "1", "--dist-timeout", "30", *extra]


class ScriptedTestCase(CliTestCase):
    pass


class ScriptedTrainTest(ScriptedTestCase):
    def test_two_ranks_equal_one_and_the_weights_load_strictly_in_python(self):
        single = self.path("single")
        result = run("train", "--model", module("mlp.pt"), *images("--micro-batch", "16", "--out", single))
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("torchscript:", result.stderr)
        ranks = self.path("ranks")
        result = run("launch", "--nproc", "2", "--master-port", str(free_port()), "--", e2e_common.BINARY, "train",
                     "--model", module("mlp.pt"), *images("--micro-batch", "32", "--out", ranks))
        self.assertEqual(result.returncode, 0, result.stderr)
        a = read_safetensors(os.path.join(single, "weights.safetensors"))
        b = read_safetensors(os.path.join(ranks, "weights.safetensors"))
        diff = max(((a[k] - b[k]).norm() / b[k].norm()).item() for k in b)
        print(f"\nscripted mlp: 2 ranks x 32 vs 1 rank x 16 x 4: max relative weight difference {diff:.3g}")
        self.assertLess(diff, 1e-5)
        # The trained weights go into the Python module under its own names, and the module comes
        # back trained as RUN/model.pt.
        python_module = torch.jit.load(os.path.join(MODELS, "mlp.pt"))
        python_module.load_state_dict(a, strict=True)
        trained = torch.jit.load(os.path.join(single, "model.pt"))
        for name, tensor in trained.state_dict().items():
            self.assertTrue(torch.equal(tensor, a[name]), name)
        with open(os.path.join(single, "metrics.jsonl")) as f:
            updates = [json.loads(line) for line in f if '"loss"' in line and '"event"' not in line]
        self.assertEqual(updates[-1]["items"], 24)  # the short window
        result = run("sample", single, "--prompt", "x")
        self.assert_one_line_error(result, "usage", "classifies images")

    def test_resume_is_bit_identical_and_refuses_another_module(self):
        local = self.path("mlp.pt")
        shutil.copy(os.path.join(MODELS, "mlp.pt"), local)
        flags = ["--model", f"torchscript:{local}", *images("--micro-batch", "16", "--schedule", "constant")]
        whole = self.path("whole")
        self.assertEqual(run("train", *flags, "--out", whole).returncode, 0)
        evaluated = run("evaluate", whole, "--json")
        self.assertEqual(evaluated.returncode, 0, evaluated.stderr)
        part = self.path("part")
        result = run("train", *flags, "--max-updates", "4", "--checkpoint-every", "2u", "--out", part)
        self.assertEqual(result.returncode, 0, result.stderr)
        result = run("train", "--resume", part, "--max-updates", "1000000")
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(os.path.join(whole, "weights.safetensors"), "rb") as x, \
                open(os.path.join(part, "weights.safetensors"), "rb") as y:
            self.assertEqual(x.read(), y.read())
        # A run stopped before its end has no model.pt of its own: its module is the file it
        # started from, checked against the digest its checkpoints record.
        stopped = self.path("stopped")
        result = run("train", *flags, "--max-updates", "2", "--checkpoint-every", "1u", "--out", stopped)
        self.assertEqual(result.returncode, 0, result.stderr)
        os.remove(os.path.join(stopped, "model.pt"))
        self.assertEqual(run("evaluate", stopped, "--json").returncode, 0)
        # The same path, another module: another run.
        shutil.copy(os.path.join(MODELS, "cnn_bn.pt"), local)
        self.assert_one_line_error(run("train", "--resume", part), "format", "model_file")
        self.assert_one_line_error(run("evaluate", stopped), "format",
                                   "is not the module run '%s' trained (its model_file digest differs" % stopped,
                                   "put the module the run trained back at that path")
        # evaluate uses the run's own module (RUN/model.pt), not the file training started from:
        # replaced by another valid module, then deleted, it changes nothing.
        for state in ("replaced", "deleted"):
            if state == "deleted":
                os.remove(local)
            again = run("evaluate", whole, "--json")
            self.assertEqual(again.returncode, 0, again.stderr)
            self.assertEqual(json.loads(again.stdout)["accuracy"], json.loads(evaluated.stdout)["accuracy"], state)

    def test_init_weights_and_a_tied_language_model_on_text(self):
        corpus = self.path("corpus")
        with open(corpus, "w") as f:
            f.write("\n%\n".join(("lorem ipsum %d " % i) * (1 + i % 5) for i in range(80)) + "\n")
        out = self.path("lm")
        result = run("train", "--model", module("tiny_lm.pt"), "--dataset", f"text:{corpus}", "--seq-len", "48",
                     "--global-batch", "16", "--micro-batch", "4", "--optimizer", "adamw", "--lr", "3e-3",
                     "--val-size", "8", "--epochs", "2", "--threads", "1", "--progress", "off", "--out", out)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("bpb", result.stderr)
        trained = read_safetensors(os.path.join(out, "weights.safetensors"))
        self.assertTrue(torch.equal(trained["head.weight"], trained["token.weight"]))  # still tied
        sampled = run("sample", out, "--prompt", "lorem", "--tokens", "20", "--seed", "3")
        self.assertEqual(sampled.returncode, 0, sampled.stderr)
        self.assertTrue(sampled.stdout.startswith("lorem"), sampled.stdout)
        # Trained weights as the start of another run: nothing more than 0 updates changes them.
        again = self.path("again")
        result = run("train", "--model", module("tiny_lm.pt"), "--dataset", f"text:{corpus}", "--seq-len", "48",
                     "--init-weights", os.path.join(out, "weights.safetensors"), "--max-updates", "0",
                     "--progress", "off", "--out", again)
        self.assertEqual(result.returncode, 0, result.stderr)
        reloaded = read_safetensors(os.path.join(again, "weights.safetensors"))
        for name, tensor in trained.items():
            self.assertTrue(torch.equal(tensor, reloaded[name]), name)

    def test_a_module_that_writes_into_its_batch_changes_that_batch_only(self):
        # Two epochs with evaluations between them: inputs shifted in place must change the
        # module's own batch only, never the training, validation or test data that later
        # epochs and evaluations read: the same as the module written out of place.
        flags = images("--epochs", "2", "--val-size", "100", "--eval-every", "5u", "--micro-batch", "32")
        results = []
        for name in ("shifts_in_place.pt", "shifts.pt"):
            out = self.path(name)
            result = run("train", "--model", module(name), *flags, "--out", out)
            self.assertEqual(result.returncode, 0, result.stderr)
            evaluations = [{k: v for k, v in r.items() if k.endswith(("_loss", "_accuracy")) or k == "step"}
                           for r in e2e_common.records(out) if "val_loss" in r]
            results.append((read_safetensors(os.path.join(out, "weights.safetensors")), evaluations))
        (a, evaluations_a), (b, evaluations_b) = results
        self.assertEqual(sorted(a), sorted(b))
        for key in a:
            self.assertTrue(torch.equal(a[key], b[key]), key)
        self.assertGreater(len(evaluations_a), 2)
        self.assertEqual(evaluations_a, evaluations_b)
        # Writing into what backward needs (labels, token ids) breaks autograd, as it would in
        # PyTorch: named as the module's fault, not an internal error; the twin that does not
        # write trains.
        corpus = self.path("corpus")
        with open(corpus, "w") as f:
            f.write("\n%\n".join(("lorem ipsum %d " % i) * (1 + i % 5) for i in range(60)) + "\n")
        text = ["--dataset", f"text:{corpus}", "--seq-len", "48", "--global-batch", "16", "--micro-batch", "4",
                "--val-size", "8", "--epochs", "1", "--threads", "1", "--progress", "off"]
        for writes, reads, flags in (("clears_targets.pt", "keeps_targets.pt", images("--micro-batch", "32")),
                                     ("clears_tokens.pt", "keeps_tokens.pt", text)):
            with self.subTest(writes):
                result = run("train", "--model", module(writes), *flags, "--out", self.path(writes))
                self.assert_one_line_error(result, "model", "wrote in place into a tensor its backward needs",
                                           "modified by an inplace operation", "x = x.clone()")
                # Failed in its first update: the start's files are gone, the --out is free.
                self.assertFalse(os.path.exists(self.path(writes)))
                # The same through the thread count's probe (--threads 0: measured).
                at = flags.index("--threads")
                result = run("train", "--model", module(writes), *flags[:at], *flags[at + 2:], "--threads", "0",
                             "--out", self.path(writes))
                self.assert_one_line_error(result, "model", "wrote in place into a tensor its backward needs")
                self.assertFalse(os.path.exists(self.path(writes)))
                result = run("train", "--model", module(reads), *flags, "--out", self.path(reads))
                self.assertEqual(result.returncode, 0, result.stderr)

    def test_out_of_memory_inside_the_module_backs_off(self):
        # The interpreter rewraps the budget's out-of-memory error; it must still back off.
        flags = ["--model", module("mlp.pt"), "--train-subset", "2048", "--global-batch", "2048", "--epochs", "1",
                 "--threads", "1", "--progress", "off"]
        backed = self.path("backed")
        result = run("train", *flags, "--micro-batch", "2048", "--memory-budget", "12MiB", "--out", backed)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("backing off to 2048 = micro 1024 x accumulation 2", result.stderr)
        with open(os.path.join(backed, "metrics.jsonl")) as f:
            events = [json.loads(line) for line in f if "oom_backoff" in line]
        direct = self.path("direct")
        result = run("train", *flags, "--micro-batch", str(events[-1]["micro_batch"]), "--out", direct)
        self.assertEqual(result.returncode, 0, result.stderr)
        a = read_safetensors(os.path.join(backed, "weights.safetensors"))
        b = read_safetensors(os.path.join(direct, "weights.safetensors"))
        self.assertLess(max(((a[k] - b[k]).norm() / b[k].norm()).item() for k in b), 1e-5)

    def test_a_module_with_its_own_loss_on_two_ranks(self):
        # forward(tokens, targets) -> (loss_sum, count): the counts of both ranks are summed with
        # the gradients before the one division, so 2 ranks equal 1.
        corpus = self.path("corpus")
        with open(corpus, "w") as f:
            f.write("\n%\n".join(("dolor sit %d " % i) * (1 + i % 6) for i in range(80)) + "\n")
        flags = ["--model", module("own_loss_lm.pt"), "--dataset", f"text:{corpus}", "--seq-len", "48",
                 "--global-batch", "16", "--optimizer", "adamw", "--lr", "3e-3", "--val-size", "8", "--epochs", "1",
                 "--progress", "off", "--dist-timeout", "30"]
        single, ranks = self.path("single"), self.path("ranks")
        result = run("train", *flags, "--micro-batch", "4", "--threads", "1", "--out", single)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("val loss", result.stderr)
        result = run("launch", "--nproc", "2", "--master-port", str(free_port()), "--", e2e_common.BINARY, "train", *flags,
                     "--micro-batch", "4", "--threads", "1", "--out", ranks)
        self.assertEqual(result.returncode, 0, result.stderr)
        a = read_safetensors(os.path.join(single, "weights.safetensors"))
        b = read_safetensors(os.path.join(ranks, "weights.safetensors"))
        keep = [k for k in b if not k.endswith("in_proj_bias")]  # the key bias: see scripted_oracle.py
        diff = max(((a[k] - b[k]).norm() / b[k].norm()).item() for k in keep)
        print(f"\nown-loss lm: 2 ranks vs 1: max relative weight difference {diff:.3g}")
        self.assertLess(diff, 1e-5)
        with open(os.path.join(single, "metrics.jsonl")) as f:
            updates = [json.loads(line) for line in f if '"loss"' in line and '"event"' not in line]
        self.assertGreater(updates[0]["items"], 16)  # tokens of 16 documents, as the module counted
        result = run("evaluate", single, "--split", "val", "--json")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertNotIn("accuracy", json.loads(result.stdout))

    def test_an_image_module_with_its_own_loss_reports_no_accuracy(self):
        out = self.path("own")
        result = run("train", "--model", module("smoothed_mlp.pt"), *images("--micro-batch", "16", "--out", out))
        self.assertEqual(result.returncode, 0, result.stderr)
        epoch = [line for line in result.stderr.splitlines() if line.startswith("epoch 1:")][0]
        self.assertNotIn("acc", epoch)
        self.assertIn("test loss", result.stdout)
        self.assert_one_line_error(run("predict", out, "--input", os.path.join(self.dir, "x.npy"), "--output",
                                       os.path.join(self.dir, "y.npy")), "data", "not found")

    def test_label_smoothing_three_ways_trains_the_same(self):
        # PyTorch's label-smoothed cross-entropy (0.1) from mlp.pt's initial weights, three ways:
        # the module's forward(x, y) -> (sum, count); its exported loss(outputs, y) over what
        # forward returns, (logits, probabilities); and bigbatch's --label-smoothing 0.1 on the
        # plain module. The same updates, so the same weights.
        cases = (("own", "smoothed_own_loss.pt", []), ("method", "loss_method.pt", []),
                 ("flag", "mlp.pt", ["--label-smoothing", "0.1"]))
        weights, results = {}, {}
        for name, model, extra in cases:
            out = self.path(name)
            results[name] = run("train", "--model", module(model), *images("--micro-batch", "16", "--out", out, *extra))
            self.assertEqual(results[name].returncode, 0, results[name].stderr)
            weights[name] = {k.removeprefix("net."): v
                             for k, v in read_safetensors(os.path.join(out, "weights.safetensors")).items()}
        diff = max(((weights[a][k] - weights["own"][k]).norm() / weights["own"][k].norm()).item()
                   for a in ("method", "flag") for k in weights["own"])
        print(f"\nlabel smoothing 0.1, module loss vs loss() vs --label-smoothing: max relative weight difference "
              f"{diff:.3g}")
        self.assertLess(diff, 1e-5)
        # The loss method's logits are scored, in training and evaluation alike; the module's own
        # forward(x, y) gives none.
        self.assertNotIn("accuracy", results["own"].stdout)
        self.assertIn("test accuracy", results["method"].stdout)
        self.assertRegex([line for line in results["method"].stderr.splitlines() if line.startswith("epoch 1:")][0],
                         r"acc \d")
        method, flag = (json.loads(run("evaluate", self.path(name), "--json").stdout) for name in ("method", "flag"))
        self.assertAlmostEqual(method["accuracy"], flag["accuracy"], places=6)
        # --label-smoothing smooths training only: evaluations report the plain cross-entropy,
        # below the module's own smoothed loss on the same weights.
        self.assertGreater(method["loss"], flag["loss"] + 0.05)
        # predict runs forward: the logits, the tuple's first element.
        x = self.path("x.npy")
        subprocess.run([sys.executable, "-c", f"import numpy; numpy.save({x!r}, numpy.zeros((3, 1, 28, 28), 'float32'))"],
                       check=True)
        result = run("predict", self.path("method"), "--input", x, "--output", self.path("p.npy"))
        self.assertEqual(result.returncode, 0, result.stderr)

    def test_batch_norm_inside_a_module_is_announced(self):
        result = run("train", "--model", module("cnn_bn.pt"), *images("--micro-batch", "16", "--max-updates", "2",
                                                                    "--out", self.path("bn")))
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("normalises over each micro-batch of 16 samples in its BatchNorm layers (bn)", result.stderr)
        # verify explains the difference, and sees none for a module without batch statistics.
        result = run("verify", "--model", module("cnn_bn.pt"), "--global-batch", "64", "--micro-batch", "16")
        self.assertEqual(result.returncode, 6, result.stdout + result.stderr)
        self.assertIn("differs because of BatchNorm in layers bn", result.stdout)
        self.assertIn("nn.GroupNorm in the module, or --bn-mode frozen", result.stdout)
        result = run("verify", "--model", module("mlp.pt"), "--global-batch", "64", "--micro-batch", "16")
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertIn("exact to fp32 tolerance", result.stdout)
        self.assertIn("float64 reference (the same samples as one batch in float64)", result.stdout)

    def test_verify_turns_a_modules_dropout_off(self):
        # Issue 59 item 3: nn.Dropout found by its type (p = 0 draws nothing and is left alone),
        # turned off on both sides and named; not "differs unexpectedly" (exit 7).
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 32), torch.nn.Dropout(0.3),
                                  torch.nn.ReLU(), torch.nn.Dropout(0.0), torch.nn.Linear(32, 10))
        path = self.path("dropout.pt")
        torch.jit.script(net).save(path)
        result = run("verify", "--model", f"torchscript:{path}", "--global-batch", "64", "--micro-batch", "16",
                     "--train-subset", "600", "--threads", "1")
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertIn("dropout turned off on both sides (2): its masks are random draws", result.stdout)
        self.assertIn("exact to fp32 tolerance", result.stdout)


class RunDirectoryTest(ScriptedTestCase):
    def test_a_run_trained_on_relative_paths_works_from_any_directory(self):
        # Issue 35: the dataset and module named relative to where training ran are recorded by
        # absolute paths; evaluate and --resume work from elsewhere; predict needs only the run
        # and its input (the training data moved away).
        import numpy as np
        work, elsewhere = self.path("work"), self.path("elsewhere")
        os.makedirs(os.path.join(work, "data"))
        os.makedirs(elsewhere)
        shutil.copy(os.path.join(MODELS, "mlp.pt"), os.path.join(work, "m.pt"))
        rng = np.random.default_rng(3)
        x = rng.random((400, 28, 28)).astype("float32")
        y = rng.integers(0, 10, 400).astype("int64")
        for split, rows in (("train", slice(0, 300)), ("test", slice(300, 400))):
            np.save(os.path.join(work, "data", f"x_{split}.npy"), x[rows])
            np.save(os.path.join(work, "data", f"y_{split}.npy"), y[rows])
        result = run("train", "--model", "torchscript:m.pt", "--dataset", "npy:data", "--global-batch", "64",
                     "--micro-batch", "32", "--epochs", "1", "--threads", "1", "--progress", "off",
                     "--checkpoint-every", "1e", "--out", "runs/a", cwd=work)
        self.assertEqual(result.returncode, 0, result.stderr)
        run_dir = os.path.join(work, "runs", "a")
        config = e2e_common.read(os.path.join(run_dir, "config.toml"))
        self.assertIn(f"dataset = 'npy:{work}/data'", config)
        self.assertIn(f"model = 'torchscript:{work}/m.pt'", config)

        evaluated = run("evaluate", run_dir, "--json", cwd=elsewhere)
        self.assertEqual(evaluated.returncode, 0, evaluated.stderr)
        tested = [r for r in e2e_common.records(run_dir) if "test_accuracy" in r][-1]["test_accuracy"]
        self.assertAlmostEqual(json.loads(evaluated.stdout)["accuracy"], tested, places=6)
        resumed = run("train", "--resume", run_dir, "--epochs", "2", cwd=elsewhere)
        self.assertEqual(resumed.returncode, 0, resumed.stderr)
        self.assertIn("resumed from", resumed.stderr)

        os.rename(os.path.join(work, "data"), os.path.join(work, "moved"))
        np.save(os.path.join(elsewhere, "x.npy"), x[:5])
        predicted = run("predict", run_dir, "--input", "x.npy", "--output", "p.npy", cwd=elsewhere)
        self.assertEqual(predicted.returncode, 0, predicted.stderr)
        trained = torch.jit.load(os.path.join(run_dir, "model.pt"))
        trained.eval()
        with torch.no_grad():
            expected = torch.softmax(trained(torch.from_numpy(x[:5]).reshape(5, 1, 28, 28)), 1).numpy()
        self.assertLess(float(np.abs(np.load(os.path.join(elsewhere, "p.npy")) - expected).max()), 1e-6)
        # evaluate reads the data, and says where it looked.
        self.assert_error(run("evaluate", run_dir, cwd=elsewhere), f"{work}/data")


class BadModelTest(ScriptedTestCase):
    def train(self, *args):
        return run("train", *images("--micro-batch", "16", "--max-updates", "2"), "--out", self.path("bad"), *args)

    def test_a_module_using_an_operator_this_libtorch_lacks_is_said_to_be_from_a_newer_pytorch(self):
        # Issue 59 item 1: a module scripted by PyTorch 2.x with attention met libtorch 1.13's
        # "Unknown builtin op" (after a blank first line) as "is not a TorchScript module ()".
        # An operator no libtorch has stands in for one a newer PyTorch added.
        plain = self.path("plain.pt")
        torch.jit.script(torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 10))).save(plain)
        newer = self.path("newer.pt")
        with zipfile.ZipFile(plain) as source, zipfile.ZipFile(newer, "w", zipfile.ZIP_STORED) as out:
            for name in source.namelist():
                data = source.read(name)
                if name.endswith("code/__torch__/torch/nn/modules/container.py"):
                    data = data.replace(b"return (_1).forward(input0, )",
                                        b"return torch.bigbatch_future_op((_1).forward(input0, ))")
                out.writestr(name, data)
        result = self.train("--model", f"torchscript:{newer}")
        self.assert_one_line_error(result, "model", f"model file '{newer}' does not load in bigbatch's libtorch ",
                                   "(Unknown builtin op: aten::bigbatch_future_op.): it was likely written by a newer "
                                   "PyTorch", "scripts/setup.sh --pytorch python3")
        self.assertNotIn("()", result.stderr)

    def test_broken_modules_are_one_line_errors_that_leave_nothing(self):
        cases = [
            ("missing.pt", "does not exist", "torch.jit.script(model).save"),
            ("not_torchscript.pt", "is not a TorchScript module", "a state_dict or a pickled model"),
            ("wrong_arguments.pt", "forward() takes (x, y, z)", "forward(inputs, targets)"),
            ("throws.pt", "failed in forward() on inputs [2, 1, 28, 28] float32: RuntimeError: this module refuses "
             "every batch", "in Python"),
            ("returns_tuple.pt", "returned Tuple that does not start with a tensor", "a tuple that starts with them"),
            ("loss_arity.pt", "loss() takes 1 argument(s)", "def loss(self, outputs, targets)"),
            ("mean_loss_method.pt", "loss(outputs, targets) returns the mean over its batch, not the sum",
             "reduction='sum'"),
            ("seven_classes.pt", "returned [2, 7] for inputs [2, 1, 28, 28]", "nn.Linear(features, 10)"),
        ]
        for name, problem, fix in cases:
            with self.subTest(name):
                self.assert_one_line_error(self.train("--model", module(name)), "model", problem, fix)
        self.assert_one_line_error(self.train("--model", module("mlp.pt"), "--dataset", "text:/usr/share/games/fortunes"),
                                   "model", "failed in forward() on inputs [2, ", "int64 token ids")
        self.assert_one_line_error(self.train("--model", module("small_vocabulary.pt"), "--dataset",
                                              "text:/usr/share/games/fortunes", "--seq-len", "32"),
                                   "model", "returned [2, 32, 100]", "a vocabulary of at least 257",
                                   "nn.Linear(d_model, 257)")
        self.assert_one_line_error(self.train("--model", module("tiny_lm.pt"), "--dataset",
                                              "text:/usr/share/games/fortunes", "--seq-len", "100"),
                                   "model", "failed in forward()")
        self.assert_one_line_error(self.train("--model", module("cnn_bn.pt"), "--norm", "group"), "config",
                                   "--norm group", "GroupNorm in the module itself")
        self.assert_one_line_error(self.train("--model", module("cnn_bn.pt"), "--bn-mode", "window"), "config",
                                   "--bn-mode window", "micro")
        self.assert_one_line_error(self.train("--model", "torchscript:"), "config", "names no file")
        # Contracts training needs: parameters that take gradients, and results that reach them.
        self.assert_one_line_error(self.train("--model", module("frozen.pt")), "model",
                                   "none requires a gradient", "requires_grad")
        self.assert_one_line_error(self.train("--model", module("detached.pt")), "model",
                                   "returned outputs with no gradient path", ".detach()")
        self.assert_one_line_error(self.train("--model", module("detached_loss.pt")), "model",
                                   "returned a loss with no gradient path", ".detach()")
        # A file damaged after PyTorch saved it: 64 bytes inverted inside the weights' member.
        blob = bytearray(e2e_common.read(os.path.join(MODELS, "mlp.pt"), "rb"))
        with zipfile.ZipFile(os.path.join(MODELS, "mlp.pt")) as archive:
            info = max(archive.infolist(), key=lambda i: i.compress_size)  # the first layer's weights
        local_extra = int.from_bytes(blob[info.header_offset + 28:info.header_offset + 30], "little")
        start = info.header_offset + 30 + len(info.filename.encode()) + local_extra + info.compress_size // 2
        for i in range(start, start + 64):
            blob[i] ^= 0xFF
        damaged = self.path("damaged.pt")
        with open(damaged, "wb") as f:
            f.write(bytes(blob))
        self.assert_one_line_error(self.train("--model", f"torchscript:{damaged}"), "model",
                                   f"member '{info.filename}' is damaged (its CRC-32 does not match)",
                                   "save it again")
        self.assert_one_line_error(self.train("--model", module("mean_loss.pt")), "model",
                                   "returned one tensor", "cannot be made the mean over the whole update",
                                   "return (loss_sum, item_count)")
        self.assert_one_line_error(self.train("--model", module("three_results.pt")), "model",
                                   "not (loss_sum, item_count)")
        self.assert_one_line_error(self.train("--model", module("own_loss_mlp.pt"), "--target-accuracy", "0.5"),
                                   "config", "--target-accuracy needs predictions")
        self.assert_one_line_error(self.train("--model", module("loss_method.pt"), "--label-smoothing", "0.1"),
                                   "config", "the module computes its own loss", "label_smoothing=0.1")
        self.assert_one_line_error(self.train("--label-smoothing", "1"), "config",
                                   "--label-smoothing must be in [0, 1), got 1")
        self.assertFalse(os.path.exists(self.path("bad")))

    def test_a_module_that_breaks_mid_run_leaves_a_reusable_out(self):
        # Issue 36: after some updates and no checkpoint, the directory could be neither
        # resumed (nothing to resume from) nor reused (it held a run). Its records are kept.
        out = self.path("later")
        flags = ["--model", module("throws_later.pt"), *images("--micro-batch", "16", "--max-updates", "8"),
                 "--out", out]
        result = run("train", *flags)
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn("refuses its fifth batch", result.stderr.splitlines()[-1])
        moved = re.search(r"moved the run's records to (\S+): it stopped after 1 update with no checkpoint to "
                          r"resume from, and its --out can be used again", result.stderr)
        self.assertTrue(moved, result.stderr)
        self.assertEqual(os.path.dirname(moved.group(1)), os.path.join(out, "abandoned"))
        updates = [r for r in e2e_common.records(moved.group(1)) if "loss" in r and "event" not in r]
        self.assertEqual([u["step"] for u in updates], [1])
        self.assertTrue(os.path.exists(os.path.join(moved.group(1), "config.toml")))
        self.assertEqual(run("train", "--max-updates", "1", "--out", out, *images()).returncode, 0)
        # With a checkpoint the run stays where it is, to resume from it.
        kept = self.path("kept")
        result = run("train", *flags[:-1], kept, "--checkpoint-every", "1u")
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertTrue(os.path.isdir(os.path.join(kept, "checkpoints")))
        self.assertTrue(os.path.exists(os.path.join(kept, "metrics.jsonl")))
        self.assertNotIn("moved the run's records", result.stderr)


def write_modules():
    global MODELS
    MODELS = tempfile.mkdtemp(prefix="bigbatch_scripted_models_")
    atexit.register(shutil.rmtree, MODELS, ignore_errors=True)
    subprocess.run([sys.executable, os.path.join(HERE, "..", "python", "make_scripted_models.py"), MODELS], check=True)


if __name__ == "__main__":
    e2e_common.main(before=write_modules)
