#!/usr/bin/python3
"""bigbatch as a C++ library: `cmake --install` the build, build examples/custom_model (its own
torch::nn::Module and data) against the installed package with find_package(bigbatch), run it,
and check what it trained: the same weights for two micro-batches of one global batch, a run
directory like the CLI's, and one-line errors where the CLI meets a C++ program's run.
Usage: test_library.py BIGBATCH_BINARY [unittest arguments]."""
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(HERE, "..", "python"))
from bigbatch_oracle import read_safetensors  # noqa: E402
import e2e_common  # noqa: E402
from e2e_common import CliTestCase, run  # noqa: E402


class LibraryTest(CliTestCase):
    def test_the_installed_package_builds_and_trains_a_program_of_its_own(self):
        build = os.path.dirname(e2e_common.BINARY)
        prefix, example = self.path("prefix"), self.path("example")
        subprocess.run(["cmake", "--install", build, "--prefix", prefix], check=True, capture_output=True)
        self.assertTrue(os.path.exists(os.path.join(prefix, "include", "bigbatch", "bigbatch.h")))
        configure = ["cmake", "-S", os.path.join(ROOT, "examples", "custom_model"), "-B", example,
                     f"-DCMAKE_PREFIX_PATH={prefix}"]
        if shutil.which("ccache"):
            configure.append("-DCMAKE_CXX_COMPILER_LAUNCHER=ccache")
        if shutil.which("ninja"):
            configure += ["-G", "Ninja"]
        result = subprocess.run(configure, capture_output=True, text=True)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        result = subprocess.run(["cmake", "--build", example], capture_output=True, text=True)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        program = os.path.join(example, "custom_model")

        trained = self.path("trained")
        result = subprocess.run([program, trained], capture_output=True, text=True, timeout=300)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("640 updates", result.stdout)
        self.assertGreater(float(result.stdout.split("test accuracy ")[1].split("%")[0]), 90.0)
        for name in ("config.toml", "plan.txt", "metrics.jsonl", "weights.safetensors", "report.html"):
            self.assertTrue(os.path.exists(os.path.join(trained, name)), name)
        # Two micro-batches of the same global batch: the same updates (3 epochs, 24 updates;
        # float32 rounding grows with the updates, so not over the whole run).
        runs = {}
        for micro in (32, 128):
            runs[micro] = self.path(f"run{micro}")
            result = subprocess.run([program, runs[micro], str(micro), "3"], capture_output=True, text=True,
                                    timeout=300)
            self.assertEqual(result.returncode, 0, result.stderr)
        a = read_safetensors(os.path.join(runs[32], "weights.safetensors"))
        b = read_safetensors(os.path.join(runs[128], "weights.safetensors"))
        diff = max(((a[k] - b[k]).norm() / b[k].norm()).item() for k in b)
        print(f"\nlibrary example: micro 32 x 4 vs 128 x 1 after 24 AdamW updates: {diff:.3g}")
        self.assertLess(diff, 1e-5)
        self.assertIn("0.hidden.weight", a)  # the module's own names, inside the Sequential

        # The same errors as the CLI's: a finished run is not overwritten.
        result = subprocess.run([program, trained], capture_output=True, text=True, timeout=300)
        self.assertEqual(result.returncode, 2)
        self.assertIn("already holds a run", result.stderr)
        # The command line cannot rebuild a C++ program's model; it says so in one line.
        self.assert_one_line_error(run("evaluate", trained), "usage", "comes from a C++ program")
        self.assert_one_line_error(run("train", "--model", "cpp:mine", "--out", self.path("cli")), "usage",
                                   "comes from a C++ program")


if __name__ == "__main__":
    e2e_common.main()
