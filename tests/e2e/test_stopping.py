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
    return [r for r in records(run_dir) if "val_loss" in r]


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

    def test_a_best_from_past_the_resumed_checkpoint_is_removed(self):
        run_dir = self.path("branch")
        args = [*ARGS, "--keep-best", "val_loss", "--checkpoint-every", "2u", "--keep-checkpoints", "100",
                "--max-updates", "12"]
        run("train", *args, "--out", run_dir, check=True)
        best = metadata(os.path.join(run_dir, "best.safetensors"))
        self.assertIn(best["step"], ["6", "12"])
        older = os.path.join(run_dir, "checkpoints", "step_000004")
        branched = run("train", "--resume", older, "--discard-newer", "--max-updates", "5")
        self.assertEqual(branched.returncode, 0, branched.stderr)
        self.assertIn(f"best.safetensors (update {best['step']}): it is not the best of the history this run "
                      "resumes (update 4)", branched.stderr)
        # The new history's own evaluation (where it ends, at update 5) is its best.
        self.assertEqual(metadata(os.path.join(run_dir, "best.safetensors"))["step"], "5")

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


if __name__ == "__main__":
    main()
