#!/usr/bin/python3
"""End-to-end tests of checkpoints and resume: kill -9 at random points and SIGINT, then
resume, must end bit-identical to an uninterrupted run; resuming with another micro-batch or
world size keeps the global batch; mismatched or damaged checkpoints are clear errors.
Usage: test_checkpoints.py BIGBATCH_BINARY [unittest arguments]."""
import functools
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import e2e_common
from e2e_common import CliTestCase, checkpoints, comparable, free_port, kill_and_resume, main, read, start
from e2e_common import records as metrics

# cnn on 4000 samples at 128: 31 full updates and one of 32 per epoch, ~5 s of training.
RUN = ["--model", "cnn", "--train-subset", "4000", "--global-batch", "128", "--micro-batch", "32", "--epochs", "3",
       "--threads", "1", "--progress", "off", "--checkpoint-every", "4u", "--keep-checkpoints", "3"]
# Commands wait as long as they take, but where a limit is given.
run = functools.partial(e2e_common.run, timeout=None)


COMPARE_RUNS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "compare_runs.py")


class CheckpointTest(CliTestCase):
    PREFIX = "bigbatch_ckpt_"

    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp(prefix=cls.PREFIX)
        cls.reference = os.path.join(cls.root, "reference")
        run("train", *RUN, "--out", cls.reference, check=True)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.root, ignore_errors=True)

    def wait_for_checkpoint(self, run_dir, process, timeout=120):
        return e2e_common.wait_for_checkpoint(run_dir, process, timeout)

    def assert_same_as_reference(self, run_dir):
        # The weights byte for byte, every record but the machine's measurements and the
        # process starts: bench/compare_runs.py, the tool docs/benchmarks.md uses.
        compared = subprocess.run([sys.executable, COMPARE_RUNS, run_dir, self.reference], capture_output=True,
                                  text=True)
        self.assertEqual(compared.returncode, 0, compared.stdout + compared.stderr)
        self.assertIn("identical: weights", compared.stdout)

    def assert_checkpoints_complete(self, run_dir):
        for name in checkpoints(run_dir):
            for part in ["state.json", "weights.safetensors", "optimizer.pt"]:
                self.assertTrue(os.path.exists(os.path.join(run_dir, "checkpoints", name, part)), (name, part))

    def test_kill_nine_at_random_points_then_resume_is_bit_identical(self):
        run_dir = self.path("killed")
        rng = random.Random(7)
        process = start("train", *RUN, "--out", run_dir)
        kills = 0
        while True:
            if kills < 3 and self.wait_for_checkpoint(run_dir, process):
                time.sleep(rng.uniform(0.0, 1.5))  # anywhere, including inside a checkpoint write
                if process.poll() is None:
                    process.kill()
                    kills += 1
            process.communicate(timeout=300)
            if process.returncode == 0:
                break
            self.assertEqual(process.returncode, -signal.SIGKILL)
            self.assert_checkpoints_complete(run_dir)
            process = start("train", "--resume", run_dir)
        self.assertGreaterEqual(kills, 1)
        self.assert_checkpoints_complete(run_dir)
        self.assertLessEqual(len(checkpoints(run_dir)), 3)
        self.assert_same_as_reference(run_dir)

    def test_a_run_directory_in_use_is_refused_and_free_again_after_kill_nine(self):
        run_dir = self.path("locked")
        first = start("train", *RUN, "--out", run_dir)
        try:
            self.assertTrue(self.wait_for_checkpoint(run_dir, first))
            # A resume while it trains, and a fresh run into the same directory: both refused,
            # naming the process, and neither touches the run.
            for args in (["--resume", run_dir], [*RUN, "--out", run_dir]):
                result = run("train", *args, timeout=120)
                self.assertEqual(result.returncode, 2, result.stderr)
                self.assertIn(f"error[io]: run directory '{run_dir}' is in use by pid {first.pid}", result.stderr)
        finally:
            first.kill()  # kill -9: the kernel drops the lock with the process
            first.communicate()
        result = run("train", "--resume", run_dir, timeout=300)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assert_same_as_reference(run_dir)
        # Issue 59 item 12: the count is the run's own, not a flag this command was given.
        self.assertIn("threads: 1 (the run's own, from its config.toml: a resume keeps the count it started with",
                      result.stderr)

    def test_a_run_killed_before_its_first_checkpoint_is_set_aside_by_the_same_command(self):
        # Issue 59 item 18: killed after metrics.jsonl was written but before any checkpoint, it
        # could be neither resumed (nothing to resume) nor restarted ("already holds a run").
        run_dir = self.path("early")
        args = [*RUN, "--checkpoint-every", "1000u", "--out", run_dir]
        first = start("train", *args)
        metrics = os.path.join(run_dir, "metrics.jsonl")
        deadline = time.time() + 120
        while time.time() < deadline and first.poll() is None:
            if os.path.exists(metrics) and '"loss"' in read(metrics):
                break
            time.sleep(0.05)
        first.kill()
        first.communicate()
        self.assertEqual(first.returncode, -signal.SIGKILL)
        self.assertIn('"loss"', read(metrics))
        self.assertFalse(os.path.exists(os.path.join(run_dir, "weights.safetensors")))
        resumed = run("train", "--resume", run_dir, timeout=120)
        self.assertEqual(resumed.returncode, 2, resumed.stderr)
        again = run("train", *args, timeout=300)
        self.assertEqual(again.returncode, 0, again.stderr)
        aside = os.path.join(run_dir, "abandoned")
        (name,) = os.listdir(aside)
        self.assertTrue(name.startswith("stopped-before-a-checkpoint-"), name)
        self.assertIn(f"moved the records of a run that stopped before its first checkpoint (nothing could resume "
                      f"it) to {os.path.join(aside, name)}; this run starts afresh in {run_dir}", again.stderr)
        self.assertTrue(os.path.exists(os.path.join(aside, name, "metrics.jsonl")))
        self.assertTrue(os.path.exists(os.path.join(aside, name, "config.toml")))
        self.assertEqual(read(os.path.join(run_dir, "weights.safetensors"), "rb"),
                         read(os.path.join(self.reference, "weights.safetensors"), "rb"))
        # A finished run is still refused.
        refused = run("train", *args, timeout=120)
        self.assertEqual(refused.returncode, 2, refused.stderr)
        self.assertIn("already holds a run", refused.stderr)

    def test_resume_removes_what_interrupted_writes_and_prunings_left(self):
        run_dir = self.path("leftovers")
        first = start("train", *RUN, "--out", run_dir)
        self.assertTrue(self.wait_for_checkpoint(run_dir, first))
        first.kill()
        first.communicate()
        for name in (".tmp-step_000099-12345", ".trash-step_000001-12345"):  # as a kill -9 leaves them
            os.makedirs(os.path.join(run_dir, "checkpoints", name, "half"))
        result = run("train", "--resume", run_dir, timeout=300)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("removed 2 unfinished checkpoint directories left by an interrupted run", result.stderr)
        self.assertEqual([d for d in os.listdir(os.path.join(run_dir, "checkpoints")) if d.startswith(".")], [])
        self.assert_same_as_reference(run_dir)

    def test_two_runs_started_into_one_directory_cannot_both_write_it(self):
        run_dir = self.path("raced")
        quick = ["--model", "cnn", "--train-subset", "4000", "--global-batch", "128", "--micro-batch", "32",
                 "--epochs", "1", "--threads", "1", "--progress", "off"]
        processes = [start("train", *quick, "--out", run_dir) for _ in range(2)]
        results = [(p.returncode, err) for p in processes for _, err in [p.communicate(timeout=300)]]
        codes = sorted(code for code, _ in results)
        self.assertEqual(codes, [0, 2], results)
        loser = next(err for code, err in results if code == 2)
        self.assertTrue("is in use by pid" in loser or "already holds a run" in loser, loser)
        steps = [r["step"] for r in metrics(run_dir) if "loss" in r and "event" not in r]
        self.assertEqual(steps, sorted(steps))  # one writer's lines, not two interleaved
        self.assertEqual(len(steps), len(set(steps)))

    def test_sigint_checkpoints_exits_130_and_resumes_bit_identical(self):
        run_dir = self.path("interrupted")
        process = start("train", *RUN, "--out", run_dir)
        self.assertTrue(self.wait_for_checkpoint(run_dir, process))
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
        self.assertEqual(process.returncode, 130, err)
        self.assertIn("continue with: bigbatch train --resume", err)
        last_step = [r for r in metrics(run_dir) if "loss" in r][-1]["step"]
        state = json.loads(read(os.path.join(run_dir, "checkpoints", checkpoints(run_dir)[-1], "state.json")))
        self.assertEqual(state["progress"]["step"], last_step)  # nothing trained is lost
        resumed = run("train", "--resume", run_dir)
        self.assertEqual(resumed.returncode, 0, resumed.stderr)
        self.assertIn(f"resumed from", resumed.stderr)
        # The summary counts the whole run's training and says what this process added (item 17
        # of issue 35: it said "training 21s ..., 9s in all" with no word of the resume).
        self.assertRegex(resumed.stdout, r"; training \S+ over the run at \S+ samples/s "
                                         r"\(\S+ in this process, \S+ in all\)\n")
        self.assert_same_as_reference(run_dir)

    def test_a_signal_during_the_final_evaluation_stops_the_run_and_a_resume_finishes_it(self):
        # Issue 21: it was ignored (exit 0). The hook raises SIGTERM as the epoch's evaluation starts.
        run_dir = self.path("signal-at-evaluation")
        small = ["--model", "mlp", "--hidden", "32", "--train-subset", "1000", "--global-batch", "100",
                 "--epochs", "1", "--threads", "1", "--progress", "off"]
        stopped = run("train", *small, "--out", run_dir,
                      env=dict(os.environ, BIGBATCH_SIGNAL_AT_EVALUATION_FOR_TESTS=str(int(signal.SIGTERM))))
        self.assertEqual(stopped.returncode, 143, stopped.stderr)
        self.assertIn("stopped by signal 15 after update 10", stopped.stderr)
        self.assertFalse(os.path.exists(os.path.join(run_dir, "weights.safetensors")))
        self.assertEqual(checkpoints(run_dir), ["step_000010"])
        resumed = run("train", "--resume", run_dir)
        self.assertEqual(resumed.returncode, 0, resumed.stderr)
        self.assertTrue(os.path.exists(os.path.join(run_dir, "weights.safetensors")))
        self.assertEqual(len([r for r in metrics(run_dir) if "test_accuracy" in r]), 1)  # evaluated once

    def test_a_signal_during_an_interval_evaluation_stops_the_run_there(self):
        # --eval-every: the hook raises SIGTERM as update 3's evaluation starts; the run stops
        # after that update (not one later), and the resume evaluates on at the same updates.
        run_dir = self.path("signal-at-interval")
        small = ["--model", "mlp", "--hidden", "32", "--train-subset", "1000", "--global-batch", "100",
                 "--epochs", "1", "--threads", "1", "--progress", "off", "--eval-every", "3u"]
        stopped = run("train", *small, "--out", run_dir,
                      env=dict(os.environ, BIGBATCH_SIGNAL_AT_EVALUATION_FOR_TESTS=str(int(signal.SIGTERM))))
        self.assertEqual(stopped.returncode, 143, stopped.stderr)
        self.assertIn("stopped by signal 15 after update 3", stopped.stderr)
        self.assertEqual(checkpoints(run_dir), ["step_000003"])
        resumed = run("train", "--resume", run_dir)
        self.assertEqual(resumed.returncode, 0, resumed.stderr)
        self.assertEqual([r["step"] for r in metrics(run_dir) if r.get("event") == "evaluation"], [3, 6, 9])

    def test_resume_from_an_older_checkpoint_starts_a_new_history(self):
        # Issue 21: pruning deleted the new history's checkpoints and kept the abandoned one's,
        # which the next resume continued. Now it is refused, or the newer ones are set aside.
        small = ["--model", "mlp", "--hidden", "32", "--train-subset", "1000", "--global-batch", "50", "--epochs", "2",
                 "--schedule", "constant", "--threads", "1", "--progress", "off", "--checkpoint-every", "2u",
                 "--keep-checkpoints", "4"]
        run_dir = self.path("branches")
        run("train", *small, "--max-updates", "20", "--out", run_dir, check=True)
        self.assertEqual(checkpoints(run_dir), ["step_000014", "step_000016", "step_000018", "step_000020"])
        older = os.path.join(run_dir, "checkpoints", "step_000014")
        refused = run("train", "--resume", older, "--max-updates", "17")
        self.assertEqual(refused.returncode, 2, refused.stderr)
        self.assertIn("is older than 3 other checkpoint(s) of its run (the newest step_000020)", refused.stderr)
        self.assertIn("--discard-newer", refused.stderr)
        self.assertEqual(len(checkpoints(run_dir)), 4)  # nothing moved or removed
        branched = run("train", "--resume", older, "--max-updates", "17", "--discard-newer")
        self.assertEqual(branched.returncode, 0, branched.stderr)
        self.assertIn("moved 3 newer checkpoint(s), up to step_000020", branched.stderr)
        # The new history's checkpoints, the final one included, and none of the old one's.
        self.assertEqual(checkpoints(run_dir), ["step_000014", "step_000016", "step_000017"])
        aside = os.path.join(run_dir, "abandoned", os.listdir(os.path.join(run_dir, "abandoned"))[0])
        self.assertEqual(sorted(os.listdir(aside)), ["step_000016", "step_000018", "step_000020"])
        steps = [r["step"] for r in metrics(run_dir) if "loss" in r]
        self.assertEqual(steps, list(range(1, 18)))  # one history in the metrics
        # The same weights as a run that went to 17 directly (a constant rate: the first 14
        # updates do not depend on the run's length).
        straight = self.path("straight-17")
        run("train", *small, "--max-updates", "17", "--out", straight, check=True)
        self.assertEqual(read(os.path.join(run_dir, "weights.safetensors"), "rb"),
                         read(os.path.join(straight, "weights.safetensors"), "rb"))
        # And the next resume continues the new history.
        again = run("train", "--resume", run_dir, "--max-updates", "18")
        self.assertEqual(again.returncode, 0, again.stderr)
        self.assertIn("at update 17", again.stderr)

    def copy_of_reference_at(self, name, step):
        run_dir = self.path(name)
        shutil.copytree(self.reference, run_dir)
        for checkpoint in checkpoints(run_dir):
            if checkpoint != f"step_{step:06d}":
                shutil.rmtree(os.path.join(run_dir, "checkpoints", checkpoint))
        os.remove(os.path.join(run_dir, "weights.safetensors"))
        return run_dir

    def test_resume_with_another_micro_batch_keeps_the_global_batch(self):
        kept = checkpoints(self.reference)
        step = int(kept[0].split("_")[1])
        run_dir = self.copy_of_reference_at("micro64", step)
        result = run("train", "--resume", run_dir, "--micro-batch", "64")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("batch plan 128 = micro 64 x accumulation 2 x world 1", result.stderr)
        a = metrics(run_dir)[-1]
        b = metrics(self.reference)[-1]
        self.assertEqual(a["step"], b["step"])
        self.assertAlmostEqual(a["test_loss"], b["test_loss"], delta=1e-3)

    def test_resume_on_two_ranks_keeps_the_global_batch(self):
        step = int(checkpoints(self.reference)[0].split("_")[1])
        run_dir = self.copy_of_reference_at("two-ranks", step)
        result = run("launch", "--nproc", "2", "--master-port", str(free_port()), "--", e2e_common.BINARY, "train",
                     "--resume", run_dir, "--micro-batch", "16", timeout=300)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("128 = micro 16 x accumulation 4 x world 2", result.stderr)
        a, b = metrics(run_dir)[-1], metrics(self.reference)[-1]
        self.assertEqual(a["step"], b["step"])
        self.assertAlmostEqual(a["test_loss"], b["test_loss"], delta=1e-3)

    def test_resume_drops_every_line_written_after_its_checkpoint(self):
        # A process killed after its checkpoint may have written lines of any kind, events keyed
        # to the checkpoint's own step among them (an out-of-memory back-off is keyed to the
        # last update done): the resumed run writes whatever happens again, so none may stay.
        step = int(checkpoints(self.reference)[0].split("_")[1])
        run_dir = self.copy_of_reference_at("after-checkpoint", step)
        with open(os.path.join(run_dir, "metrics.jsonl"), "a") as f:
            f.write(json.dumps({"event": "oom_backoff", "step": step, "micro_batch_from": 32, "micro_batch": 16}) + "\n")
        result = run("train", "--resume", run_dir)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assert_same_as_reference(run_dir)

    def test_resumed_run_with_nothing_left_records_its_end_once(self):
        run_dir = self.path("ends-inside-an-epoch")
        run("train", *RUN, "--max-updates", "6", "--out", run_dir, check=True)
        before = metrics(run_dir)
        result = run("train", "--resume", run_dir)
        self.assertEqual(result.returncode, 0, result.stderr)
        ends = [r for r in metrics(run_dir) if "test_accuracy" in r]
        self.assertEqual(len(ends), 1, ends)
        self.assertEqual(ends[0]["step"], 6)
        self.assertEqual(ends[0]["partial_epoch"], 6 / 32)
        self.assertEqual(comparable(metrics(run_dir)), comparable(before))
        # Killed after its last checkpoint, before its weights were written: the resume writes
        # them and names the figures the run last recorded (it said "no test split evaluated").
        weights = read(os.path.join(run_dir, "weights.safetensors"), "rb")
        os.remove(os.path.join(run_dir, "weights.safetensors"))
        result = run("train", "--resume", run_dir)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertRegex(result.stdout.splitlines()[-1],
                         r"^nothing left to train after 6 updates, 768 samples \(test accuracy [0-9.]+%, test loss "
                         r"[0-9.]+ when last evaluated\); wrote the run's end")
        self.assertEqual(read(os.path.join(run_dir, "weights.safetensors"), "rb"), weights)

    def test_resuming_a_finished_run_says_so_and_changes_nothing(self):
        # Issue 20: it printed "test accuracy 0.00% (loss 0.0000)" and appended a train_start.
        run_dir = self.path("finished")
        shutil.copytree(self.reference, run_dir)
        before = {name: read(os.path.join(root, name), "rb") for root, _, files in os.walk(run_dir)
                  for name in files}
        result = run("train", "--resume", run_dir)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn(f"run '{run_dir}' has already finished: 96 updates, 12000 samples, test accuracy", result.stderr)
        self.assertIn("Nothing was trained or changed", result.stderr)
        self.assertNotIn("0.00%", result.stdout + result.stderr)
        after = {name: read(os.path.join(root, name), "rb") for root, _, files in os.walk(run_dir) for name in files}
        self.assertEqual(after, before)

    def test_a_longer_resume_says_the_schedule_is_replanned(self):
        # Issue 35: --resume RUN --epochs 4 re-plans the cosine over the new length, so the rate jumps from
        # the decayed end back up; the start says so, with both rates.
        run_dir = self.path("longer")
        shutil.copytree(self.reference, run_dir)
        result = run("train", "--resume", run_dir, "--epochs", "4")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertRegex(result.stderr, r"the run's length changed \(3 -> 4 epochs\): its cosine schedule is "
                                        r"re-planned over 128 updates where the run planned 96 updates, so update 97 trains "
                                        r"at [0-9.e-]+ where the plan had 0; to keep the planned schedule, add "
                                        r"--schedule-length 96u \(past its end the rate holds its final value, "
                                        r"0: those updates would not train\)")
        # Resumed as planned, nothing is said.
        again = run("train", "--resume", run_dir)
        self.assertNotIn("re-planned", again.stderr)
        # As the line advises: the schedule the run planned, its end's rate held past it.
        kept = self.path("longer-kept")
        shutil.copytree(self.reference, kept)
        result = run("train", "--resume", kept, "--epochs", "4", "--schedule-length", "96u")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertNotIn("re-planned", result.stderr)
        rates = {r["step"]: r["lr"] for r in metrics(kept) if "lr" in r and "event" not in r}
        self.assertEqual(max(rates), 128)
        self.assertEqual({rates[step] for step in range(97, 129)}, {0.0})

    def assert_resume_error(self, run_dir, *extra, fragment):
        self.assert_error(run("train", "--resume", run_dir, *extra), fragment)

    def test_mismatched_and_damaged_checkpoints_are_clear_errors(self):
        step = int(checkpoints(self.reference)[-1].split("_")[1])
        run_dir = self.copy_of_reference_at("mismatch", step)
        self.assert_resume_error(run_dir, "--global-batch", "256", fragment="global_batch_size = 128")
        self.assert_resume_error(run_dir, "--model", "mlp", fragment='model = "cnn"')
        self.assert_resume_error(run_dir, "--out", self.path("elsewhere"), fragment="--out cannot move")
        self.assert_resume_error(self.path("nowhere"), fragment="is not a directory")
        empty = self.path("empty-run")
        os.makedirs(empty)
        self.assert_resume_error(empty, fragment="has no complete checkpoint")
        state_path = os.path.join(run_dir, "checkpoints", checkpoints(run_dir)[-1], "state.json")
        state = json.loads(read(state_path))
        damaged = json.loads(json.dumps(state))
        damaged["progress"]["recent_losses"] = [0.5, "x"]
        with open(state_path, "w") as f:
            json.dump(damaged, f)
        self.assert_resume_error(run_dir, fragment='progress.recent_losses that holds "x", not a finite number')
        damaged["progress"]["recent_losses"] = [0.5]
        damaged["progress"]["bad_in_a_row"] = damaged["progress"]["skipped_updates"] + 1
        with open(state_path, "w") as f:
            json.dump(damaged, f)
        self.assert_resume_error(run_dir, fragment="progress.bad_in_a_row that is past progress.skipped_updates")
        state["format_version"] = 99
        with open(state_path, "w") as f:
            json.dump(state, f)
        self.assert_resume_error(run_dir, fragment="format version 99")
        with open(state_path, "w") as f:
            f.write("{ cut short")
        self.assert_resume_error(run_dir, fragment="unreadable state.json")

    def test_non_finite_updates_are_skipped_then_stop_the_run_with_a_checkpoint(self):
        run_dir = self.path("diverged")
        small = ["--model", "mlp", "--train-subset", "2000", "--global-batch", "128", "--epochs", "2",
                 "--threads", "1", "--progress", "off"]
        result = run("train", *small, "--lr", "1e9", "--max-bad-updates", "3", "--out", run_dir)
        self.assertEqual(result.returncode, 4, result.stderr)
        self.assertIn("bigbatch: error[diverged]: 3 updates in a row were skipped (3 to 5: a non-finite loss or gradient",
                      result.stderr)
        self.assertIn("no checkpoint came before them, so the weights before update 3", result.stderr)
        # The fix in this run's numbers: its peak rate, a quarter of it, its warmup, clipping.
        self.assertIn("lower the peak rate (1e+09), e.g. --lr 2.5e+08", result.stderr)
        self.assertIn("--warmup, now 0 updates", result.stderr)
        self.assertIn("--clip-norm 1", result.stderr)
        self.assertIn(f"'bigbatch train --resume {run_dir} --lr 2.5e+08' continues from update 5 (whose loss had "
                      "already risen: a new run is the safer fix)", result.stderr)
        self.assertEqual(result.stderr.count("skipped: loss is not finite"), 3)
        updates = [r for r in metrics(run_dir) if "loss" in r]
        self.assertEqual([r["skipped"] for r in updates[-3:]], [True] * 3)
        self.assertEqual(updates[-1]["skipped_updates"], 3)
        self.assertEqual(checkpoints(run_dir), [f"step_{updates[-1]['step']:06d}"])
        # The checkpoint is complete and resumable (these weights were already ruined by the
        # two finite updates at rate 1e9, so the resumed run diverges again, as it should).
        resumed = run("train", "--resume", run_dir, "--lr", "0.05")
        self.assertIn("resumed from", resumed.stderr)
        self.assertEqual(resumed.returncode, 4, resumed.stderr)

    def test_a_rising_loss_is_caught_early_and_the_last_good_checkpoint_kept(self):
        # The README's first mlp example (issue 20): 0.8 at a batch of 1024 climbs from a loss of
        # ~1 to 4e25 in a few updates, then goes non-finite. Where its loss first spikes depends
        # on the BLAS kernels the CPU gets (update 62 with OpenBLAS's SkylakeX kernels, 46 with
        # its Cooperlake ones on an AMD EPYC), so a first run finds it, and the checkpoint
        # cadence is set to come three updates before it. (One thread: the same run update for
        # update, so the spike comes at the same update in every run below.)
        recipe = ["--model", "mlp", "--global-batch", "1024", "--micro-batch", "64", "--lr", "0.05",
                  "--lr-ref-batch", "64", "--lr-scaling", "linear", "--warmup", "2e", "--epochs", "5",
                  "--threads", "1", "--progress", "off"]
        probe = self.path("probe")
        result = run("train", *recipe, "--out", probe)
        self.assertEqual(result.returncode, 4, result.stderr)
        first = [r for r in metrics(probe) if r.get("loss_spike")][0]["step"]
        self.assertGreater(first, 12)  # room for a checkpoint well before it
        kept = first - 3
        diverging = recipe + ["--checkpoint-every", f"{kept}u"]
        run_dir = self.path("spiking")
        result = run("train", *diverging, "--out", run_dir)
        self.assertEqual(result.returncode, 4, result.stderr)
        self.assertRegex(result.stderr, rf"warning: update {first} skipped: loss [\d.]+ is [\d.]+x the median of "
                                        r"the last 32 applied updates \([\d.]+\) \(1 in a row\)")
        self.assertIn("5 updates in a row were skipped", result.stderr)
        self.assertIn("a loss over 10x the recent median", result.stderr)
        # The checkpoint before the rise is the newest: no checkpoint was written while updates
        # were skipped, nor at the divergence.
        self.assertIn(f"the newest checkpoint, at update {kept}, is from before them and is kept", result.stderr)
        self.assertIn(f"'bigbatch train --resume {run_dir} --lr 0.0125' continues from update {kept}", result.stderr)
        self.assertEqual(checkpoints(run_dir), [f"step_{kept:06d}"])
        updates = [r for r in metrics(run_dir) if "loss" in r and "step" in r and "epoch" in r]
        applied = [r for r in updates if not r["skipped"]]
        spikes = [r for r in updates if r.get("loss_spike")]
        self.assertEqual(len(spikes), 5)
        self.assertTrue(all(r["skipped"] for r in spikes))
        # Stopped an order of magnitude above the usual loss, not at 4e25.
        self.assertLess(max(r["loss"] for r in applied), 20)
        event = [e for e in metrics(run_dir) if e.get("event") == "diverged"][-1]
        self.assertEqual(event["checkpoint_step"], kept)
        # The diverged run has its report, which says so first.
        self.assertIn("report: " + os.path.join(run_dir, "report.html"), result.stderr)
        report = read(os.path.join(run_dir, "report.html"))
        self.assertIn("This run <b>diverged</b> at update", report)
        self.assertIn("skipped updates</th><td>5 (5 loss spikes, 0 non-finite)", report)
        # The advice works: from the kept checkpoint at a quarter of the rate the run trains on.
        resumed = run("train", "--resume", run_dir, "--lr", "0.0125")
        self.assertEqual(resumed.returncode, 0, resumed.stderr)
        self.assertIn("resumed from " + os.path.join(run_dir, "checkpoints", f"step_{kept:06d}"), resumed.stderr)
        self.assertGreater([e for e in metrics(run_dir) if "test_accuracy" in e][-1]["test_accuracy"], 0.8)
        # A checkpoint at the update just before the first spike holds the weights whose loss
        # spiked (an update's loss is that of the weights before it): it is not called good, and
        # the untouched weights are written with the guard's memory cleared.
        self.assertEqual(spikes[0]["step"], first)
        just_before = self.path("just-before")
        result = run("train", *diverging[:-1], f"{first - 1}u", "--out", just_before)
        self.assertEqual(result.returncode, 4, result.stderr)
        self.assertIn(f"({first} to {first + 4}:", result.stderr)
        self.assertIn("the newest checkpoint holds weights whose loss had already risen, so the weights before "
                      f"update {first} (untouched by the skipped ones) are checkpointed", result.stderr)
        self.assertEqual(checkpoints(just_before), [f"step_{first - 1:06d}", f"step_{first + 4:06d}"])
        state = json.loads(read(os.path.join(just_before, "checkpoints", f"step_{first + 4:06d}", "state.json")))
        self.assertEqual((state["progress"]["bad_in_a_row"], state["progress"]["recent_losses"]), (0, []))
        self.assertEqual(state["progress"]["skipped_updates"], 5)
        # Without the guard the same run runs on until the loss is not finite.
        unguarded = self.path("unguarded")
        result = run("train", *diverging, "--spike-factor", "0", "--out", unguarded)
        self.assertEqual(result.returncode, 4, result.stderr)
        self.assertRegex(result.stderr, r"skipped: (loss|gradient) is not finite")
        self.assertNotIn("x the median", result.stderr)
        self.assertGreater(max(r["loss"] for r in metrics(unguarded) if r.get("loss") is not None
                               and "epoch" in r and "step" in r and not r["skipped"]), 1e6)

    def test_mid_window_checkpoints_resume_bit_identical_or_replay_under_a_new_plan(self):
        small = ["--model", "mlp", "--hidden", "64", "--train-subset", "2000", "--global-batch", "128",
                 "--micro-batch", "16", "--epochs", "2", "--threads", "1", "--progress", "off"]
        plain = self.path("mid-plain")
        run("train", *small, "--out", plain, check=True)
        checkpointed = self.path("mid-checkpointed")
        run("train", *small, "--checkpoint-every", "5micro", "--keep-checkpoints", "1000", "--out", checkpointed,
            check=True)
        # Checkpointing itself changes nothing.
        self.assertEqual(read(os.path.join(plain, "weights.safetensors"), "rb"),
                         read(os.path.join(checkpointed, "weights.safetensors"), "rb"))
        # The cadence keeps its period: every 5 micro-steps of the 8 per update, one that falls on
        # a window's end written at that update boundary (it used to wait a micro-step and
        # restart the period from there).
        expected = [f"step_{m // 8:06d}" + (f"_{m % 8:04d}" if m % 8 else "") for m in range(5, 80, 5)]
        self.assertEqual([c for c in checkpoints(checkpointed) if int(c.split("_")[1]) < 10], expected)
        inside = [c for c in checkpoints(checkpointed) if c.count("_") == 2]
        self.assertGreater(len(inside), 20)
        for i, name in enumerate(random.Random(3).sample(inside, 3)):
            run_dir = self.path(f"mid-resume-{i}")
            shutil.copytree(checkpointed, run_dir)
            for other in checkpoints(run_dir):
                if other != name:
                    shutil.rmtree(os.path.join(run_dir, "checkpoints", other))
            os.remove(os.path.join(run_dir, "weights.safetensors"))
            state = json.loads(read(os.path.join(run_dir, "checkpoints", name, "state.json")))
            self.assertGreater(state["progress"]["micro_step"], 0)
            self.assertTrue(os.path.exists(os.path.join(run_dir, "checkpoints", name, "window.safetensors")))
            extra = ["--micro-batch", "32"] if i == 2 else []
            result = run("train", "--resume", run_dir, *extra)
            self.assertEqual(result.returncode, 0, result.stderr)
            if i < 2:
                self.assertEqual(read(os.path.join(run_dir, "weights.safetensors"), "rb"),
                                 read(os.path.join(plain, "weights.safetensors"), "rb"), name)
            else:
                self.assertIn("replayed from its start with the new plan", result.stderr)
                self.assertAlmostEqual(metrics(run_dir)[-1]["test_loss"], metrics(plain)[-1]["test_loss"], delta=1e-4)

    def test_disk_full_is_a_clear_error_and_earlier_checkpoints_stay_intact(self):
        mount_point = self.path("small-disk")
        os.makedirs(mount_point)
        # A 700 kB file system: room for one checkpoint of this mlp (~415 kB), not two.
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=700k", "tmpfs", mount_point],
                                 capture_output=True)
        if mounted.returncode != 0:
            self.skipTest("cannot mount a small tmpfs here (needs root)")
        try:
            run_dir = os.path.join(mount_point, "run")
            small = ["--model", "mlp", "--hidden", "64", "--train-subset", "2000", "--global-batch", "128",
                     "--epochs", "2", "--threads", "1", "--progress", "off", "--checkpoint-every", "4u"]
            result = run("train", *small, "--out", run_dir)
            self.assert_one_line_error(result, "io", "No space left on device")
            self.assertEqual(checkpoints(run_dir), ["step_000004"])
            self.assert_checkpoints_complete(run_dir)
            leftovers = [d for d in os.listdir(os.path.join(run_dir, "checkpoints")) if d.startswith(".tmp")]
            self.assertEqual(leftovers, [])
            # metrics.jsonl ends with a whole record: a write cut short by the full disk is cut back.
            text = read(os.path.join(run_dir, "metrics.jsonl"))
            self.assertTrue(text.endswith("\n"), text[-200:])
            for line in text.splitlines():
                json.loads(line)
            # A new run on a disk with no room left fails at its start and leaves nothing.
            filler = os.open(os.path.join(mount_point, "filler"), os.O_WRONLY | os.O_CREAT)
            try:
                while True:
                    os.write(filler, b"\0" * 4096)
            except OSError:
                pass
            finally:
                os.close(filler)
            fresh = os.path.join(mount_point, "fresh")
            self.assert_one_line_error(run("train", *small, "--out", fresh), "io", "No space left on device")
            self.assertFalse(os.path.exists(fresh))
            os.remove(os.path.join(mount_point, "filler"))
            # The surviving checkpoint resumes (on a disk with room).
            rescued = self.path("rescued")
            shutil.copytree(run_dir, rescued)
        finally:
            subprocess.run(["umount", mount_point], check=True)
        resumed = run("train", "--resume", rescued)
        self.assertEqual(resumed.returncode, 0, resumed.stderr)

    def kill_at_a_checkpoint_then_resume(self, tag, args, pause=0.0):
        """Runs `args` whole, and again killed (-9) `pause` s after its first checkpoint then
        resumed; asserts the two end with the same weights and returns their run directories."""
        whole = self.path(f"{tag}-whole")
        run("train", *args, "--out", whole, check=True)
        run_dir = self.path(f"{tag}-killed")
        process = start("train", *args, "--out", run_dir)
        self.assertTrue(self.wait_for_checkpoint(run_dir, process))
        time.sleep(pause)
        process.kill()
        process.communicate()
        resumed = run("train", "--resume", run_dir)
        self.assertEqual(resumed.returncode, 0, resumed.stderr)
        self.assertEqual(read(os.path.join(run_dir, "weights.safetensors"), "rb"),
                         read(os.path.join(whole, "weights.safetensors"), "rb"), tag)
        return whole, run_dir

    def test_layerwise_optimizer_state_resumes_bit_identical(self):
        # LARS's momentum and LAMB's moments and step counts live in the checkpoint too.
        for optimizer, lr in [("lars", "1.0"), ("lamb", "0.002")]:
            self.kill_at_a_checkpoint_then_resume(optimizer,
                                                  [*RUN, "--optimizer", optimizer, "--lr", lr, "--epochs", "2"])

    def test_adascale_resumes_bit_identical(self):
        # The scale-invariant count and the noise averages that set the gain are progress too.
        whole, run_dir = self.kill_at_a_checkpoint_then_resume(
            "adascale", [*RUN, "--lr-scaling", "adascale", "--lr-ref-batch", "32", "--lr", "0.05", "--epochs", "1"])
        self.assertEqual(comparable(metrics(run_dir)), comparable(metrics(whole)))
        self.assertTrue(any("lr_gain" in r for r in metrics(run_dir)))

    def test_batch_ramp_resumes_bit_identical_inside_a_window_and_a_phase(self):
        # The position in the epoch (no longer update x batch once the batch grows) is progress too;
        # checkpoints every 5 micro-steps fall inside windows of every phase.
        args = [a for a in RUN if a not in ("--global-batch", "128", "--checkpoint-every", "4u")]
        args += ["--global-batch-schedule", "0:64 3000s:256 1.5e:512", "--epochs", "2", "--checkpoint-every", "5micro"]
        whole = self.path("ramp-whole")
        run("train", *args, "--out", whole, check=True)
        run_dir = self.path("ramp-killed")
        self.assertEqual(kill_and_resume(args, run_dir, seed=11), 0)
        self.assertEqual(read(os.path.join(run_dir, "weights.safetensors"), "rb"),
                         read(os.path.join(whole, "weights.safetensors"), "rb"))
        self.assertEqual(comparable(metrics(run_dir)), comparable(metrics(whole)))
        self.assertEqual(sorted({r["global_batch"] for r in metrics(whole) if "loss" in r}), [64, 256, 512])

    def test_window_batch_norm_resumes_bit_identical_from_inside_a_window(self):
        # Checkpoints inside windows must hold the running statistics, not the window's, and the
        # resumed window measures its statistics again from the same samples and weights.
        args = [a for a in RUN if a not in ("--checkpoint-every", "4u")]
        args += ["--model", "cnn-bn", "--bn-mode", "window", "--epochs", "1", "--checkpoint-every", "3micro"]
        whole, run_dir = self.kill_at_a_checkpoint_then_resume("bnwindow", args, pause=1.0)
        self.assertEqual(comparable(metrics(run_dir)), comparable(metrics(whole)))

    def test_keeps_the_newest_checkpoints(self):
        names = checkpoints(self.reference)
        self.assertEqual(len(names), 3)
        total = [r for r in metrics(self.reference) if "loss" in r][-1]["step"]
        self.assertEqual(names[-1], f"step_{total:06d}")  # one at the end


if __name__ == "__main__":
    main(verbosity=2)
