#!/usr/bin/python3
"""End-to-end tests of `bigbatch sweep`: a small grid runs to completion, its summary agrees
with its cells' run directories, a rerun keeps finished cells, and bad lists are one-line
errors. Usage: test_sweep.py BIGBATCH_BINARY [unittest arguments]."""
import csv
import json
import os
import shutil
import signal
import tempfile
import time

from e2e_common import CliTestCase, main, run, start
from e2e_common import records as metrics

SMALL = ["--model", "mlp", "--hidden", "64", "--train-subset", "2048", "--val-size", "256",
         "--micro-batch", "32", "--lr", "0.05"]


class SweepTest(CliTestCase):
    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp(prefix="bigbatch_sweep_")
        cls.out = os.path.join(cls.root, "sweep")
        cls.first = run("sweep", *SMALL, "--global-batch", "64,128,...,256", "--lr-scaling", "linear",
                        "--target-accuracy", "0.6", "--max-epochs", "3", "--jobs", "2", "--out", cls.out)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.root, ignore_errors=True)

    def assert_row_matches_its_cell(self, out, row, metric, best_of):
        """A summary.csv row against its cell's metrics.jsonl: the metric, its best epoch
        (best_of: max or min), whether and when the target was reached. Returns the cell's
        epoch records and target_reached events."""
        records = metrics(os.path.join(out, row["cell"]))
        epochs = [r for r in records if metric in r]
        self.assertEqual(row["metric"], metric)
        self.assertAlmostEqual(float(row["best"]), best_of(e[metric] for e in epochs), places=4)
        reached = [r for r in records if r.get("event") == "target_reached"]
        self.assertEqual(row["reached"], "true" if reached else "false")
        if reached:
            self.assertEqual(int(row["updates_to_target"]), reached[0]["step"])
        return epochs, reached

    def rows(self):
        with open(os.path.join(self.out, "summary.csv")) as f:
            return list(csv.DictReader(f))

    def test_grid_runs_and_summary_matches_the_cells(self):
        self.assertEqual(self.first.returncode, 0, self.first.stderr)
        self.assertIn("sweep: 3 cells (3 global batches x 1 LR rules x 1 warmups), 2 at a time", self.first.stderr)
        rows = self.rows()
        self.assertEqual([int(r["global_batch"]) for r in rows], [64, 128, 256])
        for row in rows:
            cell = os.path.join(self.out, row["cell"])
            self.assertTrue(os.path.exists(os.path.join(cell, "weights.safetensors")), row)
            self.assertEqual(row["status"], "done")
            epochs, reached = self.assert_row_matches_its_cell(self.out, row, "val_accuracy", max)
            if reached:
                self.assertEqual(int(row["samples_to_target"]), reached[0]["samples_seen"])
                self.assertGreaterEqual(reached[0]["accuracy"], 0.6)
                self.assertEqual(len(epochs), reached[0]["epoch"])  # stopped at the target
            # The rate was tuned at the smallest batch and scaled linearly from it.
            self.assertAlmostEqual(float(row["peak_lr"]), 0.05 * int(row["global_batch"]) / 64, places=6)
        self.assertTrue(any(r["reached"] == "true" for r in rows))
        with open(os.path.join(self.out, "summary.md")) as f:
            table = f.read()
        self.assertIn("| global batch | LR rule | warmup | peak LR | updates to 60% |", table)
        with open(os.path.join(self.out, "report.html")) as f:
            html = f.read()
        self.assertEqual(html.count("<svg "), 4)
        self.assertIn("updates to 60% against the global batch", html)

    def test_report_on_the_sweep_directory_rebuilds_its_summaries(self):
        # Issue 20: it failed with "has no metrics.jsonl".
        self.assertEqual(self.first.returncode, 0, self.first.stderr)
        before = open(os.path.join(self.out, "summary.csv")).read()
        os.remove(os.path.join(self.out, "report.html"))
        result = run("report", self.out)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(open(os.path.join(self.out, "summary.csv")).read(), before)
        self.assertTrue(os.path.exists(os.path.join(self.out, "report.html")))

    def test_rerun_keeps_finished_cells(self):
        self.assertEqual(self.first.returncode, 0, self.first.stderr)
        weights = os.path.join(self.out, self.rows()[0]["cell"], "weights.safetensors")
        before = os.stat(weights).st_mtime_ns
        again = run("sweep", *SMALL, "--global-batch", "64,128,...,256", "--lr-scaling", "linear",
                    "--target-accuracy", "0.6", "--max-epochs", "3", "--out", self.out)
        self.assertEqual(again.returncode, 0, again.stderr)
        self.assertEqual(again.stderr.count("finished earlier, kept"), 3)
        self.assertNotIn("started", again.stderr)
        self.assertEqual(os.stat(weights).st_mtime_ns, before)

    def test_a_rerun_with_another_grid_or_settings_is_refused(self):
        # Issue 36: it merged the two grids into one summary and rewrote sweep.json silently.
        self.assertEqual(self.first.returncode, 0, self.first.stderr)
        files = {name: open(os.path.join(self.out, name)).read() for name in ("sweep.json", "base.toml", "summary.csv")}
        for changed, says in ((["--global-batch", "64,128", "--lr-scaling", "linear", "--max-epochs", "3"],
                               "holds another sweep (--global-batch 64,128,256 --lr-scaling linear"),
                              (["--global-batch", "64,128,...,256", "--lr-scaling", "linear", "--max-epochs", "4"],
                               "--max-epochs 3 --micro-batch 32), not this one"),
                              (["--global-batch", "64,128,...,256", "--lr-scaling", "linear", "--max-epochs", "3",
                                "--clip-norm", "1"], "base.toml' holds other settings than this command's: "
                                                     "'clip-norm = 0.0' there, 'clip-norm = 1.0' here")):
            result = run("sweep", *SMALL, "--target-accuracy", "0.6", *changed, "--out", self.out)
            self.assertEqual(result.returncode, 2, result.stderr)
            self.assertIn(says, result.stderr)
            self.assertIn("give the same flags to continue that sweep, or another --out", result.stderr)
            self.assertEqual(len(result.stderr.strip().splitlines()), 1, result.stderr)
            self.assertNotIn("started", result.stderr)
        for name, text in files.items():
            self.assertEqual(open(os.path.join(self.out, name)).read(), text, name)

    def test_global_batches_above_the_training_set_are_refused_before_any_cell(self):
        out = os.path.join(self.root, "too-big")
        result = run("sweep", *SMALL, "--global-batch", "64,2048,4096", "--max-epochs", "1", "--out", out)
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn("--global-batch 2048, 4096 are larger than the training set (1792 samples)", result.stderr)
        self.assertFalse(os.path.exists(out))

    def test_interrupted_sweep_continues_where_it_stopped(self):
        out = os.path.join(self.root, "interrupted")
        # The default --lr-scaling: auto, as train's (linear for the default sgd).
        args = ["sweep", "--model", "cnn", "--train-subset", "4096", "--val-size", "512", "--global-batch", "64",
                "--target-accuracy", "0.99", "--max-epochs", "4", "--out", out]
        sweep = start(*args)
        cell = os.path.join(out, "gb000064-auto-w0u")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not os.path.isdir(os.path.join(cell, "checkpoints")):
            time.sleep(0.1)  # the first epoch's checkpoint
        sweep.send_signal(signal.SIGINT)
        _, stderr = sweep.communicate(timeout=120)
        self.assertEqual(sweep.returncode, 130, stderr)
        self.assertIn("run the same command again to continue it", stderr)
        self.assertIn("gb000064-auto-w0u: stopped by signal 2 after checkpointing", stderr)  # not "failed"
        self.assertFalse(os.path.exists(os.path.join(cell, "weights.safetensors")))
        again = run(*args)
        self.assertEqual(again.returncode, 0, again.stderr)
        self.assertIn("gb000064-auto-w0u: resumed", again.stderr)
        with open(os.path.join(out, "logs", "gb000064-auto-w0u.log")) as f:
            self.assertIn("resumed from", f.read())
        epochs = [r for r in metrics(cell) if "val_accuracy" in r]
        self.assertEqual([e["epoch"] for e in epochs], [1, 2, 3, 4])  # no epoch lost or repeated

    def test_adascale_cells_keep_two_micro_steps(self):
        # AdaScale measures its gain from two batch sizes per update: a cell whose global batch
        # equals --micro-batch still runs, on two micro-steps of half the size.
        out = os.path.join(self.root, "adascale")
        result = run("sweep", *SMALL, "--global-batch", "32,64", "--lr-scaling", "adascale", "--target-accuracy",
                     "0.5", "--max-epochs", "1", "--out", out)
        self.assertEqual(result.returncode, 0, result.stderr)
        rows = {int(r["global_batch"]): r for r in csv.DictReader(open(os.path.join(out, "summary.csv")))}
        self.assertEqual({b: r["status"] for b, r in rows.items()}, {32: "done", 64: "done"})
        first = [r for r in metrics(os.path.join(out, rows[32]["cell"])) if "loss" in r][0]
        self.assertEqual((first["micro_batch"], first["micro_steps"]), (16, 2))
        self.assertIn("lr_gain", first)

    def test_a_language_model_sweep_trains_to_a_bits_per_byte_target(self):
        corpus = os.path.join(self.root, "corpus")
        with open(corpus, "w") as f:
            f.write("\n%\n".join(("the quick brown fox %d " % i) * (1 + i % 7) for i in range(120)) + "\n%\n")
        out = os.path.join(self.root, "lm")
        tiny = ["--dataset", f"text:{corpus}", "--model", "gpt", "--layers", "1", "--d-model", "32", "--heads", "2",
                "--seq-len", "64", "--optimizer", "adamw", "--lr", "3e-3", "--micro-batch", "8", "--val-size", "16"]
        result = run("sweep", *tiny, "--global-batch", "16,32", "--target", "val_bpb<=7.5", "--max-epochs", "3",
                     "--jobs", "2", "--out", out)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("target val_bpb<=7.5 in at most 3 epochs", result.stderr)
        rows = list(csv.DictReader(open(os.path.join(out, "summary.csv"))))
        self.assertEqual(len(rows), 2)
        for row in rows:
            # The best of bits per byte is its lowest.
            _, reached = self.assert_row_matches_its_cell(out, row, "val_bpb", min)
            if reached:
                self.assertEqual(reached[0]["condition"], "val_bpb<=7.5")
                self.assertLessEqual(reached[0]["value"], 7.5)
        self.assertTrue(any(r["reached"] == "true" for r in rows))
        table = open(os.path.join(out, "summary.md")).read()
        self.assertIn("updates to val_bpb<=7.5 | samples to target | time to target | best bits per byte |", table)
        report = open(os.path.join(out, "report.html")).read()
        self.assertIn("val_bpb against updates", report)
        # The target travels with the grid: the report rebuilds from sweep.json alone.
        self.assertEqual(json.load(open(os.path.join(out, "sweep.json")))["target"], "val_bpb<=7.5")
        again = run("report", out)
        self.assertEqual(again.returncode, 0, again.stderr)
        self.assertEqual(open(os.path.join(out, "summary.md")).read(), table)
        # A target the cells cannot report is train's one-line error, before any cell trains.
        bad = run("sweep", *tiny, "--global-batch", "16", "--target", "val_bpb>=7.5", "--out",
                  os.path.join(self.root, "bad"))
        self.assertEqual(bad.returncode, 2, bad.stderr)
        self.assertIn("would stop at once", bad.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.root, "bad")))

    def test_a_diverged_cell_is_labelled_diverged_and_kept(self):
        out = os.path.join(self.root, "diverged")
        args = ["sweep", *SMALL, "--lr", "1e12", "--max-bad-updates", "2", "--global-batch", "64",
                "--target-accuracy", "0.9", "--max-epochs", "1", "--out", out]
        result = run(*args)
        self.assertEqual(result.returncode, 4, result.stderr)  # the cell's own exit code
        self.assertIn("diverged with exit code 4", result.stderr)
        rows = list(csv.DictReader(open(os.path.join(out, "summary.csv"))))
        self.assertEqual([r["status"] for r in rows], ["diverged"])
        # A rerun does not train it again: it would diverge again from its checkpoint.
        again = run(*args)
        self.assertIn("diverged earlier, kept", again.stderr)
        self.assertEqual([r["status"] for r in csv.DictReader(open(os.path.join(out, "summary.csv")))],
                         ["diverged"])

    def test_rules_at_the_reference_batch_share_one_run(self):
        # Issue 35: at the batch --lr is tuned at, none and linear give the same rate: one run,
        # whose result both rows carry (said in --dry-run and as the sweep goes).
        out = os.path.join(self.root, "shared")
        grid = ["--global-batch", "64,128", "--lr-scaling", "none,linear", "--target-accuracy", "0.5",
                "--max-epochs", "1", "--out", out]
        dry = run("sweep", *SMALL, *grid, "--dry-run")
        self.assertEqual(dry.returncode, 0, dry.stderr)
        shared = [line for line in dry.stdout.splitlines() if "the same run as" in line]
        self.assertEqual(len(shared), 1, dry.stdout)
        self.assertTrue(shared[0].startswith("gb000064-linear-w0u"), shared[0])
        self.assertIn("the same run as gb000064-none-w0u", shared[0])
        result = run("sweep", *SMALL, *grid)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("gb000064-linear-w0u: the same run as gb000064-none-w0u", result.stderr)
        self.assertEqual(sorted(d for d in os.listdir(out) if d.startswith("gb")),
                         ["gb000064-none-w0u", "gb000128-linear-w0u", "gb000128-none-w0u"])
        rows = list(csv.DictReader(open(os.path.join(out, "summary.csv"))))
        self.assertEqual([(r["global_batch"], r["lr_scaling"], r["cell"]) for r in rows],
                         [("64", "none", "gb000064-none-w0u"), ("64", "linear", "gb000064-none-w0u"),
                          ("128", "none", "gb000128-none-w0u"), ("128", "linear", "gb000128-linear-w0u")])
        self.assertEqual(rows[0]["best"], rows[1]["best"])
        self.assertEqual((rows[0]["status"], rows[1]["status"]), ("done", "done"))
        for row in rows:
            self.assert_row_matches_its_cell(out, row, "val_accuracy", max)
        before = open(os.path.join(out, "summary.csv")).read()
        self.assertEqual(run("report", out).returncode, 0)
        self.assertEqual(open(os.path.join(out, "summary.csv")).read(), before)

    def test_bad_lists_are_one_line_errors(self):
        for args, fragment in [(["--global-batch", "32,64,...,100"], "does not reach 100"),
                               (["--global-batch", "64", "--lr-scaling", "linear,cubic"], "'cubic' is not known"),
                               (["--global-batch", "64", "--warmup", "2"], "has no unit"),
                               # Two cells of one name would share one directory.
                               (["--global-batch", "64", "--lr-scaling", "linear,linear"], "names 'linear' twice"),
                               (["--global-batch", "64", "--warmup", "0u,0u"], "names '0u' twice"),
                               (["--global-batch", "64", "--jobs", "-1"], "--jobs must be at least 1")]:
            result = run("sweep", *SMALL, *args, "--out", os.path.join(self.root, "bad"))
            self.assert_error(result, fragment)
            self.assertFalse(os.path.exists(os.path.join(self.root, "bad")))


if __name__ == "__main__":
    main(verbosity=2)
