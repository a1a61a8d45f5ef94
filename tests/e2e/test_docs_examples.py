#!/usr/bin/python3
"""The commands of the README and of docs/, run or planned as written; the examples of
docs/your-model.md, run as written: its Python writes the module, its commands train and verify
it, and its last Python loads the results (with a stand-in for the `safetensors` package, which
Debian does not ship, reading the same file format).
Usage: test_docs_examples.py BIGBATCH_BINARY [unittest arguments]."""
import json
import os
import re
import shlex
import subprocess
import sys
import unittest

from e2e_common import CliTestCase, main, run

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SAFETENSORS_STAND_IN = '''
import sys
sys.path.insert(0, {python_dir!r})
from bigbatch_oracle import read_safetensors as load_file
'''


def blocks(path, language):
    with open(path) as f:
        return re.findall(r"```" + language + r"\n(.*?)```", f.read(), re.S)


class DocTestCase(CliTestCase):
    """A fresh directory per test (self.dir), removed afterwards."""

    PREFIX = "bigbatch_docs_"


README = os.path.join(ROOT, "README.md")
DOCS = [README] + sorted(os.path.join(ROOT, "docs", name) for name in os.listdir(os.path.join(ROOT, "docs"))
                         if name.endswith(".md"))


def doc_commands(paths=DOCS):
    """Every `bigbatch ...` line of the sh blocks of `paths` (the README and every page of docs/
    by default), continuations joined, comments cut."""
    commands = []
    for path in paths:
        for block in blocks(path, "sh"):
            for line in block.replace("\\\n", " ").splitlines():
                line = line.split("  #")[0].strip()
                if line.startswith("bigbatch "):
                    commands.append(shlex.split(line))
    return commands


def readme_commands():
    return doc_commands([README])


def write_arrays(directory):
    """What the README's *Your own arrays* expects in data/: 3 classes of 20 features, a test
    split, and x_new.npy to predict."""
    import numpy as np
    rng = np.random.default_rng(0)
    centres = rng.normal(0, 3, (3, 20)).astype(np.float32)
    os.makedirs(os.path.join(directory, "data"), exist_ok=True)
    for split, n in (("train", 600), ("test", 150)):
        y = rng.integers(0, 3, n)
        np.save(os.path.join(directory, "data", f"x_{split}.npy"), centres[y] + rng.normal(0, 1, (n, 20)).astype(np.float32))
        np.save(os.path.join(directory, "data", f"y_{split}.npy"), y.astype(np.int64))
    np.save(os.path.join(directory, "x_new.npy"), rng.normal(0, 3, (4, 20)).astype(np.float32))


class ReadmeExamplesTest(DocTestCase):
    """The commands of the README and docs/: each train command plans as written (its flags,
    values, batch sizes and learning rate hold together), each plan command runs as written, and
    the README's recipes train as written."""

    def test_every_train_command_plans_as_written(self):
        write_arrays(self.dir)  # the README's npy:data
        planned = 0
        for words in doc_commands():
            if words[1] == "plan":
                result = run(*words[1:], timeout=300, cwd=self.dir)
                self.assertEqual(result.returncode, 0, " ".join(words) + "\n" + result.stderr)
                self.assertIn("batch plan", result.stdout)
                continue
            world = 1
            if words[1] == "launch":  # bigbatch launch --nproc N [...] -- bigbatch train ...
                world = int(words[words.index("--nproc") + 1]) * int(
                    words[words.index("--nnodes") + 1] if "--nnodes" in words else 1)
                words = words[words.index("--") + 1:]
            if words[1] != "train" or "..." in words:
                continue
            flags = words[2:]
            # Not plannable ahead by design: a resume (its config.toml plans it), a config file
            # another example writes, a model file the reader writes first, a measured micro-batch.
            measured = "--micro-batch" in flags and flags[flags.index("--micro-batch") + 1] == "auto"
            if any(f in flags for f in ("--resume", "--config")) or measured or any(
                    f.startswith("torchscript:") for f in flags):
                continue
            result = run("plan", *flags, "--world-size", str(world), timeout=300, cwd=self.dir)
            self.assertEqual(result.returncode, 0, " ".join(words) + "\n" + result.stderr)
            self.assertIn("batch plan", result.stdout)
            planned += 1
        self.assertGreaterEqual(planned, 5)

    def test_the_featured_example_and_its_repeat_train_as_written(self):
        commands = [w for w in doc_commands() if "runs/mlp-1024" in " ".join(w)]
        self.assertEqual(len(commands), 2, commands)
        for words in commands:
            result = run(*words[1:], "--progress", "off", cwd=self.dir)
            self.assertEqual(result.returncode, 0, " ".join(words) + "\n" + result.stderr)
            accuracy = float(result.stdout.split("test accuracy ")[1].split("%")[0])
            self.assertGreater(accuracy, 85.0, result.stdout)
        # The TOML twin of the configuration section trains too.
        twin = [b for path in DOCS for b in blocks(path, "toml") if "global-batch = 1024" in b]
        self.assertEqual(len(twin), 1)
        with open(os.path.join(self.dir, "twin.toml"), "w") as f:
            f.write(twin[0])
        result = run("train", "--config", "twin.toml", "--out", "runs/twin", "--progress", "off", cwd=self.dir)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertGreater(float(result.stdout.split("test accuracy ")[1].split("%")[0]), 85.0)


    def test_the_automatic_batch_example_grows_as_written(self):
        (words,) = [w for w in doc_commands()
                    if "--global-batch" in w and w[w.index("--global-batch") + 1] == "auto"]
        result = run(*words[1:], "--progress", "off", cwd=self.dir)
        self.assertEqual(result.returncode, 0, " ".join(words) + "\n" + result.stderr)
        self.assertRegex(result.stderr, r"automatic batch: 32 -> 64\b.*replay it with --global-batch-schedule")

    def test_the_other_commands_run_as_written(self):
        """verify, fit --json, lr-find and the sweep (listed by --dry-run: 48 cells of 20 epochs are an
        evening's work) exactly as the README gives them; evaluate and predict run on the
        TorchScript run they name, in YourModelDocTest."""
        by_command = {}
        for words in doc_commands():
            if not any(w.startswith("torchscript:") for w in words):  # YourModelDocTest runs those
                by_command.setdefault(words[1], []).append(words)
        (verify,) = by_command["verify"]
        result = run(*verify[1:], cwd=self.dir)
        self.assertEqual(result.returncode, 0, " ".join(verify) + "\n" + result.stderr)
        self.assertIn("exact to fp32 tolerance", result.stdout)
        fit_json = [w for w in by_command["fit"] if "--json" in w]
        self.assertEqual(len(fit_json), 1)
        result = run(*fit_json[0][1:], cwd=self.dir)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertGreater(json.loads(result.stdout)["fastest_micro_batch"], 0)
        (sweep,) = by_command["sweep"]
        result = run(*sweep[1:], "--dry-run", timeout=120, cwd=self.dir)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("sweep: 48 cells (8 global batches x 3 LR rules x 2 warmups)", result.stderr)
        self.assertEqual(len([line for line in result.stdout.splitlines() if line.startswith("gb")]), 48)
        self.assertIn("(dry run: nothing was trained or written)", result.stdout)
        self.assertEqual(os.listdir(self.dir), [])
        # lr-find writes a run of its own (runs/lr-find-<time>): after the sweep's empty check.
        lr_find = by_command["lr-find"][0]  # the README's, which docs/reference.md repeats
        self.assertTrue(all(words == lr_find for words in by_command["lr-find"]))
        result = run(*lr_find[1:], cwd=self.dir)
        self.assertEqual(result.returncode, 0, " ".join(lr_find) + "\n" + result.stderr)
        self.assertRegex(result.stdout, r"train with it: bigbatch train --model mlp --global-batch 1024 --micro-batch 64 "
                                        r"--lr [\d.e-]+ \(taken as tuned at this global batch")

    def test_the_recipe_for_your_own_arrays_runs_as_written(self):
        write_arrays(self.dir)
        commands = [w for w in readme_commands() if "runs/mine" in w or "npy:data" in w]
        self.assertEqual([w[1] for w in commands], ["train", "evaluate", "predict"])
        for words in commands:
            result = run(*words[1:], cwd=self.dir)
            self.assertEqual(result.returncode, 0, " ".join(words) + "\n" + result.stderr)
            if words[1] == "train":
                self.assertIn("3 classes", result.stderr)
                self.assertGreater(float(result.stdout.split("test accuracy ")[1].split("%")[0]), 90.0)
            if words[1] == "evaluate":
                self.assertIn("accuracy", result.stdout)
        import numpy as np
        predictions = np.load(os.path.join(self.dir, words[words.index("--output") + 1]))
        self.assertEqual(predictions.shape, (4, 3))

    def test_the_readme_trains_only_modules_docs_your_model_writes_and_runs(self):
        your_model = doc_commands([os.path.join(ROOT, "docs", "your-model.md")])
        scripted = [w for w in readme_commands() if any(x.startswith("torchscript:") for x in w)]
        self.assertGreaterEqual(len(scripted), 1)
        for words in scripted:
            self.assertIn(words, your_model)


class BenchmarkCommandsTest(unittest.TestCase):
    """docs/benchmarks.md says how each table was measured (`bench/NAME.py ARGS`); running them
    takes hours, so this checks what can go stale: each script exists, answers --help, and has
    every flag the text gives it."""

    def test_every_benchmark_command_names_a_script_and_flags_it_has(self):
        with open(os.path.join(ROOT, "docs", "benchmarks.md")) as f:
            commands = re.findall(r"`(bench/[a-z_]+\.py)([^`]*)`", f.read())
        self.assertGreaterEqual(len(commands), 10)
        helps = {}
        for script, args in commands:
            path = os.path.join(ROOT, script)
            self.assertTrue(os.path.exists(path), script)
            if script not in helps:
                result = subprocess.run([sys.executable, path, "--help"], capture_output=True, text=True,
                                        timeout=120)
                self.assertEqual(result.returncode, 0, script + "\n" + result.stderr)
                helps[script] = result.stdout + result.stderr
            for flag in re.findall(r"(?<!\S)--[a-z][a-z-]*", args):
                self.assertIn(flag, helps[script], f"{script}{args}: {flag}")


class YourModelDocTest(DocTestCase):

    def test_the_example_runs_as_written(self):
        doc = os.path.join(ROOT, "docs", "your-model.md")
        python, shell = blocks(doc, "python"), blocks(doc, "sh")
        self.assertEqual((len(python), len(shell)), (2, 1))
        write_module = os.path.join(self.dir, "write_module.py")
        with open(write_module, "w") as f:
            f.write(python[0])
        subprocess.run([sys.executable, write_module], cwd=self.dir, check=True)
        for line in shell[0].strip().splitlines():
            words = shlex.split(line)
            self.assertEqual(words[0], "bigbatch")
            result = run(*words[1:], cwd=self.dir)
            self.assertEqual(result.returncode, 0, line + "\n" + result.stdout + result.stderr)
            if words[1] == "train":
                self.assertIn("test accuracy", result.stdout + result.stderr)
            if words[1] == "verify":
                self.assertIn("exact to fp32 tolerance", result.stdout)
        stand_in = os.path.join(self.dir, "stand_in", "safetensors")
        os.makedirs(stand_in)
        open(os.path.join(stand_in, "__init__.py"), "w").close()
        with open(os.path.join(stand_in, "torch.py"), "w") as f:
            f.write(SAFETENSORS_STAND_IN.format(python_dir=os.path.join(ROOT, "tests", "python")))
        use_results = os.path.join(self.dir, "use_results.py")
        with open(use_results, "w") as f:
            f.write(python[0] + "\n" + python[1])  # the class, then its use
        env = dict(os.environ, PYTHONPATH=os.path.join(self.dir, "stand_in"))
        result = subprocess.run([sys.executable, use_results], cwd=self.dir, env=env, capture_output=True,
                                text=True)
        self.assertEqual(result.returncode, 0, result.stderr)

        # docs/reference.md's evaluate and predict, on this run (runs/small_cnn), as written.
        import numpy as np
        np.save(os.path.join(self.dir, "x_new.npy"), np.random.default_rng(0).random((5, 28, 28), np.float32))
        for words in doc_commands():
            if words[1] in ("evaluate", "predict") and "runs/small_cnn" in words:
                result = run(*words[1:], cwd=self.dir)
                self.assertEqual(result.returncode, 0, " ".join(words) + "\n" + result.stderr)
                if words[1] == "evaluate":
                    self.assertIn("accuracy", json.loads(result.stdout))
        probabilities = np.load(os.path.join(self.dir, "probabilities.npy"))
        self.assertEqual(probabilities.shape, (5, 10))
        np.testing.assert_allclose(probabilities.sum(axis=1), 1, rtol=1e-5)


class WeightsDocTest(DocTestCase):
    """docs/weights.md's reader (no safetensors package) and its input preparation, on a run."""

    def test_the_reader_loads_a_run_and_the_stated_normalisation_gives_its_accuracy(self):
        run_dir = os.path.join(self.dir, "run")
        result = run("train", "--model", "mlp", "--hidden", "64", "--train-subset", "4000", "--epochs", "1",
                     "--threads", "1", "--progress", "off", "--out", run_dir)
        self.assertEqual(result.returncode, 0, result.stderr)
        (reader,) = blocks(os.path.join(ROOT, "docs", "weights.md"), "python")
        check = reader + f"""
import gzip, json
tensors, meta = load_safetensors({os.path.join(run_dir, "weights.safetensors")!r})
# The normalisation this run measured on its 4000 training images, as the docs say to read it.
mean, std = float(meta["pixel_mean"]), float(meta["pixel_std"])
assert abs(mean - 0.286) < 0.01 and abs(std - 0.353) < 0.01, meta
assert meta["inputs"] == f"(pixel / 255 - {{mean:.6g}}) / {{std:.6g}}, shape [N, 1, H, W]", meta
model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
model.load_state_dict(tensors, strict=True)
def idx(path):
    data = gzip.open(path).read()
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(data[3])]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * len(dims)).reshape(dims)
x = idx("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz")
y = idx("/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz")
x = (torch.from_numpy(x.astype(np.float32)).unsqueeze(1) / 255 - mean) / std
with torch.no_grad():
    print(json.dumps(float((model(x).argmax(1).numpy() == y).mean())))
"""
        script = os.path.join(self.dir, "check.py")
        with open(script, "w") as f:
            f.write(check)
        checked = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=300)
        self.assertEqual(checked.returncode, 0, checked.stderr)
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            test_accuracy = [json.loads(line) for line in f if "test_accuracy" in line][-1]["test_accuracy"]
        self.assertAlmostEqual(float(checked.stdout), test_accuracy, delta=1e-4)


if __name__ == "__main__":
    main()
