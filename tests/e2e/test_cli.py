#!/usr/bin/python3
"""End-to-end tests of the bigbatch binary: real CLI, real Fashion-MNIST (small subsets), real
files. Usage: test_cli.py BIGBATCH_BINARY [unittest arguments]."""
import functools
import json
import math
import os
import re
import shutil
import struct
import time

import e2e_common
from e2e_common import CliTestCase, main, max_relative_difference, read, read_weights, records

FASHION = "/usr/share/datasets/fashion-mnist"
SMALL = ["--model", "mlp", "--hidden", "64", "--train-subset", "512", "--global-batch", "128",
         "--micro-batch", "32", "--epochs", "2", "--threads", "1", "--progress", "off"]
run = functools.partial(e2e_common.run, timeout=300)  # this module's limit on a command


class PlanTest(CliTestCase):
    def test_seed_example(self):
        out = run("plan", "--dataset-size", "1000", "--micro-batch", "10", "--accum-steps", "5", check=True).stdout
        self.assertRegex(out, r"global batch \(effective\)\s+50\s+\(derived\)")
        self.assertRegex(out, r"micro-steps \(fwd/bwd passes\)\s+100")
        self.assertRegex(out, r"updates\s+20\n")
        self.assertRegex(out, r"one direct batch\s+20 passes per epoch")

    def test_plan_config_plans_exactly_what_train_runs(self):
        config = self.path("run.toml")
        with open(config, "w") as f:
            f.write('model = "mlp"\nhidden = [32]\ntrain-subset = 3000\nval-size = 500\nglobal-batch = 256\n'
                    'micro-batch = 64\nlr = 0.1\nwarmup = "1e"\nepochs = 3\nmax-updates = 1\n'
                    'out = "ignored-by-plan"\n')
        out = self.path("run")
        trained = run("train", "--config", config, "--out", out, "--progress", "off")
        self.assertEqual(trained.returncode, 0, trained.stderr)
        with open(os.path.join(out, "plan.txt")) as f:
            written = f.read()
        # The TOML file, and the run's own config.toml, plan to the byte what train ran.
        for source in (config, os.path.join(out, "config.toml")):
            planned = run("plan", "--config", source)
            self.assertEqual(planned.returncode, 0, planned.stderr)
            self.assertEqual(planned.stdout, written)
            self.assertIn("fashion-mnist: 2500 training samples", planned.stderr)
        # A train command line plans as it is; flags that cannot change the plan are said.
        same = run("plan", "--model", "mlp", "--hidden", "32", "--train-subset", "3000", "--val-size", "500",
                   "--global-batch", "256", "--micro-batch", "64", "--lr", "0.1", "--warmup", "1e", "--epochs", "3",
                   "--max-updates", "1", "--out", "x", "--threads", "1")
        self.assertEqual(same.stdout, written)
        self.assertIn("plan: --out does not change the plan (ignored)", same.stderr)
        self.assertIn("plan: --threads does not change the plan (ignored)", same.stderr)
        self.assertNotIn("--seed does not change", run("plan", "--seed", "3").stderr)
        self.assert_one_line_error(run("plan", "--resume", out), "usage", "plan --config RUN/config.toml")
        # The default rate, scaled to 512, which config.toml writes out with its batch and rule.
        scaled = self.path("scaled")
        flags = ["--model", "mlp", "--hidden", "32", "--train-subset", "3000", "--global-batch", "512",
                 "--max-updates", "1"]
        run("train", *flags, "--out", scaled, "--progress", "off", check=True)
        with open(os.path.join(scaled, "plan.txt")) as f:
            written = f.read()
        self.assertIn("lr 0.05 @ 256 (the default rate's batch) -> 0.0707107 @ 512 (sqrt)", written)
        self.assertEqual(run("plan", *flags, check=True).stdout, written)
        self.assertEqual(run("plan", "--config", os.path.join(scaled, "config.toml"), check=True).stdout, written)
        toml = open(os.path.join(scaled, "config.toml")).read()
        self.assertIn("lr = 0.05\nlr-ref-batch = 256\nlr-scaling = 'sqrt'\n", toml)

    def test_json(self):
        out = run("plan", "--dataset-size", "1000", "--micro-batch", "10", "--accum-steps", "5", "--json",
                  check=True).stdout
        plan = json.loads(out)
        for key in ["global_batch_size", "micro_batch_size", "accumulation_steps", "world_size",
                    "micro_steps_per_epoch", "updates_per_epoch", "lr", "warmup_updates"]:
            self.assertIn(key, plan)
        self.assertEqual((plan["global_batch_size"], plan["micro_steps_per_epoch"], plan["updates_per_epoch"]),
                         (50, 100, 20))

    def test_lr_rule_and_warmup_in_updates(self):
        plan = json.loads(run("plan", "--global-batch", "1024", "--micro-batch", "64", "--lr", "0.05",
                              "--lr-ref-batch", "64", "--lr-scaling", "linear", "--warmup", "2e", "--json",
                              check=True).stdout)
        self.assertAlmostEqual(plan["lr"], 0.8)
        self.assertEqual(plan["accumulation_steps"], 16)
        self.assertEqual(plan["updates_per_epoch"], 59)  # 58 x 1024 + 608
        self.assertEqual(plan["warmup_updates"], 118)

    def test_warns_past_1024_without_warmup(self):
        result = run("plan", "--global-batch", "2048", "--lr-scaling", "linear", "--lr-ref-batch", "256", check=True)
        self.assertIn("warning: global batch 2048 with the linear scaling rule and no warmup", result.stdout)

    def test_world_size_keeps_the_global_batch(self):
        plan = json.loads(run("plan", "--global-batch", "1024", "--micro-batch", "32", "--world-size", "4",
                              "--json", check=True).stdout)
        self.assertEqual((plan["accumulation_steps"], plan["world_size"]), (8, 4))

    def test_bad_plans_are_one_line_errors(self):
        self.assert_error(run("plan", "--global-batch", "256", "--micro-batch", "32", "--accum-steps", "4"),
                          "256 != micro 32 x accumulation 4")
        self.assert_error(run("plan", "--global-batch", "1000", "--accum-steps", "64"),
                          "--global-batch 960 or --global-batch 1024")
        self.assert_error(run("plan", "--micro-batch", "0"), "--micro-batch must be a positive integer")
        self.assert_error(run("plan", "--micro-batch", "-3"), "--micro-batch must be a positive integer")
        self.assert_error(run("plan", "--dataset-size", "10", "--micro-batch", "64"),
                          "larger than the dataset")
        self.assert_error(run("plan", "--warmup", "12"), "has no unit")
        self.assert_error(run("plan", "--micro-batch", "many"))
        for size in ("1e20", "-5", "6e4"):
            with self.subTest(size=size):
                self.assert_one_line_error(run("plan", "--dataset-size", size), "usage",
                                           "--dataset-size: must be a whole number of samples", f"got '{size}'")


class TrainTest(CliTestCase):
    def test_auto_threads_with_one_cpu_says_so(self):
        # Issue 20: under a launcher (OMP_NUM_THREADS=1) auto threads printed
        # "threads: 1 (measured per micro-step:)" with nothing measured.
        small = [a for a in SMALL if a not in ("--threads", "1")] + ["--threads", "0", "--max-updates", "1"]
        result = run("train", *small, "--out", self.path("one"), check=True,
                     env=dict(os.environ, OMP_NUM_THREADS="1"))
        self.assertIn("threads: 1 (one CPU available to this process", result.stderr)
        self.assertNotIn("measured per micro-step:)", result.stderr)
        # One of a thing is not plural (issue 35: "after 1 updates").
        self.assertRegex(result.stdout, r"\) after 1 update, 128 samples; training \S+ at \S+ samples/s, \S+ in all\n")
        # And as it was found: under the launcher itself, which gives each worker one thread.
        launched = run("launch", "--nproc", "2", "--", e2e_common.BINARY, "train", *small, "--out",
                       self.path("launched"), check=True)
        self.assertIn("[rank 0] threads: 1 (one CPU available to this process", launched.stderr)
        self.assertNotIn("measured per micro-step:)", launched.stderr)

    def test_help_comes_in_sections_fits_80_columns_and_shows_every_default(self):
        # Issue 20: one flat list of 62 flags, 43 lines wider than 80 columns, defaults missing.
        text = run("train", "--help", check=True).stdout
        for section in ["Model:", "Data:", "Batch:", "Optimisation and learning rate:", "Run length:",
                        "Device, memory and CPU:", "Checkpoints and resume:", "Distributed:", "Output:"]:
            self.assertIn("\n" + section, text)
        self.assertNotIn("\nOther:", text)  # every option has its section
        wide = [line for line in text.splitlines() if len(line) > 80]
        self.assertEqual(wide, [])
        flat = " ".join(text.split())
        for default in ["(default: 256)", "(default: 32, or derived)", "(default: derived from the other two)",
                        "(default: none; --epochs decides)", "(default: none; one at the end of a resumed run)"]:
            self.assertIn(default, flat)
        self.assertIn("bigbatch's default, not PyTorch's", flat)  # --nesterov says so
        # --threads says what auto measures: 1 against all the CPUs, by a timed micro-step.
        self.assertIn("(0: auto, 1 or all the CPUs this process may use, whichever a timed micro-step finds "
                      "faster; never more than those CPUs)", flat)

    def test_help_and_misspelt_subcommands(self):
        self.assertIn("Usage:", run("help", check=True).stdout)
        # The libtorch it runs (issue 59 item 1): what decides which TorchScript files load.
        self.assertRegex(run("--version", check=True).stdout, r"^bigbatch [0-9.]+ \(libtorch [0-9]+\.[0-9]+\.[0-9]+"
                                                             r"( with CUDA)?\)\n$")
        self.assertIn("bigbatch plan", run("help", "plan", check=True).stdout.replace("build/", ""))
        for words in (["trian"], ["help", "trian"]):
            result = run(*words)
            self.assertEqual(result.returncode, 2)
            self.assertIn("'trian' is not a subcommand; did you mean 'train'?", result.stderr)
        # Arguments it does not take are named in the order they were typed (CLI11 reverses them).
        result = run("train", "--gpus", "2")
        self.assertEqual(result.returncode, 2)
        self.assertIn("bigbatch: error[usage]: arguments not expected: --gpus 2;", result.stderr)
        self.assertEqual(len(result.stderr.strip().splitlines()), 1)
        result = run("plan", "--model", "mlp", "extra1", "--global-batch", "64", "extra2")
        self.assertIn("arguments not expected: extra1 extra2;", result.stderr)

    def test_launch_takes_torchruns_spellings(self):
        result = run("launch", "--nproc-per-node", "2", "--rdzv-endpoint", "127.0.0.1:29557", "--", "/bin/sh",
                     "-c", "echo $WORLD_SIZE $MASTER_ADDR:$MASTER_PORT", check=True)
        self.assertIn("[rank 1] 2 127.0.0.1:29557", result.stdout)
        bad = run("launch", "--nproc", "1", "--rdzv-endpoint", "nowhere", "--", "true")
        self.assertEqual(bad.returncode, 2)
        self.assertIn("--rdzv-endpoint: must be HOST:PORT", bad.stderr)
        self.assertNotIn("did you mean", bad.stderr)  # a known flag with a bad value
        # torchrun's bracketed IPv6 form: the brackets are not part of the address.
        result = run("launch", "--nproc", "1", "--rdzv-endpoint", "[::1]:29558", "--", "/bin/sh", "-c",
                     "echo $MASTER_ADDR:$MASTER_PORT", check=True)
        self.assertIn("::1:29558", result.stdout)
        self.assertNotIn("[", result.stdout.replace("[rank 0]", ""))

    def test_a_flag_given_twice_takes_the_last_and_says_so(self):
        result = run("plan", "--model", "mlp", "--dataset-size", "6000", "--global-batch", "64", "--lr", "0.1",
                     "--lr", "0.2", "--json", check=True)
        self.assertIn("bigbatch: warning: --lr is given 2 times (0.1, 0.2): the last, 0.2, is used", result.stderr)
        self.assertAlmostEqual(json.loads(result.stdout)["base_lr"], 0.2)

    def test_thread_counts_beyond_the_cpus_are_capped_and_said(self):
        # Issue 21: OMP_NUM_THREADS=100000 printed nothing for 420 s; 1000 made a 0.1 s job 53 s.
        cpus = len(os.sched_getaffinity(0))
        small = [a for a in SMALL if a not in ("--threads", "1")] + ["--max-updates", "1"]
        auto = run("train", *small, "--threads", "0", "--out", self.path("omp"), check=True,
                   env=dict(os.environ, OMP_NUM_THREADS="100000"))
        self.assertIn(f"warning: 100000 threads (OMP_NUM_THREADS) capped at the {cpus} CPUs", auto.stderr)
        given = run("train", *small, "--threads", "1000", "--out", self.path("flag"), check=True)
        self.assertIn(f"warning: 1000 threads (--threads) capped at the {cpus} CPUs", given.stderr)
        self.assertIn(f"threads: {cpus} (--threads)", given.stderr)

    def test_no_scaling_warning_when_nothing_was_scaled(self):
        # Issue 20: "past ~1024 diverges" was printed for lr 0.05 @ 4096 -> 0.05 @ 4096.
        # A rate given without --lr-ref-batch is tuned at the given batch: nothing is scaled.
        result = run("plan", "--global-batch", "4096", "--micro-batch", "64", "--lr", "0.05", "--lr-scaling",
                     "linear", check=True)
        self.assertNotIn("past ~1024", result.stdout + result.stderr)
        self.assertNotIn("warning", result.stdout + result.stderr)
        self.assertIn("lr 0.05 @ 4096 (--lr taken as tuned at this batch; --lr-ref-batch B scales it from B) -> 0.05 @ "
                      "4096 (linear)", result.stdout)
        # The default rate carries the batch it was tuned at (issue 35): 16x the batch is
        # scaled, and warned as past what the rules held here.
        default = run("plan", "--global-batch", "4096", "--micro-batch", "64", check=True)
        self.assertIn("lr 0.05 @ 256 (the default rate's batch) -> 0.2 @ 4096 (sqrt)", default.stdout)
        self.assertIn("past 4x no rule beat the unscaled rate for the built-in image models with SGD here",
                      " ".join((default.stdout + default.stderr).split()))
        # Its warning is broken between words at 100 columns, under the text (issue 59 item 6).
        self.assertLessEqual(max(len(line) for line in default.stdout.splitlines()), 100, default.stdout)
        self.assertRegex(default.stdout, r"\nwarning: .*\n {9}\S")
        scaled = run("train", *SMALL, "--global-batch", "2048", "--lr-ref-batch", "64", "--lr-scaling",
                     "linear", "--max-updates", "0", "--out", self.path("scaled"), check=True)
        self.assertIn("past ~1024", scaled.stderr)
        # A scaled rate is shown to the digits that matter (it was 0.05656854249492381).
        rooted = run("plan", "--global-batch", "512", "--lr-ref-batch", "256", "--lr-scaling", "sqrt",
                     check=True)
        self.assertIn("lr 0.05 @ 256 (the default rate's batch) -> 0.0707107 @ 512 (sqrt)", rooted.stdout)

    def test_small_run_writes_every_file(self):
        out = self.path("run")
        result = run("train", *SMALL, "--val-size", "64", "--out", out, check=True)
        self.assertIn("test accuracy", result.stdout)
        for name in ["config.toml", "plan.txt", "metrics.jsonl", "weights.safetensors", "report.html"]:
            self.assertTrue(os.path.exists(os.path.join(out, name)), name)
        records = [json.loads(line) for line in read(os.path.join(out, "metrics.jsonl")).splitlines()]
        updates = [r for r in records if "loss" in r]
        epochs = [r for r in records if "test_accuracy" in r]
        # 448 training samples at 128: 3 full updates and one of 64, for 2 epochs.
        self.assertEqual(len(updates), 8)
        self.assertEqual([u["step"] for u in updates], list(range(1, 9)))
        self.assertEqual(updates[3]["items"], 64)
        self.assertEqual(updates[-1]["samples_seen"], 2 * 448)
        for key in ["step", "epoch", "samples_seen", "loss", "lr", "grad_norm", "samples_per_s"]:
            self.assertIn(key, updates[0])
        self.assertEqual(len(epochs), 2)
        for key in ["epoch", "train_loss", "train_accuracy", "test_loss", "test_accuracy", "val_loss",
                    "val_accuracy"]:
            self.assertIn(key, epochs[-1])
        self.assertGreater(epochs[-1]["test_accuracy"], 0.5)
        self.assertIn("accumulation steps           4", read(os.path.join(out, "plan.txt")))

    def test_gradient_noise_scale_is_measured_and_judged(self):
        out = self.path("gns")
        result = run("train", *SMALL, "--train-subset", "2048", "--progress", "lines", "--out", out, check=True)
        records = [json.loads(line) for line in read(os.path.join(out, "metrics.jsonl")).splitlines()]
        last = [r for r in records if "loss" in r][-1]
        self.assertGreater(last["grad_noise_scale"], 0)
        # A verdict with the estimate's range and the run's average, or, when the ends of the
        # range would judge the batch differently, the statement that it cannot judge.
        number = r"[\d.]+k?"
        self.assertRegex(result.stderr,
                         rf"(global batch of 128 samples is (well below|near|far above) the measured critical batch "
                         rf"\(gradient noise scale B_noise ~ {number} samples, averaged over all \d+ measured updates; "
                         rf"{number}-{number} samples within two standard errors; {number} samples averaged over "
                         rf"the run\)|B_noise ~ {number} samples over all \d+ measured updates, too noisy to judge whether "
                         rf"the global batch of 128 samples is (well below|near|far above) or (near|far above) the "
                         rf"critical batch \(({number}-{number}|at least {number}) samples within two standard errors)")
        self.assertRegex(result.stderr, r"B 128 B_noise \d+")
        # Without accumulation an update has only one batch size: nothing to measure, and it says so.
        single = self.path("single")
        result = run("train", *SMALL, "--micro-batch", "128", "--out", single, check=True)
        records = [json.loads(line) for line in read(os.path.join(single, "metrics.jsonl")).splitlines()]
        self.assertIsNone([r for r in records if "loss" in r][-1]["grad_noise_scale"])
        self.assertIn("gradient noise scale: not measured", result.stderr)
        # --no-noise-scale: nothing measured and nothing said of it (it gave the reason above).
        result = run("train", *SMALL, "--no-noise-scale", "--out", self.path("off"), check=True)
        self.assertNotIn("noise scale", result.stderr)

    def test_adamw_measures_the_noise_of_its_preconditioned_gradient(self):
        # AdamW's update direction is the gradient over sqrt(v) + eps: by default its noise scale
        # is measured on that (from the second update: the first has no second moment yet).
        noise = {}
        for form in ["auto", "raw"]:
            out = self.path("adamw-" + form)
            result = run("train", *SMALL, "--train-subset", "2048", "--optimizer", "adamw", "--lr", "0.001",
                         "--noise-gradient", form, "--out", out, check=True)
            records = [json.loads(line) for line in read(os.path.join(out, "metrics.jsonl")).splitlines()]
            updates = [r for r in records if "loss" in r]
            if form == "auto":
                self.assertIsNone(updates[0]["grad_noise_scale"])
            self.assertGreater(updates[-1]["grad_noise_scale"], 0)
            noise[form] = updates[-1]["grad_noise_scale"]
            said = "(of the preconditioned gradient, the update's direction: --noise-gradient)"
            (self.assertIn if form == "auto" else self.assertNotIn)(said, result.stderr)
            self.assertIn(f"noise-gradient = '{form}'", read(os.path.join(out, "config.toml")))
        # The same training (the measurement changes no weight), another gradient measured.
        self.assertNotAlmostEqual(noise["auto"], noise["raw"], places=3)
        # SGD has no preconditioner: asked for, it is one clear line.
        result = run("train", *SMALL, "--noise-gradient", "preconditioned", "--out", self.path("sgd"))
        self.assertEqual(result.returncode, 2)
        self.assertIn("--noise-gradient preconditioned measures the gradient times adamw's or lamb's "
                      "preconditioner, but the optimizer is sgd", result.stderr)

    def test_adascale_gain_drives_a_schedule_in_scale_invariant_updates(self):
        out = self.path("adascale")
        # Reference batch 32, global 256: S = 8; 2048 samples = 64 reference updates per epoch.
        result = run("train", *SMALL, "--train-subset", "2048", "--global-batch", "256", "--lr-scaling", "adascale",
                     "--lr-ref-batch", "32", "--lr", "0.05", "--epochs", "1", "--schedule", "cosine",
                     "--min-lr-factor", "0", "--out", out, check=True)
        records = [json.loads(line) for line in read(os.path.join(out, "metrics.jsonl")).splitlines()]
        updates = [r for r in records if "loss" in r]
        tau = 0.0
        for r in updates:
            self.assertGreaterEqual(r["lr_gain"], 1.0)
            self.assertLessEqual(r["lr_gain"], 8.0)
            # The update trains at gain x the reference schedule at floor(tau), then tau grows by the gain.
            expected = r["lr_gain"] * 0.05 * 0.5 * (1 + math.cos(math.pi * min(1.0, math.floor(tau) / 64)))
            self.assertAlmostEqual(r["lr"], expected, places=12)
            tau += r["lr_gain"]
            self.assertAlmostEqual(r["scale_invariant_step"], tau, places=9)
        # It ends at the first update that completes the 64 scale-invariant ones: between 8 and 64 updates.
        self.assertGreaterEqual(updates[-1]["scale_invariant_step"], 64 - 1e-9)
        self.assertLess(updates[-2]["scale_invariant_step"], 64)
        self.assertTrue(8 <= len(updates) <= 64, len(updates))
        self.assertGreater(max(r["lr_gain"] for r in updates), 1.0)  # measured, not fixed
        # The run is evaluated where it ends, also inside an epoch.
        epochs = [r for r in records if "test_accuracy" in r]
        self.assertEqual(epochs[-1]["step"], updates[-1]["step"])
        self.assertRegex(result.stderr, r"AdaScale: \d+ updates for [\d.]+ scale-invariant ones \(mean gain [\d.]+ of S = 8\)")
        plan = json.loads(run("plan", "--dataset-size", "2048", "--global-batch", "256", "--micro-batch", "32",
                              "--lr-scaling", "adascale", "--lr-ref-batch", "32", "--epochs", "1", "--json",
                              check=True).stdout)
        self.assertEqual((plan["scale_invariant_updates"], plan["adascale_scale"], plan["total_updates"]), (64, 8, 64))

    def test_global_batch_schedule_grows_accumulation_and_follows_the_rule(self):
        out = self.path("ramp")
        # 2048 samples per epoch; 128 until sample 3000 (24 updates: 2048 + 7 x 128 = 2944 < 3000), then 512
        # until the start of epoch 3, then 1024. The curve counts samples / 128; the peak is linear in the batch.
        ramp = "0:128 3000s:512 2e:1024"
        args = [a for a in SMALL if a not in ("--global-batch", "128")]
        result = run("train", *args, "--train-subset", "2048", "--micro-batch", "64", "--global-batch-schedule", ramp,
                     "--epochs", "4", "--schedule", "cosine", "--min-lr-factor", "0", "--warmup", "0.5e",
                     "--lr", "0.05", "--lr-scaling", "linear", "--progress", "lines", "--out", out, check=True)
        records = [json.loads(line) for line in read(os.path.join(out, "metrics.jsonl")).splitlines()]
        updates = [r for r in records if "loss" in r]
        changes = [r for r in records if r.get("event") == "batch_change"]
        # Each change is keyed by the first update at the new batch.
        self.assertEqual([(c["step"], c["global_batch"]) for c in changes], [(25, 512), (27, 1024)])
        self.assertEqual([r["global_batch"] for r in updates], [128] * 24 + [512] * 2 + [1024] * 4)
        self.assertEqual([r["micro_steps"] for r in updates], [2] * 16 + [2] * 8 + [8] * 2 + [16] * 4)
        # Epoch 2 switches at position 1024 of its order and ends with two windows of 512.
        self.assertEqual([r["items"] for r in updates[16:26]], [128] * 8 + [512, 512])
        self.assertEqual(sum(r["items"] for r in updates), 4 * 2048)
        seen = 0
        for r in updates:
            position = seen / 128
            warmup, total = 8, 64  # 0.5e of 2048 at 128; 4 x 2048 / 128
            curve = (position + 1) / warmup if position < warmup else \
                0.5 * (1 + math.cos(math.pi * min(1.0, (position - warmup) / (total - warmup))))
            self.assertAlmostEqual(r["lr"], 0.05 * r["global_batch"] / 128 * min(1.0, curve), places=12)
            seen += r["items"]
        self.assertIn("global batch 128 -> 512 = micro 64 x accumulation 8 x world 1 at update 25", result.stderr)
        # The rate's factors at the switch (issue 59 item 5): the curve at the reference batch times the rule's.
        switch = re.search(r"at update 25 \(\d+ samples seen\); lr now ([0-9.e-]+) = ([0-9.e-]+) \(the schedule at "
                           r"batch 128\) x 4 \(linear rule, 512 / 128\)", result.stderr)
        self.assertIsNotNone(switch, result.stderr)
        self.assertAlmostEqual(float(switch.group(1)), 4 * float(switch.group(2)), delta=1e-3 * float(switch.group(1)))
        plan = json.loads(run("plan", "--dataset-size", "2048", "--micro-batch", "64", "--global-batch-schedule", ramp,
                              "--epochs", "4", "--json", check=True).stdout)
        self.assertEqual([(p["global_batch"], p["updates"]) for p in plan["ramp_phases"]],
                         [(128, 24), (512, 2), (1024, 4)])

    def test_lr_scaling_auto_follows_the_optimizer(self):
        sgd = json.loads(run("plan", "--global-batch", "1024", "--lr-ref-batch", "256", "--lr", "0.1", "--json",
                             check=True).stdout)
        # The square root for SGD: what held here (issue 35); linear for LARS, its own rule.
        self.assertEqual((sgd["lr_scaling"], sgd["lr"]), ("sqrt", 0.2))
        lars = json.loads(run("plan", "--global-batch", "1024", "--lr-ref-batch", "256", "--lr", "0.1", "--optimizer",
                              "lars", "--json", check=True).stdout)
        self.assertEqual((lars["lr_scaling"], lars["lr"]), ("linear", 0.4))
        adam = json.loads(run("plan", "--global-batch", "1024", "--lr-ref-batch", "256", "--lr", "0.001",
                              "--optimizer", "adamw", "--adam-sqrt-adjust", "--json", check=True).stdout)
        self.assertEqual(adam["lr_scaling"], "sqrt")
        self.assertAlmostEqual(adam["lr"], 0.002)
        self.assertAlmostEqual(adam["adam_beta1"], 0.6)
        self.assertAlmostEqual(adam["adam_eps"], 5e-9)

    def test_report_command_rebuilds_the_report(self):
        out = self.path("run")
        result = run("train", *SMALL, "--out", out, check=True)
        self.assertIn(f"report: {out}/report.html", result.stderr)
        written = read(os.path.join(out, "report.html"))
        os.remove(os.path.join(out, "report.html"))
        result = run("report", out, check=True)
        self.assertEqual(result.stdout.strip(), f"{out}/report.html")
        self.assertEqual(read(os.path.join(out, "report.html")), written)
        self.assertEqual(written.count("<svg "), 9)
        self.assertIn("train (smoothed)", written)
        self.assert_error(run("report", self.path("missing")), "has no metrics.jsonl")

    def test_report_compares_runs_on_one_page(self):
        a, b = self.path("a"), self.path("b")
        run("train", *SMALL, "--val-size", "64", "--out", a, check=True)
        bigger = [("256" if value == "128" else value) for value in SMALL]  # --global-batch 256
        run("train", *bigger, "--val-size", "64", "--out", b, check=True)
        page = self.path("compare.html")
        result = run("report", a, b, "--out", page, check=True)
        self.assertEqual(result.stdout.strip(), page)
        html = read(page)
        # The table's final training loss is the smoothed curve's end: TensorBoard's debiased EMA.
        for run_dir in (a, b):
            losses = [r["loss"] for r in records(run_dir) if "loss" in r and "event" not in r]
            average, weight = 0.0, 1.0
            for loss in losses:
                average = 0.9 * average + (1 - 0.9) * loss
                weight *= 0.9
            row = html[html.index(run_dir + "</td>"):]
            self.assertIn(f"<td>{average / (1 - weight):.4g}</td>", row[:600])
            self.assertTrue(row.startswith(run_dir + "</td><td>mlp</td>"), row[:100])  # each run's model
        self.assertIn("global batch against samples", html)
        # Without --out, compare.html in the current directory; one run with --out is refused.
        run("report", a, b, cwd=self.dir, check=True)
        self.assertTrue(os.path.exists(os.path.join(self.dir, "compare.html")))
        self.assert_error(run("report", a, "--out", page), "--out names the page that compares two or more runs")
        self.assert_error(run("report", a, self.path("missing")), "has no metrics.jsonl, so there is nothing to compare")

    def test_config_file_reproduces_the_run_bit_for_bit(self):
        first = self.path("first")
        run("train", *SMALL, "--out", first, check=True)
        second = self.path("second")
        run("train", "--config", os.path.join(first, "config.toml"), "--out", second, check=True)
        self.assertEqual(read(os.path.join(first, "weights.safetensors"), "rb"),
                         read(os.path.join(second, "weights.safetensors"), "rb"))

    def test_flags_override_the_config_file(self):
        config = self.path("c.toml")
        with open(config, "w") as f:
            f.write('model = "mlp"\nhidden = [32]\ntrain-subset = 256\nglobal-batch = 64\nepochs = 1\n'
                    'threads = 1\nprogress = "off"\n')
        out = self.path("run")
        run("train", "--config", config, "--micro-batch", "16", "--out", out, check=True)
        self.assertIn("micro-batch = 16", read(os.path.join(out, "config.toml")))
        self.assertIn("accumulation steps           4", read(os.path.join(out, "plan.txt")))

    def test_max_updates_zero_writes_initial_weights(self):
        out = self.path("init")
        saved = self.path("copy.safetensors")
        run("train", *SMALL, "--max-updates", "0", "--out", out, "--save-weights", saved, check=True)
        self.assertEqual(read(os.path.join(out, "weights.safetensors"), "rb"), read(saved, "rb"))
        blob = read(saved, "rb")
        (n,) = struct.unpack("<Q", blob[:8])
        header = json.loads(blob[8:8 + n])
        self.assertEqual(header["1.weight"]["shape"], [64, 784])
        self.assertEqual(header["__metadata__"]["model"], "mlp")
        # Training from those weights equals training from the same seed.
        a, b = self.path("a"), self.path("b")
        run("train", *SMALL, "--out", a, check=True)
        run("train", *SMALL, "--init-weights", saved, "--seed", "42", "--out", b, check=True)
        self.assertEqual(read(os.path.join(a, "weights.safetensors"), "rb"),
                         read(os.path.join(b, "weights.safetensors"), "rb"))

    def test_the_device_is_said_recorded_and_repeated(self):
        # Issue 19: --device auto trains on the CPU where no GPU is visible; the start line and the
        # train_start record name the device, config.toml keeps the choice as given.
        out = self.path("auto")
        result = run("train", *SMALL, "--max-updates", "2", "--device", "auto", "--out", out, check=True)
        self.assertRegex(result.stderr, r"bigbatch: mlp on fashion-mnist \(.*\), device cpu, ")
        start = [json.loads(line) for line in read(os.path.join(out, "metrics.jsonl")).splitlines()
                 if '"train_start"' in line]
        self.assertEqual([r["device"] for r in start], ["cpu"])
        self.assertIn("device = 'auto'", read(os.path.join(out, "config.toml")))
        again = self.path("again")
        run("train", "--config", os.path.join(out, "config.toml"), "--out", again, check=True)
        self.assertEqual(read(os.path.join(out, "weights.safetensors"), "rb"),
                         read(os.path.join(again, "weights.safetensors"), "rb"))
        verified = run("verify", *SMALL, "--device", "cpu", check=True)
        self.assertIn("verify: mlp on cpu, update 1 of", verified.stdout)
        # The help names every choice.
        flat = " ".join(run("train", "--help", check=True).stdout.split())
        self.assertIn("--device cpu|cuda|cuda:N|auto", flat)

    def test_progress_lines_when_not_a_terminal(self):
        result = run("train", *SMALL[:-2], "--progress", "lines", "--out", self.path("p"), check=True)
        self.assertIn("epoch 2/2 update 4/4", result.stderr)
        self.assertNotIn("\r", result.stderr)
        self.assertIn("lr 0.05 @ 256 (the default rate's batch) -> 0.0353553 @ 128 (sqrt)",
                      result.stderr)
        # Each line carries its elapsed time (Slurm logs have no clock of their own).
        self.assertRegex(result.stderr, r"epoch 2/2 update 4/4 loss [\d.]+ .* elapsed \d+s ETA")
        # The start line says the optimizer in full, Nesterov's default included (issue 20).
        self.assertIn("optimizer: sgd, momentum 0.9, Nesterov (bigbatch's default; PyTorch's SGD default is plain "
                      "momentum: --no-nesterov), weight decay 0.0005", result.stderr)

    def test_the_bar_fits_the_terminal_and_follows_a_resize(self):
        # Issue 20: below ~110 columns each redraw wrapped and the screen filled with bars. A
        # terminal of 100 columns, narrowed to 60 while training: every bar fits the width it
        # was drawn at.
        import fcntl
        import pty
        import re
        import select
        import termios

        def set_width(fd, columns):
            fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))

        pid, fd = pty.fork()
        if pid == 0:  # the child: the pty is its controlling terminal, so it gets SIGWINCH
            binary = e2e_common.BINARY
            os.execv(binary, [binary, "train", "--model", "mlp", "--train-subset", "8192", "--global-batch", "64",
                              "--epochs", "12", "--threads", "1", "--progress", "bar", "--out", self.path("tty")])
        set_width(fd, 100)
        out, narrowed_at, start = b"", None, time.time()
        while True:
            ready, _, _ = select.select([fd], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:  # the child has exited and closed the terminal
                    break
                if not chunk:
                    break
                out += chunk
            if narrowed_at is None and b"] epoch" in out and time.time() - start > 1.0:
                set_width(fd, 60)
                narrowed_at = len(out)
        _, status = os.waitpid(pid, 0)
        self.assertEqual(os.waitstatus_to_exitcode(status), 0, out[-2000:])
        self.assertIsNotNone(narrowed_at, "the run ended before the terminal was narrowed")

        def bars(raw):
            text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", raw.decode(errors="replace"))
            return [s for s in re.split(r"[\r\n]", text) if s.startswith("[") and "] epoch" in s]

        before, after = bars(out[:narrowed_at]), bars(out[narrowed_at:])
        self.assertGreater(len(before), 0)
        self.assertGreater(len(after), 10)
        self.assertLessEqual(max(len(b) for b in before), 100)
        # The first redraws after the resize may have been on their way already.
        self.assertLessEqual(max(len(b) for b in after[2:]), 60, after[-1])
        self.assertIn("epoch 12/12 update 128/128", after[-1])

    def test_batchnorm_under_accumulation_is_announced(self):
        result = run("train", "--model", "cnn-bn", "--train-subset", "128", "--global-batch", "64",
                     "--micro-batch", "16", "--max-updates", "1", "--threads", "1", "--progress", "off",
                     "--out", self.path("bn"), check=True)
        self.assertIn("ghost batch norm", result.stderr)
        window = run("train", "--model", "cnn-bn", "--train-subset", "128", "--global-batch", "64",
                     "--micro-batch", "16", "--epochs", "1", "--threads", "1", "--progress", "off",
                     "--bn-mode", "window", "--out", self.path("bn-window"), check=True)
        self.assertIn("--bn-mode window: cnn-bn normalises every micro-batch with the statistics of its whole "
                      "window of 64 samples", window.stderr)


class VerifyTest(CliTestCase):
    VERIFY = ["verify", "--train-subset", "512", "--global-batch", "128", "--micro-batch", "32", "--threads", "1"]

    def test_exact_models_pass(self):
        for model in ["mlp", "cnn", "cnn-gn"]:
            result = run(*self.VERIFY, "--model", model)
            self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
            self.assertIn("verdict: exact to fp32 tolerance", result.stdout)
            self.assertRegex(result.stdout, r"tensor\s+grad max abs\s+grad relative\s+weight max abs")
            self.assertNotIn("<- differs", result.stdout)

    def test_run_only_flags_are_said_to_be_ignored_and_resume_refused(self):
        result = run(*self.VERIFY, "--model", "mlp", "--out", self.path("never"), "--epochs", "3",
                     "--checkpoint-every", "5u")
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        for flag in ("--out", "--epochs", "--checkpoint-every"):
            self.assertIn(f"verify: {flag} does not change what is verified (ignored)", result.stderr)
        self.assertFalse(os.path.exists(self.path("never")))
        self.assert_one_line_error(run(*self.VERIFY, "--resume", self.path("never")), "usage",
                                   "verify --config RUN/config.toml")

    def test_batchnorm_is_flagged_by_layer(self):
        result = run(*self.VERIFY, "--model", "cnn-bn")
        self.assertEqual(result.returncode, 6, result.stdout + result.stderr)
        self.assertIn("verdict: differs because of BatchNorm in layers 1, 5", result.stdout)

    def test_batchnorm_made_exact_by_freezing_or_group_norm(self):
        for extra in (["--bn-mode", "frozen"], ["--norm", "group"]):
            result = run(*self.VERIFY, "--model", "cnn-bn", *extra)
            self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
            self.assertIn("verdict: exact to fp32 tolerance", result.stdout)

    def test_window_batchnorm_is_exact_after_the_last_batchnorm(self):
        result = run(*self.VERIFY, "--model", "cnn-bn", "--bn-mode", "window")
        self.assertEqual(result.returncode, 6, result.stdout + result.stderr)
        self.assertIn("--bn-mode window: the forward pass is exact", result.stdout)
        rows = {line.split()[0]: line for line in result.stdout.splitlines() if line[:1].isdigit()}
        # Layer 5 is the last BatchNorm: its own parameters and everything after it are exact.
        for name in ["5.weight", "5.bias", "9.weight", "9.bias", "11.weight", "11.bias"]:
            self.assertNotIn("<- differs", rows[name], name)
        for name in ["0.weight", "1.weight", "4.weight"]:
            self.assertIn("<- differs", rows[name], name)

    def test_broken_normalisation_fails_loudly(self):
        # Per-micro-batch means over-weight the short last micro-batch (100 = 32 x 3 + 4).
        env = dict(os.environ, BIGBATCH_VERIFY_BREAK_NORMALISATION_FOR_TESTS="1")
        result = run("verify", "--model", "mlp", "--train-subset", "512", "--global-batch", "100", "--micro-batch",
                     "32", "--threads", "1", env=env)
        self.assertEqual(result.returncode, 7, result.stdout + result.stderr)
        self.assertIn("verdict: differs unexpectedly", result.stdout)
        self.assertIn("<- differs", result.stdout)

    def test_nothing_to_verify_without_accumulation(self):
        self.assert_error(run(*self.VERIFY, "--micro-batch", "128"), "has no accumulation to verify")

    def test_a_float64_reference_says_which_side_rounds_closer(self):
        # Issue 59 item 21: the cnn's one batch of 256 differs from 32 x 8 by ~20x the mlp's
        # rounding. Against the same update in float64 the micro-steps are the closer side:
        # libtorch's convolution backward sums a micro-batch's N x H x W terms in one fp32 run.
        result = run("verify", "--model", "cnn", "--train-subset", "512", "--global-batch", "256", "--micro-batch",
                     "32", "--threads", "1", "--seed", "3")
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        found = re.search(r"float64 reference \(the same samples as one batch in float64\): gradients of the "
                          r"micro-steps within ([0-9.e+-]+) of it, of one fp32 batch within ([0-9.e+-]+): "
                          r"the micro-steps round closer", result.stdout)
        self.assertIsNotNone(found, result.stdout)
        accumulated, whole = float(found.group(1)), float(found.group(2))
        print(f"[ verify cnn 256 = 32 x 8 ] against float64: micro-steps {accumulated:.3g}, one batch {whole:.3g}")
        self.assertLess(accumulated, 1e-5)
        self.assertLess(whole, 1e-4)


class AccumulationOneTest(CliTestCase):
    def test_the_cnn_ends_alike_at_accumulation_one_two_and_eight(self):
        # Issue 59 item 21: one micro-batch per update must train as every other split does.
        common = ["train", "--model", "cnn", "--train-subset", "1536", "--no-shuffle", "--optimizer", "sgd", "--lr",
                  "0.05", "--momentum", "0.9", "--seed", "3", "--threads", "1", "--epochs", "1", "--global-batch",
                  "256", "--progress", "off", "--no-noise-scale"]
        weights = {}
        for micro in (256, 128, 32):
            out = self.path(f"micro{micro}")
            result = run(*common, "--micro-batch", str(micro), "--out", out)
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertIn(f"global batch 256 = micro {micro} x accumulation {256 // micro}", result.stderr)
            self.assertIn("after 6 updates", result.stdout + result.stderr)
            weights[micro] = read_weights(os.path.join(out, "weights.safetensors"))
        for micro in (128, 32):
            diff = max_relative_difference(weights[micro], weights[256])
            print(f"[ cnn 6 updates ] accumulation {256 // micro} against 1: max relative weight difference {diff:.3g}")
            self.assertLess(diff, 1e-6)


class BadInputTest(CliTestCase):
    def test_unknown_flag_suggests_the_right_one(self):
        self.assert_error(run("train", "--micro-bach", "8"), "did you mean --micro-batch?")

    def test_other_tools_names_get_bigbatchs(self):
        # Issue 59: Lightning's, Hugging Face's and plain scripts' names for the batch, the
        # accumulation and the rate, with '-' or '_'.
        for flag, ours in (("--batch-size", "--global-batch N (samples per update) and --micro-batch M"),
                           ("--per_device_train_batch_size", "--micro-batch M"),
                           ("--accumulate-grad-batches", "--accum-steps K"),
                           ("--gradient_accumulation_steps", "--accum-steps K"),
                           ("--grad-accum", "--accum-steps K"),
                           ("--learning-rate", "--lr;"),
                           ("--max-steps", "--max-updates;")):
            result = run("train", flag, "8")
            self.assert_error(result, "bigbatch's name for it is " + ours)
            self.assertNotIn("did you mean", result.stderr)

    def test_bad_values(self):
        self.assert_error(run("train", "--lr", "fast"), "--lr expects a number, got 'fast'")
        self.assert_error(run("train", "--model", "resnet"), "model 'resnet' is not known")
        self.assert_error(run("train", "--optimizer", "lion"), "optimizer 'lion' is not known")
        self.assert_error(run("train", "--epochs", "0"), "--epochs must be from 1 to 1e9")
        self.assert_error(run("train", "--schedule", "step"), "--schedule step needs --step-milestones")

    def test_missing_and_corrupt_datasets(self):
        self.assert_error(run("train", "--dataset", "idx:" + self.path("none"), "--out", self.path("r")),
                          "not found")
        broken = self.path("broken")
        os.makedirs(broken)
        for name in os.listdir(FASHION):
            shutil.copy(os.path.join(FASHION, name), broken)
        with open(os.path.join(broken, "t10k-labels-idx1-ubyte.gz"), "r+b") as f:
            f.truncate(100)
        self.assert_error(run("train", *SMALL, "--dataset", "idx:" + broken, "--out", self.path("r")),
                          "t10k-labels-idx1-ubyte.gz")
        self.assertFalse(os.path.exists(self.path("r", "metrics.jsonl")))

    def test_bad_weight_files(self):
        junk = self.path("junk.safetensors")
        with open(junk, "wb") as f:
            f.write(b"\xff" * 64)
        self.assert_error(run("train", *SMALL, "--init-weights", junk, "--out", self.path("r")),
                          "safetensors file")
        cnn = self.path("cnn")
        run("train", "--model", "cnn", "--max-updates", "0", "--train-subset", "64", "--progress", "off",
            "--out", cnn, check=True)
        self.assert_error(run("train", *SMALL, "--init-weights", os.path.join(cnn, "weights.safetensors"),
                              "--out", self.path("r2")), "saved from another model")

    def test_existing_run_directory_is_never_overwritten(self):
        out = self.path("run")
        run("train", *SMALL, "--max-updates", "1", "--out", out, check=True)
        before = read(os.path.join(out, "weights.safetensors"), "rb")
        refused = run("train", *SMALL, "--out", out)
        self.assert_error(refused, "already holds a run")
        self.assertEqual(before, read(os.path.join(out, "weights.safetensors"), "rb"))
        # Refused before the data loads (issue 35, item 10): no start lines, which follow it.
        self.assertNotIn("data:", refused.stderr)
        missing = run("train", *SMALL, "--model", "torchscript:" + self.path("nope.pt"), "--out", self.path("new"))
        self.assert_error(missing, "model file", "nope.pt' does not exist")
        self.assertNotIn("data:", missing.stderr)

    def test_bad_config_files(self):
        config = self.path("c.toml")
        with open(config, "w") as f:
            f.write("micro-bach = 8\n")
        self.assert_error(run("train", "--config", config), "did you mean 'micro-batch'?")
        with open(config, "w") as f:
            f.write("lr = \n")
        self.assert_error(run("train", "--config", config), "line 1")
        self.assert_error(run("train", "--config", self.path("missing.toml")), "does not exist")

    def test_unwritable_run_directory(self):
        blocker = self.path("file")
        open(blocker, "w").close()
        self.assert_error(run("train", *SMALL, "--out", os.path.join(blocker, "run")), "cannot create")


if __name__ == "__main__":
    main(verbosity=2)
