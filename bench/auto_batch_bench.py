#!/usr/bin/python3
"""--global-batch auto against fixed batches and a hand ramp (issue 34), on the same sample
order and the same evaluation cadence: each run's held-out (validation) loss is read from its
metrics.jsonl, L* is the validation loss the best fixed run reaches at 80% of the sample
budget, and every run is scored by the updates, samples (the branch tests' thrown-away branches
included) and wall-clock it took to reach L* (interpolated between evaluations), its final
validation loss and its test accuracy (the gpt: its final held-out bits per byte).

Fixed batches each get a 3-point rate grid (the --lr-scaling rule's rate from --lr at the
start batch, times each --lr-grid factor) and keep their best (by final validation loss); the ramp doubles at a third and two
thirds of the budget; Seesaw's ramp doubles the batch where the cosine halves the rate (the
square-root rule scaling the rate at each switch); the automatic batch runs with its timed update cost and with each
--update-cost given, each with the branch test confirming its doublings (--growth-test branch)
and without it (none: the noise-scale prediction alone, the ablation). Every run sets the same
--growth-holdout samples aside, so all train on the same samples in the same order. Several
seeds: mean and spread. Nothing here is timed against a threshold: it prints what happened.

With --two-hosts RATE every run trains as two ranks, one on each of two network namespaces
joined by a veth pair shaped to RATE (tests/e2e/netns.py; root needed): the all-reduce of each
update then crosses a link of that rate, so an update is dear in fact and the automatic batch's
timed cost sees it — the wall-clock to L* is then the comparison that counts.

With --baselines-from FILE (an earlier --json of the same command: every option but the
automatic batch's variant lists the same) each run the file holds for a seed — the fixed
batches, the ramps, Seesaw and any automatic-batch variant of the same name — is read from it
instead of trained again; those runs' times come from that earlier sitting.

Usage: bench/auto_batch_bench.py BUILD_DIR [--model mlp|cnn|gpt] [--hidden 128] [--epochs 4]
       [--micro-batch 16] [--fixed 32 128 512 2048] [--lr 0.05] [--lr-scaling sqrt] [--lr-grid 0.5 1 2]
       [--update-costs auto 2000] [--growth-tests branch none] [--growth-controls rate temperature]
       [--growth-confidences 2 0] [--growth-test-budgets 0.05 1] [--optimizer sgd] [--noise-gradients auto raw preconditioned]
       [--adam-sqrt-adjusts off on] [--growth-predict-ats low estimate] [--growth-tolerances 0.1 0.02]
       [--seesaw 4] [--holdout 1100] [--seeds 42 1 2]
       [--threads 2] [--two-hosts 1gbit] [--json FILE] [--baselines-from FILE]
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

from bench_env import bigbatch_environment, libtorch_version

ENV = bigbatch_environment()
FORTUNES = "/usr/share/games/fortunes"
# Said either way: unsaid, the automatic batch with adamw adjusts the betas by default.
ADAM_SQRT_ADJUST_FLAG = {"on": ["--adam-sqrt-adjust"], "off": ["--no-adam-sqrt-adjust"]}


def records(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


# --two-hosts: the two network namespaces every run trains across, one rank on each
# (tests/e2e/netns.py), and the next rendezvous port.
HOSTS = None
PORT = [29700]


def bigbatch_train(binary, args):
    """`bigbatch train ARGS` here, or as two ranks, one on each of the two hosts (rank 0's lines,
    without their prefix, as the run's stderr)."""
    if HOSTS is None:
        return subprocess.run([binary, "train", *args], capture_output=True, text=True, env=ENV)
    from netns import MASTER
    PORT[0] += 1
    launchers = [subprocess.Popen(
        ["ip", "netns", "exec", HOSTS.ns[node], binary, "launch", "--nproc", "1", "--nnodes", "2", "--node-rank",
         str(node), "--master-addr", MASTER, "--master-port", str(PORT[0]), "--", binary, "train", *args,
         "--dist-timeout", "120"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=dict(ENV, GLOO_SOCKET_IFNAME=HOSTS.veth[node])) for node in (0, 1)]
    outputs = [launcher.communicate(timeout=7200) for launcher in launchers]
    code = next((launcher.returncode for launcher in launchers if launcher.returncode != 0), 0)
    rank0 = "\n".join(line[len("[rank 0] "):] if line.startswith("[rank 0] ") else line
                       for line in outputs[0][1].splitlines() if not line.startswith("[rank 1] "))
    return subprocess.CompletedProcess(args, code, outputs[0][0], rank0)


def train(binary, out, common, extra):
    start = time.perf_counter()
    result = bigbatch_train(binary, [*common, *extra, "--out", out])
    diverged = "error[diverged]" in result.stderr
    if result.returncode != 0 and not diverged:
        raise SystemExit(f"bigbatch train {' '.join(common + extra)} failed:\n{result.stderr}")
    wall = time.perf_counter() - start
    rs = records(out)
    if diverged:  # a rate the grid tried and the model did not take: scored as never reaching L*
        return {"evaluations": [], "train_seconds": [], "updates": 0, "samples": 0,
                "final_val_loss": float("inf"), "test_accuracy": 0.0, "final_val_bpb": float("inf"),
                "batches": [], "wall": wall,
                "summary": ["diverged"]}
    held = [r for r in rs if "val_loss" in r]
    updates = [r for r in rs if "loss" in r and "event" not in r]
    # Training time (the updates alone, not evaluation) up to each update: the records' sum, and
    # what each branch test took besides its kept branch (at the update where it ended).
    extra = {}
    for r in rs:
        if r.get("event") == "batch_test":
            extra[r["step"]] = extra.get(r["step"], 0.0) + r["extra_seconds"]
    elapsed, train_seconds = 0.0, []
    for r in updates:
        elapsed += 1.0 / r["updates_per_s"] + extra.get(r["step"], 0.0)
        train_seconds.append((r["step"], elapsed))
    return {"evaluations": [(r["samples_seen"], r["step"], r["val_loss"]) for r in held],
            "train_seconds": train_seconds,
            "updates": updates[-1]["step"], "samples": updates[-1]["samples_seen"],
            "final_val_loss": held[-1]["val_loss"],
            # A language model has no test split: its held-out bits per byte instead.
            "test_accuracy": next((r["test_accuracy"] for r in reversed(rs) if "test_accuracy" in r), None),
            "final_val_bpb": next((r["val_bpb"] for r in reversed(held) if "val_bpb" in r), None),
            "batches": sorted({r["global_batch"] for r in updates}), "wall": wall,
            "tests": [(r["proposed"], r["kept"]) for r in rs if r.get("event") == "batch_test"],
            # The samples each branch test trained besides its kept branch, where it began.
            "thrown_away": [(r["samples_seen"], (r.get("branches", 2) - 1) * r["test_samples"])
                            for r in rs if r.get("event") == "batch_test"],
            "summary": [line for line in result.stderr.splitlines()
                        if line.startswith("automatic batch:") and ("replay it" in line or "stayed at" in line)]}


def loss_at_samples(run, samples):
    """The validation loss interpolated at `samples` (None past the run's evaluations)."""
    points = run["evaluations"]
    for (s0, _, l0), (s1, _, l1) in zip(points, points[1:]):
        if s0 <= samples <= s1:
            return l0 + (l1 - l0) * (samples - s0) / (s1 - s0)
    return points[-1][2] if points and samples >= points[-1][0] else None


def reach(run, target):
    """(samples, updates, train seconds) where the validation loss first reaches `target`,
    interpolated between the two evaluations around it; None when it never does. The samples
    count the branch tests' thrown-away branches that began before that point."""
    points = run["evaluations"]
    seconds = dict(run["train_seconds"])
    previous = (0, 0, float("inf"))
    for s, u, loss in points:
        if loss <= target:
            s0, u0, l0 = previous
            f = 1.0 if l0 == float("inf") else (l0 - target) / (l0 - loss)
            updates = u0 + f * (u - u0)
            samples = s0 + f * (s - s0)
            samples += sum(n for at, n in run.get("thrown_away", []) if at < samples)
            return samples, updates, seconds.get(u, 0.0) * updates / max(u, 1)
        previous = (s, u, loss)
    return None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("build")
    p.add_argument("--model", default="mlp")
    p.add_argument("--hidden", default="128")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--micro-batch", type=int, default=16)
    p.add_argument("--val-size", type=int, default=5000)
    p.add_argument("--train-subset", type=int, default=0, help="0: all of the training split")
    p.add_argument("--fixed", type=int, nargs="+", default=[32, 128, 512, 2048])
    p.add_argument("--lr", type=float, default=0.05, help="the rate at the starting batch (micro x 2)")
    p.add_argument("--lr-scaling", default="sqrt", help="the rule from the starting batch to larger ones")
    p.add_argument("--lr-grid", type=float, nargs="+", default=[0.5, 1, 2])
    p.add_argument("--update-costs", nargs="+", default=["auto", "2000"])
    p.add_argument("--growth-tests", nargs="+", default=["branch", "none"])
    p.add_argument("--growth-controls", nargs="+", default=["rate"],
                   help="what the branch test compares the doubled branch with (--growth-control)")
    p.add_argument("--seesaw", type=int, default=4,
                   help="doublings of the Seesaw ramp (x2 at each halving of the cosine; 0: no Seesaw row)")
    p.add_argument("--optimizer", default="sgd")
    p.add_argument("--noise-gradients", nargs="+", default=["auto"],
                   help="what the automatic batch's noise scale measures (--noise-gradient): raw against "
                        "preconditioned is the ablation for adamw")
    p.add_argument("--adam-sqrt-adjusts", nargs="+", default=["off"], choices=["off", "on"],
                   help="adamw: the ramp and the automatic batch without and with --adam-sqrt-adjust (the betas "
                        "following each batch; fixed batches keep theirs, as a larger fixed batch would be refused)")
    p.add_argument("--growth-confidences", nargs="+", default=["2"],
                   help="the standard errors a kept doubling must clear its bound by (--growth-confidence)")
    p.add_argument("--growth-test-budgets", nargs="+", default=["0.05"],
                   help="the most the branch tests may throw away, a fraction of the samples trained "
                        "(--growth-test-budget; 1: as good as none)")
    p.add_argument("--growth-tolerances", nargs="+", default=["0.1"],
                   help="--growth-tolerance of the branch test (how much less progress a kept doubling may make)")
    p.add_argument("--growth-predict-ats", nargs="+", default=["low"], choices=["low", "estimate"],
                   help="--growth-predict-at of the branch-tested automatic batch (the untested one: low)")
    p.add_argument("--holdout", type=int, default=1100,
                   help="training samples every run sets aside (the branch test scores on them; 2%% of 55,000)")
    p.add_argument("--seeds", type=int, nargs="+", default=[42])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--eval-every", default="5000s",
                   help="in samples: the same data between evaluations at any batch, growing or not")
    p.add_argument("--two-hosts", metavar="RATE",
                   help="every run as two ranks, one on each of two network namespaces joined by a link shaped "
                        "to RATE (tc's tbf, e.g. 1gbit; 'veth': unshaped): an update whose all-reduce is dear in "
                        "fact, for the wall-clock to L* (root needed; one thread a rank)")
    p.add_argument("--json")
    p.add_argument("--baselines-from", metavar="FILE",
                   help="an earlier --json of the same command: the runs it holds are read, not trained")
    a = p.parse_args()
    if a.two_hosts:
        global HOSTS
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e"))
        from netns import two_hosts_for
        HOSTS = two_hosts_for("--two-hosts")
        why_not = HOSTS.slow_link(a.two_hosts) if a.two_hosts != "veth" else None
        if why_not:
            HOSTS.remove()
            raise SystemExit(why_not)
        a.threads = 1
        try:
            return benchmark(a)
        finally:
            HOSTS.remove()
    return benchmark(a)


# The options that only choose which variants run: an earlier file's runs stand for this
# command's when every other option is the same.
VARIANT_OPTIONS = {"update_costs", "growth_tests", "growth_controls", "noise_gradients", "adam_sqrt_adjusts",
                   "growth_confidences", "growth_test_budgets", "growth_predict_ats", "growth_tolerances", "seesaw", "json",
                   "baselines_from", "build", "seeds"}


def same_command(a):
    return {k: v for k, v in vars(a).items() if k not in VARIANT_OPTIONS}


def earlier_runs(a):
    """The runs of --baselines-from by name and seed; it must come from the same command."""
    if not a.baselines_from:
        return lambda name, seed: None
    with open(a.baselines_from) as f:
        earlier = json.load(f)
    if earlier.get("_command") != same_command(a):
        raise SystemExit(f"--baselines-from {a.baselines_from}: its runs come from another command "
                         f"({earlier.get('_command')}); give a --json of this one")
    seeds = earlier["_command_seeds"]
    return lambda name, seed: earlier[name][seeds.index(seed)] \
        if seed in seeds and len(earlier.get(name, [])) > seeds.index(seed) else None


def benchmark(a):
    binary = os.path.join(os.path.abspath(a.build), "bigbatch")
    reused = earlier_runs(a)
    start_batch = 2 * a.micro_batch
    # The gpt: the small language model of bench/lr_limits_bench.py on fortunes' documents.
    model = ["--model", "gpt", "--dataset", f"text:{FORTUNES}", "--seq-len", "128", "--layers", "2",
             "--d-model", "64", "--heads", "4", "--weight-decay", "0.01"] if a.model == "gpt" else \
        ["--model", a.model, "--hidden", a.hidden]
    common = [*model, "--epochs", str(a.epochs), "--val-size", str(a.val_size),
              "--threads", str(a.threads), "--progress", "off", "--micro-batch", str(a.micro_batch),
              "--growth-holdout", str(a.holdout), "--optimizer", a.optimizer]
    # The rule from the starting batch: fixed batches get its rate (times the grid's factors)
    # at their batch; the ramp and the automatic batch follow it as they grow.
    rule = ["--lr-scaling", a.lr_scaling, "--lr-ref-batch", str(start_batch)]
    if a.train_subset:
        common += ["--train-subset", str(a.train_subset)]
    workdir = tempfile.mkdtemp(prefix="bigbatch_auto_bench_")
    results = {"_command": same_command(a), "_command_seeds": a.seeds}
    for seed in a.seeds:
        seeded = [*common, "--seed", str(seed)]

        def trained_or_reused(name, directory, extra):
            return reused(name, seed) or train(binary, os.path.join(workdir, f"s{seed}-{directory}"), seeded, extra)
        fixed = {}
        for batch in a.fixed:
            best = reused(f"fixed {batch}", seed)
            for factor in a.lr_grid if best is None else []:
                tried = train(binary, os.path.join(workdir, f"s{seed}-fixed{batch}-x{factor}"), seeded,
                              [*rule, "--global-batch", str(batch), "--lr", str(a.lr * factor), "--eval-every",
                               a.eval_every])
                tried["lr_factor"] = factor
                if best is None or tried["final_val_loss"] < best["final_val_loss"]:
                    best = tried
            fixed[f"fixed {batch}"] = best
        budget = max(r["samples"] for r in fixed.values())
        # The ramp and the automatic batch start from the rate tuned for the starting batch.
        start = fixed.get(f"fixed {start_batch}")
        lr = a.lr * (start["lr_factor"] if start else 1.0)
        ramp = f"0:{start_batch} {budget // 3}s:{2 * start_batch} {2 * budget // 3}s:{4 * start_batch}"
        others = {}
        for adjust in a.adam_sqrt_adjusts:
            flag, label = ADAM_SQRT_ADJUST_FLAG[adjust], (", adam-sqrt-adjust" if adjust == "on" else "")
            others[f"ramp x2 at 1/3, 2/3{label}"] = trained_or_reused(
                f"ramp x2 at 1/3, 2/3{label}", f"ramp-{adjust}",
                [*rule, "--global-batch-schedule", ramp, "--lr", str(lr), *flag, "--eval-every", a.eval_every])
        if a.seesaw:
            # Seesaw (arXiv:2510.14717): the batch doubles where the schedule would halve the rate.
            # Under the cosine (the default schedule, counted in samples) the rate halves at
            # acos(2^(1-k) - 1) / pi of the budget; the square-root rule then scales it by sqrt(2)
            # at each doubling, Seesaw's rate / sqrt(2) at the switch.
            steps = [f"0:{start_batch}"] + [
                f"{int(budget * math.acos(2.0 ** (1 - k) - 1) / math.pi)}s:{start_batch << k}"
                for k in range(1, a.seesaw + 1)]
            others["seesaw (x2 where the cosine halves)"] = trained_or_reused(
                "seesaw (x2 where the cosine halves)", "seesaw",
                [*rule, "--global-batch-schedule", " ".join(steps), "--lr", str(lr), "--eval-every", a.eval_every])
        for cost in a.update_costs:
            for test in a.growth_tests:
                variants = [(c, z, f, at, tol) for c in a.growth_controls for z in a.growth_confidences
                            for f in a.growth_test_budgets for at in a.growth_predict_ats
                            for tol in a.growth_tolerances] \
                    if test == "branch" else [(None, None, None, "low", None)]
                for (control, z, test_budget, at, tolerance), gradient, adjust in [(v, g, j) for v in variants
                                                                   for g in a.noise_gradients
                                                                   for j in a.adam_sqrt_adjusts]:
                    name = f"auto (update cost {cost}, test {test}" + \
                        (f", control {control}, {z} SE" if control else "") + \
                        (f", test budget {test_budget}" if test_budget and test_budget != "0.05" else "") + \
                        (f", noise {gradient}" if len(a.noise_gradients) > 1 else "") + \
                        (", adam-sqrt-adjust" if adjust == "on" else "") + \
                        (", predict at estimate" if at == "estimate" else "") + \
                        (f", tolerance {tolerance}" if tolerance and tolerance != "0.1" else "") + ")"
                    branch = ["--growth-control", control, "--growth-confidence", z, "--growth-test-budget",
                              test_budget, "--growth-predict-at", at, "--growth-tolerance", tolerance] if control else []
                    others[name] = trained_or_reused(
                        name, f"auto-{cost}-{test}-{control}-{z}-{test_budget}-{gradient}-{adjust}-{at}-{tolerance}",
                        [*rule, "--global-batch", "auto", "--lr", str(lr), "--update-cost", cost, "--growth-test",
                         test, *branch, "--noise-gradient", gradient,
                         *ADAM_SQRT_ADJUST_FLAG[adjust], "--eval-every", a.eval_every])
        for run in others.values():
            run["lr_factor"] = start["lr_factor"] if start else 1.0
        runs = {**fixed, **others}
        # L*: the validation loss the best fixed run reaches at 80% of the budget.
        target = min(loss_at_samples(r, 0.8 * budget) for r in fixed.values()
                     if r["evaluations"] and loss_at_samples(r, 0.8 * budget) is not None)
        for name, run in runs.items():
            run["to_target"] = reach(run, target)
            results.setdefault(name, []).append(run)
        results.setdefault("_targets", []).append(target)
        if a.json:  # each seed as it ends: a long benchmark cut short keeps what it ran
            with open(a.json, "w") as f:
                json.dump(results, f, indent=1)
    print(f"{a.model} ({a.hidden}), {a.optimizer}, {a.epochs} epochs, micro-batch {a.micro_batch}, "
          f"lr {a.lr} @ {start_batch} "
          f"({a.lr_scaling}), grid x{a.lr_grid} (ramp and auto: the start batch's best), seeds {a.seeds}, "
          f"bigbatch {libtorch_version(a.build)}"
          + (f", 2 ranks (1 thread each) on two hosts joined by {a.two_hosts}" if a.two_hosts else ""))
    print(f"L* (validation loss): {', '.join(f'{t:.4f}' for t in results['_targets'])}")
    language = a.model == "gpt"
    print("| run | batches | lr x | updates to L* | samples to L* | train s to L* | updates | final val loss | "
          f"{'final val bpb' if language else 'test acc'} |")
    print("|---|---|---|---|---|---|---|---|---|")

    def mean_spread(values):
        reached = [v for v in values if v is not None]
        if not reached:
            return "not reached"

        def number(v):
            return "0" if abs(v) < 1e-6 else f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"
        text = number(reached[0]) if len(reached) == 1 else \
            f"{number(statistics.mean(reached))} ± {number(statistics.stdev(reached))}"
        return text if len(reached) == len(values) else f"{text} ({len(reached)} of {len(values)} seeds)"

    for name, runs in results.items():
        if name.startswith("_"):
            continue
        reached = [r["to_target"] for r in runs]
        print(f"| {name} | {'/'.join(str(b) for b in runs[0]['batches'])} "
              f"| {'/'.join(str(r.get('lr_factor', '')) for r in runs)} "
              f"| {mean_spread([t[1] if t else None for t in reached])} "
              f"| {mean_spread([t[0] if t else None for t in reached])} "
              f"| {mean_spread([t[2] if t else None for t in reached])} "
              f"| {mean_spread([r['updates'] for r in runs])} "
              f"| {statistics.mean(r['final_val_loss'] for r in runs):.4f} "
              + (f"| {statistics.mean(r['final_val_bpb'] for r in runs):.4f} |" if language else
                 f"| {100 * statistics.mean(r['test_accuracy'] for r in runs):.2f}% |"))
    for name, runs in results.items():
        for r in runs if not name.startswith("_") else []:
            for line in r["summary"]:
                print(f"{name}: {line}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
