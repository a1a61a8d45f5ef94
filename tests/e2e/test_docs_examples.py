#!/usr/bin/python3
"""The examples of docs/your-model.md, run as written: its Python writes the module, its
commands train and verify it, and its last Python loads the results (with a stand-in for the
`safetensors` package, which Debian does not ship, reading the same file format).
Usage: test_docs_examples.py BIGBATCH_BINARY [unittest arguments]."""
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import unittest

BINARY = None
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SAFETENSORS_STAND_IN = '''
import sys
sys.path.insert(0, {python_dir!r})
from bigbatch_oracle import read_safetensors as load_file
'''


def blocks(path, language):
    with open(path) as f:
        return re.findall(r"```" + language + r"\n(.*?)```", f.read(), re.S)


class YourModelDocTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="bigbatch_docs_")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_the_example_runs_as_written(self):
        doc = os.path.join(ROOT, "docs", "your-model.md")
        python, shell = blocks(doc, "python"), blocks(doc, "sh")
        self.assertEqual((len(python), len(shell)), (2, 1))
        write_module = os.path.join(self.dir, "write_module.py")
        with open(write_module, "w") as f:
            f.write(python[0])
        subprocess.run(["/usr/bin/python3", write_module], cwd=self.dir, check=True)
        for line in shell[0].strip().splitlines():
            words = shlex.split(line)
            self.assertEqual(words[0], "bigbatch")
            result = subprocess.run([BINARY, *words[1:]], cwd=self.dir, capture_output=True, text=True,
                                    timeout=600)
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
        result = subprocess.run(["/usr/bin/python3", use_results], cwd=self.dir, env=env, capture_output=True,
                                text=True)
        self.assertEqual(result.returncode, 0, result.stderr)


if __name__ == "__main__":
    BINARY = os.path.abspath(sys.argv.pop(1))
    unittest.main()
