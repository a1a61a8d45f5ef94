#!/usr/bin/python3
"""End-to-end tests of language-model training through the real CLI: a text corpus (the
fortune format, a small one written here and the real fortunes package), the gpt, per-token
metrics and bits per byte, resume, and the bad inputs of text datasets.
Usage: test_lm.py BIGBATCH_BINARY [unittest arguments]."""
import json
import os
import random
import shutil
import signal
import subprocess
import time
import unittest

import numpy as np

import token_files
from e2e_common import CliTestCase, main, records, run, start

FORTUNES = "/usr/share/games/fortunes"
TINY_GPT = ["--model", "gpt", "--layers", "1", "--d-model", "32", "--heads", "2", "--seq-len", "64",
            "--optimizer", "adamw", "--lr", "3e-3", "--threads", "1", "--progress", "off"]


class LmTestCase(CliTestCase):
    PREFIX = "bigbatch_lm_"

    def setUp(self):
        super().setUp()
        self.corpus = os.path.join(self.dir, "corpus")
        # 120 documents of 5 to 150 bytes in the fortune format.
        documents = [("the quick brown fox %d " % i) * (1 + i % 7) for i in range(120)]
        with open(self.corpus, "w") as f:
            f.write("\n%\n".join(documents) + "\n%\n")


class TrainLmTest(LmTestCase):
    def test_documents_train_with_per_token_metrics_and_bits_per_byte(self):
        out = self.path("run")
        result = run("train", "--dataset", f"text:{self.corpus}", *TINY_GPT, "--global-batch", "16",
                     "--micro-batch", "4", "--val-size", "20", "--epochs", "2", "--out", out)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("data: 120 documents", result.stderr)
        self.assertIn("held-out loss", result.stdout)
        self.assertIn("bits per byte", result.stdout)
        lines = records(out)
        updates = [r for r in lines if "loss" in r and "event" not in r]
        epochs = [r for r in lines if "val_bpb" in r]
        self.assertEqual(len(epochs), 2)
        # 100 training documents at 16 per update: 7 updates per epoch (the last of 4).
        self.assertEqual(len(updates), 14)
        self.assertEqual(updates[6]["samples_seen"], 100)
        # Items are target tokens: more than the samples, and summed exactly into tokens_seen.
        self.assertGreater(updates[0]["items"], updates[0]["samples_seen"])
        self.assertEqual(updates[-1]["tokens_seen"], sum(u["items"] for u in updates))
        self.assertEqual(epochs[-1]["tokens_seen"], updates[-1]["tokens_seen"])
        self.assertLess(epochs[-1]["val_loss"], epochs[0]["val_loss"] + 1e-9)
        self.assertAlmostEqual(epochs[-1]["val_perplexity"], 2.718281828459045 ** epochs[-1]["val_loss"],
                               places=6)
        self.assertGreater(epochs[-1]["val_bpb"], 0)
        self.assertNotIn("test_loss", epochs[-1])  # text corpora have no test split
        self.assertTrue(os.path.exists(os.path.join(out, "weights.safetensors")))

    def test_sample_draws_text_from_a_trained_run(self):
        out = self.path("run")
        self.assertEqual(run("train", "--dataset", f"text:{self.corpus}", *TINY_GPT, "--global-batch", "16",
                             "--micro-batch", "8", "--epochs", "2", "--out", out).returncode, 0)
        first = run("sample", out, "--prompt", "the quick", "--tokens", "40", "--seed", "7")
        self.assertEqual(first.returncode, 0, first.stderr)
        self.assertTrue(first.stdout.startswith("the quick"))
        self.assertIn("tokens drawn", first.stderr)
        # The same seed draws the same text; top-k 1 is the most likely continuation.
        self.assertEqual(run("sample", out, "--prompt", "the quick", "--tokens", "40", "--seed", "7").stdout,
                         first.stdout)
        greedy = run("sample", out, "--prompt", "the", "--top-k", "1", "--tokens", "20")
        self.assertEqual(greedy.returncode, 0, greedy.stderr)
        self.assert_one_line_error(run("sample", self.path("nowhere")), "io", "is not a run directory (no config.toml)")
        self.assert_one_line_error(run("sample", out, "--temperature", "0"), "config",
                                   "--temperature must be positive")
        for seed in ("-1", "18446744073709551616", "x"):
            with self.subTest(seed=seed):
                self.assert_one_line_error(run("sample", out, "--seed", seed), "usage",
                                           "--seed: must be an integer from 0 to 9223372036854775807")
        # Given twice: the last one draws, and the repeat is said.
        twice = run("sample", out, "--prompt", "x", "--prompt", "the quick", "--tokens", "40", "--seed", "7")
        self.assertEqual(twice.stdout, first.stdout)
        self.assertIn("warning: --prompt is given 2 times", twice.stderr)

    def test_packed_blocks_and_resume_bit_identical(self):
        flags = ["--dataset", f"text:{self.corpus}", *TINY_GPT, "--sequences", "packed",
                 "--global-batch", "8", "--micro-batch", "4", "--epochs", "1",
                 "--schedule", "constant"]  # the rate must not depend on the run's length
        whole = self.path("whole")
        self.assertEqual(run("train", *flags, "--out", whole).returncode, 0)
        part = self.path("part")
        result = run("train", *flags, "--max-updates", "3", "--checkpoint-every", "1u", "--out", part)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("packed blocks of 65 tokens", result.stderr)
        # Another shape or cut of the corpus is another run: refused, naming the difference.
        self.assert_one_line_error(run("train", "--resume", part, "--seq-len", "32"), "format",
                                   "was written with seq_len = 64, this run has 32")
        self.assert_one_line_error(run("train", "--resume", part, "--d-model", "64"), "format",
                                   "d_model = 32")
        result = run("train", "--resume", part, "--max-updates", "1000000")
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(os.path.join(whole, "weights.safetensors"), "rb") as a, \
                open(os.path.join(part, "weights.safetensors"), "rb") as b:
            self.assertEqual(a.read(), b.read())

    def test_recompute_is_the_same_run_bit_for_bit_in_less_memory(self):
        # Dropout on: the recomputation replays each block's masks; two layers, so the blocks'
        # activations are what a micro-batch holds; documents cut by tokens.
        flags = ["--dataset", f"text:{self.corpus}", *TINY_GPT, "--layers", "2", "--dropout", "0.1",
                 "--global-batch", "16", "--micro-batch-tokens", "256", "--epochs", "2", "--no-tensorboard"]
        plain, recomputed = self.path("plain"), self.path("recomputed")
        self.assertEqual(run("train", *flags, "--out", plain).returncode, 0)
        result = run("train", *flags, "--recompute", "--out", recomputed)
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(os.path.join(plain, "weights.safetensors"), "rb") as a, \
                open(os.path.join(recomputed, "weights.safetensors"), "rb") as b:
            self.assertEqual(a.read(), b.read())
        updates = {name: [r for r in records(d) if "loss" in r and "event" not in r]
                   for name, d in (("plain", plain), ("recomputed", recomputed))}
        self.assertEqual([(r["loss"], r["grad_norm"]) for r in updates["plain"]],
                         [(r["loss"], r["grad_norm"]) for r in updates["recomputed"]])
        peaks = {name: max(r["peak_bytes"] for r in rows) for name, rows in updates.items()}
        print(f"\ngpt, 2 layers, 256-token micro-batches: tensor peak {peaks['plain']} B, "
              f"{peaks['recomputed']} B recomputed")
        self.assertLess(peaks["recomputed"], 0.8 * peaks["plain"])
        # Only the gpt has blocks whose recomputation saves memory: one line, saying why.
        self.assert_one_line_error(run("train", "--model", "cnn", "--recompute", "--out", self.path("cnn")), "config",
                                   "--recompute recomputes the gpt's blocks", "made in either case")

    def test_resume_inside_a_token_packed_window_is_bit_identical(self):
        flags = ["--dataset", f"text:{self.corpus}", *TINY_GPT, "--global-batch", "16",
                 "--micro-batch-tokens", "256", "--epochs", "1", "--schedule", "constant"]
        whole = self.path("whole")
        self.assertEqual(run("train", *flags, "--out", whole).returncode, 0)
        part = self.path("part")
        result = run("train", *flags, "--max-updates", "3", "--checkpoint-every", "1micro",
                     "--keep-checkpoints", "100", "--out", part)
        self.assertEqual(result.returncode, 0, result.stderr)
        # A checkpoint inside update 3's window (step_000002_NNNN: 2 updates done, N micro-steps
        # of the third), cut by tokens: resume continues that window under the same packing.
        inside = sorted(d for d in os.listdir(os.path.join(part, "checkpoints"))
                        if d.startswith("step_000002_"))
        self.assertTrue(inside, os.listdir(os.path.join(part, "checkpoints")))
        # The later checkpoints belong to the history this resume abandons.
        result = run("train", "--resume", os.path.join(part, "checkpoints", inside[0]),
                     "--max-updates", "1000000", "--discard-newer")
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(os.path.join(whole, "weights.safetensors"), "rb") as a, \
                open(os.path.join(part, "weights.safetensors"), "rb") as b:
            self.assertEqual(a.read(), b.read())

    def test_plan_and_the_start_line_speak_in_token_micro_batches(self):
        # Issue 35: under --micro-batch-tokens the plan said "micro 16 x accumulation 1" while the
        # run took several micro-steps per window; it now counts the micro-steps the cut makes,
        # and they are the ones training runs.
        flags = ["--dataset", f"text:{self.corpus}", *TINY_GPT, "--global-batch", "16",
                 "--micro-batch-tokens", "256", "--epochs", "1"]
        planned = run("plan", *flags, "--json")
        self.assertEqual(planned.returncode, 0, planned.stderr)
        plan = json.loads(planned.stdout)
        self.assertEqual(plan["micro_batch_tokens"], 256)
        text = run("plan", *flags).stdout
        self.assertIn("at most 256 padded tokens (rows x longest), cut inside each window", text)
        self.assertNotIn("no accumulation", text)
        out = self.path("tokens")
        result = run("train", *flags, "--out", out)
        self.assertEqual(result.returncode, 0, result.stderr)
        updates = [r for r in records(out) if "loss" in r and "event" not in r]
        ran = sum(u["micro_steps"] for u in updates)
        self.assertEqual(plan["micro_steps_per_epoch"], ran)
        self.assertEqual(plan["micro_steps_per_window"],
                         [min(u["micro_steps"] for u in updates), max(u["micro_steps"] for u in updates)])
        self.assertGreater(ran, len(updates))  # more than one micro-step per window here
        self.assertRegex(text, rf"micro-steps \(fwd/bwd passes\)\s+{ran}\s+on rank 0 in epoch 1")
        self.assertRegex(result.stderr, rf"batch plan: global batch 16 x world 1, each window cut into "
                                        rf"micro-batches of at most 256 padded tokens: {ran} micro-steps in epoch 1")

    def test_a_target_in_bits_per_byte_stops_the_run(self):
        out = self.path("run")
        result = run("train", "--dataset", f"text:{self.corpus}", *TINY_GPT, "--global-batch", "16",
                     "--micro-batch", "8", "--val-size", "20", "--epochs", "30", "--target", "val_bpb <= 3",
                     "--out", out)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("target reached: val_bpb", result.stderr)
        lines = records(out)
        epochs = [r for r in lines if "val_bpb" in r and "event" not in r]
        reached = [r for r in lines if r.get("event") == "target_reached"]
        self.assertEqual(len(reached), 1)
        self.assertEqual(reached[0]["condition"], "val_bpb<=3")
        self.assertEqual(reached[0]["target"], 3)
        # It stopped at the first epoch at or under 3 bits per byte, and not before.
        self.assertLess(len(epochs), 30)
        self.assertLessEqual(epochs[-1]["val_bpb"], 3)
        self.assertTrue(all(e["val_bpb"] > 3 for e in epochs[:-1]))
        self.assertEqual(reached[0]["value"], epochs[-1]["val_bpb"])
        with open(os.path.join(out, "config.toml")) as f:
            self.assertIn("target = 'val_bpb<=3'", f.read())

    def test_eval_every_evaluates_between_epochs_and_stops_at_the_first_target(self):
        # 100 training documents at 16 per update: epochs end at updates 7, 14, ...; --eval-every
        # 3u evaluates at 3, 6, 9, 12, 15, ... (not 21: an epoch's end evaluates there).
        flags = ["--dataset", f"text:{self.corpus}", *TINY_GPT, "--global-batch", "16", "--micro-batch", "8",
                 "--val-size", "20", "--eval-every", "3u"]
        out = self.path("run")
        result = run("train", *flags, "--epochs", "30", "--target", "val_bpb <= 3", "--progress", "lines",
                     "--out", out)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("evaluation: every 3 updates (--eval-every 3u) and at each epoch's end", result.stderr)
        self.assertRegex(result.stderr, r"update 3 \(epoch 0\.4\d*\): evaluated \| val loss \d+\.\d{4} bpb \d")
        lines = records(out)
        evaluations = [r for r in lines if r.get("event") == "evaluation"]
        epochs = [r for r in lines if "train_loss" in r]
        self.assertTrue(evaluations)
        self.assertTrue(all(e["step"] % 3 == 0 and e["step"] % 7 != 0 for e in evaluations))
        self.assertEqual([e["step"] for e in evaluations],
                         [s for s in range(3, evaluations[-1]["step"] + 1, 3) if s % 7 != 0])
        for e in evaluations:
            self.assertGreater(e["tokens_seen"], e["samples_seen"])
            self.assertGreaterEqual(e["wall_s"], e["train_seconds"])
        # The run stops at the first held-out figure at or under the target, wherever it is.
        by_step = {r["step"]: r for r in evaluations + epochs}
        held_out = [by_step[s] for s in sorted(by_step)]
        self.assertLessEqual(held_out[-1]["val_bpb"], 3)
        self.assertTrue(all(r["val_bpb"] > 3 for r in held_out[:-1]))
        reached = [r for r in lines if r.get("event") == "target_reached"]
        self.assertEqual(len(reached), 1)
        self.assertEqual(reached[0]["step"], held_out[-1]["step"])
        self.assertEqual(reached[0]["value"], held_out[-1]["val_bpb"])
        if evaluations[-1]["step"] == reached[0]["step"]:
            # Mid-epoch: the epoch is recorded where the run ended, with the same evaluation.
            self.assertEqual(epochs[-1]["step"], reached[0]["step"])
            self.assertIn("partial_epoch", epochs[-1])
            self.assertEqual(epochs[-1]["val_bpb"], evaluations[-1]["val_bpb"])
            # Epochs done where it was reached: the evaluation's fraction, not a whole epoch.
            self.assertAlmostEqual(reached[0]["epoch"], evaluations[-1]["epoch"])
            self.assertNotEqual(reached[0]["epoch"], int(reached[0]["epoch"]))
        else:
            self.assertEqual(reached[0]["epoch"], epochs[-1]["epoch"])

        # A resumed run evaluates at the same updates, to the same figures (a constant rate: the
        # schedule must not depend on the run's length).
        whole, part = self.path("whole"), self.path("part")
        flags += ["--epochs", "2", "--schedule", "constant"]
        self.assertEqual(run("train", *flags, "--out", whole).returncode, 0)
        result = run("train", *flags, "--max-updates", "4", "--checkpoint-every", "1u", "--out", part)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(run("train", "--resume", part, "--max-updates", "1000000").returncode, 0)
        evaluated = [[(r["step"], r["val_loss"]) for r in records(d) if r.get("event") == "evaluation"]
                     for d in (whole, part)]
        self.assertEqual([s for s, _ in evaluated[0]], [3, 6, 9, 12])
        self.assertEqual(evaluated[0], evaluated[1])
        # A run that ends on an interval evaluates there once: its epoch's record.
        short = self.path("short")
        self.assertEqual(run("train", *flags, "--max-updates", "6", "--out", short).returncode, 0)
        self.assertEqual([r["step"] for r in records(short) if r.get("event") == "evaluation"], [3])
        self.assertEqual([r["step"] for r in records(short) if "train_loss" in r], [6])

        # Nothing to evaluate, or an interval the data cannot count: one line, nothing written.
        none, arrays = self.path("none"), self.path("arrays")
        os.makedirs(arrays)
        np.save(os.path.join(arrays, "x_train.npy"), np.random.default_rng(0).random((64, 8), dtype=np.float32))
        np.save(os.path.join(arrays, "y_train.npy"), np.arange(64) % 2)
        self.assert_one_line_error(run("train", "--model", "mlp", "--dataset", f"npy:{arrays}", "--eval-every",
                                       "5u", "--out", none), "config", "this run holds none")
        self.assert_one_line_error(run("train", "--model", "mlp", "--train-subset", "512", "--eval-every", "1Mt",
                                       "--out", none), "config", "counts tokens")
        self.assert_one_line_error(run("train", *flags, "--eval-every", "5x", "--out", none), "config",
                                   "has no unit")
        self.assert_one_line_error(run("train", *flags, "--eval-every", "0u", "--out", none), "config",
                                   "--eval-every 0u is a zero interval")
        self.assertFalse(os.path.exists(none))

    def test_verify_checks_the_per_token_mean_on_documents(self):
        args = ["verify", "--dataset", f"text:{self.corpus}", *TINY_GPT, "--global-batch", "16", "--micro-batch", "4"]
        exact = run(*args)
        self.assertEqual(exact.returncode, 0, exact.stdout + exact.stderr)
        self.assertIn("verdict: exact to fp32 tolerance", exact.stdout)
        # The per-micro-batch mean (Transformers before #34191) on documents of unequal length.
        broken = run(*args, env=dict(os.environ, BIGBATCH_VERIFY_BREAK_NORMALISATION_FOR_TESTS="1"))
        self.assertEqual(broken.returncode, 7, broken.stdout + broken.stderr)
        self.assertIn("look for a loss averaged per micro-batch", broken.stdout)

    def test_verify_turns_dropout_off_and_says_so(self):
        # Issue 59 item 3: dropout's masks differ between the splits by construction; the
        # arithmetic of accumulation is verified with it off, not reported as "differs
        # unexpectedly" (exit 7).
        args = ["verify", "--dataset", f"text:{self.corpus}", *TINY_GPT, "--global-batch", "16", "--micro-batch", "4",
                "--dropout", "0.1"]
        result = run(*args)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertIn("dropout turned off on both sides (0.blocks.0.dropout, 0.dropout): its masks are random draws",
                      result.stdout)
        self.assertIn("verdict: exact to fp32 tolerance", result.stdout)
        self.assertRegex(result.stdout, r"float64 reference \(the same samples as one batch in float64\): gradients of "
                                        r"the micro-steps within [0-9.e-]+ of it, of one fp32 batch within [0-9.e-]+")
        plain = run(*args[:-2])
        self.assertEqual(plain.returncode, 0, plain.stdout + plain.stderr)
        self.assertNotIn("dropout turned off", plain.stdout)

    def test_verify_cuts_the_window_by_tokens_as_training_does(self):
        # Issue 36: "the plan ... has no accumulation to verify" although the budget cut it.
        args = ["verify", "--dataset", f"text:{self.corpus}", *TINY_GPT, "--global-batch", "16"]
        exact = run(*args, "--micro-batch-tokens", "400")
        self.assertEqual(exact.returncode, 0, exact.stdout + exact.stderr)
        self.assertRegex(exact.stdout, r"update 1 of global batch 16 cut into [2-9] micro-batches of at most 400 "
                                       r"padded tokens against one batch of the same 16 samples")
        self.assertIn("verdict: exact to fp32 tolerance", exact.stdout)
        broken = run(*args, "--micro-batch-tokens", "400",
                     env=dict(os.environ, BIGBATCH_VERIFY_BREAK_NORMALISATION_FOR_TESTS="1"))
        self.assertEqual(broken.returncode, 7, broken.stdout + broken.stderr)
        whole = run(*args, "--micro-batch-tokens", "100000")
        self.assertEqual(whole.returncode, 2, whole.stderr)
        self.assertRegex(whole.stderr, r"the first window's 16 samples \([0-9]+ padded tokens\) fit in one micro-batch "
                                       r"of at most 100000 tokens: there is no accumulation to verify; give a smaller "
                                       r"budget, e.g. --micro-batch-tokens [0-9]+\n$")

    def test_jsonl_documents(self):
        jsonl = self.path("corpus.jsonl")
        with open(jsonl, "w") as f:
            for i in range(60):
                f.write(json.dumps({"id": i, "body": "document number %d " % i * (1 + i % 4)}) + "\n")
        out = self.path("jsonl")
        result = run("train", "--dataset", f"jsonl:{jsonl}", "--text-field", "body", *TINY_GPT,
                     "--global-batch", "8", "--micro-batch-tokens", "128", "--epochs", "1", "--out", out)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("data: 60 documents", result.stderr)
        updates = [r for r in records(out) if "padded_tokens" in r]
        # Packed by tokens: rows x longest <= 128 per micro-step, so the micro-steps vary.
        self.assertGreater(len({u["micro_steps"] for u in updates}), 1)
        self.assertTrue(all(u["padded_tokens"] >= u["items"] for u in updates))

    @unittest.skipUnless(os.path.isdir(FORTUNES), "the fortunes package is not installed")
    def test_a_directory_of_files_without_separators_says_most_of_it_is_cut(self):
        # Issue 35: each file is one document, cut at --seq-len + 1 tokens: a run that trains on
        # a sliver of its text says so at the start, with the fixes; the corpus cut into
        # documents does not.
        directory = self.path("pages")
        os.mkdir(directory)
        for i in range(12):
            with open(os.path.join(directory, f"page{i:02d}.txt"), "w") as f:
                f.write("".join(f"line {j} of page {i}, plain prose without separators\n" for j in range(40)))
        args = [*TINY_GPT, "--global-batch", "4", "--micro-batch", "2", "--val-size", "2", "--max-updates", "1"]
        result = run("train", "--dataset", f"text:{directory}", *args, "--out", self.path("cut"))
        self.assertEqual(result.returncode, 0, result.stderr)
        warning = [line for line in result.stderr.splitlines() if "never trained on" in line]
        self.assertEqual(len(warning), 1, result.stderr)
        self.assertRegex(warning[0], r"^warning: \d+ of the data's \d+ tokens \(9\d%\) lie past --seq-len 64 "
                                     r"in the 12 document\(s\) longer than a sample")
        self.assertIn("--doc-separator", warning[0])
        self.assertIn("--sequences packed", warning[0])
        for fix in (["--doc-separator", "line"], ["--sequences", "packed"]):
            with self.subTest(fix=fix):
                result = run("train", "--dataset", f"text:{directory}", *args, *fix,
                             "--out", self.path("fixed-" + fix[1]))
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertNotIn("never trained on", result.stderr)

    def test_fortunes_corpus(self):
        out = self.path("fortunes")
        result = run("train", "--dataset", f"text:{FORTUNES}", *TINY_GPT, "--global-batch", "32",
                     "--micro-batch", "8", "--max-updates", "3", "--out", out)
        self.assertEqual(result.returncode, 0, result.stderr)
        # The .dat indexes and .u8 links are skipped; ~15,000 documents.
        self.assertRegex(result.stderr, r"data: 1[0-9]{4} documents .* binary or repeated skipped")


    def test_resident_memory_stays_flat_over_epochs_of_documents(self):
        # Documents padded to each micro-batch's longest under a token budget: hundreds of batch
        # shapes, a different mix every step. Before the host block cache (issue 36) glibc's heap
        # kept the freed buffers as holes and this run grew 634 -> 850 MiB from epoch 2 to 5
        # (+34%); with it, 592 -> 597 MiB.
        out = self.path("epochs")
        result = run("train", "--dataset", f"text:{FORTUNES}", "--model", "gpt", "--seq-len", "256",
                     "--global-batch", "64", "--micro-batch-tokens", "4096", "--optimizer", "adamw", "--lr",
                     "1e-3", "--train-subset", "300", "--val-size", "100", "--sequences", "documents",
                     "--threads", "1", "--epochs", "5", "--progress", "off", "--no-noise-scale", "--out", out)
        self.assertEqual(result.returncode, 0, result.stderr)
        resident = {}
        for r in records(out):
            if "loss" in r and "event" not in r:
                epoch = int(-(-r["epoch"] // 1))  # the epoch an update belongs to, from 1
                resident[epoch] = max(resident.get(epoch, 0), r["rss_peak_bytes"])
        self.assertEqual(sorted(resident), [1, 2, 3, 4, 5])
        print("\nresident peak per epoch (MiB):", [resident[e] >> 20 for e in sorted(resident)])
        for epoch in (3, 4, 5):
            self.assertLessEqual(resident[epoch], 1.10 * resident[2], f"epoch {epoch}: {resident}")

class BadTextInputTest(LmTestCase):
    def train(self, *args):
        return run("train", *args, "--out", self.path("bad"))

    def test_bad_corpora_and_combinations(self):
        empty = self.path("empty")
        os.mkdir(empty)
        self.assert_one_line_error(self.train("--dataset", f"text:{empty}", *TINY_GPT), "data",
                                   "holds no text files")
        self.assert_one_line_error(self.train("--dataset", f"text:{self.path('nothing')}", *TINY_GPT),
                                   "data", "does not exist")
        one = self.path("one.txt")
        with open(one, "w") as f:
            f.write("one long text\nwith no separator line\n")
        self.assert_one_line_error(self.train("--dataset", f"text:{one}", *TINY_GPT), "data",
                                   "never has a separator line '%'", "--doc-separator")
        self.assert_one_line_error(self.train("--dataset", f"text:{self.corpus}", "--model", "cnn"),
                                   "config", "needs a sequence model", "--model gpt")
        self.assert_one_line_error(self.train("--model", "gpt"), "config", "labelled images")
        self.assert_one_line_error(self.train("--dataset", f"text:{self.corpus}", *TINY_GPT,
                                              "--seq-len", "1"), "config", "--seq-len must be at least 2")
        self.assert_one_line_error(self.train("--dataset", f"text:{self.corpus}", *TINY_GPT,
                                              "--heads", "3"), "config", "does not split into --heads 3")
        self.assert_one_line_error(self.train("--dataset", f"text:{self.corpus}", *TINY_GPT,
                                              "--sequences", "pack"), "config", "did you mean 'packed'")
        self.assert_one_line_error(self.train("--task", "lm", *TINY_GPT), "config",
                                   "--task lm needs token sequences")
        jsonl = self.path("c.jsonl")
        with open(jsonl, "w") as f:
            f.write('{"text": "a document"}\n{"body": "no text field"}\n')
        self.assert_one_line_error(self.train("--dataset", f"jsonl:{jsonl}", *TINY_GPT), "data",
                                   "line 2 of", 'has no field "text"', "--text-field")
        # None of them left a run directory behind.
        self.assertFalse(os.path.exists(self.path("bad")))


class TokenFilesTest(LmTestCase):
    """tokens:PATH: Megatron .bin/.idx, llm.c shards and headerless files."""

    def setUp(self):
        super().setUp()
        rng = np.random.default_rng(7)
        # 150 documents of 3 to 70 ids below 700, as a tokenizer would have written them.
        self.documents = [rng.integers(0, 700, size=int(rng.integers(3, 70))).tolist() for _ in range(150)]
        self.stream = [t for d in self.documents for t in d]

    def train(self, dataset, name, *args):
        out = self.path(name)
        result = run("train", "--dataset", dataset, *TINY_GPT, "--global-batch", "16", "--micro-batch", "4",
                     "--val-size", "10", "--epochs", "1", "--out", out, *args)
        self.assertEqual(result.returncode, 0, result.stderr)
        return result, records(out)

    @staticmethod
    def losses(lines):
        return [r["loss"] for r in lines if "loss" in r and "event" not in r and "step" in r]

    def test_the_three_formats_of_one_stream_train_alike(self):
        token_files.write_megatron(self.path("mega"), self.documents)
        token_files.write_llmc(self.path("shard.bin"), self.stream)
        token_files.write_headerless(self.path("raw.bin"), self.stream)
        megatron, m = self.train(f"tokens:{self.path('mega')}", "m")  # auto packs token files
        llmc, l = self.train(f"tokens:{self.path('shard.bin')}", "l")
        raw, r = self.train(f"tokens:{self.path('raw.bin')}", "r", "--token-dtype", "uint16")
        self.assertIn("Megatron indexed dataset (uint16)", megatron.stderr)
        self.assertIn("llm.c shard (uint16)", llmc.stderr)
        self.assertIn("headerless uint16 tokens", raw.stderr)
        self.assertIn("vocabulary 700", llmc.stderr)  # the largest id + 1 (rng ids reach 699)
        # The same stream packed the same way: the same run, update for update.
        self.assertGreaterEqual(len(self.losses(l)), 5)
        self.assertEqual(self.losses(m), self.losses(l))
        self.assertEqual(self.losses(r), self.losses(l))
        last = [x for x in l if "val_loss" in x][-1]
        self.assertIn("val_perplexity", last)
        self.assertNotIn("val_bpb", last)  # a token file's bytes are not known
        self.assertNotIn("bits per byte", llmc.stdout)
        # A directory of shards reads them in name order: the same stream again.
        os.mkdir(self.path("shards"))
        half = len(self.stream) // 2
        token_files.write_llmc(self.path("shards", "train_000001.bin"), self.stream[half:])
        token_files.write_llmc(self.path("shards", "train_000000.bin"), self.stream[:half])
        shards, s = self.train(f"tokens:{self.path('shards')}", "s")
        self.assertIn("in 2 file(s)", shards.stderr)
        # Each shard is its own stream, so the block that would straddle them is not there.
        self.assertEqual(self.losses(s)[0], self.losses(l)[0])
        # llm.c writes validation shards beside them: a directory of both is refused, and a
        # pattern names the training ones.
        token_files.write_llmc(self.path("shards", "val_000000.bin"), self.stream[:500])
        self.assert_one_line_error(run("train", "--dataset", f"tokens:{self.path('shards')}", *TINY_GPT,
                                       "--out", self.path("refused")), "data", "training and validation shards",
                                   "*train*.bin")
        pattern, p = self.train(f"tokens:{self.path('shards')}/train_*.bin", "p")
        self.assertIn("in 2 file(s)", pattern.stderr)
        self.assertEqual(self.losses(p), self.losses(s))
        # config.toml records what the data resolved to: the packing and the vocabulary, so a
        # validation file with fewer ids evaluates the run's model.
        with open(os.path.join(self.path("l"), "config.toml")) as f:
            config = f.read()
        self.assertIn("vocab-size = 700", config)
        self.assertIn("sequences = 'packed'", config)
        token_files.write_llmc(self.path("val.bin"), [t % 100 for t in self.stream[:2000]])
        evaluated = run("evaluate", self.path("l"), "--dataset", f"tokens:{self.path('val.bin')}", "--split",
                        "val", "--json")
        self.assertEqual(evaluated.returncode, 0, evaluated.stderr)
        self.assertIn("perplexity", json.loads(evaluated.stdout))
        self.assertNotIn("bits_per_byte", json.loads(evaluated.stdout))

    def test_a_stream_cut_at_its_end_of_text_id_trains_on_its_documents(self):
        # nanoGPT's prepare.py appends the end-of-text id to every document: --eot-id cuts the
        # stream back into them, the same samples as a Megatron index that records them.
        eot = 700
        ended = [d + [eot] for d in self.documents]
        token_files.write_megatron(self.path("mega"), ended)
        token_files.write_headerless(self.path("raw.bin"), [t for d in ended for t in d])
        mega, m = self.train(f"tokens:{self.path('mega')}", "m", "--sequences", "documents")
        raw, r = self.train(f"tokens:{self.path('raw.bin')}", "r", "--token-dtype", "uint16", "--eot-id", str(eot))
        self.assertIn("150 documents (each ended by id 700)", raw.stderr)
        self.assertIn("150 document samples", raw.stderr)  # auto: documents, once their end is known
        self.assertGreaterEqual(len(self.losses(r)), 5)
        self.assertEqual(self.losses(r), self.losses(m))
        with open(os.path.join(self.path("r"), "config.toml")) as f:
            self.assertIn("eot-id = 700", f.read())
        # An id above every id of the data, an index that records documents, text or packing: one line.
        for args, kind, fragment in (
                ([f"tokens:{self.path('raw.bin')}", "--token-dtype", "uint16", "--eot-id", "70000"], "data",
                 "end-of-text id 70000 is above every id in token data"),
                ([f"tokens:{self.path('mega')}", "--eot-id", "700"], "config", "records its documents"),
                ([f"text:{self.corpus}", "--eot-id", "256"], "config", "is not tokens:PATH"),
                ([f"tokens:{self.path('raw.bin')}", "--token-dtype", "uint16", "--eot-id", "700", "--sequences",
                  "packed"], "config", "which --sequences packed joins again")):
            self.assert_one_line_error(run("train", "--dataset", *args, *TINY_GPT, "--out", self.path("bad")), kind,
                                       fragment)
        self.assertFalse(os.path.exists(self.path("bad")))

    def test_token_files_are_read_where_they_lie(self):
        # 24M uint16 ids (48 MB): materialised as int64 inputs and targets they would take 16
        # bytes a token (384 MB, and as much again while split); read from the mapping, the rows
        # are a table of 24 bytes per row of 65 tokens beside the file's pages.
        # Against the same run on a shard 100 times smaller: what the process holds before any
        # data (libtorch's libraries: ~300 MiB with 1.13, more with a CUDA-enabled 2.x) is not
        # the data's.
        rng = np.random.default_rng(3)
        resident = {}
        for name, tokens in (("small", 240_000), ("big", 24_000_000)):
            token_files.write_llmc(self.path(f"{name}.bin"), rng.integers(0, 1000, size=tokens, dtype=np.uint16))
            out = self.path(name)
            result = run("train", "--dataset", f"tokens:{self.path(name + '.bin')}", *TINY_GPT, "--global-batch",
                         "16", "--micro-batch", "16", "--val-size", "64", "--max-updates", "2", "--out", out)
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertIn(f"{tokens} tokens in 1 file(s)", result.stderr)
            resident[name] = [r for r in records(out) if r.get("event") == "train_start"][0]["rss_bytes"]
        growth = resident["big"] - resident["small"]
        print(f"\n24M-token llm.c shard: resident {resident['big'] / 2**20:.0f} MiB when training starts, "
              f"{growth / 2**20:.0f} MiB more than with 240k tokens")
        self.assertLess(growth, 160 << 20)

    def test_megatron_documents_equal_the_text_they_were_tokenised_from(self):
        texts = [("the quick brown fox %d " % i) * (1 + i % 7) for i in range(120)]
        # The corpus's documents keep their last line's newline (setUp wrote them so).
        token_files.write_megatron(self.path("bytes"), token_files.byte_documents(t + "\n" for t in texts))
        _, tokens = self.train(f"tokens:{self.path('bytes')}", "t", "--vocab-size", "257", "--sequences",
                               "documents")
        _, text = self.train(f"text:{self.corpus}", "x")
        # Documents mode (auto for an index that records documents) on the byte tokenizer's ids:
        # the same samples, per-token means and updates as the text corpus itself.
        self.assertEqual(len(self.losses(tokens)), len(self.losses(text)))
        for a, b in zip(self.losses(tokens), self.losses(text)):
            self.assertAlmostEqual(a, b, delta=1e-6 * abs(b))
        a = [x for x in tokens if "val_loss" in x][-1]
        b = [x for x in text if "val_loss" in x][-1]
        self.assertAlmostEqual(a["val_loss"], b["val_loss"], delta=1e-6)
        self.assertEqual(a["tokens_seen"], b["tokens_seen"])

    def test_a_token_file_run_killed_anywhere_resumes_bit_identical(self):
        # kill -9 at random points of a run on an llm.c shard, checkpointing inside windows too:
        # each resume continues exactly, and the run ends where the uninterrupted one does.
        token_files.write_llmc(self.path("shard.bin"), self.stream)
        flags = ["--dataset", f"tokens:{self.path('shard.bin')}", *TINY_GPT, "--global-batch", "16", "--micro-batch",
                 "4", "--val-size", "10", "--epochs", "3", "--checkpoint-every", "3micro", "--keep-checkpoints", "2"]
        whole = self.path("whole")
        self.assertEqual(run("train", *flags, "--out", whole).returncode, 0)
        killed = self.path("killed")
        rng = random.Random(11)
        process = start("train", *flags, "--out", killed, stdout=subprocess.DEVNULL)
        kills = 0
        while True:
            deadline = time.monotonic() + 120
            while process.poll() is None and time.monotonic() < deadline and kills < 3 and not (
                    os.path.isdir(os.path.join(killed, "checkpoints"))
                    and any(d.startswith("step_") for d in os.listdir(os.path.join(killed, "checkpoints")))):
                time.sleep(0.01)
            if kills < 3 and process.poll() is None:
                time.sleep(0 if kills == 0 else rng.uniform(0.0, 0.4))  # the first at once: at least one
                if process.poll() is None:
                    process.kill()
                    kills += 1
            _, stderr = process.communicate(timeout=300)
            if process.returncode == 0:
                break
            self.assertEqual(process.returncode, -signal.SIGKILL, stderr)
            process = start("train", "--resume", killed, stdout=subprocess.DEVNULL)
        self.assertGreaterEqual(kills, 1)
        with open(os.path.join(whole, "weights.safetensors"), "rb") as a, \
                open(os.path.join(killed, "weights.safetensors"), "rb") as b:
            self.assertEqual(a.read(), b.read())
        machine = {"time", "wall_s", "samples_per_s", "updates_per_s", "tokens_per_s", "train_seconds", "rss_peak_bytes",
                   "rss_bytes", "peak_bytes", "tensor_bytes"}
        def comparable(lines):
            return [{k: v for k, v in r.items() if k not in machine} for r in lines if r.get("event") != "train_start"]
        self.assertEqual(comparable(records(killed)), comparable(records(whole)))

    def test_bad_token_files_are_one_line_errors(self):
        def train(*args):
            return run("train", *TINY_GPT, "--out", self.path("bad"), *args)

        token_files.write_megatron(self.path("mega"), self.documents)
        with open(self.path("mega.idx"), "rb") as f:
            index = f.read()
        with open(self.path("cut.idx"), "wb") as f:
            f.write(index[:-8])  # the last document entry missing: the counts no longer fit
        shutil.copy(self.path("mega.bin"), self.path("cut.bin"))
        self.assert_one_line_error(train("--dataset", f"tokens:{self.path('cut')}"), "data",
                                   "Megatron index", "cut.idx", "make")
        with open(self.path("mega.bin"), "ab") as f:
            f.write(b"\0\0")  # a token more than the index covers
        self.assert_one_line_error(train("--dataset", f"tokens:{self.path('mega')}"), "data",
                                   "covers", "which has")
        token_files.write_megatron(self.path("float"), self.documents, dtype=np.int32, dtype_code=7)
        self.assert_one_line_error(train("--dataset", f"tokens:{self.path('float.bin')}"), "data",
                                   "dtype code 7", "no integer token type")
        token_files.write_megatron(self.path("negative"), [[5, 6, -3, 7]], dtype=np.int32)
        self.assert_one_line_error(train("--dataset", f"tokens:{self.path('negative')}"), "data",
                                   "token id -3")
        token_files.write_llmc(self.path("magic.bin"), self.stream, magic=12345)
        self.assert_one_line_error(train("--dataset", f"tokens:{self.path('magic.bin')}"), "data",
                                   "header magic 12345", "--token-dtype")
        token_files.write_llmc(self.path("long.bin"), self.stream, count=len(self.stream) + 10)
        self.assert_one_line_error(train("--dataset", f"tokens:{self.path('long.bin')}"), "data",
                                   f"holds {len(self.stream) + 10} tokens", "truncated")
        token_files.write_llmc(self.path("shard.bin"), self.stream)
        self.assert_one_line_error(train("--dataset", f"tokens:{self.path('shard.bin')}", "--vocab-size", "500"),
                                   "data", "token id 699", "--vocab-size 700")
        self.assert_one_line_error(train("--dataset", f"tokens:{self.path('shard.bin')}", "--sequences",
                                         "documents"), "config", "no document boundaries", "--sequences packed")
        self.assert_one_line_error(train("--dataset", f"tokens:{self.path('shard.bin')}", "--token-dtype", "uint16"),
                                   "data", "starts with an llm.c header", "drop --token-dtype")
        self.assert_one_line_error(train("--dataset", f"tokens:{self.path('mega')}", "--token-dtype", "uint16"),
                                   "data", "Megatron index beside it")
        with open(self.path("odd.bin"), "wb") as f:
            f.write(b"\1\2\3")
        self.assert_one_line_error(train("--dataset", f"tokens:{self.path('odd.bin')}", "--token-dtype", "uint16"),
                                   "data", "not a whole number of uint16 tokens")
        self.assert_one_line_error(train("--dataset", f"tokens:{self.path('none')}"), "data", "does not exist")
        self.assert_one_line_error(train("--dataset", "tokens:/dev/zero"), "data",
                                   "'/dev/zero' is not a regular file")
        os.mkdir(self.path("empty"))
        self.assert_one_line_error(train("--dataset", f"tokens:{self.path('empty')}"), "data",
                                   "holds no .bin token files")
        self.assert_one_line_error(train("--dataset", f"text:{self.corpus}", "--vocab-size", "300"), "config",
                                   "--vocab-size describes token files")
        self.assert_one_line_error(train("--dataset", f"tokens:{self.path('shard.bin')}", "--target", "bpb<=2"),
                                   "config", "token files do not say how many bytes", "val_loss<=X")
        self.assert_one_line_error(train("--dataset", f"tokens:{self.path('shard.bin')}", "--target",
                                         "test_loss<=2"), "config", "reads the test split")
        self.assert_one_line_error(train("--dataset", f"tokens:{self.path('shard.bin')}", "--target",
                                         "val_bpb>=2"), "config", "would stop at once", "write <=")
        self.assertFalse(os.path.exists(self.path("bad")))

    def test_sample_refuses_a_run_on_token_files(self):
        token_files.write_llmc(self.path("shard.bin"), self.stream)
        self.train(f"tokens:{self.path('shard.bin')}", "run")
        self.assert_one_line_error(run("sample", self.path("run"), "--prompt", "x"), "usage",
                                   "trained on token files")


class SentencePieceTest(LmTestCase):
    """--tokenizer sentencepiece:FILE.model, with a model spm_train writes from the corpus."""

    def setUp(self):
        super().setUp()
        lines = self.path("lines.txt")
        with open(self.corpus) as f:
            documents = [d.strip() for d in f.read().split("\n%\n") if d.strip()]
        with open(lines, "w") as f:
            f.write("\n".join(documents) + "\n")
        trained = subprocess.run(["spm_train", f"--input={lines}", f"--model_prefix={self.path('m')}",
                                  "--vocab_size=60", "--hard_vocab_limit=false", "--minloglevel=2"],
                                 capture_output=True, text=True, timeout=120)
        self.assertEqual(trained.returncode, 0, trained.stderr)
        self.model = self.path("m.model")

    def test_train_on_sentencepiece_tokens_with_bits_per_byte_and_sample(self):
        runs = {}
        for name, tokenizer in (("spm", f"sentencepiece:{self.model}"), ("byte", "byte")):
            out = self.path(name)
            result = run("train", "--dataset", f"text:{self.corpus}", *TINY_GPT, "--tokenizer", tokenizer,
                         "--global-batch", "16", "--micro-batch", "4", "--val-size", "20", "--epochs", "2",
                         "--out", out)
            self.assertEqual(result.returncode, 0, result.stderr)
            runs[name] = (result, records(out))
        result, lines = runs["spm"]
        self.assertIn(f"sentencepiece tokenizer '{self.model}' (vocabulary 60", result.stderr)
        self.assertIn("bits per byte", result.stdout)
        epochs = [r for r in lines if "val_bpb" in r and "event" not in r]
        byte_epochs = [r for r in runs["byte"][1] if "val_bpb" in r and "event" not in r]
        # The same documents in fewer tokens (pieces of several bytes), and bits per byte over
        # the same text bytes, so the two tokenizers' numbers compare.
        self.assertLess(epochs[-1]["tokens_seen"], byte_epochs[-1]["tokens_seen"])
        self.assertGreater(epochs[-1]["val_bpb"], 0)
        self.assertLess(epochs[-1]["val_bpb"], 8)
        sample = run("sample", self.path("spm"), "--prompt", "the quick", "--tokens", "20", "--seed", "3")
        self.assertEqual(sample.returncode, 0, sample.stderr)
        self.assertTrue(sample.stdout.startswith("the quick"), sample.stdout)
        again = run("sample", self.path("spm"), "--prompt", "the quick", "--tokens", "20", "--seed", "3")
        self.assertEqual(sample.stdout, again.stdout)
        shutil.copy(self.model, self.path("spm-model-copy"))
        # Another sentencepiece model under the run's file name (issue 36): its ids would decode
        # into other pieces; sample names the file instead.
        with open(self.path("lines.txt"), "a") as f:
            f.write("a different corpus makes different pieces\n" * 50)
        retrained = subprocess.run(["spm_train", f"--input={self.path('lines.txt')}",
                                    f"--model_prefix={self.path('m')}", "--vocab_size=60",
                                    "--hard_vocab_limit=false", "--minloglevel=2"],
                                   capture_output=True, text=True, timeout=120)
        self.assertEqual(retrained.returncode, 0, retrained.stderr)
        self.assert_one_line_error(run("sample", self.path("spm"), "--prompt", "the quick"), "data",
                                   f"sentencepiece model '{self.model}' is not the one", "restore")
        # evaluate too (issue 59 item 16): it scored the other tokenizer's figures with exit 0.
        self.assert_one_line_error(run("evaluate", self.path("spm")), "data",
                                   f"sentencepiece model '{self.model}' is not the one '{self.path('spm')}' "
                                   "trained with", "restore")
        # A prompt that is not UTF-8 is told to be typed in UTF-8, not to convert a corpus.
        shutil.copy(self.path("spm-model-copy"), self.model)
        latin1 = run("sample", self.path("spm"), "--prompt", "caf\udce9", "--tokens", "2")
        self.assert_one_line_error(latin1, "data", "--prompt is not UTF-8", "give the prompt in UTF-8")
        self.assertNotIn("iconv", latin1.stderr)

    def test_bad_tokenizers_and_text_are_one_line_errors(self):
        def train(*args):
            return run("train", *TINY_GPT, "--out", self.path("bad"), *args)

        corpus = f"text:{self.corpus}"
        self.assert_one_line_error(train("--dataset", corpus, "--tokenizer", f"sentencepiece:{self.path('none.model')}"),
                                   "data", "does not exist", "spm_train")
        with open(self.path("junk.model"), "wb") as f:
            f.write(bytes(range(256)) * 4)
        self.assert_one_line_error(train("--dataset", corpus, "--tokenizer", f"sentencepiece:{self.path('junk.model')}"),
                                   "data", "cannot be read")
        self.assert_one_line_error(train("--dataset", corpus, "--tokenizer", "bpe"), "config",
                                   "tokenizer 'bpe' is not known")
        # Something is there, but not a model file: said as what it is (it was "does not exist").
        self.assert_one_line_error(train("--dataset", corpus, "--tokenizer", f"sentencepiece:{self.dir}"),
                                   "data", "is a directory, not a .model file")
        self.assert_one_line_error(train("--dataset", corpus, "--tokenizer", "sentencepiece:/dev/zero"),
                                   "data", "'/dev/zero' is not a regular file")
        latin1 = self.path("latin1.txt")
        with open(latin1, "wb") as f:
            f.write("caf\u00e9 au lait\n%\nna\u00efve\n%\n".encode("latin-1"))
        self.assert_one_line_error(train("--dataset", f"text:{latin1}", "--tokenizer", f"sentencepiece:{self.model}"),
                                   "data", "document 1 of", "is not UTF-8", "offset 3", "--tokenizer byte")
        # The byte tokenizer takes the same bytes as they are.
        self.assertEqual(train("--dataset", f"text:{latin1}", "--max-updates", "1", "--val-size", "1",
                               "--global-batch", "1", "--micro-batch", "1").returncode, 0)
        shutil.rmtree(self.path("bad"))
        token_files.write_llmc(self.path("shard.bin"), list(range(100)) * 20)
        self.assert_one_line_error(train("--dataset", f"tokens:{self.path('shard.bin')}", "--tokenizer",
                                         f"sentencepiece:{self.model}"), "config", "tokenised already")
        self.assertFalse(os.path.exists(self.path("bad")))


if __name__ == "__main__":
    main()
