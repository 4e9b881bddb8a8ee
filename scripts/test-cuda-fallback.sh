#!/usr/bin/env bash
# Checks that a `--features cuda` binary starts and behaves on a machine WITHOUT a usable GPU:
#   1. no libcuda at all:           device.kind=auto trains on the CPU with a one-line notice;
#                                   device.kind=cuda fails with a clear message, exit 1
#   2. a driver library, no device: (a stub libcuda.so.1 answering CUDA_ERROR_NO_DEVICE) the same;
#   3. a driver library that lacks a symbol cudarc calls (a stub that answers cuInit and then
#      has no cuDevicePrimaryCtxRetain): cudarc panics, the panic is caught, the same again.
# In each: `selftest` and `bench step --device cuda` fail clearly (exit 1), and two ranks of a
# real network with device.kind = auto (which falls back to the CPU) are refused.
# Also prints the binary's NEEDED libraries: only libc/libstdc++/libgcc/libm may appear.
# Usage: scripts/test-cuda-fallback.sh [path/to/cuda/loaderlab]   (default target-cuda/release/loaderlab)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="$(realpath "${1:-$ROOT/target-cuda/release/loaderlab}")"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
cd "$ROOT"
fail() { echo "FAIL: $*" >&2; exit 1; }

echo "== NEEDED"
needed="$(readelf -d "$BIN" | awk '/NEEDED/ {print $5}' | tr -d '[]' | tr '\n' ' ')"
echo "$needed"
for lib in $needed; do
  case "$lib" in libc.so.6|libm.so.6|libgcc_s.so.1|libstdc++.so.6|ld-linux-x86-64.so.2) ;;
    *) fail "the binary needs $lib at start-up";; esac
done

check() {  # $1 = label; LD_LIBRARY_PATH as set by the caller
  local label="$1"
  echo "== $label: device.kind = auto"
  "$BIN" experiments/smoke.toml --set protocol.rounds=1 --set 'matrix.loader.workers=[0]' \
    --out "$WORK/$label" >"$WORK/auto.log" 2>&1 || { cat "$WORK/auto.log"; fail "$label: auto did not complete"; }
  grep -E "^note: CUDA not usable" "$WORK/auto.log" || { cat "$WORK/auto.log"; fail "$label: no fallback notice"; }
  grep -q "cpu (" "$WORK/$label/run.json" || fail "$label: run.json does not name the CPU"
  echo "== $label: device.kind = cuda"
  set +e
  "$BIN" experiments/smoke.toml --set device.kind=cuda --out "$WORK/$label-cuda" >"$WORK/cuda.log" 2>&1
  local rc=$?
  set -e
  cat "$WORK/cuda.log" | tail -1
  [[ $rc -eq 1 ]] || fail "$label: device.kind=cuda exited $rc, expected 1"
  grep -q 'device.kind = "cuda" but CUDA device 0 is not usable' "$WORK/cuda.log" || fail "$label: unclear error"
  [[ ! -e "$WORK/$label-cuda" ]] || fail "$label: a results folder was left behind"
  echo "== $label: selftest (CUDA) and bench step --device cuda"
  for cmd in "selftest" "bench step --device cuda --steps 1 --repeat 1"; do
    set +e
    # shellcheck disable=SC2086
    "$BIN" $cmd >"$WORK/cmd.log" 2>&1
    rc=$?
    set -e
    tail -1 "$WORK/cmd.log"
    [[ $rc -eq 1 ]] || fail "$label: $cmd exited $rc, expected 1"
    grep -q 'CUDA device 0 is not usable' "$WORK/cmd.log" || fail "$label: $cmd: unclear error"
  done
  echo "== $label: 2 ranks of a real network, device.kind = auto (falls back to the CPU)"
  set +e
  "$BIN" experiments/smoke.toml --set distributed.ranks=2 --set protocol.rounds=1 \
    --out "$WORK/$label-ranks" >"$WORK/ranks.log" 2>&1
  rc=$?
  set -e
  tail -1 "$WORK/ranks.log"
  [[ $rc -ne 0 ]] || fail "$label: 2 CPU ranks of a real network ran"
  grep -q 'needs one GPU per rank' "$WORK/ranks.log" || fail "$label: ranks: unclear error"
}

env -u LD_LIBRARY_PATH bash -c true
LD_LIBRARY_PATH="" check no-driver

cc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$WORK/libcuda.so.1" tests/cuda/fake_libcuda.c
LD_LIBRARY_PATH="$WORK" check no-device

mkdir -p "$WORK/partial"
cc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$WORK/partial/libcuda.so.1" tests/cuda/fake_libcuda_partial.c
LD_LIBRARY_PATH="$WORK/partial" check missing-symbol

echo "OK: the CUDA binary falls back to the CPU (auto) and fails clearly (cuda) without a GPU, also when the driver library lacks a symbol"
