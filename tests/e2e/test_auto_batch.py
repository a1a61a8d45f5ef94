"""--global-batch auto end to end: it grows when an update is dear and stays when it is free,
every check is in metrics.jsonl, the run's end says what growing saved and how to replay it, the
replay as a --global-batch-schedule is bit-identical, a run killed (-9) and resumed is
bit-identical, plan shows it, and what cannot work is refused in one line.
"""
import functools
import json
import os
import re

import e2e_common
from e2e_common import CliTestCase, checkpoints, kill_and_resume, main, read, records, update_records

# 4096 samples, micro-batch 16: the automatic batch starts at 16 x 2 = 32.
ARGS = ["--model", "mlp", "--hidden", "64", "--train-subset", "4096", "--micro-batch", "16", "--epochs", "2",
        "--lr", "0.05", "--lr-scaling", "linear", "--threads", "1", "--progress", "off"]
AUTO = [*ARGS, "--global-batch", "auto"]
run = functools.partial(e2e_common.run, timeout=600)
REPLAY = re.compile(r'replay it with --global-batch-schedule "([^"]+)"')


def weights(run_dir):
    return read(os.path.join(run_dir, "weights.safetensors"), "rb")


class AutoBatchTest(CliTestCase):
    def test_grows_when_an_update_is_dear_and_replays_bit_for_bit(self):
        out = self.path("auto")
        # An update worth 2000 samples of compute (a slow all-reduce, say): the goodput's best batch,
        # sqrt(2000 x B_noise), is far above 32.
        result = run("train", *AUTO, "--update-cost", "2000", "--out", out, check=True)
        self.assertIn("global batch auto: starts at 32, doubles while the predicted goodput gain is at least 5%",
                      result.stderr)
        checks = [r for r in records(out) if r.get("event") == "batch_check"]
        grown = [c for c in checks if c["grow"]]
        self.assertGreaterEqual(len(grown), 1, checks)
        for check in checks:
            self.assertEqual(check["update_cost"], 2000)
            self.assertEqual(check["proposed"], 2 * check["global_batch"])
            if check["grow"]:
                self.assertGreaterEqual(check["goodput_gain"], 1.05)
                self.assertLessEqual(check["noise_scale_low"], check["noise_scale"])
            else:
                self.assertIn("reason", check)
        # Each doubling takes effect at the next update, at the sample it was decided at.
        changes = [r for r in records(out) if r.get("event") == "batch_change"]
        self.assertEqual([(c["step"], c["samples_seen"], c["global_batch"]) for c in changes],
                         [(g["step"] + 1, g["samples_seen"], g["proposed"]) for g in grown])
        batches = [r["global_batch"] for r in update_records(out)]
        self.assertEqual(batches[0], 32)
        self.assertEqual(sorted(batches), batches)
        self.assertEqual(sum(r["items"] for r in update_records(out)), 2 * 4096)
        self.assertRegex(result.stderr, r"automatic batch: 32 -> 64 after update \d+: noise scale")
        summary = [line for line in result.stderr.splitlines() if line.startswith("automatic batch: 32 -> ")][-1]
        self.assertRegex(summary, r"; \d+ updates where 32 throughout takes 256 updates for the same 8192 samples")
        # report.html draws the batch over the samples beside the noise scale at each check.
        self.assertIn("automatic batch: the global batch and the noise scale at each check",
                      read(os.path.join(out, "report.html")))
        replay = REPLAY.search(summary).group(1)
        self.assertTrue(replay.startswith("0:32 "), replay)
        # The decision log, replayed as an ordinary ramp without the controller: the same run.
        again = self.path("replay")
        run("train", *ARGS, "--global-batch-schedule", replay, "--out", again, check=True)
        self.assertEqual(weights(again), weights(out))
        self.assertEqual([r["lr"] for r in update_records(again)], [r["lr"] for r in update_records(out)])

    def test_stays_put_when_updates_are_free(self):
        out = self.path("free")
        result = run("train", *AUTO, "--update-cost", "0", "--out", out, check=True)
        checks = [r for r in records(out) if r.get("event") == "batch_check"]
        self.assertGreater(len(checks), 0)
        self.assertTrue(not any(c["grow"] for c in checks), checks)
        self.assertEqual({r["global_batch"] for r in update_records(out)}, {32})
        self.assertIn("automatic batch: stayed at 32: doubling predicted", result.stderr)

    def test_the_update_cost_is_timed_when_not_given(self):
        out = self.path("timed")
        result = run("train", *AUTO, "--out", out, check=True)
        self.assertIn("an update's cost timed over updates 3-18", result.stderr)
        checks = [r for r in records(out) if r.get("event") == "batch_check"]
        self.assertGreater(len(checks), 0)
        # One cost for the whole run, fixed once timed: decisions follow from the checkpointed state.
        self.assertEqual(len({c["update_cost"] for c in checks}), 1)
        self.assertGreaterEqual(checks[0]["update_cost"], 0)
        self.assertEqual(checks[0]["step"], 20)

    def test_killed_and_resumed_runs_are_bit_identical(self):
        args = [*AUTO, "--update-cost", "2000", "--checkpoint-every", "7u"]
        whole = self.path("whole")
        run("train", *args, "--out", whole, check=True)
        self.assertGreater(len({r["global_batch"] for r in update_records(whole)}), 1)
        run_dir = self.path("killed")
        self.assertEqual(kill_and_resume(args, run_dir, seed=5, pause=(0.2, 1.0)), 0)
        self.assertEqual(weights(run_dir), weights(whole))
        state = json.loads(read(os.path.join(run_dir, "checkpoints", checkpoints(run_dir)[-1], "state.json")))
        self.assertEqual([d["to_batch"] for d in state["progress"]["growth"]["decisions"]],
                         [c["proposed"] for c in records(whole)
                          if c.get("event") == "batch_check" and c["grow"]])

    def test_evaluations_in_samples_stay_at_the_same_data_as_the_batch_grows(self):
        out = self.path("evaluated")
        result = run("train", *AUTO, "--update-cost", "2000", "--eval-every", "1000s", "--out", out, check=True)
        self.assertIn("evaluation: every 1000 samples (--eval-every 1000s, counted in samples", result.stderr)
        batch_at = {r["step"]: r["global_batch"] for r in update_records(out)}
        self.assertGreater(len(set(batch_at.values())), 1)
        evaluated = [r for r in records(out) if r.get("event") == "evaluation"]
        # Each in the update that passes a multiple of 1000 samples (none at an epoch's end, which evaluates
        # anyway): the multiples below the run's 8192 samples, but 4096's and 8192's.
        passed = [r["samples_seen"] // 1000 for r in evaluated]
        for r in evaluated:
            before = r["samples_seen"] - batch_at[r["step"]]
            self.assertGreater(r["samples_seen"] // 1000, before // 1000, r)
        self.assertEqual(sorted(set(range(1, 9)) - {4, 8}), [p for p in passed if p not in (4, 8)])

    def test_plan_shows_the_start_and_the_limit(self):
        plan = json.loads(run("plan", "--dataset-size", "4096", "--micro-batch", "16", "--global-batch", "auto",
                              "--json", check=True).stdout)
        self.assertEqual((plan["global_batch_size"], plan["global_batch_auto"], plan["max_global_batch"]),
                         (32, True, 2048))
        text = run("plan", "--dataset-size", "4096", "--micro-batch", "16", "--global-batch", "auto",
                   "--max-global-batch", "512", check=True).stdout
        self.assertIn("global batch auto", text)
        self.assertRegex(text, r"at most\s+global 512")

    def test_what_cannot_work_is_refused_in_one_line(self):
        cases = [
            (["--global-batch-schedule", "0:32 1000s:64"], "config", "both choose the batch"),
            (["--accum-steps", "1"], "config", "--accum-steps 1 leaves nothing to measure"),
            (["--lr-scaling", "adascale"], "config", "both adapt to the batch"),
            (["--max-updates", "10"], "config", "--max-updates cannot bound it"),
            (["--no-noise-scale"], "config", "--no-noise-scale"),
            (["--max-global-batch", "16"], "config", "--max-global-batch 16 is below the batch"),
            (["--update-cost", "-3"], "config", "--update-cost must be zero or positive"),
        ]
        for extra, kind, fragment in cases:
            with self.subTest(extra=extra):
                self.assert_one_line_error(run("train", *AUTO, *extra, "--out", self.path("x")), kind, fragment)
                self.assertFalse(os.path.exists(self.path("x")))
        self.assert_one_line_error(run("train", *ARGS, "--global-batch", "64", "--update-cost", "5"), "config",
                                   "belong to --global-batch auto")


if __name__ == "__main__":
    main(verbosity=2)
