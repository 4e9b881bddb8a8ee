#!/usr/bin/env bash
# Same-machine comparisons against PyTorch, torchvision and Pillow, for a machine whose python3
# has them (the GPU machines lent here do; elsewhere `python3 -m venv /tmp/tv && /tmp/tv/bin/pip install
# torch torchvision pillow` from PyPI and `/tmp/tv/bin` first on PATH):
#   - regenerates the ResNet entries of the model fixture, with PyTorch's float64 trajectory
#     beside its float32 one (tests/fixtures/make_model_fixture.py);
#   - `bench experiments/imagenet_style.toml`: decode and whole chain against Pillow and
#     torchvision in the same run, interleaved; `bench` of the seed's chain (the loader's
#     2-worker share of the machine's ceiling on a machine with cores to spare);
#   - `bench step` for the three cases issue 17 names, interleaved with PyTorch's step.
# Every part has its own time limit and prints "STAGE <name>: ok|FAILED …"; nothing stops the rest.
# Usage: BIN=path/to/loaderlab OUT=folder bash scripts/torch-compare.sh [--fixtures-only|--bench-only]
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT="${OUT:-$ROOT/torch-compare-out}"
BIN="${BIN:-target/release/loaderlab}"
mkdir -p "$OUT"
stage() { echo "STAGE $*"; }

part() {  # $1 = name, $2 = time limit s, rest = the command
  local name="$1" limit="$2"; shift 2
  echo "== $name ($limit s at most): $*"
  local t0=$SECONDS
  timeout --signal=INT --kill-after=5 "$limit" "$@" > "$OUT/$name.txt" 2>&1
  local rc=$?
  cat "$OUT/$name.txt"
  if [[ $rc -eq 0 ]]; then stage "$name: ok in $((SECONDS - t0)) s"; else stage "$name: FAILED (exit $rc) after $((SECONDS - t0)) s"; fi
}

fixtures() {
  python3 -c 'import torch, torchvision; print("torch", torch.__version__, "torchvision", torchvision.__version__)'
  # The ResNet entries at the committed sizes, into a copy (merge it into the fixture by hand).
  cp tests/fixtures/model_fixture.json "$OUT/model_fixture.json"
  part fixture-resnet 150 python3 tests/fixtures/make_model_fixture.py \
    --only resnet18_cifar,resnet34_imagenet --out "$OUT/model_fixture.json"
}

benches() {
  lscpu | grep -E 'Model name|^CPU\(s\)|Thread|MHz' || true
  python3 -c 'import torch, torchvision, PIL; print("torch", torch.__version__, "torchvision", torchvision.__version__, "Pillow", PIL.__version__)'
  part bench-imagenet 150 "$BIN" bench experiments/imagenet_style.toml --repeat 5
  part bench-seed 35 "$BIN" bench experiments/dataloader_workers.toml --set dataset.kind=synthetic \
    --repeat 5
  # Each PyTorch repetition starts python3 (importing torch took 5.2 s on the H200 machine).
  part step-small-cnn 90 "$BIN" bench step --batch 256 --repeat 5
  part step-cnn 90 "$BIN" bench step --model cnn --set 'model.channels=[32,64]' --batch 128 \
    --repeat 5 --steps 10
  # ResNet-18 did not finish 3 warm-up + 2 timed steps in 200 s on candle's CPU layers there.
  part step-resnet18 300 "$BIN" bench step --model resnet --set model.depth=18 --set model.stem=cifar \
    --input 3x32x32 --batch 64 --repeat 1 --steps 2
}

case "${1:-}" in
  --fixtures-only) fixtures ;;
  --bench-only) benches ;;
  *) fixtures; benches ;;
esac
