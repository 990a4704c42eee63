#!/usr/bin/env bash
# make deb-check, first part: what make packages wrote to dist/, read
# without installing anything on this host. The checksums hold; each binary is static,
# stripped and of its architecture and prints the version; each .deb's
# control fields (architecture, version, Depends, Homepage, Maintainer),
# contents and Debian changelog (dpkg-parsechangelog reads it); each .rpm's
# header, requirements, scriptlets and files, the configuration marked
# %config(noreplace), its directories owned (rpm -i then rpm -e into a
# scratch --root leaves nothing), %doc and %license marked;
# lintian passes the amd64 .deb and rpmlint the x86_64 .rpm, but for what
# deploy/packaging/deb/lintian-overrides and deploy/packaging/rpm/rpmlintrc
# justify; and dpkg and rpm both sort this version after the previous
# release's.
set -euo pipefail
usage="usage: check-release.sh DIST VERSION"
dist=${1:?$usage}
version=${2:?$usage}
fail() { echo "FAIL: $*" >&2; exit 1; }
say() { printf '\n== %s\n' "$*"; }
for tool in dpkg-deb dpkg-parsechangelog rpm file sha256sum lintian rpmlint cpio unshare; do
	command -v "$tool" >/dev/null || fail "$tool is missing (make deps installs it)"
done
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$dist"

say "checksums"
[ -s SHA256SUMS ] || fail "no SHA256SUMS"
sha256sum -c SHA256SUMS
for f in *; do
	[ "$f" = SHA256SUMS ] || grep -q "  $f\$" SHA256SUMS || fail "$f has no checksum"
done

debv=$(go run ../deploy/pkg -print-version deb "$version")
rpmv=$(go run ../deploy/pkg -print-version rpm "$version")
declare -A deb_arch=([amd64]=amd64 [arm64]=arm64) rpm_arch=([amd64]=x86_64 [arm64]=aarch64) elf=([amd64]=x86-64 [arm64]="ARM aarch64")
for arch in amd64 arm64; do
	say "$arch"
	bin=sluice_${version}_linux_$arch
	desc=$(file -b "$bin")
	for want in "${elf[$arch]}" "statically linked" "stripped"; do
		case "$desc" in *"$want"*) ;; *) fail "$bin: '$desc' is not $want" ;; esac
	done
	echo "$bin: $desc" | cut -c1-120
	if [ "$arch" = "$(dpkg --print-architecture)" ]; then
		got=$(./"$bin" version)
		case "$got" in "sluice $version revision "*) echo "$got" ;; *) fail "$bin version printed '$got'" ;; esac
	fi

	deb=sluice_${debv}_${deb_arch[$arch]}.deb
	[ -f "$deb" ] || fail "no $deb"
	dpkg-deb -I "$deb"
	[ "$(dpkg-deb -f "$deb" Architecture)" = "${deb_arch[$arch]}" ] || fail "$deb: Architecture $(dpkg-deb -f "$deb" Architecture)"
	[ "$(dpkg-deb -f "$deb" Version)" = "$debv" ] || fail "$deb: Version $(dpkg-deb -f "$deb" Version), want $debv"
	dpkg-deb -f "$deb" Depends | grep -qw iproute2 || fail "$deb: Depends lacks iproute2"
	[ "$(dpkg-deb -f "$deb" Homepage)" = https://github.com/sluice-dev/sluice ] || fail "$deb: Homepage '$(dpkg-deb -f "$deb" Homepage)'"
	case "$(dpkg-deb -f "$deb" Maintainer)" in *@localhost*|'') fail "$deb: Maintainer '$(dpkg-deb -f "$deb" Maintainer)'" ;; esac
	files=$(dpkg-deb -c "$deb" | awk '{print $6}')
	for want in ./usr/bin/sluice ./usr/lib/systemd/system/sluice.service ./etc/sluice/sluice.yaml ./usr/share/doc/sluice/copyright \
		./usr/share/doc/sluice/changelog.gz ./usr/share/man/man1/sluice.1.gz ./usr/share/man/man1/sluice-status.1.gz \
		./usr/share/bash-completion/completions/sluice ./usr/share/zsh/vendor-completions/_sluice ./usr/share/sluice/prometheus/sluice-rules.yaml \
		./usr/share/doc/sluice/LICENSE ./usr/share/doc/sluice/NOTICE ./usr/share/doc/sluice/THIRD_PARTY_NOTICES \
		./usr/share/lintian/overrides/sluice; do
		grep -qx "$want" <<<"$files" || fail "$deb lacks $want"
	done
	dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./conffiles | grep -qx /etc/sluice/sluice.yaml || fail "$deb: sluice.yaml is not a conffile"
	# A native package's changelog (the version has no Debian revision),
	# whose newest entry is this version, as dpkg-parsechangelog reads it.
	changelog=$(mktemp)
	dpkg-deb --fsys-tarfile "$deb" | tar -xO ./usr/share/doc/sluice/changelog.gz | gzip -dc > "$changelog"
	parsed=$(dpkg-parsechangelog -l "$changelog" 2>&1) || fail "$deb: dpkg-parsechangelog rejects the changelog: $parsed"
	rm -f "$changelog"
	for want in "Source: sluice" "Version: $debv" "Distribution: unstable" "Urgency: medium" "Maintainer: $(dpkg-deb -f "$deb" Maintainer)"; do
		grep -qxF "$want" <<<"$parsed" || fail "$deb: the changelog's newest entry lacks '$want':"$'\n'"$parsed"
	done
	dpkg-deb --fsys-tarfile "$deb" | tar -xO ./usr/bin/sluice | cmp -s - "$bin" || fail "$deb carries another binary than $bin"
	echo "$deb: $(wc -l <<<"$files") entries, the binary is $bin"

	rpmf=sluice-${rpmv}-1.${rpm_arch[$arch]}.rpm
	[ -f "$rpmf" ] || fail "no $rpmf"
	rpm -qip "$rpmf" 2>/dev/null
	[ "$(rpm -qp --qf '%{ARCH} %{VERSION}' "$rpmf" 2>/dev/null)" = "${rpm_arch[$arch]} $rpmv" ] || fail "$rpmf: $(rpm -qp --qf '%{ARCH} %{VERSION}' "$rpmf")"
	rpm -qp --requires "$rpmf" 2>/dev/null | grep -qx iproute || fail "$rpmf does not require iproute"
	rpm -qp --configfiles "$rpmf" 2>/dev/null | grep -qx /etc/sluice/sluice.yaml || fail "$rpmf: sluice.yaml is not %config"
	[ "$(rpm -qp --qf '[%{FILEFLAGS:fflags} %{FILENAMES}\n]' "$rpmf" 2>/dev/null | grep ' /etc/sluice/sluice.yaml$' | cut -d' ' -f1)" = cn ] ||
		fail "$rpmf: sluice.yaml is not %config(noreplace)"
	[ "$(rpm -qp --qf '%{URL}' "$rpmf" 2>/dev/null)" = https://github.com/sluice-dev/sluice ] || fail "$rpmf: URL '$(rpm -qp --qf '%{URL}' "$rpmf")'"
	rpmfiles=$(rpm -qlp "$rpmf" 2>/dev/null)
	for want in /usr/bin/sluice /usr/lib/systemd/system/sluice.service /usr/share/man/man1/sluice.1.gz /usr/share/doc/sluice/copyright \
		/usr/share/doc/sluice/LICENSE /usr/share/doc/sluice/NOTICE /usr/share/doc/sluice/THIRD_PARTY_NOTICES \
		/usr/share/zsh/site-functions/_sluice; do
		grep -qx "$want" <<<"$rpmfiles" || fail "$rpmf lacks $want"
	done
	grep -q '^/usr/share/zsh/vendor-completions/' <<<"$rpmfiles" && fail "$rpmf puts the zsh completion in Debian's directory"
	# rpm -e removes only the directories a package lists.
	dirs=$(rpm -qp --qf '[%{FILEMODES:perms} %{FILENAMES}\n]' "$rpmf" 2>/dev/null | sed -n 's/^d[^ ]* //p')
	for want in /etc/sluice /usr/share/sluice /usr/share/sluice/prometheus /usr/share/sluice/grafana /usr/share/doc/sluice /usr/share/doc/sluice/LICENSES; do
		grep -qx "$want" <<<"$dirs" || fail "$rpmf does not own the directory $want"
	done
	# Every file under /usr/share/doc and /usr/share/man is %doc or %license.
	licenses=$(rpm -qp --licensefiles "$rpmf" 2>/dev/null)
	docs=$( (rpm -qp --docfiles "$rpmf" 2>/dev/null; echo "$licenses") | sort)
	undocumented=$(grep -E '^/usr/share/(doc|man)/' <<<"$rpmfiles" | grep -vxF "$dirs" | sort | comm -23 - <(echo "$docs"))
	[ -z "$undocumented" ] || fail "$rpmf: neither %doc nor %license: $undocumented"
	for want in LICENSE NOTICE THIRD_PARTY_NOTICES; do
		grep -qx "/usr/share/doc/sluice/$want" <<<"$licenses" || fail "$rpmf: $want is not %license"
	done
	scripts=$(rpm -qp --scripts "$rpmf" 2>/dev/null)
	for want in "try-restart sluice.service" "disable --now sluice.service" "sluice unload"; do
		grep -q "$want" <<<"$scripts" || fail "$rpmf's scriptlets lack $want"
	done
	# rpm -i and rpm -e into a scratch root (files only: no scriptlets, no
	# dependencies) leave nothing of sluice's: it owns its directories.
	root=$(mktemp -d)
	out=$(rpm --root "$root" -i --nodeps --noscripts --nosignature --ignorearch "$rpmf" 2>&1) || fail "$rpmf: rpm --root -i: $out"
	[ -x "$root/usr/bin/sluice" ] || fail "$rpmf: rpm --root $root -i installed no /usr/bin/sluice"
	out=$(rpm --root "$root" -e --noscripts sluice 2>&1) || fail "$rpmf: rpm --root -e: $out"
	left=$(cd "$root" && find . -path ./root -prune -o -name '*sluice*' -print)
	rm -rf "$root"
	[ -z "$left" ] || fail "$rpmf: rpm -e leaves $left"
	rpm -qp --changelog "$rpmf" 2>/dev/null | head -1 | grep -q -- " - $rpmv-$(rpm -qp --qf '%{RELEASE}' "$rpmf" 2>/dev/null)\$" ||
		fail "$rpmf: the newest %changelog entry does not name version-release $rpmv-$(rpm -qp --qf '%{RELEASE}' "$rpmf")"
	rpm -qp --changelog "$rpmf" 2>/dev/null | head -3
	echo "$rpmf: $(wc -l <<<"$rpmfiles") files"
done

# The distributions' own linters, on the packages for the machines most
# hosts run. lintian: any error or warning fails, as does an override that
# no longer matches; what is overridden is listed (O:) with its reason (N:).
deb=sluice_${debv}_amd64.deb
say "lintian $deb"
lint=$(lintian --display-info --show-overrides --fail-on none "$deb" 2>&1 | { grep -v '^running with root privileges' || true; }) ||
	fail "lintian could not check $deb:"$'\n'"$lint"
echo "$lint"
if grep -E '^[EW]: |unused-override|mismatched-override' <<<"$lint" >&2; then
	fail "lintian: fix the package or justify the tag in deploy/packaging/deb/lintian-overrides"
fi
echo "lintian: no errors or warnings but the overridden ones in deploy/packaging/deb/lintian-overrides"

# rpmlint unpacks a package with `rpm2cpio | cpio -id` in a scratch
# directory, but nfpm writes the payload's paths absolute
# (goreleaser/nfpm#1122), so as root GNU cpio would write the files over
# this host's /usr and /etc, and rpmlint would check an empty directory.
# A cpio first on PATH that keeps the paths relative puts them where
# rpmlint looks; as root, rpmlint runs in a mount namespace where the
# directories the package writes to are read-only, so a stray write fails
# instead of landing on the host (and rpmlint then reports no-binary).
rpmf=sluice-${rpmv}-1.x86_64.rpm
say "rpmlint $rpmf"
shim=$(mktemp -d)
trap 'rm -rf "$shim"' EXIT
printf '#!/bin/sh\nexec %s --no-absolute-filenames "$@"\n' "$(command -v cpio)" > "$shim/cpio"
chmod +x "$shim/cpio"
rpmlint_cmd=(env PATH="$shim:$PATH" rpmlint -s -r "$repo/deploy/packaging/rpm/rpmlintrc" "$rpmf")
if [ "$(id -u)" = 0 ]; then
	tops=$(rpm -qlp "$rpmf" 2>/dev/null | cut -d/ -f2 | sort -u | sed 's:^:/:')
	lint=$(unshare --mount --propagation private bash -c 'for d in $1; do mount --bind "$d" "$d" && mount -o remount,bind,ro "$d" || exit 1; done; shift; exec "$@"' \
		- "$tops" "${rpmlint_cmd[@]}" 2>&1) || rc=$?
else
	lint=$("${rpmlint_cmd[@]}" 2>&1) || rc=$?
fi
echo "$lint"
[ "${rc:-0}" = 0 ] || fail "rpmlint: fix the package or justify the message in deploy/packaging/rpm/rpmlintrc"
grep -q '^ 1 packages and 0 specfiles checked; 0 errors, 0 warnings' <<<"$lint" || fail "rpmlint did not check $rpmf"
echo "rpmlint: no messages but the filtered ones in deploy/packaging/rpm/rpmlintrc"

prev_version=$(sed -n 's/^version //p' ../test/release/previous.txt)
if [ -n "$prev_version" ]; then
	say "versions sort after the previous release's, $prev_version"
	prev_deb=$(go run ../deploy/pkg -print-version deb "$prev_version")
	prev_rpm=$(go run ../deploy/pkg -print-version rpm "$prev_version")
	dpkg --compare-versions "$prev_deb" lt "$debv" || fail "dpkg sorts $debv before $prev_deb"
	[ "$(rpm --eval "%{lua: print(rpm.vercmp('$prev_rpm', '$rpmv'))}")" = -1 ] || fail "rpm sorts $rpmv before $prev_rpm"
	echo "dpkg: $prev_deb < $debv; rpm: $prev_rpm < $rpmv"
fi
echo
echo "check-release: PASS"
