"""bigbatch lr-find (issue 35, item 3): the learning-rate range test at the run's global batch.
Its rates rise exponentially from --lr-min to --lr-max over --updates (read back from
metrics.jsonl); its suggestion is recomputed here from those records by the rule it names (the
debiased moving average, the stop at 4x the lowest, the steepest descent against log(rate));
the train command it prints plans as written; a range that diverges is read up to there; the
flags the test owns are refused in one line, before anything is written.
Usage: test_lr_find.py BIGBATCH_BINARY [unittest arguments]."""
import functools
import json
import math
import os
import re
import shlex

import e2e_common
from e2e_common import CliTestCase, main, update_records

run = functools.partial(e2e_common.run, timeout=None)

ARGS = ["--model", "mlp", "--hidden", "64", "--train-subset", "2048", "--global-batch", "128", "--micro-batch", "32",
        "--threads", "1", "--progress", "off"]


def reading(points):
    """The suggestion as lr_range.cpp reads it, written out again: what its docs say it does."""
    smoothed, average, debias = [], 0.0, 1.0
    for lr, loss in points:
        if not math.isfinite(loss):
            continue
        average = 0.98 * average + 0.02 * loss
        debias *= 0.98
        smoothed.append((lr, average / (1 - debias)))
    end, low = len(smoothed), smoothed[0][1]
    for i in range(1, len(smoothed)):
        if smoothed[i][1] > 4 * low:
            end = i
            break
        low = min(low, smoothed[i][1])
    lowest = min(range(end), key=lambda i: (smoothed[i][1], i))
    begin, last = min(10, end // 10), lowest
    if last < begin + 2:
        begin, last = 0, end - 1

    def slope(i):
        a, b = max(i - 1, 0), min(i + 1, end - 1)
        run_ = math.log(smoothed[b][0]) - math.log(smoothed[a][0])
        return (smoothed[b][1] - smoothed[a][1]) / run_ if run_ > 0 else 0.0

    steepest = begin
    for i in range(begin, last + 1):
        if slope(i) < slope(steepest):
            steepest = i
    return smoothed[steepest][0], smoothed[lowest][0], end < len(smoothed)


class LrFindTest(CliTestCase):
    def test_the_rate_rises_exponentially_and_the_suggestion_follows_its_rule(self):
        out = self.path("find")
        result = run("lr-find", *ARGS, "--updates", "40", "--out", out, "--json")
        self.assertEqual(result.returncode, 0, result.stderr)
        found = json.loads(result.stdout)
        updates = update_records(out)
        rates = [r["lr"] for r in updates]
        self.assertAlmostEqual(rates[0], 1e-6, delta=1e-12)
        step = (1.0 / 1e-6) ** (1 / 39)
        for a, b in zip(rates, rates[1:]):
            self.assertAlmostEqual(b / a, step, places=9)
        self.assertTrue(all(r["global_batch"] == 128 and r["micro_batch"] == 32 for r in updates))
        suggested, lowest, diverged = reading([(r["lr"], r["loss"]) for r in updates])
        print(f"\nlr-find, mlp at 128: suggested {found['suggested_lr']:.3g}, lowest loss at {lowest:.3g}, "
              f"diverged {found['diverged']}")
        self.assertAlmostEqual(found["suggested_lr"] / suggested, 1.0, places=12)
        self.assertAlmostEqual(found["lowest_loss_lr_over_10"] / (lowest / 10), 1.0, places=12)
        self.assertEqual(found["global_batch"], 128)
        self.assertTrue(1e-6 <= found["suggested_lr"] <= 1.0)
        self.assertTrue(found["fell_clearly"])
        self.assertAlmostEqual(found["fall"], (found["start_loss"] - found["lowest_loss"]) / found["start_loss"],
                               places=12)
        with open(os.path.join(out, "lr_find.html")) as f:
            page = f.read()
        self.assertIn("<svg", page)
        self.assertIn("suggested", page)
        self.assertEqual(json.loads(open(os.path.join(out, "lr_find.json")).read()), found)

    def test_the_text_names_the_rate_and_a_train_command_that_plans(self):
        result = run("lr-find", *ARGS, "--updates", "30", "--out", self.path("text"))
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("lr-find: 30 updates at global batch 128 (micro-batch 32), the rate rising from 1e-06 to 1",
                      result.stdout)
        # The noise scale under a swept rate judges no batch: neither measured nor judged.
        self.assertNotIn("noise scale", result.stdout + result.stderr)
        suggested = re.search(r"suggested: --lr (\S+) \(the steepest descent", result.stdout).group(1)
        line = [l for l in result.stdout.splitlines() if l.startswith("train with it: ")][0]
        self.assertIn(f" --lr {suggested} (taken as tuned at this global batch", line)
        words = shlex.split(line[len("train with it: bigbatch "):].split(" (taken")[0])
        self.assertEqual(words[0], "train")
        planned = run("plan", *words[1:])
        self.assertEqual(planned.returncode, 0, planned.stderr)
        self.assertIn(f"lr {suggested} @ 128 (--lr taken as tuned at this batch", planned.stdout)

    def test_a_curve_that_barely_falls_suggests_no_rate(self):
        # Issue 59 item 4: rates far too low to learn in 30 updates; the curve's steepest point is
        # noise, so nothing is suggested and no command printed.
        out = self.path("flat")
        result = run("lr-find", *ARGS, "--lr-min", "1e-8", "--lr-max", "1e-5", "--updates", "30", "--out", out)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("lr rising exponentially from 1e-08 to 1e-05 over 30 updates at global batch 128 (the range "
                      "test: no scaling, warmup or schedule)", result.stderr)
        self.assertNotIn("(none)", result.stderr)
        self.assertRegex(result.stdout, r"the smoothed loss fell only [0-9.]+% \(from [0-9.]+ to [0-9.]+, lowest at lr ")
        self.assertIn("no rate suggested: a curve that falls less than 10% has no steepest descent to read", result.stdout)
        self.assertIn("run longer (--updates 200), widen the range (--lr-min 1e-10 --lr-max 0.0001)", result.stdout)
        self.assertNotIn("suggested: --lr", result.stdout)
        self.assertNotIn("train with it", result.stdout)
        with open(os.path.join(out, "lr_find.json")) as f:
            found = json.load(f)
        self.assertFalse(found["fell_clearly"])
        self.assertLess(found["fall"], 0.1)
        self.assertIsNone(found["suggested_lr"])
        self.assertIsNone(found["lowest_loss_lr_over_10"])
        with open(os.path.join(out, "lr_find.html")) as f:
            self.assertNotIn(">suggested ", f.read())

    def test_a_range_that_diverges_is_read_up_to_there(self):
        out = self.path("diverges")
        result = run("lr-find", *ARGS, "--lr-max", "1000", "--updates", "60", "--out", out, "--json")
        self.assertEqual(result.returncode, 0, result.stderr)
        found = json.loads(result.stdout)
        self.assertTrue(found["diverged"])
        self.assertLess(found["suggested_lr"], found["diverged_lr"] or 1000)
        updates = update_records(out)
        suggested, _, _ = reading([(r["lr"], r["loss"]) for r in updates])
        self.assertAlmostEqual(found["suggested_lr"] / suggested, 1.0, places=12)

    def test_what_the_test_owns_is_refused_before_anything_is_written(self):
        out = self.path("bad")
        for extra, fragments in [
            (["--lr", "0.1"], ("does not take --lr", "--lr-min and --lr-max")),
            (["--warmup", "2e"], ("does not take --warmup",)),
            # At its default value too: the test owns the schedule.
            (["--schedule", "cosine"], ("does not take --schedule",)),
            (["--max-updates", "5"], ("does not take --max-updates", "--updates")),
            (["--lr-min", "1", "--lr-max", "0.1"], ("--lr-min below --lr-max",)),
            (["--updates", "5"], ("--updates must be from 10",)),
            (["--global-batch", "auto"], ("tests one global batch",)),
        ]:
            with self.subTest(extra):
                flags = list(ARGS)
                if "--global-batch" in extra:
                    i = flags.index("--global-batch")
                    del flags[i:i + 2]
                self.assert_one_line_error(run("lr-find", *flags, *extra, "--out", out), "config", *fragments)
        self.assertFalse(os.path.exists(out))


if __name__ == "__main__":
    main()
