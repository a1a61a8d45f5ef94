#!/usr/bin/python3
"""End-to-end tests of numpy datasets through the real CLI (--dataset npy:DIR): the dtypes
numpy writes, the optional splits, Fashion-MNIST saved as arrays training like the IDX files,
and every header lie or layout bigbatch cannot read as a one-line error that leaves nothing.
Usage: test_npy.py BIGBATCH_BINARY [unittest arguments]."""
import json
import os
import sys
import zipfile

import numpy as np
import torch  # Debian's python3-torch: the regression's RMSE recomputed from the saved weights

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
from bigbatch_oracle import pixel_normalisation, read_idx, read_safetensors  # noqa: E402
from e2e_common import CliTestCase, main, records, run  # noqa: E402

FASHION = "/usr/share/datasets/fashion-mnist"
QUICK = ["--global-batch", "64", "--micro-batch", "16", "--epochs", "1", "--threads", "1", "--progress", "off"]


class NpyTestCase(CliTestCase):
    def arrays(self, name, **arrays):
        directory = self.path(name)
        os.makedirs(directory, exist_ok=True)
        for key, value in arrays.items():
            np.save(os.path.join(directory, key + ".npy"), value, allow_pickle=True)
        return directory


class NpyTrainTest(NpyTestCase):
    def test_fashion_mnist_as_arrays_trains_like_the_idx_files(self):
        images = read_idx(os.path.join(FASHION, "train-images-idx3-ubyte.gz"))[:1000]
        labels = read_idx(os.path.join(FASHION, "train-labels-idx1-ubyte.gz"))[:1000]
        out_npy, out_idx = self.path("npy_run"), self.path("idx_run")
        result = run("train", "--model", "mlp", "--train-subset", "1000", *QUICK, "--out", out_idx)
        self.assertEqual(result.returncode, 0, result.stderr)
        # Normalised as that run measured it on its 1000 images, in the same float32 steps.
        mean, std = pixel_normalisation(out_idx)
        x = (images.astype(np.float32) / np.float32(255) - np.float32(mean)) / np.float32(std)
        directory = self.arrays("fashion", x_train=x, y_train=labels.astype(np.int64))
        result = run("train", "--dataset", f"npy:{directory}", "--model", "mlp", *QUICK, "--out", out_npy)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("1000 samples of shape [1, 28, 28] in 10 classes", result.stderr)
        a = read_safetensors(os.path.join(out_npy, "weights.safetensors"))
        b = read_safetensors(os.path.join(out_idx, "weights.safetensors"))
        diff = max(float(np.abs(a[k] - b[k]).max()) for k in b)
        print(f"\nfashion-mnist as npy vs IDX, 16 updates: max weight difference {diff:.3g}")
        self.assertLess(diff, 1e-5)

    def test_a_resume_on_data_changed_in_place_is_refused(self):
        # Same path, same shape and size, other values: the checkpoint's digest of the training
        # samples tells them apart (issue 36).
        rng = np.random.default_rng(1)
        x, y = rng.random((256, 12)).astype("float32"), rng.integers(0, 4, 256).astype("int64")
        directory = self.arrays("changing", x_train=x, y_train=y)
        out = self.path("changing_run")
        result = run("train", "--dataset", f"npy:{directory}", "--model", "mlp", "--hidden", "16", *QUICK,
                     "--epochs", "2", "--checkpoint-every", "2u", "--max-updates", "3", "--out", out)
        self.assertEqual(result.returncode, 0, result.stderr)
        x[0, 0] += 1
        self.arrays("changing", x_train=x, y_train=y)
        self.assert_one_line_error(run("train", "--resume", out, "--max-updates", "8"), "format",
                                   "was written on other training data", "same samples' count and shape",
                                   "resume on the data the run trained on")
        x[0, 0] -= 1
        self.arrays("changing", x_train=x, y_train=y)
        result = run("train", "--resume", out, "--max-updates", "8")
        self.assertEqual(result.returncode, 0, result.stderr)

    def test_every_dtype_and_the_optional_splits(self):
        rng = np.random.default_rng(0)
        for x_dtype in ("float32", "float64", "uint8"):
            for y_dtype in ("uint8", "int32", "int64"):
                with self.subTest(x=x_dtype, y=y_dtype):
                    x = (rng.random((200, 12)) * (255 if x_dtype == "uint8" else 1)).astype(x_dtype)
                    y = rng.integers(0, 4, 200).astype(y_dtype)
                    directory = self.arrays(f"{x_dtype}-{y_dtype}", x_train=x, y_train=y)
                    result = run("train", "--dataset", f"npy:{directory}", "--model", "mlp", "--hidden", "16",
                                 *QUICK, "--out", self.path(f"run-{x_dtype}-{y_dtype}"))
                    self.assertEqual(result.returncode, 0, result.stderr)
                    self.assertIn("200 samples of shape [12] in 4 classes", result.stderr)
        # x_val and x_test are the validation and test splits; a class only in the test split
        # still counts.
        x = rng.random((300, 1, 16, 16)).astype("float32")
        directory = self.arrays("splits", x_train=x[:200], y_train=rng.integers(0, 3, 200),
                                x_val=x[200:250], y_val=rng.integers(0, 3, 50),
                                x_test=x[250:], y_test=np.full(50, 4))
        out = self.path("splits_run")
        result = run("train", "--dataset", f"npy:{directory}", "--model", "cnn", *QUICK, "--out", out)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("in 5 classes", result.stderr)
        self.assertIn("val acc", result.stderr)
        self.assertIn("test accuracy", result.stdout + result.stderr)
        self.assert_one_line_error(run("train", "--dataset", f"npy:{directory}", "--val-size", "10", *QUICK,
                                       "--out", self.path("bad")), "config", "x_val.npy", "drop --val-size")


class NpzTest(NpyTestCase):
    """One .npz archive instead of a directory: --dataset npy:FILE.npz (issue 18)."""

    def test_savez_and_savez_compressed_train_like_the_directory(self):
        rng = np.random.default_rng(3)
        x = rng.random((256, 10)).astype("float32")
        y = rng.integers(0, 3, 256)
        directory = self.arrays("dir", x_train=x[:200], y_train=y[:200], x_test=x[200:], y_test=y[200:])
        runs = {}
        for name, save in [("dir", None), ("stored", np.savez), ("deflated", np.savez_compressed)]:
            source = directory
            if save:
                source = self.path(name + ".npz")
                save(source, x_train=x[:200], y_train=y[:200], x_test=x[200:], y_test=y[200:])
            out = self.path("run-" + name)
            result = run("train", "--dataset", f"npy:{source}", "--model", "mlp", "--hidden", "16", *QUICK,
                         "--out", out)
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertIn("200 samples of shape [10] in 3 classes", result.stderr)
            with open(os.path.join(out, "weights.safetensors"), "rb") as f:
                runs[name] = f.read()
        self.assertEqual(runs["stored"], runs["dir"])
        self.assertEqual(runs["deflated"], runs["dir"])

    def test_damaged_archives_are_one_line_errors(self):
        x, y = np.zeros((64, 4), "float32"), np.zeros(64, "int64")
        good = self.path("good.npz")
        np.savez_compressed(good, x_train=x, y_train=y)
        blob = open(good, "rb").read()
        cases = {"junk.npz": (b"not a zip at all" * 8, "is not a zip archive"),
                 "cut.npz": (blob[:len(blob) // 2], "is not a zip archive"),
                 "only-y.npz": (None, "has no x_train.npy and y_train.npy")}
        for name, (content, fragment) in cases.items():
            with self.subTest(name):
                path = self.path(name)
                if content is None:
                    np.savez(path, y_train=y)
                else:
                    open(path, "wb").write(content)
                self.assert_one_line_error(run("train", "--dataset", f"npy:{path}", "--model", "mlp", *QUICK,
                                               "--out", self.path("bad")), "data", fragment)
        # A flipped byte inside a deflated member's data: its CRC-32 (or the inflation) says so.
        with zipfile.ZipFile(good) as archive:
            info = archive.getinfo("x_train.npy")
        local_extra = int.from_bytes(blob[info.header_offset + 28:info.header_offset + 30], "little")
        start = info.header_offset + 30 + len(info.filename.encode()) + local_extra
        damaged = bytearray(blob)
        damaged[start + info.compress_size // 2] ^= 0xFF
        path = self.path("flipped.npz")
        open(path, "wb").write(bytes(damaged))
        self.assert_one_line_error(run("train", "--dataset", f"npy:{path}", "--model", "mlp", *QUICK, "--out",
                                       self.path("bad")), "data", "member 'x_train.npy' is damaged")
        # A member that is not an array.
        path = self.path("other.npz")
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("notes.txt", "hello")
        self.assert_one_line_error(run("train", "--dataset", f"npy:{path}", "--model", "mlp", *QUICK, "--out",
                                       self.path("bad")), "data", "holds 'notes.txt', which is not an .npy array")
        self.assertFalse(os.path.exists(self.path("bad")))


class RegressionTest(NpyTestCase):
    """--task regress (issue 18): float targets, the summed squared error over samples, RMSE."""

    def linear_problem(self, name, outputs, n=640):
        rng = np.random.default_rng(1)
        w = rng.normal(size=(8, outputs)).astype("float32")
        x = rng.normal(size=(n + 200, 8)).astype("float32")
        y = x @ w + np.float32(0.05) * rng.normal(size=(n + 200, outputs)).astype("float32")
        y = y[:, 0] if outputs == 1 else y
        return self.arrays(name, x_train=x[:n], y_train=y[:n], x_test=x[n:], y_test=y[n:]), x[n:], y[n:]

    def train(self, directory, out, *extra):
        return run("train", "--dataset", f"npy:{directory}", "--model", "mlp", "--hidden", "32", "--global-batch",
                   "64", "--epochs", "6", "--threads", "1", "--progress", "off", "--optimizer", "adamw", "--lr",
                   "2e-2", "--out", out, *extra)

    def test_float_targets_train_a_regression_whose_rmse_pytorch_confirms(self):
        directory, x_test, y_test = self.linear_problem("one", 1)
        out = self.path("regress")
        result = self.train(directory, out, "--micro-batch", "16")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("640 samples of shape [8] with 1 regression target(s)", result.stderr)
        self.assertIn("test RMSE", result.stdout)
        epochs = [r for r in records(out) if "train_loss" in r and "epoch" in r]
        self.assertEqual(len(epochs), 6)
        self.assertNotIn("test_accuracy", epochs[-1])
        self.assertLess(epochs[-1]["test_rmse"], 0.3 * epochs[0]["test_rmse"])  # it learns
        # The engine's mean is over samples, so accumulation equals one batch per update.
        whole = self.path("regress-whole")
        self.assertEqual(self.train(directory, whole, "--micro-batch", "64").returncode, 0)
        a = read_safetensors(os.path.join(out, "weights.safetensors"))
        b = read_safetensors(os.path.join(whole, "weights.safetensors"))
        diff = max(float(np.abs(a[k] - b[k]).max() / (np.abs(b[k]).max() + 1e-12)) for k in b)
        print(f"\nregression, 16 x 4 vs 64 x 1, 60 AdamW updates: max relative weight difference {diff:.3g}")
        self.assertLess(diff, 1e-4)
        # The test RMSE as PyTorch computes it from the saved weights.
        model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
        model.load_state_dict({k: torch.as_tensor(np.array(v)) for k, v in a.items()}, strict=True)
        with torch.no_grad():
            predicted = model(torch.from_numpy(x_test)).reshape(-1).numpy()
        rmse = float(np.sqrt(np.mean((predicted.astype(np.float64) - y_test) ** 2)))
        self.assertAlmostEqual(epochs[-1]["test_rmse"], rmse, delta=1e-5 * rmse)
        # evaluate and predict on the trained run.
        evaluated = run("evaluate", out, "--json")
        self.assertEqual(evaluated.returncode, 0, evaluated.stderr)
        self.assertAlmostEqual(json.loads(evaluated.stdout)["rmse"], rmse, delta=1e-5 * rmse)
        np.save(self.path("x_new.npy"), x_test)
        predicted_file = self.path("y_new.npy")
        result = run("predict", out, "--input", self.path("x_new.npy"), "--output", predicted_file)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("predicted values of 200 samples", result.stderr)
        self.assertEqual(np.load(predicted_file).shape, (200,))  # as y was saved
        self.assertLess(float(np.abs(np.load(predicted_file) - predicted).max()), 1e-5)

    def test_several_targets_per_sample(self):
        directory, _, _ = self.linear_problem("three", 3)
        out = self.path("three-run")
        result = self.train(directory, out, "--micro-batch", "32")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("with 3 regression target(s)", result.stderr)
        np.save(self.path("x3.npy"), np.zeros((5, 8), "float32"))
        result = run("predict", out, "--input", self.path("x3.npy"), "--output", self.path("y3.npy"))
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(np.load(self.path("y3.npy")).shape, (5, 3))

    def test_the_training_targets_decide_for_every_split(self):
        # Float y_train with integer y_test: the test split is values too (it was read as classes).
        rng = np.random.default_rng(4)
        x = rng.normal(size=(300, 4)).astype("float32")
        directory = self.arrays("mixed", x_train=x[:200], y_train=rng.normal(size=200).astype("float32"),
                                x_test=x[200:], y_test=rng.integers(0, 3, 100))
        out = self.path("mixed-run")
        result = self.train(directory, out)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("test_rmse", [r for r in records(out) if "train_loss" in r][-1])
        empty = self.arrays("no-outputs", x_train=x[:64], y_train=np.zeros((64, 0), "float32"))
        self.assert_one_line_error(self.train(empty, self.path("bad-run")), "data", "regression targets are one value")

    def test_integer_targets_regress_when_asked(self):
        rng = np.random.default_rng(2)
        x = rng.normal(size=(256, 4)).astype("float32")
        directory = self.arrays("counts", x_train=x, y_train=rng.integers(0, 5, 256))
        result = self.train(directory, self.path("counts-run"), "--task", "regress")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("with 1 regression target(s)", result.stderr)
        # predict gives values for a regression asked for (it refused every --task regress run).
        np.save(self.path("x_counts.npy"), x[:7])
        result = run("predict", self.path("counts-run"), "--input", self.path("x_counts.npy"), "--output",
                     self.path("y_counts.npy"))
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(np.load(self.path("y_counts.npy")).shape, (7,))

    def test_what_a_regression_cannot_do_is_one_line_error(self):
        directory, _, _ = self.linear_problem("bad", 1, n=64)
        self.assert_one_line_error(self.train(directory, self.path("bad-run"), "--task", "classify"), "data",
                                   "--task classify needs integer class labels", "--task regress")
        self.assert_one_line_error(self.train(directory, self.path("bad-run"), "--target-accuracy", "0.9"),
                                   "config", "a regression, which has none")
        self.assert_one_line_error(run("train", "--task", "regress", "--out", self.path("bad-run")), "config",
                                   "--task regress needs value targets")
        self.assert_one_line_error(self.train(directory, self.path("bad-run"), "--label-smoothing", "0.1"),
                                   "config", "--label-smoothing 0.1 smooths class targets, but this run regresses")
        self.assertFalse(os.path.exists(self.path("bad-run")))


class BadNpyTest(NpyTestCase):
    def train(self, directory, *extra):
        return run("train", "--dataset", f"npy:{directory}", "--model", "mlp", *QUICK, "--out", self.path("bad"),
                   *extra)

    def test_bad_arrays_are_one_line_errors_that_leave_nothing(self):
        x = np.zeros((64, 4), dtype="float32")
        y = np.zeros(64, dtype="int64")
        cases = [
            (dict(x_train=x.astype(">f4"), y_train=y), "big-endian"),
            (dict(x_train=np.asfortranarray(np.zeros((64, 4), "f4")), y_train=y), "Fortran order"),
            (dict(x_train=np.array([[1, "a"]] * 64, dtype=object), y_train=y), "Python objects"),
            (dict(x_train=x[:7], y_train=y), "holds 7 samples but '"),
            (dict(x_train=x, y_train=np.full(64, np.inf, "f4")), "NaN or infinite targets"),
            (dict(x_train=x, y_train=np.zeros((64, 2, 2), "f4")), "regression targets are one value [N] or one row"),
            (dict(x_train=x, y_train=y - 1), "has label -1"),
            (dict(x_train=np.full((64, 4), np.nan, "f4"), y_train=y), "NaN or infinite"),
            (dict(x_train=x.astype("int64"), y_train=y), "int64 inputs"),
            (dict(x_train=x, y_train=np.zeros((64, 3), "int64")), "[N]"),
            (dict(x_train=x, y_train=y, x_test=x), "has x_test.npy but not y_test.npy"),
            (dict(y_train=y), "has no x_train.npy and y_train.npy"),
        ]
        for i, (arrays, fragment) in enumerate(cases):
            with self.subTest(fragment):
                self.assert_one_line_error(self.train(self.arrays(f"case{i}", **arrays)), "data", fragment)
        # A file whose header claims more than it holds.
        directory = self.arrays("truncated", x_train=x, y_train=y)
        with open(os.path.join(directory, "x_train.npy"), "r+b") as f:
            f.truncate(os.path.getsize(os.path.join(directory, "x_train.npy")) - 8)
        self.assert_one_line_error(self.train(directory), "data", "says shape (64, 4) of float32 but holds 1016 bytes")
        # Built-in convolutions need images.
        directory = self.arrays("features", x_train=x, y_train=y)
        self.assert_one_line_error(self.train(directory, "--model", "cnn"), "config",
                                   "cnn convolves images", "--model mlp")
        self.assert_one_line_error(run("train", "--dataset", "npy:", *QUICK), "config", "names no directory")
        self.assert_one_line_error(self.train(self.path("missing")), "data",
                                   f"npy directory '{self.path('missing')}' does not exist")
        # The directory given bare: the prefix it needs is named.
        self.assert_one_line_error(run("train", "--dataset", directory, *QUICK, "--out", self.path("bad")), "config",
                                   f"use --dataset npy:{directory}")
        self.assertFalse(os.path.exists(self.path("bad")))

    def test_float_labels_that_read_as_classes_say_how_to_classify(self):
        # pandas hands out float64 labels: they train as a regression, and the start line says so.
        x = np.random.default_rng(3).normal(size=(64, 4)).astype("float32")
        directory = self.arrays("float-labels", x_train=x, y_train=(np.arange(64) % 10).astype("float64"))
        result = self.train(directory)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("if they are class labels, save y_train as integers, y.astype('int64'), to classify",
                      result.stderr)


if __name__ == "__main__":
    main()
