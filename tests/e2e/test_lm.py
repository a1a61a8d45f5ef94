#!/usr/bin/python3
"""End-to-end tests of language-model training through the real CLI: a text corpus (the
fortune format, a small one written here and the real fortunes package), the gpt, per-token
metrics and bits per byte, resume, and the bad inputs of text datasets.
Usage: test_lm.py BIGBATCH_BINARY [unittest arguments]."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from e2e_common import CliTestCase

BINARY = None
FORTUNES = "/usr/share/games/fortunes"
TINY_GPT = ["--model", "gpt", "--layers", "1", "--d-model", "32", "--heads", "2", "--seq-len", "64",
            "--optimizer", "adamw", "--lr", "3e-3", "--threads", "1", "--progress", "off"]


def run(*args, env=None):
    # errors="replace": a byte-level model may draw bytes that are not UTF-8 (sample prints them).
    return subprocess.run([BINARY, *args], capture_output=True, text=True, errors="replace", timeout=600,
                          env=env)


def records(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


class LmTestCase(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="bigbatch_lm_")
        self.corpus = os.path.join(self.dir, "corpus")
        # 120 documents of 5 to 150 bytes in the fortune format.
        documents = [("the quick brown fox %d " % i) * (1 + i % 7) for i in range(120)]
        with open(self.corpus, "w") as f:
            f.write("\n%\n".join(documents) + "\n%\n")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    assert_one_line_error = CliTestCase.assert_one_line_error  # the one check of tests/e2e/e2e_common.py


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
        self.assert_one_line_error(run("sample", self.path("nowhere")), "io", "not a finished run directory")
        self.assert_one_line_error(run("sample", out, "--temperature", "0"), "config",
                                   "--temperature must be positive")

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
    def test_fortunes_corpus(self):
        out = self.path("fortunes")
        result = run("train", "--dataset", f"text:{FORTUNES}", *TINY_GPT, "--global-batch", "32",
                     "--micro-batch", "8", "--max-updates", "3", "--out", out)
        self.assertEqual(result.returncode, 0, result.stderr)
        # The .dat indexes and .u8 links are skipped; ~15,000 documents.
        self.assertRegex(result.stderr, r"data: 1[0-9]{4} documents .* binary or repeated skipped")


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


if __name__ == "__main__":
    BINARY = os.path.abspath(sys.argv.pop(1))
    unittest.main()
