#!/usr/bin/env bash
# The vendored candle-core (vendor/candle-core) is the published candle-core 0.11.1 with ONE line
# changed, minus what the build does not need. This script is the claim, made checkable:
#
#     bash scripts/vendor-candle.sh --check    # CI: fetch the published crate, rebuild the
#                                              # vendored copy from it, fail on any difference
#     bash scripts/vendor-candle.sh --update   # rewrite vendor/candle-core from the crate
#
# The rebuild: keep src/, LICENSE and README.md as published; in Cargo.toml drop the
# [[example]], [[test]] and [[bench]] targets (their folders are not vendored) and change the
# cudarc feature "dynamic-linking" to "dynamic-loading" (vendor/README.md says why; upstream
# candle PR #3916 is still open). Nothing else may differ.
set -euo pipefail

VERSION=0.11.1
SHA256=d11c8be87cfbaef9ebb62fb3f850d1fc8e00cc1d11d393fdbe55a4d5c2cdb325
URL="https://static.crates.io/crates/candle-core/candle-core-$VERSION.crate"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENDORED="$ROOT/vendor/candle-core"
MODE="${1:---check}"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

if ! curl -sSfL --retry 3 -o "$work/crate.tar.gz" "$URL"; then
    echo "error: cannot fetch $URL" >&2
    exit 3
fi
echo "$SHA256  $work/crate.tar.gz" | sha256sum -c --quiet - || {
    echo "error: the published candle-core $VERSION does not have the expected SHA-256" >&2
    exit 1
}
tar xzf "$work/crate.tar.gz" -C "$work"
upstream="$work/candle-core-$VERSION"
expected="$work/expected"
mkdir -p "$expected"
cp -r "$upstream/src" "$upstream/LICENSE" "$upstream/README.md" "$expected/"
python3 - "$upstream/Cargo.toml" "$expected/Cargo.toml" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
# Drop the example, test and bench targets: each block runs to the next table header.
blocks = re.split(r"(?m)^(?=\[)", text)
kept = [b for b in blocks if not re.match(r"\[\[(example|test|bench)\]\]", b)]
text = "".join(kept)
old = '    "dynamic-linking",\n'
new = '    "dynamic-loading", # loaderlab patch: was "dynamic-linking" (see vendor/README.md)\n'
if text.count(old) != 1:
    sys.exit(f"expected exactly one {old.strip()!r} line in the published Cargo.toml")
open(sys.argv[2], "w").write(text.replace(old, new))
PY

case "$MODE" in
--update)
    rm -rf "$VENDORED"
    cp -r "$expected" "$VENDORED"
    echo "vendor/candle-core rebuilt from the published candle-core $VERSION"
    ;;
--check)
    if ! diff -r "$expected" "$VENDORED"; then
        echo "error: vendor/candle-core differs from the published candle-core $VERSION beyond" \
             "the one documented line (see scripts/vendor-candle.sh)" >&2
        exit 1
    fi
    changed=$(diff "$upstream/Cargo.toml" "$VENDORED/Cargo.toml" | grep -c '^>' || true)
    echo "vendor/candle-core = published candle-core $VERSION: src/ identical, $changed changed" \
         "line in Cargo.toml (cudarc dynamic-loading), tests/benches/examples not vendored"
    ;;
*)
    echo "usage: $0 [--check|--update]" >&2
    exit 2
    ;;
esac
