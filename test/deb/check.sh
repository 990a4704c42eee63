#!/usr/bin/env bash
# make deb-check: install, remove and purge the Debian package with dpkg,
# inside private mount and network namespaces whose /usr, /etc and /var
# are overlays on tmpfs, so the host's files, dpkg database, interfaces and
# pins never change. A stub
# systemctl (first on PATH, /run/systemd/system present) records what the
# maintainer scripts ask of systemd. Checks: the files and their paths,
# the conffile, the unit naming the packaged binary, `sluice version`
# printing the package's version, daemon-reload but never enable or start,
# an upgrade's try-restart going through policy-rc.d (deb-systemd-invoke),
# dpkg -r stopping the agent and removing the operator's enablement and
# leaving only the conffile, dpkg -P leaving nothing; given the
# previous release's package (test/release/build.sh), an upgrade from it:
# versions that sort, the edited conffile kept, the running agent
# try-restarted on the new binary.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
usage="usage: check.sh sluice_VERSION_amd64.deb VERSION [PREVIOUS.deb PREVIOUS_VERSION]"
deb=${1:?$usage}
version=${2:?$usage}
deb=$(readlink -f "$deb")
prev=${3:-} prev_version=${4:-}
[ -z "$prev" ] || prev=$(readlink -f "$prev")
[ "$(id -u)" = 0 ] || { echo "deb-check needs root (mount namespaces, dpkg)" >&2; exit 1; }
if dpkg-query -W sluice >/dev/null 2>&1; then
	echo "deb-check: a sluice package is installed on this host; the check works in overlays and does not need it" >&2
fi

# A network namespace of its own and a fresh bpffs too: prerm runs
# `sluice unload` with the shipped configuration (interfaces: [eth0]),
# which must not touch this host's eth0 or pins.
exec unshare --mount --net --propagation private bash -s "$deb" "$version" "$prev" "$prev_version" <<'INNER'
set -euo pipefail
deb=$1 version=$2 prev=$3 prev_version=$4
fail() { echo "FAIL: $*" >&2; exit 1; }
say() { printf '\n== %s\n' "$*"; }
scratch=$(mktemp -d)
mount -t tmpfs tmpfs "$scratch"
for d in usr etc var; do
	mkdir -p "$scratch/$d.upper" "$scratch/$d.work"
	mount -t overlay overlay -o "lowerdir=/$d,upperdir=$scratch/$d.upper,workdir=$scratch/$d.work" "/$d"
done
mount -t tmpfs tmpfs /run
mount -t bpf bpf /sys/fs/bpf
mkdir -p /run/systemd/system /usr/local/sbin
calls=/run/systemctl-calls
cat > /usr/local/sbin/systemctl <<STUB
#!/bin/sh
echo "\$*" >> $calls
STUB
chmod +x /usr/local/sbin/systemctl
# The maintainer scripts ask policy-rc.d (deb-systemd-invoke) before they
# act on the unit: none here but the one a check below installs (a
# container image's own may forbid everything).
rm -f /usr/sbin/policy-rc.d
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
: > "$calls"

say "dpkg -i $(basename "$deb")"
dpkg -i "$deb"
for f in /usr/bin/sluice /usr/lib/systemd/system/sluice.service /etc/sluice/sluice.yaml \
	/usr/share/sluice/prometheus/sluice-rules.yaml /usr/share/sluice/grafana/sluice-dashboard.json /usr/share/doc/sluice/README.md /usr/share/doc/sluice/runbook.md \
	/usr/share/doc/sluice/copyright /usr/share/man/man1/sluice.1.gz /usr/share/man/man1/sluice-status.1.gz /usr/share/bash-completion/completions/sluice; do
	[ -e "$f" ] || fail "$f not installed"
	echo "installed $f"
done
dpkg-query -W -f='${Conffiles}\n' sluice | grep '/etc/sluice/sluice.yaml' >/dev/null || fail "/etc/sluice/sluice.yaml is not a conffile"
echo "conffile: /etc/sluice/sluice.yaml"
for exe in $(sed -n 's/^Exec[A-Za-z]*=\([^ ]*\).*/\1/p' /usr/lib/systemd/system/sluice.service); do
	[ -x "$exe" ] || fail "the unit runs $exe, which is not installed"
	echo "unit runs $exe"
done
grep '^ExecStart=/usr/bin/sluice run' /usr/lib/systemd/system/sluice.service >/dev/null || fail "ExecStart does not name /usr/bin/sluice"
gzip -dc /usr/share/man/man1/sluice-status.1.gz | groff -man -Tascii 2>/dev/null | grep -q -- '--watch' || fail "the installed sluice-status(1) does not read"
echo "man page reads: sluice-status(1)"
got=$(/usr/bin/sluice version)
case "$got" in "sluice $version revision "*) echo "$got" ;; *) fail "sluice version printed '$got', want version $version" ;; esac
grep -x 'daemon-reload' "$calls" >/dev/null || fail "postinst did not reload systemd"
if grep -E '(^| )(start|enable|restart)( |$)' "$calls"; then fail "postinst enabled or started the unconfigured agent"; fi
echo "systemctl calls on install: $(paste -sd';' "$calls")"

say "an upgrade (dpkg -i over the installed package) restarts a running agent, never starts a stopped one"
: > "$calls"
dpkg -i "$deb"
grep -x 'try-restart sluice.service' "$calls" >/dev/null || fail "postinst did not try-restart the unit on upgrade: $(paste -sd';' "$calls")"
if grep -E '(^| )(start|enable|restart)( |$)' "$calls"; then fail "postinst started or enabled the agent on upgrade"; fi
echo "systemctl calls on upgrade: $(paste -sd';' "$calls")"

say "an upgrade where policy-rc.d forbids service actions (an image build) does not restart"
printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
chmod +x /usr/sbin/policy-rc.d
: > "$calls"
dpkg -i "$deb"
rm /usr/sbin/policy-rc.d
if grep -E '(^| )(start|enable|restart|try-restart)( |$)' "$calls"; then fail "postinst acted on the unit against policy-rc.d"; fi
echo "systemctl calls under policy-rc.d 101: $(paste -sd';' "$calls")"

say "dpkg -r stops and disables the agent; an edited conffile survives"
echo "# edited by the operator" >> /etc/sluice/sluice.yaml
# What `systemctl enable sluice` makes from the unit's [Install] section.
wants=/etc/systemd/system/multi-user.target.wants
mkdir -p "$wants"
ln -s /usr/lib/systemd/system/sluice.service "$wants/sluice.service"
: > "$calls"
dpkg -r sluice
grep -x 'stop sluice.service' "$calls" >/dev/null || fail "prerm did not stop the unit: $(paste -sd';' "$calls")"
[ ! -L "$wants/sluice.service" ] || fail "prerm left the unit enabled ($wants/sluice.service)"
echo "systemctl calls on dpkg -r: $(paste -sd';' "$calls"); $wants/sluice.service removed"
for f in /usr/bin/sluice /usr/lib/systemd/system/sluice.service /usr/share/sluice /usr/share/doc/sluice /usr/share/man/man1/sluice.1.gz \
	/usr/share/bash-completion/completions/sluice /usr/share/zsh/vendor-completions/_sluice /usr/share/lintian/overrides/sluice; do
	[ ! -e "$f" ] || fail "$f left after dpkg -r"
done
grep '# edited by the operator' /etc/sluice/sluice.yaml >/dev/null || fail "dpkg -r lost the edited configuration"
[ "$(dpkg-query -W -f='${db:Status-Abbrev}' sluice)" = "rc " ] || fail "status after -r: $(dpkg-query -W -f='${db:Status-Abbrev}' sluice)"
echo "left after dpkg -r: $(find /etc/sluice -type f)"

say "dpkg -P"
dpkg -P sluice
[ ! -e /etc/sluice ] || fail "/etc/sluice left after purge: $(ls -A /etc/sluice)"
[ ! -e /var/lib/systemd/deb-systemd-helper-enabled/sluice.service.dsh-also ] || fail "deb-systemd-helper's state of sluice.service left after purge"
if dpkg-query -W sluice >/dev/null 2>&1; then fail "sluice still known to dpkg after purge"; fi
echo "nothing left after dpkg -P"

if [ -n "$prev" ]; then
	say "an upgrade from the previous release, $prev_version, to $version"
	dpkg --compare-versions "$prev_version" lt "$version" || fail "$version does not sort after $prev_version: dpkg would take the upgrade for a downgrade"
	echo "dpkg sorts $prev_version before $version"
	dpkg -i "$prev" </dev/null
	got=$(/usr/bin/sluice version)
	case "$got" in "sluice $prev_version "*) echo "installed: $got" ;; *) fail "the previous package's sluice printed '$got', want $prev_version" ;; esac
	echo "# edited by the operator before the upgrade" >> /etc/sluice/sluice.yaml
	: > "$calls"
	# The operator's edit against the packaged file's changes: keep theirs
	# (what apt-get -o Dpkg::Options::=--force-confold does), never ask.
	dpkg --force-confdef --force-confold -i "$deb" </dev/null
	got=$(/usr/bin/sluice version)
	case "$got" in "sluice $version revision "*) echo "upgraded: $got" ;; *) fail "after the upgrade sluice printed '$got', want $version" ;; esac
	grep '# edited by the operator before the upgrade' /etc/sluice/sluice.yaml >/dev/null || fail "the upgrade lost the edited configuration"
	grep -x 'try-restart sluice.service' "$calls" >/dev/null || fail "the upgrade did not try-restart the unit: $(paste -sd';' "$calls")"
	if grep -E '(^| )(start|enable|restart)( |$)' "$calls"; then fail "the upgrade started or enabled the agent"; fi
	echo "systemctl calls on the upgrade: $(paste -sd';' "$calls")"
	dpkg -P sluice
	[ ! -e /etc/sluice ] || fail "/etc/sluice left after purge"
fi
echo
echo "deb-check: PASS"
INNER
