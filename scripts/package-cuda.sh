#!/usr/bin/env bash
# Build the CUDA binary on this (GPU-less) machine and pack it for a GPU machine:
#   dist/loaderlab-cuda.xz   (stripped, xz; must stay under the 64 MiB a GPU run can carry)
# Then, on the GPU machine, from the repository root: bash scripts/gpu-check.sh
# First clean build ~10 min on 2 cores (nvcc compiles candle's kernels once), then ~1 min.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/setup-cuda-toolkit.sh >/dev/null
# shellcheck disable=SC1091
source .cuda/env.sh
cargo build --release --features cuda --target-dir target-cuda
mkdir -p dist
strip -o dist/loaderlab-cuda target-cuda/release/loaderlab
xz -T0 -6 -c dist/loaderlab-cuda > dist/loaderlab-cuda.xz
rm dist/loaderlab-cuda
( cd dist && sha256sum loaderlab-cuda.xz > loaderlab-cuda.xz.sha256 )
git rev-parse HEAD > dist/loaderlab-cuda.commit 2>/dev/null || true
size=$(stat -c %s dist/loaderlab-cuda.xz)
echo "dist/loaderlab-cuda.xz: $((size / 1024 / 1024)) MiB (commit $(cat dist/loaderlab-cuda.commit 2>/dev/null))"
(( size < 60 * 1024 * 1024 )) || { echo "error: larger than 60 MiB" >&2; exit 1; }
