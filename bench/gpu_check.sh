#!/usr/bin/env bash
# The GPU side of bigbatch (issue 19), checked in one call on a machine with a CUDA GPU and a
# Python PyTorch 2.x whose wheel carries libtorch and its CMake files:
#
#   1. the machine: GPU, driver, torch, CUDA, compiler; whether the wheel has Gloo's and NCCL's
#      headers (Gloo's come from the bundle's libgloo-dev where the wheel has none);
#   2. configure and build bigbatch against that libtorch (Release, all cores);
#   3. the unit and torch test suites: the Gpu* tests run on the card (its memory counters and
#      budget, the fit, pinned micro-batches equal to one batch, gpt on the card equal to the
#      CPU's float64, bf16 autocast, the card's generator in checkpoints); the rest checks
#      the libtorch 2.x build on the CPU;
#   4. exactness through the CLI on the card: `verify` (mlp, gpt), and 16 x 4 against 64 x 1
#      for five AdamW updates with clipping (fp32, relative to the weights' norm: < 1e-5);
#   5. memory on the card: `fit` within a budget and without one (the card's free memory),
#      and an out-of-memory back-off whose weights equal a direct run at the final size;
#   6. two ranks over Gloo on the CPU against one process, where the build has Gloo (the c10d
#      2.x port; one GPU cannot hold two NCCL ranks);
#   7. a throughput table: cnn and gpt (the README's and a GPT-2-small shape), fp32 and bf16,
#      samples and tokens per second, peak memory, and model FLOPs utilisation for the gpts.
#
# Everything goes to LOG_DIR (default $OUT, else gpu-check-logs/): check.log (every command and
# its output), summary.txt (one line per step), results.md (the tables for docs/benchmarks.md)
# and torch_tests.json. The steps run in order of importance, and each later one only while
# time is left (BIGBATCH_CHECK_SECONDS, default 520), so one call fits the device tool's limit.
#
# Usage, on the GPU machine (bench/gpu_check.sh needs scripts/gpu_bundle.sh's .gpu-bundle/):
#   bench/gpu_check.sh [LOG_DIR]
# A dry run of the same steps on this CPU machine, against an existing build:
#   BIGBATCH_CHECK_DEVICE=cpu BIGBATCH_CHECK_BUILD=build bench/gpu_check.sh /tmp/gpu-check
# or building its CUDA configuration here first, against the GPU machine's PyTorch (2.11):
#   scripts/setup.sh --pytorch 2.11.0   # or any Python with that PyTorch as BIGBATCH_PYTHON
#   BIGBATCH_CHECK_DEVICE=cpu BIGBATCH_PYTHON=~/.cache/bigbatch/pytorch-2.11.0/bin/python \
#     bench/gpu_check.sh /tmp/gpu-check
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
logs=${1:-${OUT:-$root/gpu-check-logs}}
device=${BIGBATCH_CHECK_DEVICE:-cuda}
build=${BIGBATCH_CHECK_BUILD:-$root/build-gpu}
deadline=${BIGBATCH_CHECK_SECONDS:-520}
python=$(command -v "${BIGBATCH_PYTHON:-python3}")
bundle=$root/.gpu-bundle
mkdir -p "$logs"
log=$logs/check.log
summary=$logs/summary.txt
results=$logs/results.md
: >"$log"
: >"$summary"
: >"$results"
runs=$(mktemp -d)
trap 'rm -rf "$runs"' EXIT

export BIGBATCH_PYTHON=$python
export LD_LIBRARY_PATH="$bundle/root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fashion=$bundle/data/fashion-mnist
fortunes=$bundle/data/fortunes
[ -d "$fashion" ] || fashion=/usr/share/datasets/fashion-mnist
[ -d "$fortunes" ] || fortunes=/usr/share/games/fortunes
bigbatch=$build/bigbatch

# One step: its command and output in check.log, a line in summary.txt; the exit status.
step() {
  local name=$1
  shift
  local start=$SECONDS
  printf '\n===== %s: %s\n' "$name" "$*" >>"$log"
  "$@" >>"$log" 2>&1
  local status=$?
  local verdict="ok"
  [ $status -eq 0 ] || verdict="FAILED (exit $status)"
  printf '%-30s %-18s %4ds\n' "$name" "$verdict" $((SECONDS - start)) | tee -a "$summary"
  return $status
}

# Whether step $1, expected to take about $2 seconds, still fits before the deadline.
time_left() {
  if [ $((SECONDS + ${2:-30})) -ge "$deadline" ]; then
    printf '%-30s %s\n' "$1" "skipped (${SECONDS}s gone, ~${2:-30}s needed)" | tee -a "$summary"
    return 1
  fi
}

# --- 1. the machine ------------------------------------------------------------------------
machine() {
  date -u
  nvidia-smi || true
  "$python" - <<'PY'
import os, torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "cxx11 abi", torch._C._GLIBCXX_USE_CXX11_ABI)
print("cmake prefix", torch.utils.cmake_prefix_path)
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print("device", p.name, p.total_memory, "bytes")
include = os.path.join(os.path.dirname(torch.__file__), "include")
print("gloo headers in the wheel:", os.path.exists(os.path.join(include, "gloo", "algorithm.h")))
PY
  command -v nvcc && nvcc --version | tail -2
  cmake --version | head -1
  c++ --version | head -1
  nproc
}
step machine machine

torch_prefix=$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null)
nccl_include=$("$python" -c 'import os, nvidia.nccl as n; print(os.path.join(list(n.__path__)[0], "include"))' \
  2>/dev/null || true)
nccl_flag=()  # only a folder that holds nccl.h: CMake's own search stays on otherwise
[ -f "$nccl_include/nccl.h" ] && nccl_flag=("-DBIGBATCH_NCCL_INCLUDE_DIR=$nccl_include")
cuda_root=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)")")}
# libtorch's CMake files find CUDA through nvcc (FindCUDA in older ones, CUDAToolkit in newer).
[ -x "$cuda_root/bin/nvcc" ] && export PATH="$cuda_root/bin:$PATH"

# --- 2. build --------------------------------------------------------------------------------
if [ "${BIGBATCH_CHECK_SKIP_BUILD:-}" != 1 ] && [ ! -x "$bigbatch" -o "$build" = "$root/build-gpu" ]; then
  step configure cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    "-DCMAKE_PREFIX_PATH=$torch_prefix;$bundle/root/usr" "-DCUDAToolkit_ROOT=$cuda_root" \
    "-DCUDA_TOOLKIT_ROOT_DIR=$cuda_root" \
    "${nccl_flag[@]}" || exit 1
  step build cmake --build "$build" -j "$(nproc)" --target bigbatch torch_tests core_tests || exit 1
fi

# One update on the device first: a start-up failure shows here, in seconds.
step smoke "$bigbatch" train --device "$device" --model mlp --dataset "idx:$fashion" \
  --train-subset 1024 --global-batch 256 --micro-batch 64 --max-updates 2 --progress off \
  --out "$runs/smoke" || exit 1

# --- 3. test suites --------------------------------------------------------------------------
step core_tests "$build/tests/core_tests" --gtest_brief=1
step torch_tests_gpu "$build/tests/torch_tests" --gtest_filter='Gpu*:Device*:Checkpoints*' \
  --gtest_output="json:$logs/torch_tests.json"

# --- 4. exactness through the CLI ------------------------------------------------------------
exact_verdict() {
  "$bigbatch" verify --device "$device" "$@" | tee "$runs/verify.txt"
  grep -q "^verdict: exact" "$runs/verify.txt"
}
time_left verify_mlp 20 && step verify_mlp exact_verdict --model mlp --dataset "idx:$fashion" \
  --train-subset 8192 --global-batch 512 --micro-batch 64
time_left verify_gpt 30 && step verify_gpt exact_verdict --model gpt --dataset "text:$fortunes" \
  --seq-len 256 --global-batch 64 --micro-batch 8 --optimizer adamw --lr 1e-3

# Relative difference of two weight files, all tensors as one vector (the torch tests' measure).
compare_weights() {
  "$python" - "$@" <<'PY'
import json, struct, sys
import numpy as np
def load(path):  # safetensors, read with numpy alone (any python with numpy will do)
    data = open(path, "rb").read()
    size = struct.unpack("<Q", data[:8])[0]
    header, body = json.loads(data[8:8 + size]), data[8 + size:]
    types = {"F32": np.float32, "F64": np.float64, "I64": np.int64}
    return {k: np.frombuffer(body[v["data_offsets"][0]:v["data_offsets"][1]], types[v["dtype"]]).astype(np.float64)
            for k, v in header.items() if k != "__metadata__"}
a, b, limit = load(sys.argv[1]), load(sys.argv[2]), float(sys.argv[3])
assert a.keys() == b.keys(), "different tensors"
va = np.concatenate([a[k] for k in sorted(a)])
vb = np.concatenate([b[k] for k in sorted(b)])
diff = float(np.linalg.norm(va - vb) / np.linalg.norm(vb))
print(f"relative difference of the weights {diff:.3g} (limit {limit:g})")
sys.exit(0 if diff < limit else 1)
PY
}
gpt_recipe=(--model gpt --dataset "text:$fortunes" --seq-len 256 --global-batch 64 --optimizer adamw
  --lr 1e-3 --warmup 2u --clip-norm 1 --max-updates 5 --progress off --no-noise-scale)
accumulation_on_the_card() {
  "$bigbatch" train "${gpt_recipe[@]}" --device "$device" --micro-batch 64 --out "$runs/one" &&
    "$bigbatch" train "${gpt_recipe[@]}" --device "$device" --micro-batch 16 --out "$runs/four" &&
    "$bigbatch" train "${gpt_recipe[@]}" --device "$device" --micro-batch-tokens 2048 --out "$runs/tokens" &&
    compare_weights "$runs/four/weights.safetensors" "$runs/one/weights.safetensors" 1e-5 &&
    compare_weights "$runs/tokens/weights.safetensors" "$runs/one/weights.safetensors" 1e-5 &&
    if [ "$device" != cpu ]; then
      "$bigbatch" train "${gpt_recipe[@]}" --device cpu --micro-batch 64 --out "$runs/cpu" &&
        { compare_weights "$runs/one/weights.safetensors" "$runs/cpu/weights.safetensors" 1e-3 || true; }
    fi
}
time_left accumulation_gpt 60 && step accumulation_gpt accumulation_on_the_card

# --- 5. memory on the card -------------------------------------------------------------------
time_left fit_cnn_budget 60 && step fit_cnn_budget "$bigbatch" fit --device "$device" --model cnn \
  --dataset "idx:$fashion" --memory-budget 1GiB
if [ "$device" != cpu ]; then
  time_left fit_mlp_card 60 && step fit_mlp_card "$bigbatch" fit --device "$device" --model mlp \
    --dataset "idx:$fashion"
fi
# An out-of-memory back-off: the direct run's peak at micro 4096 sets a budget a quarter below
# it, which must back off and end at the weights of a direct run at the size it backed off to
# (an mlp: no convolution whose algorithm could change with the memory it is given).
back_off_on_the_card() {
  local recipe=(--model mlp --hidden 2048,2048 --dataset "idx:$fashion" --train-subset 16384
    --global-batch 8192 --max-updates 3 --progress off --no-noise-scale --device "$device")
  "$bigbatch" train "${recipe[@]}" --micro-batch 8192 --out "$runs/whole" || return 1
  local budget
  budget=$("$python" - "$runs/whole/metrics.jsonl" <<'PY'
import json, sys
peak = max(r["peak_bytes"] for r in map(json.loads, filter(str.strip, open(sys.argv[1]))) if "peak_bytes" in r)
print(f"{int(peak * 0.75) // 2**20}MiB")
PY
  ) || return 1
  echo "budget: $budget (three quarters of micro 8192's peak)"
  "$bigbatch" train "${recipe[@]}" --micro-batch 8192 --memory-budget "$budget" \
    --out "$runs/backoff" || return 1
  local final
  final=$("$python" - "$runs/backoff/metrics.jsonl" <<'PY'
import json, sys
backs = [r for r in map(json.loads, filter(str.strip, open(sys.argv[1]))) if r.get("event") == "oom_backoff"]
for b in backs:
    print(f"back-off: {b['micro_batch_from']} -> {b['micro_batch']} ({b['error']})", file=sys.stderr)
print(backs[-1]["micro_batch"] if backs else "")
PY
  ) || return 1
  [ -n "$final" ] || { echo "no back-off happened under $budget"; return 1; }
  "$bigbatch" train "${recipe[@]}" --micro-batch "$final" --out "$runs/direct" &&
    compare_weights "$runs/backoff/weights.safetensors" "$runs/direct/weights.safetensors" 1e-5
}
time_left back_off 40 && step back_off back_off_on_the_card

# --- 6. ranks over Gloo with the 2.x build ---------------------------------------------------
two_ranks_on_the_cpu() {
  if grep -q "BIGBATCH_GLOO_INCLUDE_DIR:PATH=.*NOTFOUND" "$build/CMakeCache.txt"; then
    echo "built without Gloo's headers: no data parallelism to check"
    return 0
  fi
  local recipe=(--model mlp --dataset "idx:$fashion" --train-subset 4096 --global-batch 256
    --micro-batch 32 --max-updates 6 --progress off --device cpu --threads 1)
  "$bigbatch" train "${recipe[@]}" --out "$runs/rank1" &&
    "$bigbatch" launch --nproc 2 -- "$bigbatch" train "${recipe[@]}" --out "$runs/rank2" &&
    compare_weights "$runs/rank2/weights.safetensors" "$runs/rank1/weights.safetensors" 1e-6
}
time_left two_ranks_gloo 30 && step two_ranks_gloo two_ranks_on_the_cpu

# --- 7. throughput ---------------------------------------------------------------------------
# Median over the updates after the first five (allocator, cuDNN and autocast warm up there).
throughput_row() {
  local label=$1 run=$2
  "$python" - "$label" "$run" "$device" <<'PY' >>"$results"
import json, statistics, sys
label, run, device = sys.argv[1:4]
records = [json.loads(l) for l in open(run + "/metrics.jsonl") if l.strip()]
updates = [r for r in records if "loss" in r and "event" not in r][5:]
config = {k.strip(): v.strip().strip("'\"") for k, v in
          (l.split(" = ", 1) for l in open(run + "/config.toml") if " = " in l)}
ups = statistics.median(r["updates_per_s"] for r in updates)
samples = statistics.median(r["samples_per_s"] for r in updates)
tokens = ups * statistics.median(r["items"] for r in updates) if config.get("model") == "gpt" else 0
peak = max(r["peak_bytes"] for r in updates) / 2**30
mfu = "-"
if tokens:
    layers, d, seq = (int(config[k]) for k in ("layers", "d-model", "seq-len"))
    params = 12 * layers * d * d + 257 * d + seq * d       # blocks, tied embedding, positions
    flops_per_token = 6 * params + 12 * layers * d * seq   # PaLM's estimate, attention included
    ceilings = dict(l.split() for l in open(run + "/../ceilings.txt")) if device != "cpu" else {}
    ceiling = float(ceilings.get("bf16" if "bf16" in label else "fp32", 0))
    mfu = f"{100 * tokens * flops_per_token / ceiling:.1f}%" if ceiling > 0 else "-"
print(f"| {label} | {samples:,.0f} | {f'{tokens:,.0f}' if tokens else '-'} | {ups:.2f} | {peak:.2f} | {mfu} |")
PY
}
# The card's measured matrix ceilings (8192^3 products, median of 10 after 3 warm-ups), which
# MFU is taken against; fp32 with TF32 off, as bigbatch's fp32 runs compute.
ceilings() {
  "$python" - "$runs/ceilings.txt" <<'PY'
import sys, torch
torch.backends.cuda.matmul.allow_tf32 = False
out = open(sys.argv[1], "w")
for name, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
    a = torch.randn(8192, 8192, device="cuda", dtype=dtype)
    times = []
    for i in range(13):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(); a @ a; end.record(); torch.cuda.synchronize()
        if i >= 3:
            times.append(start.elapsed_time(end) / 1e3)
    rate = 2 * 8192**3 / sorted(times)[len(times) // 2]
    print(name, rate, file=out)
    print(f"{name} matrix ceiling {rate / 1e12:.0f} TFLOP/s")
PY
}
throughput() {
  if [ "$device" != cpu ]; then
    ceilings || return 1
  fi
  printf '\n### Throughput on %s\n\n' "$device" >>"$results"
  printf '| run | samples/s | tokens/s | updates/s | peak GiB | MFU |\n|---|---|---|---|---|---|\n' >>"$results"
  local updates=25
  [ "$device" = cpu ] && updates=7
  local cnn=(--model cnn --dataset "idx:$fashion" --global-batch 1024 --micro-batch 256)
  local gpt=(--model gpt --dataset "text:$fortunes" --seq-len 256 --global-batch 64 --micro-batch 16)
  local gpt2=(--model gpt --dataset "text:$fortunes" --sequences packed --seq-len 1024 --layers 12
    --d-model 768 --heads 12 --global-batch 64 --micro-batch 16)
  local name label args
  for precision in fp32 bf16; do
    for name in cnn gpt gpt2; do
      case $name in
        cnn) args=("${cnn[@]}") label="cnn 256 x 4, $precision" ;;
        gpt) args=("${gpt[@]}") label="gpt 4x128 seq 256, 16 x 4, $precision" ;;
        gpt2) args=("${gpt2[@]}") label="gpt 12x768 seq 1024 packed, 16 x 4, $precision" ;;
      esac
      [ "$device" = cpu ] && [ "$name" = gpt2 ] && continue
      "$bigbatch" train "${args[@]}" --device "$device" --precision "$precision" \
        --optimizer adamw --lr 1e-3 --max-updates "$updates" --progress off --no-noise-scale \
        --out "$runs/speed-$name-$precision" || return 1
      throughput_row "$label" "$runs/speed-$name-$precision" || return 1
    done
  done
  cat "$results"
}
time_left throughput 150 && step throughput throughput

# The rest of the torch suite (CPU tests, on the 2.x build) while time is left.
time_left torch_tests_rest 60 && step torch_tests_rest "$build/tests/torch_tests" --gtest_brief=1 \
  --gtest_filter='-Gpu*:Device*:Checkpoints*'

{
  printf '\n### Steps\n\n```\n'
  cat "$summary"
  printf '```\n'
} >>"$results"
! grep -q FAILED "$summary"
