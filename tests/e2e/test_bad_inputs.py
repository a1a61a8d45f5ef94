#!/usr/bin/python3
"""The bad-input corpus: every kind of input a user can get wrong — flags, TOML files, IDX
files, safetensors files, checkpoints, run directories, launcher environments — must give
exactly one error line naming its kind, a non-zero exit, no stack trace, and damage nothing:
no run directory appears, and an existing run's files stay byte for byte the same.
Usage: test_bad_inputs.py BIGBATCH_BINARY [unittest arguments]."""
import gzip
import hashlib
import json
import os
import shutil
import struct
import subprocess
import tempfile

import e2e_common  # e2e_common.run: this module's tests name their run directories `run`
from e2e_common import CliTestCase, main


def idx_bytes(dims, data):
    return bytes([0, 0, 8, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + bytes(data)


def write_gz(path, blob):
    with gzip.open(path, "wb") as f:
        f.write(blob)


def write_dataset(directory, train=256, test=64):
    os.makedirs(directory, exist_ok=True)
    for prefix, n in [("train", train), ("t10k", test)]:
        write_gz(os.path.join(directory, f"{prefix}-images-idx3-ubyte.gz"),
                 idx_bytes([n, 28, 28], [(i * 7 + j) % 256 for i in range(n) for j in range(784)]))
        write_gz(os.path.join(directory, f"{prefix}-labels-idx1-ubyte.gz"), idx_bytes([n], [i % 10 for i in range(n)]))


def safetensors_bytes(tensors, data_length, header_length=None):
    header = json.dumps(tensors).encode()
    header += b" " * ((8 - len(header) % 8) % 8)
    length = len(header) if header_length is None else header_length
    return struct.pack("<Q", length) + header + bytes(data_length)


def tree_digest(path):
    digest = {}
    for root, _, files in os.walk(path):
        for name in files:
            full = os.path.join(root, name)
            with open(full, "rb") as f:
                digest[os.path.relpath(full, path)] = hashlib.sha256(f.read()).hexdigest()
    return digest


class BadInputCorpus(CliTestCase):
    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp(prefix="bigbatch_bad_inputs_")
        cls.data = os.path.join(cls.root, "data")
        write_dataset(cls.data)
        # A finished run with checkpoints, the victim of the resume cases.
        cls.victim = os.path.join(cls.root, "victim")
        e2e_common.run("train", *cls.small(), "--checkpoint-every", "2u", "--out", cls.victim, check=True,
                       timeout=None)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.root, ignore_errors=True)

    @classmethod
    def small(cls, data=None):
        return ["--model", "mlp", "--hidden", "16", "--dataset", "idx:" + (data or cls.data), "--global-batch", "64",
                "--micro-batch", "16", "--epochs", "1", "--threads", "1", "--progress", "off"]

    def setUp(self):  # (CliTestCase's tearDown removes it)
        self.dir = tempfile.mkdtemp(dir=self.root)
        self.out = os.path.join(self.dir, "run")

    def expect(self, args, kind, fragment, code=2, env=None, victim=None):
        before = tree_digest(victim) if victim else None
        result = e2e_common.run(*args, env=dict(os.environ, **(env or {})), timeout=120)
        self.assert_one_line_error(result, kind, fragment, code=code)  # no libtorch backtrace either
        for marker in ["terminate called", "Traceback", "Segmentation"]:
            self.assertNotIn(marker, result.stderr)
        self.assertFalse(os.path.exists(self.out), "a failed run left a run directory behind")
        if victim:
            self.assertEqual(tree_digest(victim), before, "a failed run changed an existing run")
        return result

    def train(self, *extra, data=None):
        """`FLAG, None` in extra drops that flag and its value from the small run."""
        base, extra = self.small(data), list(extra)
        while None in extra:
            i = extra.index(None)
            j = base.index(extra[i - 1])
            del base[j:j + 2], extra[i - 1:i + 1]
        return ["train", *base, *extra, "--out", self.out]

    # ---- flags ----
    def test_flag_unknown(self):
        self.expect(self.train("--micro-bach", "8"), "usage", "did you mean --micro-batch?")

    def test_flag_missing_value(self):
        self.expect(["train", "--lr"], "usage", "--lr")

    def test_flag_not_a_number(self):
        self.expect(self.train("--lr", "fast"), "config", "--lr expects a number, got 'fast'")

    def test_flag_unknown_model(self):
        self.expect(self.train("--model", "resnet"), "config", "model 'resnet' is not known")

    def test_flag_model_given_as_a_file(self):
        self.expect(self.train("--model", "/tmp/net.pt"), "config", "use --model torchscript:/tmp/net.pt")

    def test_flag_unknown_optimizer(self):
        self.expect(self.train("--optimizer", "lion"), "config", "optimizer 'lion' is not known")

    def test_flag_zero_epochs(self):
        self.expect(self.train("--epochs", "0"), "config", "--epochs must be from 1 to 1e9")

    def test_flag_step_schedule_without_milestones(self):
        self.expect(self.train("--schedule", "step"), "config", "needs --step-milestones")

    def test_flag_momentum_out_of_range(self):
        self.expect(self.train("--momentum", "1.5"), "config", "--momentum must be in [0, 1)")

    def test_flag_interval_without_unit(self):
        self.expect(self.train("--warmup", "12"), "config", "has no unit")

    def test_flag_fractional_updates(self):
        self.expect(self.train("--warmup", "2.5u"), "config", "not a whole number")

    def test_flag_adascale_without_reference_batch(self):
        # A rate given needs the batch it was tuned at (the default rate carries its own, 256).
        self.expect(self.train("--lr-scaling", "adascale", "--lr", "0.1"), "config", "needs --lr-ref-batch")

    def test_flag_adascale_with_adamw(self):
        self.expect(self.train("--lr-scaling", "adascale", "--lr-ref-batch", "16", "--optimizer", "adamw"), "config",
                    "defined for SGD")

    def test_flag_adascale_without_accumulation(self):
        self.expect(self.train("--lr-scaling", "adascale", "--lr-ref-batch", "16", "--micro-batch", "64"), "config",
                    "two batch sizes per update")

    def test_flag_batch_schedule_in_updates(self):
        self.expect(self.train("--global-batch", None, "--global-batch-schedule", "0:32 10u:64"), "config",
                    "counts updates")

    def test_flag_batch_schedule_with_global_batch(self):
        self.expect(self.train("--global-batch-schedule", "0:32 1e:64"), "config",
                    "--global-batch-schedule sets the global batch")

    def test_flag_batch_schedule_step_below_the_micro_batch(self):
        self.expect(self.train("--global-batch", None, "--global-batch-schedule", "0:32 100s:8"), "plan",
                    "--global-batch-schedule step 8")

    def test_flag_zero_checkpoint_cadence(self):
        self.expect(self.train("--checkpoint-every", "0u"), "config", "is zero")

    def test_flag_bad_checkpoint_cadence(self):
        self.expect(self.train("--checkpoint-every", "3hours"), "config", "interval '3hours'")

    def test_flag_negative_hidden_width(self):
        self.expect(self.train("--hidden", "64,-3"), "config", "--hidden width -3")

    def test_flag_negative_threads(self):
        self.expect(self.train("--threads", "-1"), "config", "--threads")

    def test_flag_negative_seed(self):
        self.expect(self.train("--seed", "-5"), "config", "non-negative integer")

    def test_flag_unknown_progress_mode(self):
        self.expect(self.train("--progress", "loud"), "config", "--progress 'loud'")

    def test_flag_zero_timeout(self):
        self.expect(self.train("--dist-timeout", "0"), "config", "--dist-timeout must be positive")

    def test_flag_zero_kept_checkpoints(self):
        self.expect(self.train("--keep-checkpoints", "0"), "config", "--keep-checkpoints")

    def test_flag_subset_larger_than_data(self):
        self.expect(self.train("--train-subset", "70000"), "config", "--train-subset 70000 is larger")

    def test_flag_validation_takes_everything(self):
        self.expect(self.train("--val-size", "256"), "config", "leaves no training samples")

    # ---- batch plans ----
    def test_plan_inconsistent_triple(self):
        self.expect(self.train("--accum-steps", "2"), "plan", "64 != micro 16 x accumulation 2")

    def test_plan_indivisible(self):
        self.expect(["plan", "--global-batch", "100", "--accum-steps", "3"], "plan", "nearest valid")

    def test_plan_micro_larger_than_the_batch(self):
        self.expect(self.train("--global-batch", "8"), "plan", "micro batch 16 is larger than the per-rank batch 8")

    def test_plan_zero_micro(self):
        self.expect(self.train("--micro-batch", "0"), "plan", "--micro-batch must be a positive integer")

    def test_plan_micro_larger_than_data(self):
        self.expect(self.train("--micro-batch", "64", "--train-subset", "32"), "plan", "larger than the dataset")

    def test_plan_drop_leaves_nothing(self):
        self.expect(self.train("--last-window", "drop", "--train-subset", "40"), "plan", "leaves no update")

    def test_plan_command_errors_too(self):
        self.expect(["plan", "--global-batch", "1000", "--accum-steps", "64"], "plan", "--global-batch 960")

    def test_plan_strict_batch_short_last_window(self):
        self.expect(self.train("--strict-batch", "--train-subset", "100"), "plan", "--strict-batch")

    # ---- memory ----
    def test_memory_budget_without_unit(self):
        self.expect(self.train("--memory-budget", "512"), "config", "a size with a unit such as 512MiB")

    def test_memory_budget_words(self):
        self.expect(self.train("--memory-budget", "12 gigs"), "config", "--memory-budget expects a size")

    def test_memory_budget_zero(self):
        self.expect(self.train("--memory-budget", "0MiB"), "config", "--memory-budget expects a size")

    def test_micro_batch_auto_with_accumulation(self):
        self.expect(["train", "--micro-batch", "auto", "--accum-steps", "4", "--out", self.out], "config",
                    "--accum-steps cannot be given too")

    def test_micro_batch_word(self):
        self.expect(self.train("--micro-batch", "big"), "config", "--micro-batch expects an integer")

    def test_plan_cannot_measure_auto(self):
        self.expect(["plan", "--micro-batch", "auto"], "plan", "measured when training starts")

    def test_bn_mode_unknown(self):
        self.expect(self.train("--bn-mode", "ghost"), "config", "--bn-mode 'ghost' is not known")

    def test_precision_unknown(self):
        self.expect(self.train("--precision", "fp8"), "config", "--precision 'fp8' is not known")

    def test_norm_unknown(self):
        self.expect(self.train("--norm", "layer"), "config", "--norm 'layer' is not known")

    def test_fit_margin_out_of_range(self):
        self.expect(["fit", "--memory-budget", "1GiB", "--fit-margin", "1.5"], "config", "--fit-margin must be in [0, 1)")

    # ---- devices ----
    def test_device_unknown(self):
        self.expect(self.train("--device", "gpu"), "config", "--device 'gpu' is not a device: did you mean 'cuda'?")
        self.expect(self.train("--device", "cuda1"), "config", "did you mean 'cuda:1'?")
        self.expect(self.train("--device", "CUDA"), "config", "did you mean 'cuda'?")

    def test_device_bad_index(self):
        self.expect(self.train("--device", "cuda:first"), "config", "names no device index")

    def test_device_in_a_config_file(self):
        self.expect(self.train("--config", self.write_config('device = "tpu"\n')), "config",
                    "--device 'tpu' is a device bigbatch does not compute on")

    def skip_unless_cpu_only(self):
        # A device no machine has: refused at once, by a CUDA build too (for another reason).
        probe = e2e_common.run("fit", "--device", "cuda:99", timeout=60)
        if "without CUDA" not in probe.stderr:
            self.skipTest("this bigbatch is built against a CUDA libtorch")

    def test_device_cuda_on_a_cpu_only_build(self):
        self.skip_unless_cpu_only()
        for device in ("cuda", "cuda:0"):
            self.expect(self.train("--device", device), "config",
                        f"--device {device}: this bigbatch is built against a libtorch without CUDA")
        self.expect(["fit", "--model", "mlp", "--device", "cuda"], "config", "without CUDA")
        self.expect(["verify", *self.small(), "--device", "cuda"], "config", "without CUDA")
        # A sweep refuses before its directory or any cell exists.
        self.expect(["sweep", "--dataset", "idx:" + self.data, "--global-batch", "64,128", "--max-epochs", "1",
                     "--jobs", "1", "--device", "cuda", "--out", self.out], "config", "without CUDA")

    def test_resume_on_a_device_this_build_lacks(self):
        self.skip_unless_cpu_only()
        run = self.victim_copy()
        self.out = os.path.join(self.dir, "never-created")
        self.expect(["train", "--resume", run, "--device", "cuda"], "config", "without CUDA", victim=run)

    # ---- TOML configuration ----
    def write_config(self, text):
        path = os.path.join(self.dir, "c.toml")
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_config_unknown_key(self):
        self.expect(self.train("--config", self.write_config("micro-bach = 8\n")), "config", "did you mean 'micro-batch'?")

    def test_config_syntax(self):
        result = self.expect(self.train("--config", self.write_config("lr = = 3\n")), "config", "line 1")
        # The hint names a section the docs have (issue 35: it named one that did not exist).
        self.assertIn("docs/reference.md's 'Configuration files' shows the format", result.stderr)
        reference = open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "reference.md")).read()
        self.assertIn("\n## Configuration files\n", reference)

    def test_config_wrong_type(self):
        self.expect(self.train("--config", self.write_config('global-batch = "many"\n')), "config",
                    "--global-batch expects an integer")

    def test_config_nested_table(self):
        self.expect(self.train("--config", self.write_config("[model]\nname = 'mlp'\n")), "config", "unsupported type")

    def test_config_resume_key(self):
        self.expect(self.train("--config", self.write_config("resume = 'RUN'\n")), "config",
                    "has the key 'resume', which only the command line takes")

    def test_config_list_for_one_value(self):
        # `lr = [0.1]` was read as 0.1, hiding that it is not a sweep.
        for text, key in [("lr = [0.1]\n", "lr"), ("micro-batch = [16]\n", "micro-batch")]:
            self.expect(self.train("--config", self.write_config(text)), "config",
                        f"config key '{key}' takes one value, not a list")

    def test_flag_milestones_not_increasing(self):
        self.expect(self.train("--schedule", "step", "--step-milestones", "5u,2u"), "config",
                    "--step-milestones must increase")

    def test_flag_init_weights_with_resume(self):
        self.out = os.path.join(self.dir, "never-created")
        run = self.victim_copy()
        weights = os.path.join(run, "weights.safetensors")
        self.expect(["train", "--resume", run, "--init-weights", weights], "usage",
                    "--init-weights cannot be given with --resume", victim=run)

    def test_output_paths_are_checked_before_training(self):
        self.expect(self.train("--save-weights", os.path.join(self.dir, "missing", "w.safetensors")), "io",
                    "does not exist")
        self.expect(self.train("--save-weights", self.dir), "io", "is a directory")

    def test_output_lost_to_a_full_device(self):
        with open("/dev/full", "w") as full:
            result = subprocess.run([e2e_common.BINARY, "plan", "--global-batch", "64", "--micro-batch", "16"],
                                    stdout=full, stderr=subprocess.PIPE, text=True, timeout=60)
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn("bigbatch: error[io]: cannot write standard output", result.stderr)

    def test_model_too_large_for_the_machine(self):
        # It was an internal error; now the size it would need, as an out-of-memory error.
        for width in ("20000000", "99999999999"):
            self.expect(self.train("--hidden", width), "memory", "this machine could not give", code=5)

    def test_report_skips_the_lines_that_are_no_record_and_says_why(self):
        # Issue 59 item 17: a string step, invalid UTF-8 and a loss of 1e400 each skip their own
        # line with its own reason; the report is written from the rest.
        run_dir = os.path.join(self.dir, "edited-run")
        os.makedirs(run_dir)
        with open(os.path.join(run_dir, "metrics.jsonl"), "wb") as f:
            f.write(b'{"step": 1, "loss": 2.0}\n{"step": "two", "loss": 1.0}\n{"step": 3, "loss": 1e400}\n'
                    b'{"step": 4, "loss": 1.5, "event": "\xff"}\n{"step": 5, "loss": 1.2}\n')
        result = e2e_common.run("report", run_dir, timeout=120)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout, os.path.join(run_dir, "report.html") + "\n")
        warnings = result.stderr.splitlines()
        self.assertEqual(len(warnings), 3, result.stderr)
        self.assertIn("report: warning: " + run_dir + "/metrics.jsonl line 2: \"step\" is a string, not a number; "
                      "skipped it (restore the file, or delete that line)", warnings[0])
        self.assertIn("line 3: not JSON: number overflow", warnings[1])
        self.assertNotIn("NaN", warnings[1])
        self.assertIn("line 4: not JSON: ", warnings[2])
        self.assertIn("UTF-8", warnings[2])
        with open(os.path.join(run_dir, "report.html")) as f:
            self.assertIn("3 line(s) skipped", f.read())

    def test_config_missing_file(self):
        self.expect(self.train("--config", os.path.join(self.dir, "none.toml")), "config", "does not exist")

    # ---- IDX datasets ----
    def broken_dataset(self, name, blob, plain=False):
        directory = os.path.join(self.dir, "data")
        write_dataset(directory)
        path = os.path.join(directory, name + ".gz")
        if plain:
            with open(path, "wb") as f:
                f.write(blob)
        else:
            write_gz(path, blob)
        return directory

    def test_idx_labels_that_training_never_sees_are_warned_about(self):
        # Training labels of 1 of 256 classes, test labels of 10 others: it trains, and says so.
        directory = self.broken_dataset("train-labels-idx1-ubyte", idx_bytes([256], [255] * 256))
        result = e2e_common.run(*self.train(data=directory), timeout=120)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("warning: the training labels use 1 of 256 classes (every label is 255): the model can "
                      "only learn to answer it", result.stderr)
        self.assertIn("warning: the test split has 10 classes that training never sees (0, 1, 2, 3, 4, ...)",
                      result.stderr)
        # Every label 0: one class, which the class count alone cannot show.
        shutil.rmtree(self.out)
        directory = self.broken_dataset("train-labels-idx1-ubyte", idx_bytes([256], [0] * 256))
        result = e2e_common.run(*self.train(data=directory), timeout=120)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("warning: the training labels use 1 of", result.stderr)
        self.assertIn("(every label is 0)", result.stderr)

    def test_idx_missing_directory(self):
        self.expect(self.train(data=os.path.join(self.dir, "nowhere")), "data", "not found")

    def test_idx_truncated_gzip(self):
        directory = os.path.join(self.dir, "data")
        write_dataset(directory)
        path = os.path.join(directory, "train-images-idx3-ubyte.gz")
        with open(path, "r+b") as f:
            f.truncate(300)
        self.expect(self.train(data=directory), "data", "train-images-idx3-ubyte.gz")

    def test_idx_bad_magic(self):
        directory = self.broken_dataset("train-labels-idx1-ubyte", b"\x01\x02\x08\x01" + struct.pack(">I", 256) + bytes(256))
        self.expect(self.train(data=directory), "data", "bad magic")

    def test_idx_classes_come_from_the_labels_and_the_images_are_measured(self):
        # Not Fashion-MNIST's ten: the labels say 43 classes (no longer an error), and the model
        # gets 43 outputs; the normalisation is measured on these images and recorded.
        directory = self.broken_dataset("train-labels-idx1-ubyte", idx_bytes([256], [3] * 255 + [42]))
        out = os.path.join(self.dir, "classes43")
        result = e2e_common.run("train", "--dataset", f"idx:{directory}", "--model", "mlp", "--hidden", "16",
                                "--global-batch", "64", "--epochs", "1", "--threads", "1", "--progress", "off",
                                "--out", out, timeout=300)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertRegex(result.stderr, r"data: 256 samples of shape \[1, 28, 28\] in 43 classes, normalised "
                                        r"\(pixel / 255 - [\d.]+\) / [\d.]+ \(measured on the training images\)")
        with open(os.path.join(out, "weights.safetensors"), "rb") as f:
            self.assertIn(b'"shape":[43,16]', f.read(4096))
        config = open(os.path.join(out, "config.toml")).read()
        self.assertRegex(config, r"pixel-mean = 0\.\d+")
        # Given on the command line, the pair is used as it is; half of it is refused.
        given = e2e_common.run("plan", "--dataset", f"idx:{directory}", "--pixel-mean", "0.5", "--pixel-std", "0.25",
                               timeout=300)
        self.assertEqual(given.returncode, 0, given.stderr)
        self.expect(["train", "--dataset", f"idx:{directory}", "--pixel-mean", "0.5", "--out",
                     os.path.join(self.dir, "half")], "config",
                    "--pixel-mean 0.5 and --pixel-std 0 do not describe pixels / 255")
        self.assertFalse(os.path.exists(os.path.join(self.dir, "half")))

    def test_idx_images_of_one_shade(self):
        directory = self.broken_dataset("train-images-idx3-ubyte", idx_bytes([256, 28, 28], bytes(256 * 784)))
        self.expect(self.train(data=directory), "data", "are all one shade")

    def test_idx_count_mismatch(self):
        directory = self.broken_dataset("t10k-labels-idx1-ubyte", idx_bytes([63], [1] * 63))
        self.expect(self.train(data=directory), "data", "holds 64 images but")

    def test_idx_trailing_bytes(self):
        directory = self.broken_dataset("t10k-labels-idx1-ubyte", idx_bytes([64], [1] * 64) + b"extra")
        self.expect(self.train(data=directory), "data", "bytes after the declared data")

    def test_idx_header_lies_about_size(self):
        directory = self.broken_dataset("train-images-idx3-ubyte", idx_bytes([256, 28, 28], bytes(1000)))
        self.expect(self.train(data=directory), "data", "is truncated: header declares")

    def test_idx_swapped_files(self):
        directory = self.broken_dataset("train-images-idx3-ubyte", idx_bytes([256], [1] * 256))
        self.expect(self.train(data=directory), "data", "images need 3")

    def test_idx_test_images_of_another_size(self):
        directory = self.broken_dataset("t10k-images-idx3-ubyte", idx_bytes([64, 64, 64], bytes(64 * 64 * 64)))
        self.expect(self.train(data=directory), "data",
                    "test samples in '" + directory + "' have shape [1, 64, 64], the training samples [1, 28, 28]")

    def test_idx_not_gzip_at_all(self):
        directory = self.broken_dataset("train-labels-idx1-ubyte", b"\x1f\x8b\x08\x00garbage-not-deflate", plain=True)
        self.expect(self.train(data=directory), "data", "train-labels-idx1-ubyte.gz")

    # ---- safetensors weights ----
    def weights_file(self, blob):
        path = os.path.join(self.dir, "w.safetensors")
        with open(path, "wb") as f:
            f.write(blob)
        return path

    def test_weights_junk(self):
        self.expect(self.train("--init-weights", self.weights_file(b"\xff" * 64)), "format", "safetensors file")

    def test_weights_header_length_lies(self):
        blob = safetensors_bytes({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, 8, header_length=1 << 40)
        self.expect(self.train("--init-weights", self.weights_file(blob)), "format", "-byte header but holds")

    def test_weights_truncated_data(self):
        blob = safetensors_bytes({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, 8)
        self.expect(self.train("--init-weights", self.weights_file(blob)), "format", "truncated file?")

    def test_weights_shape_and_dtype_disagree(self):
        blob = safetensors_bytes({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, 8)
        self.expect(self.train("--init-weights", self.weights_file(blob)), "format", "need 12")

    def test_weights_of_another_model(self):
        blob = safetensors_bytes({"1.weight": {"dtype": "F32", "shape": [8, 784], "data_offsets": [0, 25088]}}, 25088)
        self.expect(self.train("--init-weights", self.weights_file(blob)), "format", "shape [8, 784]")

    def test_weights_integer_parameters(self):
        tensors, offset = {}, 0
        for name, shape in [("1.weight", [16, 784]), ("1.bias", [16]), ("3.weight", [10, 16]), ("3.bias", [10])]:
            size = 8 * (shape[0] * (shape[1] if len(shape) > 1 else 1))
            tensors[name] = {"dtype": "I64", "shape": shape, "data_offsets": [offset, offset + size]}
            offset += size
        self.expect(self.train("--init-weights", self.weights_file(safetensors_bytes(tensors, offset))), "format",
                    "dtype Long")

    def test_weights_holding_nan(self):
        tensors, offset = {}, 0
        for name, shape in [("1.weight", [16, 784]), ("1.bias", [16]), ("3.weight", [10, 16]), ("3.bias", [10])]:
            size = 4 * (shape[0] * (shape[1] if len(shape) > 1 else 1))
            tensors[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + size]}
            offset += size
        blob = bytearray(safetensors_bytes(tensors, offset))
        blob[-4:] = struct.pack("<f", float("nan"))  # the last element of 3.bias
        self.expect(self.train("--init-weights", self.weights_file(bytes(blob))), "format",
                    "holds NaN or infinite values in tensor '3.bias'")

    def test_files_that_are_not_regular_files(self):
        # A directory as --config, a FIFO as --init-weights (it would block for ever), a device
        # as metrics.jsonl (it would never end): refused before they are read.
        self.expect(self.train("--config", self.dir), "io", "is a directory, not a regular file")
        fifo = os.path.join(self.dir, "weights.fifo")
        os.mkfifo(fifo)
        self.expect(self.train("--init-weights", fifo), "io", "is a FIFO, not a regular file")
        run_dir = os.path.join(self.dir, "device-run")
        os.makedirs(run_dir)
        os.symlink("/dev/zero", os.path.join(run_dir, "metrics.jsonl"))
        self.expect(["report", run_dir], "io", "is a device, not a regular file")

    def test_links_in_a_run_directory_are_replaced_not_followed(self):
        # Links planted in a new run's directory: the run's own files replace the links, and the
        # files they point at are left as they were.
        outside = {name: os.path.join(self.dir, "outside-" + name)
                   for name in ("report.html", "plan.txt")}
        os.makedirs(self.out)
        for name, target in outside.items():
            with open(target, "w") as f:
                f.write("precious\n")
            os.symlink(target, os.path.join(self.out, name))
        result = e2e_common.run(*self.train(), timeout=300)
        self.assertEqual(result.returncode, 0, result.stderr)
        for name, target in outside.items():
            self.assertEqual(e2e_common.read(target), "precious\n",
                             name + " was written through its link")
            self.assertFalse(os.path.islink(os.path.join(self.out, name)), name)
        self.assertIn("global batch", e2e_common.read(os.path.join(self.out, "plan.txt")))

    def test_weights_missing_file(self):
        self.expect(self.train("--init-weights", os.path.join(self.dir, "none.safetensors")), "format", "does not exist")

    # ---- checkpoints (the victim run must not change) ----
    def victim_copy(self):
        copy = os.path.join(self.dir, "victim")
        shutil.copytree(self.victim, copy)
        return copy

    def newest_checkpoint(self, run):
        root = os.path.join(run, "checkpoints")
        return os.path.join(root, sorted(d for d in os.listdir(root) if d.startswith("step_"))[-1])

    def expect_resume_error(self, run, fragment, *extra):
        self.out = os.path.join(self.dir, "never-created")
        self.expect(["train", "--resume", run, *extra], "format", fragment, victim=run)

    def test_resume_missing(self):
        self.expect_resume_error(os.path.join(self.dir, "none"), "is not a directory")

    def test_resume_without_checkpoints(self):
        empty = os.path.join(self.dir, "empty")
        os.makedirs(empty)
        self.expect_resume_error(empty, "has no complete checkpoint")

    def test_resume_other_global_batch(self):
        self.expect_resume_error(self.victim_copy(), "global_batch_size = 64", "--global-batch", "128")

    def test_resume_other_model(self):
        self.expect_resume_error(self.victim_copy(), 'model = "mlp"', "--model", "cnn")

    def test_resume_corrupt_state(self):
        run = self.victim_copy()
        with open(os.path.join(self.newest_checkpoint(run), "state.json"), "w") as f:
            f.write("{ cut")
        self.expect_resume_error(run, "unreadable state.json")

    def test_resume_future_format(self):
        run = self.victim_copy()
        path = os.path.join(self.newest_checkpoint(run), "state.json")
        with open(path) as f:
            state = json.load(f)
        state["format_version"] = 99
        with open(path, "w") as f:
            json.dump(state, f)
        self.expect_resume_error(run, "format version 99")

    def edit_state(self, run, edit):
        path = os.path.join(self.newest_checkpoint(run), "state.json")
        with open(path) as f:
            state = json.load(f)
        edit(state)
        with open(path, "w") as f:
            json.dump(state, f)

    def test_resume_corrupt_optimizer_state(self):
        run = self.victim_copy()
        with open(os.path.join(self.newest_checkpoint(run), "optimizer.pt"), "wb") as f:
            f.write(b"not an archive")
        self.expect_resume_error(run, "optimizer.pt that is not the one it was written with")
        # A checkpoint from before file digests: the archive's own reader says it.
        self.edit_state(run, lambda state: state.pop("files"))
        self.expect_resume_error(run, "unreadable optimizer.pt")

    def test_resume_truncated_weights(self):
        run = self.victim_copy()
        path = os.path.join(self.newest_checkpoint(run), "weights.safetensors")
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) - 10)
        self.expect_resume_error(run, "weights.safetensors that is not the one it was written with")
        self.edit_state(run, lambda state: state.pop("files"))
        self.expect_resume_error(run, "safetensors file")

    def test_resume_flipped_bit_and_a_file_of_another_checkpoint(self):
        run = self.victim_copy()
        path = os.path.join(self.newest_checkpoint(run), "weights.safetensors")
        with open(path, "r+b") as f:
            f.seek(os.path.getsize(path) - 3)
            byte = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([byte[0] ^ 0x10]))
        self.expect_resume_error(run, "weights.safetensors that is not the one it was written with")
        shutil.rmtree(run)
        run = self.victim_copy()
        root = os.path.join(run, "checkpoints")
        older, newer = sorted(d for d in os.listdir(root) if d.startswith("step_"))[-2:]
        shutil.copy(os.path.join(root, older, "optimizer.pt"), os.path.join(root, newer, "optimizer.pt"))
        self.expect_resume_error(run, "optimizer.pt that is not the one it was written with")

    def test_resume_accepts_a_checkpoint_standing_at_an_epochs_end(self):
        # A run that diverges in an epoch's last update checkpoints before the epoch's
        # bookkeeping: position = the dataset's size. Not refused (review of issue 21's checks).
        run = self.victim_copy()

        def edit(state):
            state["progress"].update(epoch=0, update_in_epoch=4, position_in_epoch=256)
            state.pop("files")
        self.edit_state(run, edit)
        result = e2e_common.run("train", "--resume", run, timeout=120)
        self.assertEqual(result.returncode, 0, result.stderr)

    def test_a_refused_older_checkpoint_leaves_the_newer_history_in_place(self):
        run = self.victim_copy()
        root = os.path.join(run, "checkpoints")
        older = os.path.join(root, sorted(d for d in os.listdir(root) if d.startswith("step_"))[0])
        with open(os.path.join(older, "weights.safetensors"), "r+b") as f:
            f.truncate(100)
        before = tree_digest(run)
        self.out = os.path.join(self.dir, "never-created")
        self.expect(["train", "--resume", older, "--discard-newer"], "format", "weights.safetensors that is not the one")
        self.assertEqual(tree_digest(run), before)
        self.assertFalse(os.path.exists(os.path.join(run, "abandoned")))

    def test_resume_edited_progress_fields(self):
        # Each was taken as it was: a NaN rate, a directory step_-00003, other samples trained.
        cases = [("step", -5, "progress.step that is -5, below its least value 0"),
                 ("step", 1e6, "progress.step that is 1000000.0, not a whole number"),
                 ("step", 1000000, "progress.step 1000000 in epoch"),
                 ("position_in_epoch", 48, "progress.position_in_epoch 48 where update"),
                 ("samples_seen", -1, "progress.samples_seen that is -1"),
                 ("epoch", -1, "progress.epoch that is -1"),
                 ("epoch_items", -5, "progress.epoch_items that is -5"),
                 ("train_seconds", "soon", "progress.train_seconds that is \"soon\", not a finite number")]
        for key, value, fragment in cases:
            with self.subTest(key=key, value=value):
                run = self.victim_copy()

                def edit(state):
                    state["progress"][key] = value
                    state.pop("files")  # the digests cover the other files, not state.json
                self.edit_state(run, edit)
                self.expect_resume_error(run, fragment)
                shutil.rmtree(run)

    # ---- run directories ----
    def test_existing_run_is_never_overwritten(self):
        run = self.victim_copy()
        self.out = os.path.join(self.dir, "never-created")
        self.expect(["train", *self.small(), "--out", run], "io", "already holds a run", victim=run)

    def test_run_directory_under_a_file(self):
        blocker = os.path.join(self.dir, "file")
        open(blocker, "w").close()
        self.expect(["train", *self.small(), "--out", os.path.join(blocker, "run")], "io", "cannot create")

    # ---- launcher environments ----
    def test_env_rank_outside_world(self):
        self.expect(self.train(), "distributed", "RANK=2 is not below WORLD_SIZE=2", code=3,
                    env={"RANK": "2", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"})

    def test_env_bad_port(self):
        self.expect(self.train(), "distributed", "is not a TCP port", code=3,
                    env={"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "http"})

    def test_launch_without_command(self):
        self.expect(["launch", "--nproc", "2"], "usage", "no command to launch")

    def test_launch_grace_seconds_out_of_range(self):
        for value in ("-1", "nan"):
            self.expect(["launch", "--nproc", "2", "--grace-seconds", value, "--", "true"], "usage",
                        "--grace-seconds must be from 0 to 3600")


def load_tests(loader, tests, pattern):
    suite = loader.loadTestsFromTestCase(BadInputCorpus)
    assert suite.countTestCases() >= 40, "the corpus must keep at least 40 cases"
    return suite


if __name__ == "__main__":
    main(verbosity=2)
