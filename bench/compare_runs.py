#!/usr/bin/env python3
"""Two run directories of the same flags, compared for bit-identity: weights.safetensors byte
for byte, and every metrics.jsonl record field by field except what measures the machine
(times, rates, memory) and the records of each process start (train_start: a resumed run has
one per start). Used to show that a refactoring changes no run, and that a resumed run equals
an uninterrupted one (the checkpoint tests run it).

Usage: compare_runs.py RUN_A RUN_B
Exit 0 when identical; otherwise prints the first differences and exits 1.
"""
import json
import pathlib
import sys

# Fields that time or measure the process, not the training (a resumed process starts with
# other allocations, so its peaks differ too).
MACHINE_FIELDS = {"time", "wall_s", "extra_seconds", "samples_per_s", "tokens_per_s", "updates_per_s", "train_seconds", "rss_peak_bytes",
                  "rss_bytes", "peak_bytes"}


def records(run):
    """The training records of RUN's metrics.jsonl, and how many process starts it records."""
    lines = (pathlib.Path(run) / "metrics.jsonl").read_text().splitlines()
    every = [json.loads(line) for line in lines if line.strip()]
    training = [r for r in every if r.get("event") != "train_start"]
    return training, len(every) - len(training)


def main():
    if len(sys.argv) != 3 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr)
        sys.exit(0 if len(sys.argv) == 2 else 2)
    a, b = sys.argv[1], sys.argv[2]
    problems = []
    weights_a = (pathlib.Path(a) / "weights.safetensors").read_bytes()
    weights_b = (pathlib.Path(b) / "weights.safetensors").read_bytes()
    if weights_a != weights_b:
        problems.append("weights.safetensors differ")
    (ra, starts_a), (rb, starts_b) = records(a), records(b)
    if len(ra) != len(rb):
        problems.append(f"metrics.jsonl: {len(ra)} records against {len(rb)}")
    compared = 0
    for i, (x, y) in enumerate(zip(ra, rb)):
        keys = (set(x) | set(y)) - MACHINE_FIELDS
        for key in sorted(keys):
            compared += 1
            if x.get(key) != y.get(key):
                problems.append(f"record {i + 1} ({x.get('event', 'step ' + str(x.get('step')))}) "
                                f"{key}: {x.get(key)!r} against {y.get(key)!r}")
    for problem in problems[:20]:
        print(problem)
    if problems:
        print(f"{len(problems)} difference(s)")
        return 1
    print(f"identical: weights ({len(weights_a)} bytes) and {len(ra)} metrics records "
          f"({compared} fields; machine measurements {sorted(MACHINE_FIELDS)} and the "
          f"{starts_a} and {starts_b} process starts left out)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
