#!/usr/bin/env bash
# Builds a release tarball that runs on a Debian or Ubuntu machine without Swift: the `cumulus` binary with the Swift
# runtime linked in (`--static-swift-stdlib`), the README and docs, and a systemd unit. Prints the tarball's path.
# The binary needs only libc, libsqlite3 and libcurl (`apt-get install libsqlite3-0 libcurl4`), as
# `scripts/test-release.sh` proves in a minimal Debian 12 root.
#
#   scripts/build-release.sh [OUTPUT-DIRECTORY]     # default .build-static/dist
set -euo pipefail
cd "$(dirname "$0")/.."
scratch=.build-static
out=${1:-$scratch/dist}
# Foundation's URLSession (the client library `cumulus` links for the model linter, and `cumulus doctor --url`) is
# linked statically with the rest of the runtime but calls libcurl, which stays a system library: the linker is pointed
# at the system's libcurl.so.4, so no development package is needed.
mkdir -p "$scratch/link"
curl_library=$(ls /usr/lib/*-linux-gnu/libcurl.so.4 /usr/lib64/libcurl.so.4 2>/dev/null | head -1 || true)
[ -n "$curl_library" ] || { echo "build-release: libcurl.so.4 not found (apt-get install libcurl4)" >&2; exit 1; }
ln -sf "$curl_library" "$scratch/link/libcurl.so"
swift build -c release --static-swift-stdlib --product cumulus --scratch-path "$scratch" -Xlinker -L"$(pwd)/$scratch/link" >&2
binary="$scratch/release/cumulus"
version=$("$binary" --version)
name="cumulus-$version-linux-$(uname -m)"
stage="$out/$name"
rm -rf "$stage"
mkdir -p "$stage/bin" "$stage/docs"
cp "$binary" "$stage/bin/cumulus"
# Symbols stay in the build directory: a third of the size.
strip "$stage/bin/cumulus"
cp README.md packaging/cumulus.service "$stage/"
cp docs/*.md docs/*.png "$stage/docs/"
[ -f LICENSE ] && cp LICENSE "$stage/"
tar -C "$out" -czf "$out/$name.tar.gz" "$name"
echo "$out/$name.tar.gz"
