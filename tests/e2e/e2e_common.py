"""What the end-to-end tests share: running the real binary, reading a run's files, a free
loopback port, and the check every bad input must pass — one `bigbatch: error[KIND]: MESSAGE`
line naming the problem, its exit code (2 unless said), no libtorch backtrace.

    from e2e_common import CliTestCase, main, run
    class MyTest(CliTestCase):
        def test_x(self):
            self.assert_one_line_error(run("train", "--lr", "-1"), "config", "--lr")
    if __name__ == "__main__":
        main()   # takes BIGBATCH_BINARY from the command line

The binary is BINARY here, set by main(): a module that names it itself (`--`, BINARY, ...)
reads e2e_common.BINARY at the time it runs, never a copy taken at import.
"""
import json
import os
import random
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import unittest

BINARY = None
ERROR_LINE = re.compile(r"^bigbatch: error\[(\w+)\]: (.*)$")


def run(*args, check=False, env=None, cwd=None, timeout=600):
    """bigbatch ARGS to completion, its output captured as text; check: fail unless it exits 0.
    timeout=None waits for ever."""
    # errors="replace": a byte-level model may draw bytes that are not UTF-8 (sample prints them).
    result = subprocess.run([BINARY, *args], capture_output=True, text=True, errors="replace", timeout=timeout,
                            env=env, cwd=cwd)
    if check and result.returncode != 0:
        raise AssertionError(f"bigbatch {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
    return result


def start(*args, stdout=subprocess.PIPE):
    """bigbatch ARGS in the background (stderr piped, text): to be signalled, killed or raced."""
    return subprocess.Popen([BINARY, *args], stdout=stdout, stderr=subprocess.PIPE, text=True, errors="replace")


def read(path, mode="r"):
    with open(path, mode) as f:
        return f.read()


def records(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def comparable(records):
    """Everything but wall-clock and memory figures (measurements of the process, not results;
    a resumed process starts with other allocations), and the process starts."""
    drop = {"time", "samples_per_s", "updates_per_s", "wall_s", "train_seconds", "peak_bytes", "rss_peak_bytes",
            "extra_seconds"}
    return [{k: v for k, v in r.items() if k not in drop} for r in records if r.get("event") != "train_start"]


def update_records(run_dir):
    return [r for r in records(run_dir) if "loss" in r and "event" not in r]


def checkpoints(run_dir):
    root = os.path.join(run_dir, "checkpoints")
    return sorted(d for d in os.listdir(root) if d.startswith("step_")) if os.path.isdir(root) else []


def wait_for_checkpoint(run_dir, process, timeout=120):
    """Whether `process` wrote a checkpoint into `run_dir` before ending or the timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        if checkpoints(run_dir):
            return True
        time.sleep(0.05)
    return False


def kill_and_resume(args, run_dir, kills=3, seed=0, pause=(0.5, 2.0)):
    """`train ARGS --out RUN_DIR`, killed (-9) a random `pause` after a checkpoint exists and
    resumed, `kills` times (fewer if it ends first); returns the last process's exit code."""
    rng = random.Random(seed)
    process = start("train", *args, "--out", run_dir)
    for _ in range(kills):
        if not wait_for_checkpoint(run_dir, process):
            break
        time.sleep(rng.uniform(*pause))
        if process.poll() is None:
            process.kill()
        process.communicate()
        process = start("train", "--resume", run_dir)
    process.communicate(timeout=300)
    return process.returncode


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_weights(path):
    """A safetensors file's float32 tensors, by name (Debian's python3-torch)."""
    import torch
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    header.pop("__metadata__", None)
    return {name: torch.frombuffer(bytearray(blob[8 + n + i["data_offsets"][0]:8 + n + i["data_offsets"][1]]),
                                   dtype=torch.float32).reshape(i["shape"])
            for name, i in header.items() if i["dtype"] == "F32"}


def max_relative_difference(a, b):
    return max(((a[k] - b[k]).norm() / b[k].norm()).item() for k in b)


class CliTestCase(unittest.TestCase):
    """A fresh directory per test (self.dir, self.path(...)), removed afterwards."""

    PREFIX = "bigbatch_e2e_"  # of each test's directory

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix=self.PREFIX)

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    def assert_error(self, result, *fragments, kind=None, code=2, library_log=False):
        """Exit `code`, exactly one `bigbatch: error[KIND]: MESSAGE` line (of any kind, or `kind`)
        with every fragment in its MESSAGE, and no libtorch backtrace (unless `library_log`: a
        library logged on its own before bigbatch's line). Returns the line's match."""
        self.assertEqual(result.returncode, code, result.stdout + result.stderr)
        errors = [line for line in result.stderr.splitlines() if line.startswith("bigbatch: error[")]
        self.assertEqual(len(errors), 1, result.stderr)
        match = ERROR_LINE.match(errors[0])
        self.assertIsNotNone(match, errors[0])
        if kind is not None:
            self.assertEqual(match.group(1), kind, errors[0])
        for fragment in fragments:
            self.assertIn(fragment, match.group(2))
        if not library_log:
            self.assertNotIn("Exception raised from", result.stderr)  # no libtorch backtrace
        return match

    def assert_one_line_error(self, result, kind, *fragments, code=2):
        return self.assert_error(result, *fragments, kind=kind, code=code)


def main(before=None, verbosity=1):
    """BIGBATCH_BINARY [unittest arguments]; `before` runs first (shared set-up)."""
    global BINARY
    BINARY = os.path.abspath(sys.argv.pop(1))
    if before:
        before()
    unittest.main(verbosity=verbosity)
