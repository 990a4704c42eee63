#!/usr/bin/env bash
# make deb-check, first part: what make packages wrote to dist/, read
# without installing anything. The checksums hold; each binary is static,
# stripped and of its architecture and prints the version; each .deb's
# control fields (architecture, version, Depends) and contents; each .rpm's
# header, requirements, scriptlets and files, the configuration marked
# %config(noreplace); and dpkg and rpm both sort this version after the
# previous release's.
set -euo pipefail
usage="usage: check-release.sh DIST VERSION"
dist=${1:?$usage}
version=${2:?$usage}
fail() { echo "FAIL: $*" >&2; exit 1; }
say() { printf '\n== %s\n' "$*"; }
for tool in dpkg-deb rpm file sha256sum; do
	command -v "$tool" >/dev/null || fail "$tool is missing (make deps installs it)"
done
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
	files=$(dpkg-deb -c "$deb" | awk '{print $6}')
	for want in ./usr/bin/sluice ./usr/lib/systemd/system/sluice.service ./etc/sluice/sluice.yaml ./usr/share/doc/sluice/copyright \
		./usr/share/doc/sluice/changelog.Debian.gz ./usr/share/man/man1/sluice.1.gz ./usr/share/man/man1/sluice-status.1.gz \
		./usr/share/bash-completion/completions/sluice ./usr/share/sluice/prometheus/sluice-rules.yaml \
		./usr/share/doc/sluice/LICENSE ./usr/share/doc/sluice/NOTICE ./usr/share/doc/sluice/THIRD_PARTY_NOTICES; do
		grep -qx "$want" <<<"$files" || fail "$deb lacks $want"
	done
	dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./conffiles | grep -qx /etc/sluice/sluice.yaml || fail "$deb: sluice.yaml is not a conffile"
	dpkg-deb --fsys-tarfile "$deb" | tar -xO ./usr/share/doc/sluice/changelog.Debian.gz | gzip -dc | head -1 | grep -q "^sluice ($debv)" ||
		fail "$deb: the changelog does not start with this version"
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
	rpmfiles=$(rpm -qlp "$rpmf" 2>/dev/null)
	for want in /usr/bin/sluice /usr/lib/systemd/system/sluice.service /usr/share/man/man1/sluice.1.gz /usr/share/doc/sluice/copyright \
		/usr/share/doc/sluice/LICENSE /usr/share/doc/sluice/NOTICE /usr/share/doc/sluice/THIRD_PARTY_NOTICES; do
		grep -qx "$want" <<<"$rpmfiles" || fail "$rpmf lacks $want"
	done
	scripts=$(rpm -qp --scripts "$rpmf" 2>/dev/null)
	for want in "try-restart sluice.service" "disable --now sluice.service" "sluice unload"; do
		grep -q "$want" <<<"$scripts" || fail "$rpmf's scriptlets lack $want"
	done
	rpm -qp --changelog "$rpmf" 2>/dev/null | head -3
	echo "$rpmf: $(wc -l <<<"$rpmfiles") files"
done

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
