#!/usr/bin/python3
"""End-to-end tests of `bigbatch evaluate`: a trained run's metrics on any split, as text and
JSON, equal to what training reported; weights files alone; other datasets; its errors.
Usage: test_evaluate.py BIGBATCH_BINARY [unittest arguments]."""
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_common  # noqa: E402
from e2e_common import CliTestCase, main, records, run  # noqa: E402


class EvaluateTest(CliTestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="bigbatch_evaluate_")
        cls.run_dir = os.path.join(cls.dir, "mlp")
        result = run("train", "--model", "mlp", "--hidden", "32", "--train-subset", "1000", "--val-size", "200",
                     "--global-batch", "100", "--micro-batch", "50", "--epochs", "1", "--threads", "1",
                     "--progress", "off", "--out", cls.run_dir)
        assert result.returncode == 0, result.stderr

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def test_metrics_equal_what_training_reported(self):
        epoch = [r for r in records(self.run_dir) if "test_accuracy" in r][-1]
        for split, key in (("test", "test"), ("val", "val")):
            result = run("evaluate", self.run_dir, "--split", split, "--json")
            self.assertEqual(result.returncode, 0, result.stderr)
            report = json.loads(result.stdout)
            self.assertEqual(report["split"], split)
            self.assertAlmostEqual(report["accuracy"], epoch[f"{key}_accuracy"], places=6)
            self.assertAlmostEqual(report["loss"], epoch[f"{key}_loss"], places=5)
        self.assertEqual(json.loads(run("evaluate", self.run_dir, "--split", "val", "--json").stdout)["samples"], 200)
        text = run("evaluate", self.run_dir)
        self.assertEqual(text.returncode, 0, text.stderr)
        self.assertIn("test split: 10000 samples", text.stdout)
        self.assertIn("accuracy", text.stdout)

    def test_a_weights_file_alone_and_another_dataset(self):
        weights = os.path.join(self.run_dir, "weights.safetensors")
        alone = run("evaluate", weights, "--json")
        self.assertEqual(alone.returncode, 0, alone.stderr)
        from_run = run("evaluate", self.run_dir, "--json")
        self.assertEqual(json.loads(alone.stdout)["accuracy"], json.loads(from_run.stdout)["accuracy"])
        other = run("evaluate", self.run_dir, "--dataset", "idx:/usr/share/datasets/fashion-mnist", "--json")
        self.assertEqual(other.returncode, 0, other.stderr)
        self.assertEqual(json.loads(other.stdout)["accuracy"], json.loads(from_run.stdout)["accuracy"])

    def test_a_run_stopped_before_its_end_is_read_from_its_newest_checkpoint(self):
        # Issue 59 item 10: after Ctrl-C a run has checkpoints but no weights.safetensors; evaluate
        # and predict used to refuse it ("not a finished run directory"), and a checkpoint too.
        stopped = os.path.join(self.dir, "stopped")
        result = run("train", "--model", "mlp", "--hidden", "32", "--train-subset", "1000", "--global-batch", "100",
                     "--epochs", "1", "--threads", "1", "--progress", "off", "--checkpoint-every", "4u",
                     "--out", stopped)
        self.assertEqual(result.returncode, 0, result.stderr)
        os.remove(os.path.join(stopped, "weights.safetensors"))  # as a run stopped before its end
        newest = os.path.join(stopped, "checkpoints", sorted(os.listdir(os.path.join(stopped, "checkpoints")))[-1])
        evaluated = run("evaluate", stopped, "--json")
        self.assertEqual(evaluated.returncode, 0, evaluated.stderr)
        report = json.loads(evaluated.stdout)
        self.assertEqual(report["weights"], os.path.join(newest, "weights.safetensors"))
        self.assertEqual(report["note"], f"run '{stopped}' did not finish (no weights.safetensors): using its newest "
                                         f"checkpoint, '{newest}'")
        text = run("evaluate", stopped)
        self.assertTrue(text.stdout.startswith(f"evaluate: run '{stopped}' did not finish"), text.stdout)
        # A checkpoint directory itself, and the same figures through --weights.
        direct = run("evaluate", newest, "--json")
        self.assertEqual(direct.returncode, 0, direct.stderr)
        self.assertEqual(json.loads(direct.stdout)["accuracy"], report["accuracy"])
        by_weights = run("evaluate", stopped, "--weights", os.path.join(newest, "weights.safetensors"), "--json")
        self.assertEqual(json.loads(by_weights.stdout)["accuracy"], report["accuracy"])
        import numpy as np
        x = os.path.join(self.dir, "x_stopped.npy")
        np.save(x, np.zeros((3, 28, 28), dtype=np.uint8))
        predicted = run("predict", stopped, "--input", x, "--output", os.path.join(self.dir, "p_stopped.npy"))
        self.assertEqual(predicted.returncode, 0, predicted.stderr)
        self.assertIn(f"predict: run '{stopped}' did not finish", predicted.stderr)
        # No weights and no checkpoint: what to do about it.
        shutil.rmtree(os.path.join(stopped, "checkpoints"))
        self.assert_one_line_error(run("evaluate", stopped), "io", "has no weights.safetensors (it did not finish) "
                                   "and no complete checkpoint", f"bigbatch train --resume {stopped}")

    def test_another_dataset_the_model_cannot_take_is_named_not_its_weights(self):
        # Issue 36: labels past the run's classes were "weights file ... gives tensor '3.weight'
        # shape [10, 32], the model needs [12, 32]"; the run's --train-subset 1000 was applied to
        # the other data too.
        import numpy as np
        rng = np.random.default_rng(5)

        def arrays(name, classes, side=28):
            directory = os.path.join(self.dir, name)
            os.makedirs(directory, exist_ok=True)
            for split, n in (("train", 300), ("test", 100)):
                np.save(os.path.join(directory, f"x_{split}.npy"), rng.random((n, side, side)).astype("float32"))
                np.save(os.path.join(directory, f"y_{split}.npy"), rng.integers(0, classes, n))
            return "npy:" + directory

        fits = run("evaluate", self.run_dir, "--dataset", arrays("ten", 10), "--json")
        self.assertEqual(fits.returncode, 0, fits.stderr)
        self.assertEqual(json.loads(fits.stdout)["samples"], 100)
        self.assert_one_line_error(run("evaluate", self.run_dir, "--dataset", arrays("twelve", 12)), "data",
                                   "has labels up to 11; the run's model has outputs for 10 classes (0 to 9)")
        self.assert_one_line_error(run("evaluate", self.run_dir, "--dataset", arrays("small", 10, side=27)),
                                   "data", "holds samples of shape [1, 27, 27]; the run's model takes [1, 28, 28]")

    def test_predict_writes_probabilities_that_agree_with_evaluate(self):
        import numpy as np
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
        from bigbatch_oracle import read_idx
        fashion = "/usr/share/datasets/fashion-mnist"
        images = read_idx(os.path.join(fashion, "t10k-images-idx3-ubyte.gz"))  # raw uint8 [N, 28, 28]
        labels = read_idx(os.path.join(fashion, "t10k-labels-idx1-ubyte.gz"))
        x = os.path.join(self.dir, "x.npy")
        np.save(x, images)
        out = os.path.join(self.dir, "p.npy")
        result = run("predict", self.run_dir, "--input", x, "--output", out)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("class probabilities of 10000 samples x 10 classes", result.stderr)
        probabilities = np.load(out)
        self.assertEqual(probabilities.shape, (10000, 10))
        self.assertEqual(probabilities.dtype, np.float32)
        self.assertTrue(np.allclose(probabilities.sum(1), 1, atol=1e-5))
        evaluated = json.loads(run("evaluate", self.run_dir, "--json").stdout)
        self.assertAlmostEqual(float((probabilities.argmax(1) == labels).mean()), evaluated["accuracy"], places=6)
        logits = os.path.join(self.dir, "l.npy")
        self.assertEqual(run("predict", self.run_dir, "--input", x, "--output", logits, "--logits").returncode, 0)
        self.assertTrue((np.load(logits).argmax(1) == probabilities.argmax(1)).all())
        np.save(x, images[:, :27, :27])
        self.assert_one_line_error(run("predict", self.run_dir, "--input", x, "--output", out), "data",
                                   "samples of shape [1, 27, 27]", "[1, 28, 28]")
        # Outputs that must not be written: the input itself (under any name), a device, a
        # pipe; a link is written through, and stays a link.
        before = e2e_common.read(x, "rb")
        alias = os.path.join(self.dir, "alias.npy")
        os.symlink(x, alias)
        for output, fragment in ((x, "is the input"), (alias, "is the input"),
                                 ("/dev/null", "'/dev/null' is a character device, not a regular file")):
            with self.subTest(output=output):
                self.assert_one_line_error(run("predict", self.run_dir, "--input", x, "--output", output), "io",
                                           fragment)
        self.assertEqual(e2e_common.read(x, "rb"), before)
        self.assertTrue(os.path.exists("/dev/null") and not os.path.isfile("/dev/null"))
        pipe = os.path.join(self.dir, "pipe")
        os.mkfifo(pipe)
        self.assert_one_line_error(run("predict", self.run_dir, "--input", x, "--output", pipe), "io",
                                   "is a named pipe")
        # Issue 59 item 20: a directory is answered with a file of what predict writes.
        self.assert_one_line_error(run("predict", self.run_dir, "--input", x, "--output", self.dir), "io",
                                   "is a directory", f"e.g. {os.path.join(self.dir, 'predictions.npy')}")
        np.save(x, images[:100])
        target = os.path.join(self.dir, "target.npy")
        link = os.path.join(self.dir, "link.npy")
        os.symlink(target, link)
        self.assertEqual(run("predict", self.run_dir, "--input", x, "--output", link).returncode, 0)
        self.assertTrue(os.path.islink(link))
        self.assertEqual(np.load(target).shape, (100, 10))
        # A name of another format is refused, not filled with a .npy (issue 36).
        named = os.path.join(self.dir, "p.safetensors")
        self.assert_one_line_error(run("predict", self.run_dir, "--input", x, "--output", named), "usage",
                                   "names a .safetensors file, but predict writes a numpy array (.npy)",
                                   "name it " + os.path.join(self.dir, "p.npy"))
        self.assertFalse(os.path.exists(named))
        # No samples at all: said, not an internal error.
        np.save(x, images[:0])
        self.assert_one_line_error(run("predict", self.run_dir, "--input", x, "--output", out), "data",
                                   "holds no samples")

    def test_the_device_is_the_commands_choice(self):
        # Issue 19: evaluate, predict and sample compute where --device says, not where the run
        # trained; auto is the CPU here, and gives the CPU's figures.
        on_cpu = json.loads(run("evaluate", self.run_dir, "--json").stdout)
        auto = run("evaluate", self.run_dir, "--json", "--device", "auto")
        self.assertEqual(auto.returncode, 0, auto.stderr)
        self.assertEqual(json.loads(auto.stdout)["accuracy"], on_cpu["accuracy"])
        self.assertEqual((on_cpu["device"], json.loads(auto.stdout)["device"]), ("cpu", "cpu"))
        self.assertIn("test split: 10000 samples, on cpu", run("evaluate", self.run_dir, "--device", "auto").stdout)
        self.assert_one_line_error(run("evaluate", self.run_dir, "--device", "gpu"), "config", "did you mean 'cuda'?")
        if "without CUDA" in run("evaluate", self.run_dir, "--device", "cuda:99").stderr:
            for command in (["evaluate", self.run_dir], ["predict", self.run_dir, "--input", "x.npy", "--output",
                                                          os.path.join(self.dir, "never.npy")],
                            ["sample", self.run_dir]):
                self.assert_one_line_error(run(*command, "--device", "cuda"), "config",
                                           "--device cuda: this bigbatch is built against a libtorch without CUDA")
            self.assertFalse(os.path.exists(os.path.join(self.dir, "never.npy")))

    def test_errors_are_one_line(self):
        self.assert_one_line_error(run("evaluate", self.run_dir, "--split", "dev"), "usage",
                                   "--split must be test, val or train")
        self.assert_one_line_error(run("evaluate", os.path.join(self.dir, "nowhere")), "io",
                                   "neither a run directory")
        self.assert_one_line_error(run("evaluate", self.run_dir, "--weights", os.path.join(self.dir, "none.safetensors")),
                                   "format", "does not exist")
        self.assert_one_line_error(run("evaluate", self.run_dir, "--dataset", "text:/usr/share/games/fortunes"),
                                   "config", "classifies images")
        corpus = os.path.join(self.dir, "corpus")
        with open(corpus, "w") as f:
            f.write("\n%\n".join("document %d " % i * 3 for i in range(40)) + "\n")
        lm = os.path.join(self.dir, "lm")
        result = run("train", "--dataset", f"text:{corpus}", "--model", "gpt", "--layers", "1", "--d-model", "16",
                     "--heads", "2", "--seq-len", "32", "--global-batch", "8", "--micro-batch", "4", "--max-updates", "2", "--threads", "1",
                     "--progress", "off", "--out", lm)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assert_one_line_error(run("evaluate", lm), "usage", "no test split", "--split val")
        result = run("evaluate", lm, "--split", "val", "--json")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("bits_per_byte", json.loads(result.stdout))
        self.assert_one_line_error(run("predict", lm, "--input", "x.npy", "--output", "y.npy"), "usage",
                                   "bigbatch sample")
        self.assert_one_line_error(run("evaluate", os.path.join(lm, "weights.safetensors")), "usage",
                                   "does not say how to rebuild its model (gpt)")


if __name__ == "__main__":
    main()
