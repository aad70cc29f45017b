#!/usr/bin/env bash
# Runs a release tarball's `cumulus` in a minimal Debian 12 root made with debootstrap (no Swift, no compiler, no
# development packages; libsqlite3-0 and libcurl4 are the libraries added), through the README's and the guides' walk-throughs
# (`scripts/run-docs.sh`, with every `cumulus` command and the server run inside the root). Needs root and debootstrap.
#
#   scripts/test-release.sh TARBALL     # the root is kept in $CUMULUS_RELEASE_ROOT (default /tmp/cumulus-release-root)
set -euo pipefail
cd "$(dirname "$0")/.."
tarball=$(realpath "$1")
root=${CUMULUS_RELEASE_ROOT:-/tmp/cumulus-release-root}
if [ ! -x "$root/usr/bin/env" ]; then
    debootstrap --variant=minbase --include=libsqlite3-0,libcurl4 bookworm "$root" http://deb.debian.org/debian >&2
fi
for tool in swift swiftc cc gcc clang; do
    if chroot "$root" /bin/sh -c "command -v $tool" >/dev/null; then echo "test-release: the root has $tool" >&2; exit 1; fi
done
rm -rf "$root/opt/cumulus"
mkdir -p "$root/opt/cumulus"
tar -xzf "$tarball" -C "$root/opt/cumulus" --strip-components=1

size=$(du -sh "$root" | cut -f1)

# The root sees /proc, and the host's /tmp and this directory at the same paths, so the walk-throughs' files and the
# docs runner's data directory are where the commands look; the network is the host's, so curl reaches the server.
mounts=("$root/proc" "$root/tmp" "$root$(pwd)")
mkdir -p "$root$(pwd)"
mount -t proc proc "$root/proc"
mount --bind /tmp "$root/tmp"
mount --bind "$(pwd)" "$root$(pwd)"
wrapper=$(mktemp /tmp/cumulus-in-root.XXXXXX)
cleanup() {
    for (( index=${#mounts[@]}-1; index>=0; index-- )); do umount "${mounts[index]}" 2>/dev/null || umount -l "${mounts[index]}" || true; done
    rm -f "$wrapper"
}
trap cleanup EXIT
cat > "$wrapper" <<SH
#!/bin/sh
# \`cumulus\` inside the root, in the caller's directory, with the caller's environment.
exec chroot "$root" /bin/sh -c 'cd "\$0" && exec /opt/cumulus/bin/cumulus "\$@"' "\$PWD" "\$@"
SH
chmod +x "$wrapper"

echo "test-release: $("$wrapper" --version) in $(chroot "$root" /bin/sh -c '. /etc/os-release; echo "$PRETTY_NAME"') ($size, no Swift)"
scripts/run-docs.sh "$wrapper"
