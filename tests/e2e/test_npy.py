#!/usr/bin/python3
"""End-to-end tests of numpy datasets through the real CLI (--dataset npy:DIR): the dtypes
numpy writes, the optional splits, Fashion-MNIST saved as arrays training like the IDX files,
and every header lie or layout bigbatch cannot read as a one-line error that leaves nothing.
Usage: test_npy.py BIGBATCH_BINARY [unittest arguments]."""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
from bigbatch_oracle import read_idx, read_safetensors  # noqa: E402
from e2e_common import CliTestCase, main, run  # noqa: E402

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
        x = (images.astype(np.float32) / np.float32(255) - np.float32(0.2860)) / np.float32(0.3530)
        directory = self.arrays("fashion", x_train=x, y_train=labels.astype(np.int64))
        out_npy, out_idx = self.path("npy_run"), self.path("idx_run")
        result = run("train", "--dataset", f"npy:{directory}", "--model", "mlp", *QUICK, "--out", out_npy)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("1000 samples of shape [1, 28, 28] in 10 classes", result.stderr)
        result = run("train", "--model", "mlp", "--train-subset", "1000", *QUICK, "--out", out_idx)
        self.assertEqual(result.returncode, 0, result.stderr)
        a = read_safetensors(os.path.join(out_npy, "weights.safetensors"))
        b = read_safetensors(os.path.join(out_idx, "weights.safetensors"))
        diff = max(float(np.abs(a[k] - b[k]).max()) for k in b)
        print(f"\nfashion-mnist as npy vs IDX, 16 updates: max weight difference {diff:.3g}")
        self.assertLess(diff, 1e-5)

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
            (dict(x_train=x, y_train=y.astype("float32")), "regression targets are not read yet"),
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
        self.assertFalse(os.path.exists(self.path("bad")))


if __name__ == "__main__":
    main()
