"""TensorBoard event files in the run directory, read back by TensorBoard's own reader (it
checks every record's CRC-32C and drops a record that fails): the scalars equal metrics.jsonl's
figures update by update and evaluation by evaluation, with samples and tokens as steps too; a
run resumed from an older checkpoint has one event file saying what its metrics.jsonl says;
--no-tensorboard writes none, and a resume under it removes the run's older ones.

TensorBoard is installed by pip into the PyTorch 2.x environment of scripts/test.sh's second
stage; under a Python without it (Debian's, for the 1.13 build) those tests skip, and
EventFileTest still checks every record's framing and checksums with a CRC-32C of its own.
"""
import glob
import os
import struct
import subprocess
import sys
import unittest

from e2e_common import CliTestCase, main, records, run, update_records

try:
    from tensorboard.backend.event_processing import event_accumulator, event_file_loader
except ImportError:
    event_accumulator = None

MLP = ["--model", "mlp", "--hidden", "32", "--train-subset", "768", "--val-size", "128", "--global-batch", "64",
       "--micro-batch", "32", "--epochs", "2", "--eval-every", "5u", "--threads", "1", "--progress", "off"]


def event_files(run_dir):
    return sorted(glob.glob(os.path.join(run_dir, "events.out.tfevents.*")))


def scalars(run_dir):
    """{tag: [(step, value, wall_time)]} as TensorBoard loads the directory."""
    accumulator = event_accumulator.EventAccumulator(run_dir, size_guidance={event_accumulator.SCALARS: 0})
    accumulator.Reload()
    return {tag: [(e.step, e.value, e.wall_time) for e in accumulator.Scalars(tag)]
            for tag in accumulator.Tags()["scalars"]}


def crc32c(data):
    """CRC-32C bit by bit (reflected polynomial 0x82F63B78): slow, obviously right."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def tfrecords(path):
    """The file's records, each checked against both of its masked CRC-32Cs."""
    with open(path, "rb") as f:
        data = f.read()
    records, offset = [], 0
    while offset < len(data):
        header = data[offset:offset + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[offset + 8:offset + 12])
        payload = data[offset + 12:offset + 12 + length]
        (payload_crc,) = struct.unpack("<I", data[offset + 12 + length:offset + 16 + length])
        assert length_crc == masked(crc32c(header)), f"record at byte {offset}: length checksum"
        assert payload_crc == masked(crc32c(payload)), f"record at byte {offset}: data checksum"
        records.append(payload)
        offset += 16 + length
    return records


def record_count(path):
    return len(tfrecords(path))


def float32(x):
    import numpy
    return float(numpy.float32(x))


@unittest.skipIf(event_accumulator is None, f"{sys.executable} has no tensorboard (scripts/test.sh's PyTorch 2.x "
                                            "stage installs it)")
class TensorBoardTest(CliTestCase):
    def assert_events_equal_metrics(self, run_dir):
        """Every figure TensorBoard shows is metrics.jsonl's, at its step and time."""
        shown = scalars(run_dir)
        updates = update_records(run_dir)
        self.assertEqual(shown["train/loss"], [(r["step"], float32(r["loss"]), r["time"]) for r in updates])
        self.assertEqual(shown["train/lr"], [(r["step"], float32(r["lr"]), r["time"]) for r in updates])
        self.assertEqual([(s, v) for s, v, _ in shown["by_samples/train_loss"]],
                         [(r["samples_seen"], float32(r["loss"])) for r in updates])
        self.assertEqual([(s, v) for s, v, _ in shown["batch/global_batch"]], [(r["step"], 64.0) for r in updates])
        held_out = [r for r in records(run_dir) if "val_accuracy" in r]
        self.assertGreater(len(held_out), 2)
        self.assertEqual(shown["val/accuracy"], [(r["step"], float32(r["val_accuracy"]), r["time"]) for r in held_out])
        self.assertEqual([(s, v) for s, v, _ in shown["by_samples/val_loss"]],
                         [(r["samples_seen"], float32(r["val_loss"])) for r in held_out])
        epochs = [r for r in records(run_dir) if "train_loss" in r]
        self.assertEqual([(s, v) for s, v, _ in shown["train/epoch_loss"]],
                         [(r["step"], float32(r["train_loss"])) for r in epochs])
        tested = [r for r in records(run_dir) if "test_accuracy" in r]
        self.assertEqual([(s, v) for s, v, _ in shown["test/accuracy"]],
                         [(r["step"], float32(r["test_accuracy"])) for r in tested])
        return shown

    def test_the_events_show_what_metrics_jsonl_holds(self):
        run_dir = self.path("run")
        run("train", *MLP, "--out", run_dir, check=True)
        files = event_files(run_dir)
        self.assertEqual(len(files), 1, files)
        self.assertTrue(files[0].endswith(".bigbatch"), files[0])
        # Every record whole: the loader stops at the first that fails its checksums.
        events = list(event_file_loader.LegacyEventFileLoader(files[0]).Load())
        self.assertEqual(events[0].file_version, "brain.Event:2")
        self.assertEqual(len(events), record_count(files[0]))
        shown = self.assert_events_equal_metrics(run_dir)
        for tag in ["train/grad_norm", "noise_scale/update", "throughput/samples_per_s", "memory/peak_bytes",
                    "progress/epoch", "val/loss", "test/loss", "noise_scale/epoch"]:
            self.assertIn(tag, shown)

    def test_a_resumed_run_has_one_event_file_that_matches_its_metrics(self):
        # Resumed from an older checkpoint: the first history's events past it (updates 15 to
        # 20) must not show beside the new history's.
        run_dir = self.path("resumed")
        args = [*MLP, "--checkpoint-every", "2u", "--keep-checkpoints", "4"]
        run("train", *args, "--max-updates", "20", "--out", run_dir, check=True)
        self.assertEqual(len(event_files(run_dir)), 1)
        self.assertEqual([s for s, _, _ in scalars(run_dir)["train/loss"]], list(range(1, 21)))
        older = os.path.join(run_dir, "checkpoints", "step_000014")
        resumed = run("train", "--resume", older, "--max-updates", "17", "--discard-newer")
        self.assertEqual(resumed.returncode, 0, resumed.stderr)
        self.assertEqual(len(event_files(run_dir)), 1, event_files(run_dir))
        shown = self.assert_events_equal_metrics(run_dir)
        self.assertEqual([s for s, _, _ in shown["train/loss"]], list(range(1, 18)), "each update once")

    def test_a_language_model_shows_tokens_and_bits_per_byte(self):
        corpus = self.path("corpus.txt")
        with open(corpus, "w") as f:
            f.write("%\n".join(f"fortune number {i}: the batch grows and the rate follows.\n" for i in range(200)))
        run_dir = self.path("lm")
        run("train", "--dataset", f"text:{corpus}", "--model", "gpt", "--layers", "1", "--d-model", "32", "--heads",
            "2", "--seq-len", "32", "--optimizer", "adamw", "--lr", "3e-3", "--threads", "1", "--progress", "off",
            "--global-batch", "16", "--micro-batch", "8", "--epochs", "1", "--val-size", "20", "--out", run_dir, check=True)
        shown = scalars(run_dir)
        updates = update_records(run_dir)
        self.assertEqual([(s, v) for s, v, _ in shown["by_tokens/train_loss"]],
                         [(r["tokens_seen"], float32(r["loss"])) for r in updates])
        self.assertEqual([v for _, v, _ in shown["throughput/tokens_per_s"]],
                         [float32(r["tokens_per_s"]) for r in updates])
        held_out = [r for r in records(run_dir) if "val_bpb" in r]
        self.assertEqual([(s, v) for s, v, _ in shown["by_tokens/val_bpb"]],
                         [(r["tokens_seen"], float32(r["val_bpb"])) for r in held_out])



class EventFileTest(CliTestCase):
    """What needs no TensorBoard: the files are there, whole, and go when asked."""

    def test_every_record_is_whole_and_its_checksums_hold(self):
        run_dir = self.path("run")
        run("train", *MLP, "--epochs", "1", "--out", run_dir, check=True)
        files = event_files(run_dir)
        self.assertEqual(len(files), 1, files)
        records = tfrecords(files[0])
        self.assertIn(b"brain.Event:2", records[0])
        # One event per update and per evaluation at least (the by_samples steps add more).
        self.assertGreaterEqual(len(records), 1 + len(update_records(run_dir)))
        self.assertTrue(any(b"train/loss" in r for r in records))

    def test_no_tensorboard_writes_none_and_a_resume_with_it_removes_them(self):
        run_dir = self.path("none")
        run("train", *MLP, "--epochs", "1", "--no-tensorboard", "--out", run_dir, check=True)
        self.assertEqual(event_files(run_dir), [])
        self.assertTrue(os.path.exists(os.path.join(run_dir, "metrics.jsonl")))
        # A run with events, resumed without: they would show a history the resume may abandon.
        other = self.path("other")
        run("train", *MLP, "--epochs", "1", "--checkpoint-every", "1e", "--out", other, check=True)
        self.assertEqual(len(event_files(other)), 1)
        resumed = run("train", "--resume", other, "--epochs", "2", "--no-tensorboard")
        self.assertEqual(resumed.returncode, 0, resumed.stderr)
        self.assertIn("--no-tensorboard: removed the run's 1 TensorBoard event file", resumed.stderr)
        self.assertEqual(event_files(other), [])

    def test_an_older_event_file_that_cannot_be_removed_is_said(self):
        # Issue 59 item 19: it carried on silently, and TensorBoard showed the steps twice.
        run_dir = self.path("immutable")
        run("train", *MLP, "--epochs", "1", "--checkpoint-every", "1e", "--out", run_dir, check=True)
        (older,) = event_files(run_dir)
        made = subprocess.run(["chattr", "+i", older], capture_output=True)
        if made.returncode != 0:
            self.skipTest("this file system cannot make a file immutable (chattr +i)")
        try:
            resumed = run("train", "--resume", run_dir, "--epochs", "2")
        finally:
            subprocess.run(["chattr", "-i", older], check=True)
        self.assertEqual(resumed.returncode, 0, resumed.stderr)
        self.assertIn(f"warning: could not remove the older TensorBoard event file {older} (Operation not permitted): "
                      "TensorBoard reads it beside the new one and shows its updates twice", resumed.stderr)
        self.assertEqual(len(event_files(run_dir)), 2)


if __name__ == "__main__":
    main()
