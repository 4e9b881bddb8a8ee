#!/usr/bin/env bash
# One prepared check on a GPU machine (at most ~5 minutes). Needs dist/loaderlab-cuda.xz from
# scripts/package-cuda.sh (built on a CPU machine) and this repository's experiments/.
#   - prints the GPU, the driver and the CUDA libraries found (cuBLAS/cuRAND/cuDNN are
#     dlopened: the folders of Python's nvidia-* wheels that hold libcublas.so.13,
#     libcurand.so.10 and libcudnn.so.9 go FIRST on LD_LIBRARY_PATH, so a CUDA 12 libcublas.so
#     elsewhere is never picked up before libcublas.so.13);
#   - `selftest --device cuda` first: every model kind and optimizer for 3 steps on CUDA against
#     the CPU (the first process also JIT-compiles candle's PTX: its wall time is that cost,
#     which belongs to warm-up and never to timed steps; CUDA_CACHE_MAXSIZE is raised so the
#     cache keeps every kernel for the later stages); it prints whether the fused optimizer and
#     the pooling kernels passed their own checks (a notice when one did not);
#   - `bench step --device cuda` for small_cnn b256, cnn [32, 64] b128 and resnet 18 CIFAR b128,
#     each beside PyTorch's eager, fused-Adam and CUDA-graphed steps on the same GPU (TF32 off);
#   - runs experiments/stand_in.toml on CUDA (the stand-in step's kernel, ~15 s), and checks
#     that 2 ranks on a 1-GPU machine fail with the message naming the GPU count;
#   - runs experiments/dataloader_workers.toml on CUDA (synthetic data of FashionMNIST's shape:
#     GPU machines here cannot download), and a shorter variant if that fails or runs out of time;
#   - then, time permitting, a worker sweep (0, 1, 2, 4, 8) with fewer steps;
#   - copies report.md, result.json, steps.csv, the traces and a tarball of everything to $OUT.
# Every stage prints one line "STAGE <name>: ok|FAILED …", so a failure names its stage, and the
# log and the files come back whatever fails.
# Usage: bash scripts/gpu-check.sh [--dry-run]    (OUT defaults to ./gpu-check-out)
# --dry-run (or GPU_CHECK_DEVICE=auto) runs the same flow on a machine without a GPU: the CUDA
# binary falls back to the CPU where it can (selftest and bench step need CUDA and fail).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
[[ "${1:-}" == "--dry-run" ]] && export GPU_CHECK_DEVICE=auto
OUT="${OUT:-$ROOT/gpu-check-out}"
mkdir -p "$OUT"
START=$(date +%s)
BIN=/tmp/loaderlab-cuda
left() { echo $(( 285 - ($(date +%s) - START) )); }
stage() { echo "STAGE $*"; }

unpack() {
  [[ -f dist/loaderlab-cuda.xz ]] || { echo "dist/loaderlab-cuda.xz missing: run scripts/package-cuda.sh and carry dist/"; return 1; }
  (cd dist && sha256sum -c loaderlab-cuda.xz.sha256) || return 1
  if command -v xz >/dev/null 2>&1; then
    xz -dc dist/loaderlab-cuda.xz > "$BIN" || return 1
  else
    echo "(no xz here: unpacking with Python's lzma)"
    python3 -c 'import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
      dist/loaderlab-cuda.xz "$BIN" || return 1
  fi
  chmod +x "$BIN"
  echo "built from commit $(cat dist/loaderlab-cuda.commit 2>/dev/null)"
  "$BIN" --version || return 1
}

cuda13_first() {
  local dirs="" sp f d
  for sp in $(python3 -c 'import site; print(" ".join(site.getsitepackages()+[site.getusersitepackages()]))' 2>/dev/null) /opt /usr/local; do
    [[ -d "$sp" ]] || continue
    for f in $(find "$sp" -maxdepth 6 \( -name 'libcublas.so.13' -o -name 'libcurand.so.10' -o -name 'libcudnn.so.9' \) 2>/dev/null); do
      d="$(dirname "$f")"; [[ ":$dirs:" == *":$d:"* ]] || dirs="$dirs:$d"
    done
  done
  if [[ -n "$dirs" ]]; then
    export LD_LIBRARY_PATH="${dirs#:}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
  echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
  ldconfig -p | grep -E 'libcuda\.so|libcublas(Lt)?\.so|libcurand\.so|libcudnn\.so' || true
}

run() {  # $1 = name, $2 = timeout s, rest = loaderlab arguments
  local name="$1" limit="$2"; shift 2
  echo "== $name ($limit s at most): loaderlab $*"
  local t0 rc
  t0=$(date +%s.%N)
  timeout --signal=INT --kill-after=10 "$limit" "$BIN" "$@" --out "/tmp/results/$name" 2>&1 \
    | tee "$OUT/$name.log"
  rc=${PIPESTATUS[0]}
  local took
  took=$(python3 -c "print(f'{$(date +%s.%N) - $t0:.1f}')" 2>/dev/null || echo "?")
  if [[ $rc -eq 0 ]]; then stage "$name: ok in $took s"; else stage "$name: FAILED (exit $rc) after $took s"; fi
  return $rc
}

main() {
  echo "== machine"
  if nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total,clocks.max.sm --format=csv; then
    stage "device found: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
  else
    stage "device found: FAILED (nvidia-smi gave nothing)"
  fi
  ldd --version | head -1
  nproc; free -g | sed -n 2p

  echo "== binary"
  if unpack; then stage "binary: ok"; else stage "binary: FAILED"; return 1; fi

  echo "== CUDA libraries"
  cuda13_first

  # The driver keeps JIT-compiled kernels here; large enough for all of candle's.
  export CUDA_CACHE_PATH=/tmp/cuda-compute-cache CUDA_CACHE_MAXSIZE=4294967296
  local DEV="${GPU_CHECK_DEVICE:-cuda}"
  SYN=(--set dataset.kind=synthetic --set dataset.synthetic_size=60000 --set "device.kind=$DEV")
  if run selftest 150 selftest --device cuda; then
    stage "kernels: candle's PTX compiled and every model kind and optimizer agrees with the CPU"
  else
    stage "kernels: selftest FAILED or incomplete (see its output above)"
  fi
  grep -E "^note: the (fused optimizer|max pooling)" "$OUT/selftest.log" || \
    echo "(no kernel notices: the fused optimizer and the pooling kernels passed their checks)"

  # The CUDA step beside PyTorch's on this GPU; each case stops early rather than eat the budget.
  local B=(bench step --device cuda --repeat 3 --steps 20)
  (( $(left) > 200 )) && run bench-small-cnn 50 "${B[@]}" --batch 256
  (( $(left) > 180 )) && run bench-cnn 50 "${B[@]}" --model cnn --set 'model.channels=[32,64]' --batch 128
  (( $(left) > 160 )) && run bench-resnet18 70 "${B[@]}" --model resnet --set model.depth=18 \
    --set model.stem=cifar --input 3x32x32 --batch 128
  (( $(left) > 150 )) || stage "bench: some cases skipped ($(left) s left)"

  # The stand-in step's CUDA kernel (checked against the host on first use): its device time
  # per step must be the declared 40 ms and its ceiling 64 / 40 ms = 1,600 img/s.
  if run stand-in-cuda 45 experiments/stand_in.toml --set "device.kind=$DEV" --set protocol.rounds=1; then
    python3 - /tmp/results/stand-in-cuda/result.json <<'PY' || true
import json, sys
r = json.load(open(sys.argv[1]))
for c in r["analysis"]["conditions"]:
    h = c.get("headroom") or {}
    print(f"stand-in {c['condition']}: device {c['device_median_ms']:.3f} ms/step (want 40), "
          f"ceiling {h.get('img_per_s', float('nan')):.0f} img/s (want 1600), "
          f"{c['judgement']['input_bound']} ({c['judgement']['share']:.4f} {c['judgement']['classified_by']})")
PY
    cp /tmp/results/stand-in-cuda/report.md "$OUT/stand-in-report.md" 2>/dev/null || true
  fi
  # One rank per GPU: with more ranks than GPUs the run must stop with the count named.
  local gpus
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')   # grep -c prints 0 when there is none
  [[ "$gpus" =~ ^[0-9]+$ ]] || gpus=0
  if run ranks-beyond-gpus 30 experiments/node.toml --set "device.kind=$DEV" \
      --set "distributed.ranks=$(( gpus + 1 ))" --set 'matrix.loader.workers=[1]' \
      --set protocol.rounds=1 --set protocol.timed_steps=5 --set protocol.warmup_steps=1; then
    stage "ranks: $(( gpus + 1 )) ranks on $gpus GPU(s) ran: FAILED (expected a refusal)"
  elif grep -q "this machine has $gpus CUDA device" "$OUT/ranks-beyond-gpus.log"; then
    stage "ranks: $(( gpus + 1 )) ranks on $gpus GPU(s) refused, naming the count: ok"
  else
    stage "ranks: refused without naming the GPU count: FAILED (see the log above)"
  fi

  MAIN=main
  if ! run main $(( $(left) > 120 ? 120 : $(left) )) experiments/dataloader_workers.toml "${SYN[@]}"; then
    MAIN=short
    run short $(( $(left) > 90 ? 90 : $(left) )) experiments/dataloader_workers.toml "${SYN[@]}" \
      --set protocol.rounds=2 --set protocol.timed_steps=50 --set protocol.warmup_steps=20 || true
  fi
  if (( $(left) > 60 )); then
    run sweep $(( $(left) - 15 )) experiments/dataloader_workers.toml "${SYN[@]}" \
      --set 'matrix.loader.workers=[0,1,2,4,8]' --set protocol.rounds=2 \
      --set protocol.timed_steps=60 --set protocol.warmup_steps=20 --set protocol.profile=false || true
  else
    stage "sweep: skipped ($(left) s left)"
  fi

  echo "== results"
  local R="/tmp/results/$MAIN"
  [[ -d "$R" ]] || R="/tmp/results/$MAIN.partial"
  for f in report.md result.json steps.csv; do cp "$R/$f" "$OUT/$MAIN-$f" 2>/dev/null || true; done
  for t in "$R"/traces/*.json; do
    [[ -f "$t" ]] && cp "$t" "$OUT/trace-$(basename "$t" | tr -c 'A-Za-z0-9._\n-' '_')"
  done
  [[ -f /tmp/results/sweep/report.md ]] && cp /tmp/results/sweep/report.md "$OUT/sweep-report.md"
  tar -C /tmp -czf "$OUT/results.tar.gz" results 2>/dev/null || true
  ls -la "$OUT"
  sed -n '/## Verdict/,/## Setup/p' "$R/report.md" 2>/dev/null
  echo "== done in $(( $(date +%s) - START )) s"
}

# The pipe (not a process substitution) makes the script wait for tee: the log is complete
# on disk when the script exits.
main 2>&1 | tee "$OUT/gpu-check.log"
exit "${PIPESTATUS[0]}"
