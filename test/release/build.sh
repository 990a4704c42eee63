#!/usr/bin/env bash
# Builds the previous release (the commit CI last landed, recorded in
# previous.txt by `make previous-release`) into OUT from this clone's own
# history (git archive): its binary at OUT/src/bin/sluice and its package
# at OUT/src/dist/, stamped with its version. The upgrade tests (the restart
# scenario, deb-check) start from it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# The release is its own module: this repository's go.work, found above an
# OUT inside it, must not take its build over.
export GOWORK=off
out=${1:?usage: build.sh OUT [make targets, default: build deb]}
targets=${2:-build deb}
version=$(sed -n 's/^version //p' "$here/previous.txt")
[ -n "$version" ] || { echo "build.sh: no version in $here/previous.txt" >&2; exit 1; }
commit=$(sed -n 's/^commit //p' "$here/previous.txt")
[ -n "$commit" ] || { echo "build.sh: no commit in $here/previous.txt" >&2; exit 1; }
repo=$(cd "$here/../.." && pwd)
if ! git -C "$repo" cat-file -e "$commit^{commit}" 2>/dev/null; then
	echo "build.sh: the previous release $commit is not in this clone's history (a shallow clone?); the upgrade tests build it from there: git fetch --unshallow" >&2
	exit 1
fi
rm -rf "$out/src"
mkdir -p "$out/src"
git -C "$repo" archive "$commit" | tar -x -C "$out/src"
# Its Makefile stamps the revision with `git rev-parse HEAD`, and the source
# has no .git: a git that answers that with the release's commit.
mkdir -p "$out/shim"
cat > "$out/shim/git" <<SHIM
#!/bin/sh
[ "\$*" = "rev-parse HEAD" ] && { echo $commit; exit 0; }
exec /usr/bin/git "\$@"
SHIM
chmod +x "$out/shim/git"
# Its BPF object first: that Makefile names it as a prerequisite of build
# before defining it, so build alone would not make it.
# shellcheck disable=SC2086 # the targets are words
PATH="$out/shim:$PATH" make -C "$out/src" --no-print-directory maps/sluice_bpfel.o $targets VERSION="$version" >&2
echo "$version"
