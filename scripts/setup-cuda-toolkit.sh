#!/usr/bin/env bash
# One-time setup for `cargo build --release --features cuda` on a machine WITHOUT a GPU or a
# system CUDA toolkit. Fetches five pinned NVIDIA wheels from PyPI (the only network access it
# needs, ~100 MB), unpacks them into .cuda/ and writes .cuda/env.sh to source before building:
#
#     bash scripts/setup-cuda-toolkit.sh
#     source .cuda/env.sh
#     cargo build --release --features cuda --target-dir target-cuda
#
# Why 13.0.x: nvcc >= 13.1 emits PTX ISA >= 9.1, which a CUDA 13.0 driver (R580) cannot JIT
# (CUDA_ERROR_UNSUPPORTED_PTX_VERSION). 13.0 PTX runs on R580 and every newer driver.
# Why only these wheels: the binary dlopens libcuda/cuBLAS/cuRAND at run time (vendored
# candle-core, see vendor/README.md) and links cudart statically, so the build needs nvcc, its
# compiler back end (nvvm), headers (crt, cccl) and libcudart_static.a — nothing else.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="${LOADERLAB_CUDA_DIR:-$ROOT/.cuda}"
PY="${PYTHON:-python3}"
WHEELS=(
  nvidia-cuda-nvcc==13.0.88
  nvidia-nvvm==13.0.88
  nvidia-cuda-crt==13.0.88
  nvidia-cuda-runtime==13.0.96
  nvidia-cuda-cccl==13.0.85
)

CU="$DEST/nvidia/cu13"
if [[ -x "$CU/bin/nvcc" && -f "$DEST/cudart_static/libcudart.a" && -f "$DEST/env.sh" ]]; then
  echo "CUDA toolkit already set up in $DEST"
  "$CU/bin/nvcc" --version | tail -2
  exit 0
fi

if ! "$PY" -m pip --version >/dev/null 2>&1; then
  echo "error: $PY -m pip is not available; install pip (e.g. apt-get install python3-pip)" >&2
  exit 1
fi

mkdir -p "$DEST/wheels"
echo "Downloading ${#WHEELS[@]} CUDA 13.0 wheels from PyPI into $DEST/wheels"
"$PY" -m pip download --quiet --no-deps --only-binary=:all: -d "$DEST/wheels" \
  --platform manylinux2014_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_28_x86_64 \
  --python-version 3.11 --implementation cp "${WHEELS[@]}"

for w in "$DEST"/wheels/*.whl; do
  "$PY" -m zipfile -e "$w" "$DEST"
done
# zipfile drops the executable bits.
chmod +x "$CU"/bin/* "$CU"/nvvm/bin/* 2>/dev/null || true
find "$CU/bin" -type f -exec chmod +x {} +

# candle-kernels asks the linker for `-lcudart`; a folder holding only the static archive under
# that name makes the link static, so the binary needs no libcudart.so at run time.
mkdir -p "$DEST/cudart_static"
cp "$CU/lib/libcudart_static.a" "$DEST/cudart_static/libcudart.a"

cat > "$DEST/env.sh" <<ENV
# Source before \`cargo build --features cuda\` (written by scripts/setup-cuda-toolkit.sh).
export CUDA_HOME="$CU"
export PATH="$CU/bin:\$PATH"
export CUDA_COMPUTE_CAP="\${CUDA_COMPUTE_CAP:-90}"   # 90 = Hopper (H100/H200); no GPU is needed to build
export CUDART_STATIC_DIR="$DEST/cudart_static"
export CUDARC_CUDA_VERSION=13000
export CUDAFORGE_THREADS="\${CUDAFORGE_THREADS:-\$(nproc)}"
ENV

"$CU/bin/nvcc" --version | tail -2
echo "Done. Now: source $DEST/env.sh && cargo build --release --features cuda --target-dir target-cuda"
