#!/usr/bin/env bash
# A change meant to change no run (a restructure): the same jobs trained by two binaries,
# compared bit for bit with compare_runs.py (weights byte for byte, every metrics record but
# the machine's measurements). The jobs cover each batch regime and task: a fixed batch, a
# ramp, AdaScale, evaluations that keep the best weights and stop the run, an out-of-memory
# back-off, a ramp resumed from a middle checkpoint with --discard-newer, the automatic
# batch with its branch test, npy regression, the gpt on fortunes, 2 ranks; --default adds the
# default job itself (two minutes or more per binary).
#
# Usage: bench/refactor_check.sh BASE_BINARY NEW_BINARY [--default]
# Exit 0 when every job is identical.
set -euo pipefail
base=$1 new=$2 default=${3:-}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

quick=(--model mlp --hidden 64 --train-subset 4096 --threads 1 --progress off --no-tensorboard)
/usr/bin/python3 - "$work/reg" <<'EOF'
import sys, pathlib, numpy as np
d = pathlib.Path(sys.argv[1]); d.mkdir()
rng = np.random.default_rng(3)
x = rng.random((512, 8)).astype("float32")
np.save(d / "x_train.npy", x)
np.save(d / "y_train.npy", (x @ rng.random((8, 2))).astype("float32"))
EOF

# name: the flags of one job
jobs=(
  "fixed|${quick[*]} --global-batch 128 --micro-batch 32 --epochs 2"
  "ramp|${quick[*]} --global-batch-schedule '0:32 1500s:128' --micro-batch 16 --epochs 2"
  "adascale|${quick[*]} --global-batch 128 --micro-batch 32 --lr-scaling adascale --epochs 2"
  "watched|${quick[*]} --global-batch 64 --micro-batch 32 --epochs 4 --val-size 500 --eval-every 20u --keep-best val_loss --early-stop val_accuracy --patience 2 --target 'val_accuracy>=0.9'"
  "backoff|--model cnn-bn --train-subset 512 --global-batch 256 --micro-batch 256 --memory-budget 40MiB --epochs 1 --threads 1 --progress off --no-tensorboard"
  "auto|${quick[*]} --micro-batch 16 --global-batch auto --lr 0.05 --lr-scaling linear --update-cost 2000 --epochs 2"
  "regress|--dataset npy:$work/reg --task regress --model mlp --hidden 16 --global-batch 64 --micro-batch 16 --epochs 3 --threads 1 --progress off --no-tensorboard"
  "gpt|--dataset text:/usr/share/games/fortunes --model gpt --seq-len 64 --train-subset 512 --global-batch 32 --micro-batch 8 --epochs 1 --threads 1 --progress off --no-tensorboard"
)
[[ $default == --default ]] && jobs+=("default|--threads 2 --progress off")

status=0
compare() {  # name
  echo "== $1"
  python3 "$here/compare_runs.py" "$work/base-$1" "$work/new-$1" || status=1
}
for job in "${jobs[@]}"; do
  name=${job%%|*} flags=${job#*|}
  for side in base new; do
    binary=$base; [[ $side == new ]] && binary=$new
    eval "set -- $flags"  # the flags are words, quoted where a value has spaces
    "$binary" train "$@" --out "$work/$side-$name" >"$work/$side-$name.log" 2>&1 ||
      { echo "$side $name failed:"; tail -5 "$work/$side-$name.log"; exit 1; }
  done
  compare "$name"
done

# A ramp resumed from its middle checkpoint with --discard-newer, and 2 ranks.
for side in base new; do
  binary=$base; [[ $side == new ]] && binary=$new
  out=$work/$side-resumed
  "$binary" train "${quick[@]}" --global-batch-schedule '0:32 1500s:128' --micro-batch 16 --epochs 2 \
    --checkpoint-every 40u --out "$out" >"$out.log" 2>&1
  middle=$(ls -d "$out"/checkpoints/step_* | sort -V | sed -n 2p)
  "$binary" train --resume "$middle" --discard-newer >>"$out.log" 2>&1
  "$binary" launch --nproc 2 -- "$binary" train "${quick[@]}" --global-batch 128 --micro-batch 16 \
    --epochs 1 --out "$work/$side-ranks" >"$work/$side-ranks.log" 2>&1
done
compare resumed
compare ranks
exit $status
