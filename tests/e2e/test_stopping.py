"""Early stopping and the best weights (issue 35, item 12): --early-stop METRIC ends the run
--patience evaluations after its best (improvements must beat --min-delta), on every rank at the
same update; --keep-best METRIC keeps the weights of its best evaluation in RUN/best.safetensors,
which evaluate reads back to the figures recorded there. Both survive a resume; a best from past
the checkpoint a resume starts from is not kept; mistakes are one line each.
Usage: test_stopping.py BIGBATCH_BINARY [unittest arguments]."""
import functools
import json
import os
import re
import shutil
import struct

import e2e_common
from e2e_common import CliTestCase, free_port, main, records, update_records

run = functools.partial(e2e_common.run, timeout=None)

# 300 training samples at a constant, high rate: validation loss bottoms out within a few
# epochs, and 40 epochs (240 updates) is far more than an early stop lets run.
ARGS = ["--model", "mlp", "--hidden", "64", "--train-subset", "500", "--val-size", "200", "--global-batch", "50",
        "--epochs", "40", "--lr", "0.2", "--schedule", "constant", "--threads", "1", "--progress", "off"]
TOTAL_UPDATES = 240


def metadata(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n))["__metadata__"]


def evaluations(run_dir):
    """Each evaluation once: a run ending at an interval's evaluation records it again as its
    partial epoch (same step, same figures)."""
    seen, out = set(), []
    for r in records(run_dir):
        if "val_loss" in r and r["step"] not in seen:
            seen.add(r["step"])
            out.append(r)
    return out


def expected_stop(evals, key, rises, patience, min_delta):
    """The step --early-stop ends at, and its best, from the evaluations as recorded."""
    best = best_step = None
    since = 0
    for r in evals:
        value = r[key]
        if best is None or (value - best > min_delta if rises else best - value > min_delta):
            best, best_step, since = value, r["step"], 0
        else:
            since += 1
            if since >= patience:
                return r["step"], best, best_step
    return None, best, best_step


def best_step(evals, key, rises):
    best = step = None
    for r in evals:
        if best is None or (r[key] > best if rises else r[key] < best):
            best, step = r[key], r["step"]
    return step


class StoppingTest(CliTestCase):
    PREFIX = "bigbatch_stop_"

    def test_early_stop_ends_the_run_patience_evaluations_after_its_best(self):
        run_dir = self.path("run")
        result = run("train", *ARGS, "--early-stop", "val_loss", "--patience", "3", "--min-delta", "0.01",
                     "--keep-best", "val_accuracy", "--out", run_dir)
        self.assertEqual(result.returncode, 0, result.stderr)
        evals = evaluations(run_dir)
        stop, best, at = expected_stop(evals, "val_loss", False, patience=3, min_delta=0.01)
        self.assertIsNotNone(stop, "the validation loss never stalled: the test's run needs to overfit")
        self.assertLess(stop, TOTAL_UPDATES)
        events = [r for r in records(run_dir) if r.get("event") == "early_stop"]
        self.assertEqual(len(events), 1, events)
        self.assertEqual((events[0]["step"], events[0]["best_step"], events[0]["metric"]), (stop, at, "val_loss"))
        self.assertAlmostEqual(events[0]["best"], best, places=12)
        self.assertEqual(update_records(run_dir)[-1]["step"], stop)
        self.assertIn(f"early stop: val_loss has not improved on", result.stderr)
        self.assertIn(f"(update {at}) by more than 0.01 in 3 evaluations (--patience 3); stopping at update {stop}",
                      result.stderr)
        # The best validation accuracy's weights, as they were at its evaluation.
        best_at = best_step(evals, "val_accuracy", True)
        path = os.path.join(run_dir, "best.safetensors")
        self.assertEqual(metadata(path)["step"], str(best_at))
        self.assertEqual(metadata(path)["best_metric"], "val_accuracy")
        saved = [r for r in records(run_dir) if r.get("event") == "best_weights"]
        self.assertEqual(saved[-1]["step"], best_at)
        self.assertIn(f"at update {best_at}: {path}", result.stderr)
        evaluated = run("evaluate", run_dir, "--weights", path)
        self.assertEqual(evaluated.returncode, 0, evaluated.stderr)
        recorded = next(r for r in evals if r["step"] == best_at)
        shown = re.search(r"accuracy (\d+\.\d+)%", evaluated.stdout + evaluated.stderr)
        self.assertEqual(float(shown.group(1)), round(100 * recorded["test_accuracy"], 2))

    def test_a_resumed_run_counts_on_and_an_early_stopped_one_stays_stopped(self):
        watch = ["--early-stop", "val_loss", "--patience", "2", "--keep-best", "val_loss", "--checkpoint-every", "1e"]
        whole = self.path("whole")
        run("train", *ARGS, *watch, "--out", whole, check=True)
        stop = [r for r in records(whole) if r.get("event") == "early_stop"][0]["step"]
        self.assertGreater(stop, 12)
        # Stopped after 2 epochs, then resumed: the same stop and the same best file, byte for byte.
        parts = self.path("parts")
        run("train", *ARGS, *watch, "--max-updates", "12", "--out", parts, check=True)
        resumed = run("train", "--resume", parts, "--max-updates", str(TOTAL_UPDATES))
        self.assertEqual(resumed.returncode, 0, resumed.stderr)
        self.assertEqual([r["step"] for r in records(parts) if r.get("event") == "early_stop"], [stop])
        with open(os.path.join(whole, "best.safetensors"), "rb") as a, \
                open(os.path.join(parts, "best.safetensors"), "rb") as b:
            self.assertEqual(a.read(), b.read())
        # Resumed as it is, it stays stopped; a larger --patience trains on.
        again = run("train", "--resume", whole)
        self.assertEqual(again.returncode, 0, again.stderr)
        self.assertIn(f"the run stopped early at update {stop}", again.stderr)
        self.assertEqual(update_records(whole)[-1]["step"], stop)
        longer = run("train", "--resume", whole, "--patience", "4")
        self.assertEqual(longer.returncode, 0, longer.stderr)
        self.assertGreater(update_records(whole)[-1]["step"], stop)

    def test_a_resume_gets_back_the_best_its_checkpoint_knew_of(self):
        run_dir = self.path("branch")
        args = [*ARGS, "--keep-best", "val_loss", "--checkpoint-every", "2u", "--keep-checkpoints", "100",
                "--max-updates", "12"]
        run("train", *args, "--out", run_dir, check=True)
        best = os.path.join(run_dir, "best.safetensors")
        self.assertIn(metadata(best)["step"], ["6", "12"])
        # Each checkpoint keeps the best as it stood: none before the first evaluation (update 6).
        self.assertFalse(os.path.exists(os.path.join(run_dir, "checkpoints", "step_000004", "best.safetensors")))
        kept_at_8 = os.path.join(run_dir, "checkpoints", "step_000008", "best.safetensors")
        self.assertEqual(metadata(kept_at_8)["step"], "6")
        # From update 8, with the run's file replaced by another (as an abandoned history's later
        # best would be): the checkpoint's copy comes back.
        shutil.copyfile(os.path.join(run_dir, "weights.safetensors"), best)
        branched = run("train", "--resume", os.path.join(run_dir, "checkpoints", "step_000008"), "--discard-newer",
                       "--max-updates", "8")
        self.assertEqual(branched.returncode, 0, branched.stderr)
        self.assertIn(f"restored {best} (update 6, the best the checkpoint knew of) from the checkpoint",
                      branched.stderr)
        # The run then ends at update 8 with the evaluation of its partial epoch: the restored
        # best stays unless that one beats it.
        now, kept = metadata(best), metadata(kept_at_8)
        if now["step"] == "6":
            with open(best, "rb") as a, open(kept_at_8, "rb") as b:
                self.assertEqual(a.read(), b.read())
        else:
            self.assertEqual(now["step"], "8")
            self.assertLess(float(now["best_value"]), float(kept["best_value"]))
        # From update 4, before any evaluation: the later file goes, and the new history's own
        # evaluation (where it ends, at update 5) is its best.
        branched = run("train", "--resume", os.path.join(run_dir, "checkpoints", "step_000004"), "--discard-newer",
                       "--max-updates", "5")
        self.assertEqual(branched.returncode, 0, branched.stderr)
        self.assertIn(f"removed {best}: it is from past the checkpoint this run resumes (update 4)", branched.stderr)
        self.assertEqual(metadata(best)["step"], "5")

    def test_an_early_stop_at_an_interval_counts_that_evaluation_once(self):
        # Stopped at an --eval-every evaluation inside an epoch, the run's end records that same
        # evaluation as its partial epoch: counted once, so one more --patience trains on.
        run_dir = self.path("interval")
        result = run("train", *ARGS, "--eval-every", "1u", "--early-stop", "val_loss", "--patience", "2",
                     "--checkpoint-every", "1e", "--out", run_dir)
        self.assertEqual(result.returncode, 0, result.stderr)
        stop = [r for r in records(run_dir) if r.get("event") == "early_stop"][0]["step"]
        evals = [r for r in evaluations(run_dir) if r["step"] <= stop]
        self.assertEqual(expected_stop(evals, "val_loss", False, patience=2, min_delta=0)[0], stop)
        longer = run("train", "--resume", run_dir, "--patience", "3")
        self.assertEqual(longer.returncode, 0, longer.stderr)
        self.assertNotIn("stopped early", longer.stderr)
        self.assertGreater(update_records(run_dir)[-1]["step"], stop)

    def test_another_metric_on_a_resume_starts_the_count_again(self):
        run_dir = self.path("switch")
        run("train", *ARGS, "--early-stop", "val_loss", "--patience", "2", "--checkpoint-every", "1e",
            "--max-updates", "12", "--out", run_dir, check=True)
        switched = run("train", "--resume", run_dir, "--max-updates", "18", "--early-stop", "val_accuracy")
        self.assertEqual(switched.returncode, 0, switched.stderr)
        self.assertIn("--early-stop now watches val_accuracy where the checkpoint counted val_loss: its count "
                      "starts again here", switched.stderr)

    def test_ranks_stop_early_together(self):
        out = self.path("ranks")
        result = run("launch", "--nproc", "2", "--master-port", str(free_port()), "--", e2e_common.BINARY, "train",
                     *ARGS, "--micro-batch", "25", "--early-stop", "val_loss", "--patience", "2", "--dist-timeout", "30",
                     "--out", out)
        self.assertEqual(result.returncode, 0, result.stderr)
        events = [r for r in records(out) if r.get("event") == "early_stop"]
        self.assertEqual(len(events), 1, result.stderr)
        self.assertEqual(update_records(out)[-1]["step"], events[0]["step"])
        self.assertLess(events[0]["step"], TOTAL_UPDATES)

    def test_mistakes_are_one_line_each(self):
        out = self.path("refused")
        for extra, fragments in [
            (["--early-stop", "val_loss", "--patience", "0"], ["--patience must be at least 1"]),
            (["--patience", "5"], ["--patience and --min-delta tell --early-stop", "--early-stop val_loss"]),
            (["--early-stop", "val_loss", "--min-delta", "-1"], ["--min-delta must be a finite number >= 0"]),
            (["--early-stop", "val_bpb"], ["--early-stop watches bpb, which only language models have",
                                           "--early-stop val_loss"]),
            (["--keep-best", "val_acuracy"], ["--keep-best 'val_acuracy' names metric 'acuracy'", "did you mean 'accuracy'"]),
            (["--keep-best", "val_rmse"], ["--keep-best keeps the best RMSE, which only a regression has"]),
        ]:
            result = run("train", *ARGS, *extra, "--out", out)
            self.assert_one_line_error(result, "config", *fragments)
            self.assertFalse(os.path.exists(out), extra)
        no_validation = [a for a in ARGS if a not in ("--val-size", "200")]
        result = run("train", *no_validation, "--early-stop", "val_loss", "--out", out)
        self.assert_one_line_error(result, "config", "--early-stop reads the validation split, and this run holds none")
        # Without a split named and no validation split, the test set would decide: only when asked.
        result = run("train", *no_validation, "--keep-best", "loss", "--out", out)
        self.assert_one_line_error(result, "config", "--keep-best loss would decide on the test split",
                                   "add --val-size N", "--keep-best test_loss")
        self.assertFalse(os.path.exists(out))
        asked = run("train", *no_validation, "--keep-best", "test_loss", "--max-updates", "6", "--out", out)
        self.assertEqual(asked.returncode, 0, asked.stderr)
        self.assertEqual(metadata(os.path.join(out, "best.safetensors"))["best_metric"], "test_loss")


if __name__ == "__main__":
    main()
