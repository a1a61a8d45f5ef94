"""What the end-to-end tests share: running the real binary, reading a run's metrics, and the
check every bad input must pass — one `bigbatch: error[KIND]` line naming the problem, exit 2.

    from e2e_common import CliTestCase, main, run
    class MyTest(CliTestCase):
        def test_x(self):
            self.assert_one_line_error(run("train", "--lr", "-1"), "config", "--lr")
    if __name__ == "__main__":
        main()   # takes BIGBATCH_BINARY from the command line
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

BINARY = None


def run(*args, env=None, cwd=None):
    # errors="replace": a byte-level model may draw bytes that are not UTF-8 (sample prints them).
    return subprocess.run([BINARY, *args], capture_output=True, text=True, errors="replace", timeout=600,
                          env=env, cwd=cwd)


def records(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def update_records(run_dir):
    return [r for r in records(run_dir) if "loss" in r and "event" not in r]


class CliTestCase(unittest.TestCase):
    """A fresh directory per test (self.dir, self.path(...)), removed afterwards."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="bigbatch_e2e_")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    def assert_one_line_error(self, result, kind, *fragments):
        self.assertEqual(result.returncode, 2, result.stdout + result.stderr)
        errors = [line for line in result.stderr.splitlines() if line.startswith("bigbatch: error[")]
        self.assertEqual(len(errors), 1, result.stderr)
        self.assertTrue(errors[0].startswith(f"bigbatch: error[{kind}]"), errors[0])
        for fragment in fragments:
            self.assertIn(fragment, errors[0])


def main(before=None):
    """BIGBATCH_BINARY [unittest arguments]; `before` runs first (shared set-up)."""
    global BINARY
    BINARY = os.path.abspath(sys.argv.pop(1))
    if before:
        before()
    unittest.main()
