"""--global-batch auto end to end: it grows when an update is dear and stays when it is free,
every check is in metrics.jsonl, the run's end says what growing saved and how to replay it, the
replay as a --global-batch-schedule is bit-identical, a run killed (-9) and resumed is
bit-identical, plan shows it, and what cannot work is refused in one line. Under the branch test
(the default) each doubling is trained both ways from the same point and kept only if its loss
keeps up: the tests are in metrics.jsonl, the losing branches leave no records, the replay is still
bit-identical, and a run stopped inside a test resumes to the same bits.
"""
import functools
import json
import os
import re
import signal

import e2e_common
from e2e_common import CliTestCase, checkpoints, kill_and_resume, main, read, records, start, update_records

# 4096 samples, micro-batch 16: the automatic batch starts at 16 x 2 = 32.
ARGS = ["--model", "mlp", "--hidden", "64", "--train-subset", "4096", "--micro-batch", "16", "--epochs", "2",
        "--lr", "0.05", "--lr-scaling", "linear", "--threads", "1", "--progress", "off"]
# A run of 7680 samples: the tests' default budget (5% of the samples trained) would let no test of 64 (512
# samples a branch) start before 9728 samples, so these runs' tests may throw away as many as are trained
# (the budget's own test runs the default).
EVERY_TEST = ["--growth-test-budget", "1"]
AUTO = [*ARGS, "--global-batch", "auto", *EVERY_TEST]
run = functools.partial(e2e_common.run, timeout=600)
REPLAY = re.compile(r'replay it with --global-batch-schedule "([^"]+)"')


def weights(run_dir):
    return read(os.path.join(run_dir, "weights.safetensors"), "rb")


class AutoBatchTest(CliTestCase):
    def test_grows_when_an_update_is_dear_and_replays_bit_for_bit(self):
        out = self.path("auto")
        # An update worth 2000 samples of compute (a slow all-reduce, say): the goodput's best batch,
        # sqrt(2000 x B_noise), is far above 32. The prediction alone decides here (no branch test).
        result = run("train", *AUTO, "--update-cost", "2000", "--growth-test", "none", "--out", out, check=True)
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

    def test_branch_tests_decide_each_doubling_and_the_run_replays_bit_for_bit(self):
        out = self.path("tested")
        result = run("train", *AUTO, "--update-cost", "2000", "--out", out, check=True)
        # 2% of the 4096 training samples, at least 256, are set aside to score the branches on.
        self.assertIn("(3840 train, 0 validation, 10000 test samples, 256 set aside for the growth tests)",
                      result.stderr)
        proposals = [r for r in records(out) if r.get("event") == "batch_check" and "test_samples" in r]
        tests = [r for r in records(out) if r.get("event") == "batch_test"]
        self.assertEqual(len(proposals), len(tests))
        self.assertGreaterEqual(len(tests), 2, tests)
        # This run has both outcomes: the first test (early, while the loss falls fast) keeps 32.
        self.assertFalse(tests[0]["kept"], tests[0])
        self.assertTrue(any(t["kept"] for t in tests), tests)
        for proposal, test in zip(proposals, tests):
            self.assertFalse(proposal["grow"])
            self.assertEqual(test["started_step"], proposal["step"])
            self.assertEqual(test["test_samples"], proposal["test_samples"])
            self.assertEqual(test["test_samples"] % (2 * test["proposed"]), 0)
            # Kept exactly when the doubled branch made at least 90% (the default) of the current one's
            # progress from where both began (none made: it must do at least as well), with two standard
            # errors of the paired difference to spare (the default).
            self.assertAlmostEqual(test["difference"], test["doubled_loss"] - test["current_loss"], places=12)
            self.assertAlmostEqual(test["bound"], 0.1 * max(0.0, test["start_loss"] - test["current_loss"]),
                                   places=12)
            self.assertEqual(test["confidence"], 2)
            self.assertEqual(test["kept"], test["difference"] + 2 * test["standard_error"] <= test["bound"])
            self.assertGreaterEqual(test["standard_error"], 0)
            self.assertGreaterEqual(test["extra_seconds"], 0)
        # Each test began where the rest of the run could repay it: kept at its predicted goodput gain, the
        # samples after it save the compute of at least the samples a lost test throws away. Checks where it
        # could not (a gain near 1 early; too little run left late) say so, and no test starts at them.
        for proposal in proposals:
            after = 2 * 3840 - proposal["samples_seen"] - proposal["test_samples"]
            self.assertGreaterEqual(after * (1 - 1 / proposal["goodput_gain"]), proposal["test_samples"], proposal)
        late = [r for r in records(out) if r.get("event") == "batch_check" and "cannot repay itself" in r.get("reason", "")]
        self.assertGreater(len(late), 0)
        self.assertGreater(late[-1]["samples_seen"], max(t["samples_seen"] for t in tests))
        self.assertFalse({r["step"] for r in late} & {t["started_step"] for t in tests})
        for check in late:
            self.assertRegex(check["reason"], r"^testing \d+ \((\d+) samples a branch\) cannot repay itself: (the run "
                                              r"ends within it|[0-9.]+x the goodput over the \d+ samples the run has left "
                                              r"after it saves the compute of \d+, less than the \1 a lost test throws "
                                              r"away)$")
        # A kept doubling starts where its test did; the losing branches left no update records.
        changes = [r for r in records(out) if r.get("event") == "batch_change"]
        self.assertEqual([(c["samples_seen"], c["global_batch"]) for c in changes],
                         [(t["samples_seen"], t["proposed"]) for t in tests if t["kept"]])
        updates = update_records(out)
        self.assertEqual([r["step"] for r in updates], list(range(1, len(updates) + 1)))
        self.assertEqual(sum(r["items"] for r in updates), 2 * 3840)
        kept = sum(t["kept"] for t in tests)
        losing = sum(t["test_samples"] for t in tests)
        summary = [line for line in result.stderr.splitlines() if line.startswith("automatic batch: 32 -> ")][-1]
        self.assertIn(f"; {len(tests)} branch tests ({kept} kept) trained {losing} samples more", summary)
        self.assertIn("testing 64 against 32: both train the", result.stderr)
        self.assertRegex(result.stderr, r"automatic batch: kept 64: from loss [0-9.]+, 64 reached [0-9.]+ and 32 "
                                        r"[0-9.]+ \(32 made no progress; difference")
        # The decision log replayed as a ramp, with the same samples set aside: the same run, record for record.
        replay = REPLAY.search(summary).group(1)
        self.assertIn(f'"{replay}" --growth-holdout 256', summary)
        again = self.path("replay")
        run("train", *ARGS, "--global-batch-schedule", replay, "--growth-holdout", "256", "--out", again, check=True)
        self.assertEqual(weights(again), weights(out))
        fields = ("step", "samples_seen", "loss", "lr", "global_batch", "grad_norm")
        self.assertEqual([[r[f] for f in fields] for r in update_records(again)],
                         [[r[f] for f in fields] for r in updates])

    def test_a_control_at_the_doubled_batchs_temperature_judges_the_batch_alone(self):
        # Under the square-root rule the control trains 32 at 1/sqrt(2) of its rate: the doubled
        # batch's rate over its batch. A rejected doubling trains 32 a third time, at its own rate.
        # A lost test throws two branches away, which the rest of a 2-epoch run cannot repay: 4 epochs.
        sqrt_args = [("sqrt" if previous == "--lr-scaling" else "4" if previous == "--epochs" else arg)
                     for previous, arg in zip([None, *ARGS], ARGS)]
        out = self.path("control")
        result = run("train", *sqrt_args, "--global-batch", "auto", *EVERY_TEST, "--update-cost", "2000",
                     "--growth-control", "temperature", "--out", out, check=True)
        tests = [r for r in records(out) if r.get("event") == "batch_test"]
        self.assertGreaterEqual(len(tests), 2, tests)
        self.assertFalse(all(t["kept"] for t in tests), tests)
        for test in tests:
            self.assertAlmostEqual(test["control_rate_factor"], 2 ** -0.5, places=15)
            self.assertEqual(test["branches"], 2 if test["kept"] else 3)
            self.assertEqual(test["kept"], test["difference"] + 2 * test["standard_error"] <= test["bound"])
        self.assertIn("and 32 at 0.707x its rate ", result.stderr)
        self.assertIn("samples of the doubled branch and the control thrown away, 32 trained again at its rate",
                      result.stderr)
        summary = [line for line in result.stderr.splitlines()
                   if line.startswith("automatic batch: ") and "branch test" in line and "trained" in line][-1]
        losing = sum((t["branches"] - 1) * t["test_samples"] for t in tests)
        self.assertIn(f"trained {losing} samples more", summary)
        # The control never trains the run: the run is the ramp of its kept doublings, record for record.
        replay = REPLAY.search(summary)
        schedule = replay.group(1) if replay else "0:32"
        again = self.path("replay")
        run("train", *sqrt_args, "--global-batch-schedule", schedule, "--growth-holdout", "256", "--out", again,
            check=True)
        self.assertEqual(weights(again), weights(out))
        fields = ("step", "samples_seen", "loss", "lr", "global_batch", "grad_norm")
        self.assertEqual([[r[f] for f in fields] for r in update_records(again)],
                         [[r[f] for f in fields] for r in update_records(out)])

    def test_a_stop_inside_a_branch_test_resumes_to_the_same_bits(self):
        # A wider model, so that a test's branches take long enough to be stopped in.
        args = [*AUTO, "--hidden", "1024", "--update-cost", "2000"]
        whole = self.path("whole")
        run("train", *args, "--out", whole, check=True)
        stopped = self.path("stopped")
        process = start("train", *args, "--out", stopped)
        for line in process.stderr:
            if "automatic batch: testing" in line:
                process.send_signal(signal.SIGINT)
                break
        _, stderr = process.communicate(timeout=300)
        self.assertEqual(process.returncode, 130, stderr)
        # Back where the test began, the proposal waiting in the checkpoint: the resume tests it again.
        state = json.loads(read(os.path.join(stopped, "checkpoints", checkpoints(stopped)[-1], "state.json")))
        proposal = state["progress"]["growth"]["proposal"]
        self.assertIsNotNone(proposal)
        self.assertEqual(state["progress"]["samples_seen"], proposal["samples_seen"])
        self.assertEqual(state["progress"]["growth"]["tests"], [])
        run("train", "--resume", stopped, check=True)
        self.assertEqual(weights(stopped), weights(whole))
        self.assertEqual([r["loss"] for r in update_records(stopped)], [r["loss"] for r in update_records(whole)])

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
        shown = [*AUTO]
        shown[shown.index("--progress") + 1] = "lines"
        result = run("train", *shown, "--out", out, check=True)
        self.assertIn("an update's cost timed over updates 3-18", result.stderr)
        # The status line says what the controller waits for: the first update's, while the cost is
        # timed; each epoch's last, the next check.
        status = [line for line in result.stderr.splitlines() if re.match(r"epoch \d+/\d+ update ", line)]
        self.assertIn("auto: timing updates", status[0])
        self.assertRegex(status[-1], r"auto: (check in \d+|noise settling|at its limit)$")
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
                         [t["proposed"] for t in records(whole) if t.get("event") == "batch_test" and t["kept"]])
        self.assertEqual(len(state["progress"]["growth"]["tests"]),
                         len([t for t in records(whole) if t.get("event") == "batch_test"]))

    def test_evaluations_in_samples_stay_at_the_same_data_as_the_batch_grows(self):
        out = self.path("evaluated")
        result = run("train", *AUTO, "--update-cost", "2000", "--growth-test", "none", "--eval-every", "1000s",
                     "--out", out, check=True)
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

    def test_adamws_betas_follow_each_doubling_and_the_replay_keeps_them(self):
        # --adam-sqrt-adjust: each batch trains at Malladi's betas and eps for kappa = batch / 32 (the rate's
        # reference), each doubling says them, the growth stops before beta1 0.9 reaches 0 (10 x 32), and the
        # replay with the same flag is the same run, while one without it is not (the betas are applied).
        adamw = [*[a for a in ARGS if a not in ("--lr", "0.05", "--lr-scaling", "linear")], "--optimizer", "adamw",
                 "--lr", "0.002", "--lr-ref-batch", "32", "--lr-scaling", "sqrt", "--adam-sqrt-adjust"]
        plan = json.loads(run("plan", *adamw, "--global-batch", "auto", "--json", check=True).stdout)
        self.assertEqual(plan["max_global_batch"], 256)  # the last doubling of 32 within 320
        self.assertEqual(plan["max_global_batch_reason"], "the last doubling before beta1 0.9 reaches 0 at 10x the "
                                                          "rate's reference batch 32 under --adam-sqrt-adjust")
        self.assertEqual((plan["adam_beta1"], plan["adam_beta2"], plan["adam_eps"]), (0.9, 0.999, 1e-8))
        out = self.path("adamw")
        result = run("train", *adamw, "--global-batch", "auto", "--update-cost", "2000", "--growth-test", "none",
                     "--out", out, check=True)
        self.assertIn("adamw under the square-root rule (--adam-sqrt-adjust): beta1 0.9, beta2 0.999, eps 1e-08 at "
                      "the starting batch; each batch trains at its own", result.stderr)
        changes = [r for r in records(out) if r.get("event") == "batch_change"]
        self.assertGreaterEqual(len(changes), 1, changes)
        for change in changes:
            kappa = change["global_batch"] / 32
            self.assertAlmostEqual(change["adam_beta1"], 1 - kappa * 0.1, places=12)
            self.assertAlmostEqual(change["adam_beta2"], 1 - kappa * 0.001, places=12)
            self.assertAlmostEqual(change["adam_eps"] / (1e-8 / kappa ** 0.5), 1, places=12)
        self.assertRegex(result.stderr, r"global batch 32 -> 64 = micro 16 x accumulation 4 x world 1 at update \d+ "
                                        r"\(\d+ samples seen\); lr now [0-9.]+ = [0-9.]+ \(the schedule at batch 32\) x "
                                        r"1\.414 \(sqrt rule, 64 / 32\), beta1 0\.8, beta2 0\.998, eps 7\.07107e-09")
        self.assertLessEqual(max(r["global_batch"] for r in update_records(out)), 256)
        summary = [line for line in result.stderr.splitlines() if line.startswith("automatic batch: 32 -> ")][-1]
        replay = REPLAY.search(summary).group(1)
        again = self.path("replay")
        run("train", *adamw, "--global-batch-schedule", replay, "--out", again, check=True)
        self.assertEqual(weights(again), weights(out))
        ramp_plan = json.loads(run("plan", *adamw, "--global-batch-schedule", replay, "--json", check=True).stdout)
        self.assertEqual([(p["global_batch"], p["adam_beta1"]) for p in ramp_plan["ramp_phases"]][1:],
                         [(c["global_batch"], c["adam_beta1"]) for c in changes])
        unadjusted = self.path("unadjusted")
        run("train", *[a for a in adamw if a != "--adam-sqrt-adjust"], "--global-batch-schedule", replay,
            "--out", unadjusted, check=True)
        self.assertNotEqual(weights(unadjusted), weights(out))
        # Under the branch test the rejected doubled branches trained at their own betas and left nothing behind:
        # the kept run replays bit for bit, and a run killed (-9) and resumed (the betas set again before each
        # step, whatever the checkpoint's optimizer holds) ends on the same bits.
        tested = self.path("tested")
        result = run("train", *adamw, "--global-batch", "auto", *EVERY_TEST, "--update-cost", "2000", "--out", tested,
                     check=True)
        self.assertIn("automatic batch: testing 64 against 32", result.stderr)
        summary = [line for line in result.stderr.splitlines() if line.startswith("automatic batch: 32 -> ")][-1]
        replay = REPLAY.search(summary).group(1)
        again = self.path("tested-replay")
        run("train", *adamw, "--global-batch-schedule", replay, "--growth-holdout", "256", "--out", again, check=True)
        self.assertEqual(weights(again), weights(tested))
        killed = self.path("killed")
        self.assertEqual(kill_and_resume([*adamw, "--global-batch", "auto", *EVERY_TEST, "--update-cost", "2000",
                                          "--checkpoint-every", "7u"], killed, seed=3, pause=(0.1, 0.6)), 0)
        self.assertEqual(weights(killed), weights(tested))
        # Past the betas' range: refused in one line, naming the flag to change.
        self.assert_one_line_error(run("train", *adamw, "--global-batch", "auto", "--max-global-batch", "640",
                                       "--out", self.path("x")), "config", "--max-global-batch 640 is past the betas' range")
        self.assert_one_line_error(run("train", *adamw, "--global-batch-schedule", "0:32 1e:512", "--out", self.path("x")),
                                   "config", "the global batch 512 of the --global-batch-schedule is past the betas' range")
        self.assertFalse(os.path.exists(self.path("x")))

    def test_adamw_under_the_automatic_batch_adjusts_its_betas_unless_told(self):
        # Unsaid, adamw under --global-batch auto with the square-root rule trains each batch at its own betas
        # (the plan and the start line say so and how to keep them); config.toml writes the choice, so a resume
        # keeps it whatever later defaults are. --no-adam-sqrt-adjust keeps the betas and the 64x limit, a
        # written ramp keeps them unsaid, and a limit past the betas' range names the default as its cause.
        adamw = [*[a for a in ARGS if a not in ("--lr", "0.05", "--lr-scaling", "linear")], "--optimizer", "adamw",
                 "--lr", "0.002", "--lr-ref-batch", "32", "--lr-scaling", "sqrt"]
        plan = run("plan", *adamw, "--global-batch", "auto", check=True).stdout
        self.assertRegex(plan, r"adam \(sqrt rule\) +beta1 0\.9, beta2 0\.999, eps 1e-08 at the start; at each batch "
                               r"its own .*; --no-adam-sqrt-adjust keeps them at every batch")
        self.assertIn("at most                      global 256 (the last doubling before beta1 0.9 reaches 0 at 10x "
                      "the rate's reference batch 32; --no-adam-sqrt-adjust lifts the limit), peak lr", plan)
        planned = json.loads(run("plan", *adamw, "--global-batch", "auto", "--json", check=True).stdout)
        self.assertEqual(planned["max_global_batch"], 256)
        self.assertIn("--no-adam-sqrt-adjust lifts the limit", planned["max_global_batch_reason"])
        kept = json.loads(run("plan", *adamw, "--global-batch", "auto", "--no-adam-sqrt-adjust", "--json",
                              check=True).stdout)
        self.assertEqual(kept["max_global_batch"], 64 * 32)
        self.assertNotIn("adam_beta1", kept)
        self.assertNotIn("max_global_batch_reason", kept)
        self.assertNotIn("adam_beta1", json.loads(run("plan", *adamw, "--global-batch-schedule", "0:32 1e:64",
                                                      "--json", check=True).stdout))
        out = self.path("default")
        result = run("train", *adamw, "--global-batch", "auto", "--out", out, check=True)
        self.assertIn("at most 256 (the last doubling before beta1 0.9 reaches 0 at 10x the rate's reference batch 32; "
                      "--no-adam-sqrt-adjust lifts the limit)", result.stderr)
        self.assertIn("adamw under the square-root rule (--adam-sqrt-adjust, the default under --global-batch auto; "
                      "--no-adam-sqrt-adjust keeps the betas): beta1 0.9", result.stderr)
        with open(os.path.join(out, "config.toml")) as f:
            config = f.read()
        self.assertIn("\nadam-sqrt-adjust = true\n", config)
        self.assertNotIn("no-adam-sqrt-adjust", config)
        out = self.path("kept")
        result = run("train", *adamw, "--global-batch", "auto", "--no-adam-sqrt-adjust",
                     "--out", out, check=True)
        self.assertNotIn("adamw under the square-root rule", result.stderr)
        with open(os.path.join(out, "config.toml")) as f:
            self.assertIn("\nadam-sqrt-adjust = false\n", f.read())
        self.assert_one_line_error(run("train", *adamw, "--global-batch", "auto", "--max-global-batch", "640",
                                       "--out", self.path("x")), "config",
                                   "past the betas' range under --adam-sqrt-adjust (on by default for adamw under "
                                   "--global-batch auto)")
        self.assertFalse(os.path.exists(self.path("x")))

    def test_the_tests_never_throw_away_more_than_their_budget(self):
        # The default, 5% of the samples trained: a test of 64 (512 samples a branch) may start once 9728 samples
        # are trained, which this 7680-sample run never reaches. Each check says so, and the end says why.
        out = self.path("default")
        result = run("train", *ARGS, "--global-batch", "auto", "--update-cost", "2000", "--out", out, check=True)
        self.assertIn("each doubling tested on 256 samples set aside, the tests throwing away at most 5% of the "
                      "samples trained", result.stderr)
        self.assertEqual([r for r in records(out) if r.get("event") == "batch_test"], [])
        waiting = [r for r in records(out) if r.get("event") == "batch_check" and "budget" in r.get("reason", "")]
        self.assertGreater(len(waiting), 0)
        self.assertIn("testing 64 (512 samples a branch) waits for the tests' budget: 5% of the samples trained, 0 "
                      "thrown away so far; it fits from sample 9728", waiting[0]["reason"])
        self.assertIn("automatic batch: stayed at 32: doubling predicted", result.stderr)
        self.assertIn("its branch test (512 samples a branch) fits the tests' budget (5% of the samples trained) only "
                      "from sample 9728 (a longer run, or a larger --growth-test-budget, lets it test)", result.stderr)
        # A quarter: tests run, and at the end of each the losing branches are within a quarter of what was trained.
        out = self.path("quarter")
        run("train", *ARGS, "--global-batch", "auto", "--update-cost", "2000", "--growth-test-budget", "0.25",
            "--out", out, check=True)
        tests = [r for r in records(out) if r.get("event") == "batch_test"]
        self.assertGreaterEqual(len(tests), 1)
        thrown = 0
        for test in tests:
            thrown += test["test_samples"]
            self.assertLessEqual(thrown, 0.25 * (test["samples_seen"] + test["test_samples"]), tests)
        # Fewer tests than with no budget to speak of, on the same run.
        unbounded = self.path("unbounded")
        run("train", *AUTO, "--update-cost", "2000", "--out", unbounded, check=True)
        self.assertLess(len(tests), len([r for r in records(unbounded) if r.get("event") == "batch_test"]))

    def test_predicted_at_the_estimate_a_doubling_is_proposed_no_later(self):
        def goodput_gain(batch, noise, cost):
            return 2 * (1 + batch / noise) * (cost + batch) / ((1 + 2 * batch / noise) * (cost + 2 * batch))

        proposals = {}
        for at, decides in (("low", "noise_scale_low"), ("estimate", "noise_scale")):
            out = self.path(at)
            result = run("train", *AUTO, "--update-cost", "2000", "--growth-predict-at", at, "--out", out, check=True)
            self.assertIn("at the noise scale's low end" if at == "low" else
                          "at the noise scale's estimate, --growth-predict-at estimate", result.stderr)
            checks = [r for r in records(out) if r.get("event") == "batch_check"]
            self.assertTrue(checks)
            for check in checks:
                self.assertEqual(check["predicted_at"], at)
                # The gain is the goodput model's at the value --growth-predict-at names, band or no band
                # (0: not judged, for a limit or a value not above 0).
                if check[decides] <= 0:
                    self.assertEqual(check["goodput_gain"], 0)
                elif check["goodput_gain"] > 0:
                    self.assertAlmostEqual(check["goodput_gain"],
                                           goodput_gain(check["global_batch"], check[decides], 2000), places=9)
            proposals[at] = [c for c in checks if "test_samples" in c]
            if proposals[at]:
                self.assertRegex(result.stderr, "x the goodput at the " +
                                 ("band's low end" if at == "low" else "estimate") + ", ")
        # Both runs are the same run until the first proposal, and the gain grows with the noise scale, so
        # the estimate (never below the band's low end) proposes first or with it.
        self.assertTrue(proposals["estimate"])
        if proposals["low"]:
            self.assertLessEqual(proposals["estimate"][0]["step"], proposals["low"][0]["step"])
        plan = json.loads(run("plan", "--dataset-size", "4096", "--micro-batch", "16", "--global-batch", "auto",
                              "--growth-predict-at", "estimate", "--json", check=True).stdout)
        self.assertEqual(plan["growth_predict_at"], "estimate")
        text = run("plan", "--dataset-size", "4096", "--micro-batch", "16", "--global-batch", "auto", check=True).stdout
        self.assertRegex(text, r"doubles\s+while the predicted goodput gain is at least 5% \(at the noise scale's low end")

    def test_plan_shows_the_start_and_the_limit(self):
        plan = json.loads(run("plan", "--dataset-size", "4096", "--micro-batch", "16", "--global-batch", "auto",
                              "--json", check=True).stdout)
        self.assertEqual((plan["global_batch_size"], plan["global_batch_auto"], plan["max_global_batch"]),
                         (32, True, 2048))
        self.assertEqual((plan["growth_test"], plan["growth_holdout"], plan["growth_control"],
                          plan["growth_test_budget"]), ("branch", 256, "rate", 0.05))
        text = run("plan", "--dataset-size", "4096", "--micro-batch", "16", "--global-batch", "auto",
                   "--max-global-batch", "512", check=True).stdout
        self.assertIn("global batch auto", text)
        self.assertRegex(text, r"at most\s+global 512")
        # The default rate, 0.05 at 256, scaled by the square root to the starting 32.
        self.assertRegex(text, r"starts at\s+global 32 = micro 16 x accumulation 2 x world 1, lr 0.0176777")
        self.assertRegex(text, r"tested\s+by branching: the next samples at both batches, scored on 256 training")
        text = run("plan", "--dataset-size", "4096", "--micro-batch", "16", "--global-batch", "auto",
                   "--growth-control", "temperature", check=True).stdout
        self.assertRegex(text, r"the current batch at the doubled one's\s+noise\s+temperature\s+\(--growth-control")

    def test_what_cannot_work_is_refused_in_one_line(self):
        cases = [
            (["--global-batch-schedule", "0:32 1000s:64"], "config", "both choose the batch"),
            (["--accum-steps", "1"], "config", "--accum-steps 1 leaves nothing to measure"),
            (["--lr-scaling", "adascale"], "config", "both adapt to the batch"),
            (["--max-updates", "10"], "config", "--max-updates cannot bound it"),
            (["--no-noise-scale"], "config", "--no-noise-scale"),
            (["--max-global-batch", "16"], "config", "--max-global-batch 16 is below the batch"),
            (["--update-cost", "-3"], "config", "--update-cost must be zero or positive"),
            (["--growth-holdout", "0"], "config", "--growth-holdout 0 sets none aside"),
            (["--growth-holdout", "-1"], "config", "--growth-holdout must be zero or positive"),
            (["--growth-holdout", "4096"], "config", "would set aside all 4096 training samples"),
            (["--growth-tolerance", "-0.1"], "config", "--growth-tolerance must be zero or positive"),
            (["--growth-confidence", "-1"], "config", "--growth-confidence must be zero or positive"),
            (["--growth-test", "maybe"], "config", "growth test 'maybe' is not known"),
            (["--growth-control", "loss"], "config", "growth control 'loss' is not known"),
            (["--growth-predict-at", "high"], "config", "growth prediction 'high' is not known"),
            (["--growth-test-budget", "0"], "config", "--growth-test-budget must be a fraction of the samples"),
            (["--growth-test-budget", "1.5"], "config", "--growth-test-budget must be a fraction of the samples"),
        ]
        for extra, kind, fragment in cases:
            with self.subTest(extra=extra):
                self.assert_one_line_error(run("train", *ARGS, "--global-batch", "auto", *extra, "--out", self.path("x")),
                                           kind, fragment)
                self.assertFalse(os.path.exists(self.path("x")))
        for extra in (["--update-cost", "5"], ["--growth-test", "none"], ["--growth-tolerance", "0.02"],
                      ["--growth-confidence", "1"], ["--growth-control", "temperature"],
                      ["--growth-test-budget", "0.1"], ["--growth-predict-at", "estimate"]):
            self.assert_one_line_error(run("train", *ARGS, "--global-batch", "64", *extra), "config",
                                       "belong to --global-batch auto")


if __name__ == "__main__":
    main(verbosity=2)
