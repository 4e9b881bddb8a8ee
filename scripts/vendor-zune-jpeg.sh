#!/usr/bin/env bash
# The vendored zune-jpeg (vendor/zune-jpeg) is the published zune-jpeg 0.4.21 plus one patch,
# vendor/zune-jpeg.patch: region-of-interest decoding (`JpegDecoder::set_window`, see
# vendor/README.md). This script is the claim, made checkable:
#
#     bash scripts/vendor-zune-jpeg.sh --check    # CI: fetch the published crate, apply the
#                                                  # patch, fail on any difference
#     bash scripts/vendor-zune-jpeg.sh --update   # rewrite vendor/zune-jpeg.patch from the
#                                                  # vendored copy (after editing it)
# Exit 3: the crate could not be fetched.
set -euo pipefail

VERSION=0.4.21
SHA256=29ce2c8a9384ad323cf564b67da86e21d3cfdff87908bc1223ed5c99bc792713  # as in Cargo.lock
URL="https://static.crates.io/crates/zune-jpeg/zune-jpeg-$VERSION.crate"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENDORED="$ROOT/vendor/zune-jpeg"
PATCH="$ROOT/vendor/zune-jpeg.patch"
MODE="${1:---check}"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

if ! curl -sSfL --retry 3 -o "$work/crate.tar.gz" "$URL"; then
    echo "error: cannot fetch $URL" >&2
    exit 3
fi
echo "$SHA256  $work/crate.tar.gz" | sha256sum -c --quiet - || {
    echo "error: the published zune-jpeg $VERSION does not have the expected SHA-256" >&2
    exit 1
}
tar xzf "$work/crate.tar.gz" -C "$work"
upstream="$work/zune-jpeg-$VERSION"
# What is vendored: the sources, the manifest, the README and the changelog, as published.
mkdir -p "$work/a" "$work/b"
cp -r "$upstream/src" "$upstream/Cargo.toml" "$upstream/README.md" "$upstream/Changelog.md" "$work/a/"

case "$MODE" in
--update)
    cp -r "$VENDORED/." "$work/b/"
    # (file timestamps dropped from the headers, so an unchanged patch rewrites identically)
    (cd "$work" && diff -ruN a b | sed -E 's/^(---|\+\+\+) ([^\t]*)\t.*/\1 \2/' > "$PATCH") || true
    echo "vendor/zune-jpeg.patch rewritten: $(grep -c '^[-+][^-+]' "$PATCH") changed lines"
    ;;
--check)
    cp -r "$work/a/." "$work/b/"
    (cd "$work/b" && patch -s -p1 < "$PATCH")
    if ! diff -r "$work/b" "$VENDORED"; then
        echo "error: vendor/zune-jpeg differs from the published zune-jpeg $VERSION plus" \
             "vendor/zune-jpeg.patch (see scripts/vendor-zune-jpeg.sh)" >&2
        exit 1
    fi
    echo "vendor/zune-jpeg = published zune-jpeg $VERSION + vendor/zune-jpeg.patch" \
         "($(grep -c '^[-+][^-+]' "$PATCH") changed lines: region-of-interest decoding)"
    ;;
*)
    echo "usage: $0 [--check|--update]" >&2
    exit 2
    ;;
esac
