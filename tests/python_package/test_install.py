"""The Python package's install command, as docs/python.md gives it (pip, no build isolation,
on the engine of the build tree the tests run from), and what the package refuses at import:
a torch other than the one it was built for.

Run with the Python the package was built for, BIGBATCH_ENGINE_BUILD naming the build tree."""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


class InstallTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="bigbatch_install_")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}

    def test_pip_installs_the_package_and_no_console_script(self):
        target = os.path.join(self.dir, "site")
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation",
                        "--no-index", "--no-deps", "--target", target, "./python"],
                       cwd=ROOT, env=self.env, check=True)
        self.assertFalse(os.path.exists(os.path.join(target, "bin")),
                         "the package must not install a console script that shadows the CLI")
        check = ("import bigbatch, json; p = bigbatch.plan(global_batch=64, micro_batch=16, "
                 "dataset_size=1000); print(json.dumps([p.accumulation_steps, bigbatch.__file__]))")
        out = subprocess.run([sys.executable, "-c", check], cwd=self.dir, capture_output=True,
                             text=True, env=dict(self.env, PYTHONPATH=target), check=True)
        self.assertIn("[4, ", out.stdout)
        self.assertIn(target, out.stdout)

    def test_a_build_isolated_from_the_environments_torch_says_how_to_install(self):
        # pip's isolated build environment cannot see the user's torch: the backend says so.
        env = dict(self.env, PYTHONNOUSERSITE="1")
        out = subprocess.run([sys.executable, "-S", "-c",
                              "import sys; sys.path.insert(0, 'python'); import bigbatch_build; "
                              "sys.modules['torch'] = None; bigbatch_build.build_wheel('.')"],
                             cwd=ROOT, capture_output=True, text=True, env=env)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("cannot import torch", out.stderr)
        self.assertIn("--no-build-isolation", out.stderr)

    def test_another_torch_than_the_one_built_for_is_one_import_error(self):
        built = os.path.join(os.environ["BIGBATCH_ENGINE_BUILD"], "python", "bigbatch")
        copy = os.path.join(self.dir, "bigbatch")
        shutil.copytree(built, copy)
        with open(os.path.join(copy, "_build_info.py"), "w") as f:
            f.write('TORCH_VERSION = "0.0.1"\nPYTHON = "elsewhere"\n')
        out = subprocess.run([sys.executable, "-c", "import bigbatch"], cwd=self.dir,
                             capture_output=True, text=True, env=self.env)
        self.assertNotEqual(out.returncode, 0)
        last = out.stderr.strip().splitlines()[-1]
        self.assertTrue(last.startswith("ImportError: bigbatch was built against torch 0.0.1"), last)
        self.assertIn("pip install --no-build-isolation --force-reinstall ./python", last)


if __name__ == "__main__":
    unittest.main()
