#!/usr/bin/env bash
# One prepared check on a GPU machine (at most ~5 minutes). Needs dist/loaderlab-cuda.xz from
# scripts/package-cuda.sh (built on a CPU machine) and this repository's experiments/.
#   - prints the GPU, the driver and the CUDA libraries found (cuBLAS/cuRAND are dlopened:
#     from the system, else from Python's nvidia-* wheels, which are put on LD_LIBRARY_PATH);
#   - runs experiments/dataloader_workers.toml on CUDA (synthetic data of FashionMNIST's shape:
#     GPU machines here cannot download), and a shorter variant if that fails or runs out of time;
#   - then, time permitting, a worker sweep (0, 1, 2, 4, 8) with fewer steps;
#   - copies report.md, result.json, steps.csv, the traces and a tarball of everything to $OUT.
# Usage: bash scripts/gpu-check.sh      (OUT defaults to ./gpu-check-out)
# GPU_CHECK_DEVICE=auto runs the same flow on a machine without a GPU (a dry run of the script:
# the CUDA binary falls back to the CPU).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT="${OUT:-$ROOT/gpu-check-out}"
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu-check.log") 2>&1
START=$(date +%s)
left() { echo $(( 285 - ($(date +%s) - START) )); }

echo "== machine"
nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total,clocks.max.sm --format=csv || true
nvidia-smi | sed -n 1,12p || true
ldd --version | head -1
nproc; free -g | sed -n 2p

echo "== binary"
BIN=/tmp/loaderlab-cuda
if [[ -f dist/loaderlab-cuda.xz ]]; then
  (cd dist && sha256sum -c loaderlab-cuda.xz.sha256) || exit 1
  xz -dc dist/loaderlab-cuda.xz > "$BIN" && chmod +x "$BIN"
  echo "built from commit $(cat dist/loaderlab-cuda.commit 2>/dev/null)"
else
  echo "dist/loaderlab-cuda.xz missing: run scripts/package-cuda.sh and carry dist/"; exit 1
fi

echo "== CUDA libraries"
ldconfig -p | grep -E 'libcuda\.so|libcublas(Lt)?\.so|libcurand\.so|libnvrtc\.so' || true
if ! ldconfig -p | grep -q 'libcublas\.so\.13'; then
  dirs=""
  for sp in $(python3 -c 'import site,sys; print(" ".join(site.getsitepackages()+[site.getusersitepackages()]))' 2>/dev/null) /opt /usr/local; do
    [[ -d "$sp" ]] || continue
    for f in $(find "$sp" -maxdepth 6 \( -name 'libcublas.so.13' -o -name 'libcurand.so.10' -o -name 'libnvrtc.so.13' \) 2>/dev/null); do
      d="$(dirname "$f")"; [[ ":$dirs:" == *":$d:"* ]] || dirs="$dirs:$d"
    done
  done
  export LD_LIBRARY_PATH="${dirs#:}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
fi

run() {  # $1 = name, $2 = timeout s, rest = loaderlab arguments
  local name="$1" limit="$2"; shift 2
  echo "== $name ($limit s at most): loaderlab $*"
  local t0=$(date +%s)
  timeout --signal=INT --kill-after=10 "$limit" "$BIN" "$@" --out "/tmp/results/$name"
  local rc=$?
  echo "== $name: exit $rc after $(( $(date +%s) - t0 )) s"
  return $rc
}

SYN=(--set dataset.kind=synthetic --set dataset.synthetic_size=60000 --set "device.kind=${GPU_CHECK_DEVICE:-cuda}")
MAIN=main
if ! run main 150 experiments/dataloader_workers.toml "${SYN[@]}"; then
  MAIN=short
  run short $(( $(left) > 90 ? 90 : $(left) )) experiments/dataloader_workers.toml "${SYN[@]}" \
    --set protocol.rounds=2 --set protocol.timed_steps=50 --set protocol.warmup_steps=20 || true
fi
if (( $(left) > 60 )); then
  run sweep $(( $(left) - 15 )) experiments/dataloader_workers.toml "${SYN[@]}" \
    --set 'matrix.loader.workers=[0,1,2,4,8]' --set protocol.rounds=2 \
    --set protocol.timed_steps=60 --set protocol.warmup_steps=20 --set protocol.profile=false || true
fi

echo "== results"
R="/tmp/results/$MAIN"
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
