#!/usr/bin/python3
"""End-to-end tests of memory as a budget: `bigbatch fit`, `--micro-batch auto`, the
out-of-memory back-off that keeps the global batch (and the weights) exact, `--strict-batch`,
uneven micro-batches, and the memory figures in metrics.jsonl.
Usage: test_memory.py BIGBATCH_BINARY [unittest arguments]."""
import functools
import json
import os
import re

import e2e_common
from e2e_common import CliTestCase, main, max_relative_difference, read_weights
from e2e_common import records as metrics

# The default mlp (784-512-256-10) on 8192 samples: big enough that a 12 MiB budget cannot hold
# a micro-batch of 4096 (its input alone is 12.25 MiB), small enough to run in a second.
MLP = ["--model", "mlp", "--train-subset", "8192", "--threads", "1", "--progress", "off"]
run = functools.partial(e2e_common.run, timeout=300)  # this module's limit on a command


def updates(run_dir):
    return [m for m in metrics(run_dir) if "loss" in m]


class MemoryTestCase(CliTestCase):
    PREFIX = "bigbatch_memory_"

    def train(self, name, *args):
        out = os.path.join(self.dir, name)
        result = run("train", *MLP, *args, "--out", out)
        return result, out


class BackOffTest(MemoryTestCase):
    def test_back_off_ends_at_the_weights_of_the_smaller_micro_batch(self):
        backed, backed_dir = self.train("backed", "--global-batch", "4096", "--micro-batch", "4096",
                                        "--memory-budget", "12MiB", "--epochs", "2")
        self.assertEqual(backed.returncode, 0, backed.stderr)
        self.assertIn("backing off to 4096 = micro 2048 x accumulation 2", backed.stderr)
        events = [m for m in metrics(backed_dir) if m.get("event") == "oom_backoff"]
        self.assertGreaterEqual(len(events), 2)
        self.assertTrue(all(e["global_batch"] == 4096 for e in events))
        final_micro = events[-1]["micro_batch"]
        steps = updates(backed_dir)
        self.assertEqual([m["items"] for m in steps], [4096] * 4)  # the global batch never moved
        self.assertEqual(steps[-1]["micro_batch"], final_micro)

        direct, direct_dir = self.train("direct", "--global-batch", "4096", "--micro-batch",
                                        str(final_micro), "--epochs", "2")
        self.assertEqual(direct.returncode, 0, direct.stderr)
        difference = max_relative_difference(read_weights(os.path.join(backed_dir, "weights.safetensors")),
                                             read_weights(os.path.join(direct_dir, "weights.safetensors")))
        self.assertLess(difference, 1e-5)

    def test_a_token_budget_that_does_not_fit_halves_and_keeps_the_update(self):
        # --micro-batch-tokens cuts the window by padded tokens: a back-off halves that budget
        # (the window, the plan's micro-batch, stays) and replays the window, and evaluation
        # runs within what is left of it.
        lm = ["--dataset", "text:/usr/share/games/fortunes", "--model", "gpt", "--layers", "1", "--d-model", "32",
              "--heads", "2", "--seq-len", "128", "--global-batch", "32", "--max-updates", "3", "--optimizer",
              "adamw", "--lr", "1e-3", "--schedule", "constant", "--threads", "1", "--progress", "off"]
        backed_dir, direct_dir = os.path.join(self.dir, "backed"), os.path.join(self.dir, "direct")
        backed = run("train", *lm, "--micro-batch-tokens", "4096", "--memory-budget", "10MiB", "--out",
                     backed_dir)
        self.assertEqual(backed.returncode, 0, backed.stderr)
        self.assertIn("at 4096 padded tokens per micro-batch", backed.stderr)
        events = [m for m in metrics(backed_dir) if m.get("event") == "oom_backoff"]
        self.assertEqual([e["micro_batch_tokens"] for e in events], [2048, 1024])
        self.assertTrue(all(m["peak_bytes"] <= 10 << 20 and m["micro_batch_tokens"] == 1024
                            for m in updates(backed_dir)))
        # Not below one row of --seq-len: there the run stops, naming it.
        floor = run("train", *lm, "--micro-batch-tokens", "512", "--memory-budget", "1MiB", "--out",
                    os.path.join(self.dir, "floor"))
        self.assertEqual(floor.returncode, 5, floor.stderr)
        self.assertIn("backing off to 256", floor.stderr)
        self.assertIn("backing off to 128", floor.stderr)
        self.assertNotIn("backing off to 64", floor.stderr)
        self.assertIn("error[memory]: out of memory at --micro-batch-tokens 128, one row of --seq-len 128", floor.stderr)
        direct = run("train", *lm, "--micro-batch-tokens", "1024", "--out", direct_dir)
        self.assertEqual(direct.returncode, 0, direct.stderr)
        self.assertEqual([m["items"] for m in updates(backed_dir)], [m["items"] for m in updates(direct_dir)])
        difference = max_relative_difference(read_weights(os.path.join(backed_dir, "weights.safetensors")),
                                             read_weights(os.path.join(direct_dir, "weights.safetensors")))
        self.assertLess(difference, 1e-5)

    def test_micro_batch_of_one_that_does_not_fit_is_a_clear_error(self):
        # The model fits (2 MiB of weights), a single sample's step does not.
        result, _ = self.train("floor", "--global-batch", "64", "--micro-batch", "64", "--memory-budget", "2200KiB",
                               "--epochs", "1")
        self.assert_one_line_error(result, "memory", "micro-batch 1", code=5)

    def test_model_larger_than_the_budget_is_a_clear_error(self):
        result, out = self.train("tiny", "--memory-budget", "1MiB", "--epochs", "1")
        self.assert_one_line_error(result, "memory", "memory budget exceeded", code=5)
        self.assertFalse(os.path.exists(out))

    def test_strict_batch_refuses_to_change_batchnorm_statistics(self):
        result, _ = self.train("strict", "--model", "cnn-bn", "--train-subset", "512", "--global-batch", "256",
                               "--micro-batch", "256", "--memory-budget", "40MiB", "--strict-batch", "--epochs", "1")
        self.assert_one_line_error(result, "memory", "--strict-batch", code=5)

    def test_batchnorm_back_off_is_announced(self):
        result, _ = self.train("bn", "--model", "cnn-bn", "--train-subset", "512", "--global-batch", "256",
                               "--micro-batch", "256", "--memory-budget", "40MiB", "--epochs", "1")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("now normalises over micro-batches of 128 instead of 256", result.stderr)


class FitTest(MemoryTestCase):
    def test_fit_json_never_exceeds_the_budget(self):
        # A global batch large enough that the budget, not the batch, ends the search.
        result = run("fit", "--model", "mlp", "--memory-budget", "32MiB", "--global-batch", "8192", "--threads", "1",
                     "--json")
        self.assertEqual(result.returncode, 0, result.stderr)
        fit = json.loads(result.stdout)
        self.assertEqual(fit["budget_bytes"], 32 << 20)
        rows = {row["micro_batch"]: row for row in fit["table"]}
        best = fit["max_micro_batch"]
        self.assertGreater(best, 64)
        self.assertLessEqual(rows[best]["peak_bytes"], fit["budget_bytes"] * 0.9)
        self.assertTrue(any(not row["fits"] and size > best for size, row in rows.items()))
        for size, row in rows.items():
            self.assertEqual(row["fits"], size <= best, row)
            if row["fits"]:
                self.assertLessEqual(row["peak_bytes"], fit["usable_bytes"])
                # Timed in three rounds; the speed shown is their median.
                self.assertEqual(len(row["samples_per_s_rounds"]), 3, row)
                self.assertEqual(row["samples_per_s"], sorted(row["samples_per_s_rounds"])[1])
        self.assertIn(fit["fastest_micro_batch"], [s for s, r in rows.items() if r["fits"]])
        # Named the fastest: the largest of the sizes within the timing noise of the best median.
        best_speed = max(r["samples_per_s"] for r in rows.values() if r["fits"])
        self.assertGreaterEqual(rows[fit["fastest_micro_batch"]]["samples_per_s"], 0.5 * best_speed)
        self.assertTrue(all(s < fit["fastest_micro_batch"] for s in fit["as_fast"]))
        # Peak memory grows with the micro-batch.
        fitting = sorted(s for s, r in rows.items() if r["fits"])
        self.assertGreater(rows[fitting[-1]]["peak_bytes"], rows[fitting[0]]["peak_bytes"])

    def test_fit_prints_a_table_and_the_command_to_use(self):
        result = run("fit", "--model", "mlp", "--memory-budget", "16MiB", "--threads", "1")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertRegex(result.stdout, r"micro batch\s+peak memory\s+samples/s")
        self.assertIn("<- largest", result.stdout)
        self.assertIn("largest fitting micro-batch:", result.stdout)
        self.assertIn("--micro-batch auto --memory-budget 16MiB", result.stdout)
        # The command repeats what was given (the model, its shape, its data), so it runs as shown.
        self.assertRegex(result.stdout, r"train with it: bigbatch train --model mlp --threads 1 --global-batch G "
                                        r"--micro-batch \d+ ")
        lm = run("fit", "--dataset", "text:/usr/share/games/fortunes", "--model", "gpt", "--layers", "1",
                 "--d-model", "32", "--heads", "2", "--seq-len", "64", "--memory-budget", "64MiB", "--threads",
                 "1")
        self.assertEqual(lm.returncode, 0, lm.stderr)
        # Probed where memory peaks: rows as long as --seq-len allows (fortunes has many longer).
        self.assertIn("each size probed at the longest rows (64 target tokens", lm.stdout)
        line = [l for l in lm.stdout.splitlines() if l.startswith("train with it: ")][0]
        self.assertIn("--model gpt --dataset text:/usr/share/games/fortunes --seq-len 64 --layers 1 --d-model 32 "
                      "--heads 2", line)
        # ... and plans as written (G filled in: a few micro-batches, whichever size was fastest).
        micro = int(re.search(r"--micro-batch (\d+)", line).group(1))
        words = line[len("train with it: bigbatch train "):].split(" (or")[0].replace(" G ", f" {4 * micro} ").split()
        planned = run("plan", *words)
        self.assertEqual(planned.returncode, 0, planned.stderr)
        # Fitting micro-batches cut by tokens: the answer is a token bound, which train takes.
        tokens = run("fit", "--dataset", "text:/usr/share/games/fortunes", "--model", "gpt", "--layers", "1",
                     "--d-model", "32", "--heads", "2", "--seq-len", "64", "--micro-batch-tokens", "2048",
                     "--memory-budget", "16MiB", "--threads", "1")
        self.assertEqual(tokens.returncode, 0, tokens.stderr)
        line = [l for l in tokens.stdout.splitlines() if l.startswith("train with it: ")][0]
        fastest = int(re.search(r"fastest fitting micro-batch: (\d+)", tokens.stdout).group(1))
        self.assertIn(f"--micro-batch-tokens {fastest * 64} ({fastest} of the longest rows, 64 tokens each)", line)
        self.assertNotIn("--micro-batch ", line)
        words = line[len("train with it: bigbatch train "):].split(" (")[0].replace(" G ", " 64 ").split()
        planned = run("plan", *words)
        self.assertEqual(planned.returncode, 0, planned.stderr)

    def test_fit_searches_up_to_the_global_batch_in_the_available_memory(self):
        # No budget: the memory available now, as --micro-batch auto takes; no --global-batch:
        # the default 256 bounds the search, since no run trains at a larger micro-batch.
        result = run("fit", "--model", "mlp", "--threads", "1")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("the memory available now", result.stdout)
        self.assertIn("searched up to micro-batch 256: the global batch 256 (the default; --global-batch searches "
                      "further)", result.stdout)
        sizes = [int(line.split()[0]) for line in result.stdout.splitlines() if re.match(r"\s+\d+\s", line)]
        self.assertEqual(sizes, [1, 2, 4, 8, 16, 32, 64, 128, 256])
        self.assertIn("largest fitting micro-batch: 256", result.stdout)
        self.assertRegex(result.stdout, r"fastest fitting micro-batch: \d+ \(the median of 3 timing rounds")
        # Each row printed once: progress goes to a terminal only (or when --progress lines asks).
        self.assertNotIn("fit: ", result.stderr)
        # Four ranks share a global batch of 512: 128 each.
        result = run("fit", "--model", "mlp", "--threads", "1", "--global-batch", "512", "--world-size", "4",
                     "--memory-budget", "64MiB", "--progress", "lines")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("searched up to micro-batch 128: a rank's share of the global batch 512\n", result.stdout)
        self.assertIn("--global-batch 512 --micro-batch ", result.stdout)
        probed = [line for line in result.stderr.splitlines() if line.startswith("fit: micro-batch ")]
        self.assertGreaterEqual(len(probed), 8 + 2 * 8)  # the search, then two more timing rounds

    def test_fit_with_nothing_fitting_exits_non_zero(self):
        result = run("fit", "--model", "mlp", "--memory-budget", "1MiB", "--threads", "1", "--json")
        self.assertEqual(result.returncode, 5, result.stderr)
        self.assertEqual(json.loads(result.stdout)["max_micro_batch"], 0)


class AutoTest(MemoryTestCase):
    def test_auto_micro_batch_fits_and_keeps_the_global_batch(self):
        result, out = self.train("auto", "--global-batch", "2048", "--micro-batch", "auto",
                                 "--memory-budget", "16MiB", "--epochs", "1")
        self.assertEqual(result.returncode, 0, result.stderr)
        chosen = int(re.search(r"micro-batch auto: (\d+)", result.stderr).group(1))
        self.assertLessEqual(chosen, 2048)
        micro_steps = -(-2048 // chosen)
        self.assertEqual(chosen, -(-2048 // micro_steps))  # its micro-steps in parts as equal as they go
        steps = updates(out)
        self.assertTrue(all(m["items"] == 2048 and m["micro_batch"] == chosen for m in steps))
        self.assertTrue(all(m["peak_bytes"] <= 16 << 20 for m in steps))
        # The resolved configuration repeats the run with the measured size.
        with open(os.path.join(out, "config.toml")) as f:
            self.assertIn(f"micro-batch = {chosen}\n", f.read())

    def test_auto_micro_batch_of_a_language_model_holds_its_longest_rows(self):
        # Fortunes documents run from 1 to 2,400 bytes: the probe takes rows cut at --seq-len, so
        # no window, however long its documents, backs off or passes the budget.
        out = os.path.join(self.dir, "lm")
        result = run("train", "--dataset", "text:/usr/share/games/fortunes", "--model", "gpt", "--layers", "1",
                     "--d-model", "32", "--heads", "2", "--seq-len", "64", "--global-batch", "64",
                     "--micro-batch", "auto", "--memory-budget", "12MiB", "--max-updates", "6", "--threads", "1",
                     "--progress", "off", "--out", out)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("probed at the longest rows, 64 target tokens", result.stderr)
        chosen = int(re.search(r"micro-batch auto: (\d+)", result.stderr).group(1))
        self.assertLess(chosen, 64)  # the budget is what decides here
        self.assertEqual(chosen, -(-64 // -(-64 // chosen)))  # evened over its micro-steps
        steps = updates(out)
        self.assertEqual(len(steps), 6)
        self.assertTrue(all(m["micro_batch"] == chosen and m["peak_bytes"] <= 12 << 20 for m in steps))
        self.assertEqual([m for m in metrics(out) if m.get("event") == "oom_backoff"], [])


class RecomputeChoiceTest(MemoryTestCase):
    GPT = ["--dataset", "text:/usr/share/games/fortunes", "--model", "gpt", "--layers", "2", "--d-model", "64",
           "--heads", "2", "--seq-len", "64", "--optimizer", "adamw", "--threads", "1", "--progress", "off"]

    def test_fit_weighs_recomputing_the_gpts_blocks_and_takes_it_only_where_nothing_fits_without(self):
        result = run("fit", *self.GPT, "--memory-budget", "24MiB", "--json")
        self.assertEqual(result.returncode, 0, result.stderr)
        fit = json.loads(result.stdout)
        plain, recomputed = fit["table"], fit["recomputed"]["table"]
        # More micro-batch in the same memory; not taken while a size fits without (less compute).
        self.assertGreater(fit["recomputed"]["max_micro_batch"], fit["max_micro_batch"])
        self.assertFalse(fit["recompute"])
        peak = {name: next(r["peak_bytes"] for r in rows if r["micro_batch"] == 1)
                for name, rows in (("plain", plain), ("recomputed", recomputed))}
        self.assertLess(peak["recomputed"], peak["plain"])
        text = run("fit", *self.GPT, "--memory-budget", "24MiB")
        self.assertIn("with --recompute (each block recomputed in the backward", text.stdout)
        self.assertIn("not taken (accumulation trains the same update at the smaller micro-batch", text.stdout)
        self.assertNotIn("--recompute --global-batch", text.stdout)
        # A budget whose usable part (90%) lies between the two peaks of one sample: only recomputing fits.
        budget = str(int((peak["plain"] + peak["recomputed"]) / 2 / 0.9)) + "B"
        text = run("fit", *self.GPT, "--memory-budget", budget)
        self.assertEqual(text.returncode, 0, text.stderr)
        self.assertIn("(none without): the only way to fit, so the fit takes it", text.stdout)
        self.assertIn(" --recompute --global-batch G --micro-batch 1", text.stdout)
        # --micro-batch auto takes it too, says so, and records it for a rerun or resume.
        out = os.path.join(self.dir, "auto-recompute")
        trained = run("train", *self.GPT, "--memory-budget", budget, "--micro-batch", "auto", "--global-batch",
                      "4", "--max-updates", "3", "--out", out)
        self.assertEqual(trained.returncode, 0, trained.stderr)
        self.assertIn("not even a micro-batch of 1 fits without --recompute; with it", trained.stderr)
        with open(os.path.join(out, "config.toml")) as f:
            self.assertIn("recompute = true\n", f.read())


class MetricsTest(MemoryTestCase):
    def test_memory_figures_are_in_metrics_and_progress(self):
        result, out = self.train("metrics", "--global-batch", "1024", "--micro-batch", "256", "--epochs", "1",
                                 "--progress", "lines")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertRegex(result.stderr, r"mem \d+\.\d MiB")
        records = metrics(out)
        start = records[0]
        self.assertEqual(start["event"], "train_start")
        self.assertGreater(start["tensor_bytes"], 0)  # the weights
        for record in records[1:]:
            self.assertGreater(record["peak_bytes"], start["tensor_bytes"])
            self.assertGreater(record["rss_peak_bytes"], record["peak_bytes"])
            self.assertGreaterEqual(record["rss_peak_bytes"], start["rss_bytes"] // 2)

    def test_uneven_micro_batches_match_one_batch(self):
        uneven, uneven_dir = self.train("uneven", "--global-batch", "1000", "--micro-batch", "96",
                                        "--train-subset", "3000", "--epochs", "1")
        self.assertEqual(uneven.returncode, 0, uneven.stderr)
        self.assertIn("last micro-batch: 40", uneven.stderr)
        self.assertEqual([m["micro_steps"] for m in updates(uneven_dir)], [11, 11, 11])
        whole, whole_dir = self.train("whole", "--global-batch", "1000", "--micro-batch", "1000",
                                      "--train-subset", "3000", "--epochs", "1")
        self.assertEqual(whole.returncode, 0, whole.stderr)
        difference = max_relative_difference(read_weights(os.path.join(uneven_dir, "weights.safetensors")),
                                             read_weights(os.path.join(whole_dir, "weights.safetensors")))
        self.assertLess(difference, 1e-5)

    def test_strict_batch_refuses_a_short_last_window(self):
        result, _ = self.train("short", "--global-batch", "1000", "--micro-batch", "100", "--strict-batch",
                               "--epochs", "1")
        self.assert_one_line_error(result, "plan", "--strict-batch: the last update of each epoch would have 192")
        result, _ = self.train("dropped", "--global-batch", "1000", "--micro-batch", "100", "--strict-batch",
                               "--last-window", "drop", "--epochs", "1")
        self.assertEqual(result.returncode, 0, result.stderr)


if __name__ == "__main__":
    main(verbosity=2)
