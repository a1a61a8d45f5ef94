"""bigbatch.Accumulator over data-parallel ranks: `bigbatch launch --nproc 2 -- python SCRIPT`
gives each rank its share of every window and one all-reduce per update, so 2 processes end
where one does (to float32's summation order); ranks started differently stop together.

Run with BIGBATCH_BINARY and the package on PYTHONPATH, as test_accumulator."""
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import unittest

import torch

BINARY = os.environ.get("BIGBATCH_BINARY", "build/bigbatch")
SCRIPT = r'''
import os, sys, torch, torch.nn.functional as F, bigbatch
generator = torch.Generator().manual_seed(4)
x, y = torch.randn(100, 12, generator=generator), torch.randint(0, 5, (100,), generator=generator)
torch.manual_seed(int(os.environ.get("RANK", "0")))  # each rank draws other weights: rank 0's win
model = torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.Tanh(), torch.nn.Linear(32, 5))
lr = float(sys.argv[2]) if os.environ.get("RANK") == "1" and len(sys.argv) > 2 else 0.01
acc = bigbatch.Accumulator(model, global_batch=32, micro_batch=8, optimizer="adamw", lr=lr,
                           clip_norm=0.5, max_updates=8, dataset_size=len(x))
for window in acc.windows((x, y)):
    for inputs, targets in window:
        acc.backward(F.cross_entropy(model(inputs), targets, reduction="sum"))
    stats = acc.step()
if acc.rank == 0:
    torch.save({"weights": model.state_dict(), "world": acc.world_size, "stats": stats}, sys.argv[1])
'''

# The same run through bigbatch.train: the engine's loop on each rank.
TRAIN_SCRIPT = r'''
import sys, torch, bigbatch
generator = torch.Generator().manual_seed(4)
x, y = torch.randn(100, 12, generator=generator), torch.randint(0, 5, (100,), generator=generator)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.Tanh(), torch.nn.Linear(32, 5))
run = bigbatch.train(model, (x, y), global_batch=32, micro_batch=8, optimizer="adamw", lr=0.01,
                     clip_norm=0.5, max_updates=8, progress="off", threads=1, out=sys.argv[2],
                     shard_optimizer=len(sys.argv) > 3)  # any third argument: sharded
if run["main_rank"]:
    torch.save({"weights": model.state_dict(), "updates": run["updates"]}, sys.argv[1])
'''


class DataParallelTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="bigbatch_py_dist_")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.script = os.path.join(self.dir, "train.py")
        with open(self.script, "w") as f:
            f.write(SCRIPT)

    def launch(self, out, *extra):
        return subprocess.run([BINARY, "launch", "--nproc", "2", "--", sys.executable, self.script,
                               out, *extra], capture_output=True, text=True, timeout=300)

    def test_two_ranks_end_where_one_process_ends(self):
        one, two = (os.path.join(self.dir, name) for name in ("one.pt", "two.pt"))
        subprocess.run([sys.executable, self.script, one], check=True, timeout=300)
        result = self.launch(two)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        alone, ranks = torch.load(one), torch.load(two)
        self.assertEqual((alone["world"], ranks["world"]), (1, 2))
        self.assertEqual(ranks["stats"]["step"], 8)
        self.assertEqual(ranks["stats"]["samples"], alone["stats"]["samples"])
        for name, weight in alone["weights"].items():
            scale = weight.abs().max().item()
            difference = (weight - ranks["weights"][name]).abs().max().item() / scale
            self.assertLess(difference, 1e-5, name)

    def test_bigbatch_train_on_two_ranks_ends_where_one_process_ends(self):
        script = os.path.join(self.dir, "engine.py")
        with open(script, "w") as f:
            f.write(TRAIN_SCRIPT)
        one, two = (os.path.join(self.dir, name) for name in ("engine1.pt", "engine2.pt"))
        subprocess.run([sys.executable, script, one, os.path.join(self.dir, "run1")], check=True,
                       timeout=300, capture_output=True)
        result = subprocess.run([BINARY, "launch", "--nproc", "2", "--", sys.executable, script,
                                 two, os.path.join(self.dir, "run2")], capture_output=True,
                                text=True, timeout=300)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        alone, ranks = torch.load(one), torch.load(two)
        self.assertEqual(ranks["updates"], 8)
        for name, weight in alone["weights"].items():
            difference = (weight - ranks["weights"][name]).abs().max().item() / weight.abs().max().item()
            self.assertLess(difference, 1e-5, name)

    def test_bigbatch_train_with_the_optimizer_sharded_is_the_unsharded_run_bit_for_bit(self):
        script = os.path.join(self.dir, "engine.py")
        with open(script, "w") as f:
            f.write(TRAIN_SCRIPT)
        weights = []
        for sharded in [False, True]:
            saved = os.path.join(self.dir, f"sharded-{sharded}.pt")
            result = subprocess.run([BINARY, "launch", "--nproc", "2", "--", sys.executable, script, saved,
                                     os.path.join(self.dir, f"run-{sharded}"), *(["shard"] if sharded else [])],
                                    capture_output=True, text=True, timeout=300)
            self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
            if sharded:
                self.assertIn("optimizer state sharded over 2 ranks", result.stdout + result.stderr)
            weights.append(torch.load(saved)["weights"])
        for name, weight in weights[0].items():
            self.assertTrue(torch.equal(weight, weights[1][name]), name)

    @unittest.skipIf(int(torch.__version__.split(".")[0]) < 2,
                     "torch 1.13's torchrun cannot start workers on Python 3.11 (its Std enum "
                     "reads None there); the 2.x lane runs this")
    def test_under_torchrun_too(self):
        # torchrun's agent serves the rendezvous store at MASTER_PORT: every rank is its client.
        one, two = (os.path.join(self.dir, name) for name in ("one.pt", "torchrun.pt"))
        subprocess.run([sys.executable, self.script, one], check=True, timeout=300)
        with socket.socket() as probe:  # a free port for the agent
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node",
                                 "2", "--master_addr", "127.0.0.1", "--master_port", str(port),
                                 self.script, two], capture_output=True, text=True, timeout=300)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        alone, ranks = torch.load(one), torch.load(two)
        self.assertEqual(ranks["world"], 2)
        for name, weight in alone["weights"].items():
            difference = (weight - ranks["weights"][name]).abs().max().item() / weight.abs().max().item()
            self.assertLess(difference, 1e-5, name)

    def test_ranks_started_differently_stop_together_naming_the_difference(self):
        result = self.launch(os.path.join(self.dir, "bad.pt"), "0.5")
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("rank 1 differs from rank 0: lr", result.stderr)


if __name__ == "__main__":
    unittest.main()
