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
# leaving only the conffile, dpkg -P leaving nothing; uninstall always
# unloads: an agent (the packaged binary) runs and attaches, then stops
# leaving its data path attached (keep_attached_on_exit), and dpkg -r, then
# rpm -e of the .rpm beside the .deb, with the conffile deleted, and with
# it broken after pointing pin_path elsewhere, leave tc -j, bpftool -j,
# the devices, the bpffs and /var/lib/sluice as they were before install
# (and the agent's programs, links and maps gone from the kernel); given
# the previous release's package (test/release/build.sh), an upgrade from
# it: versions that sort, the edited conffile kept, the running agent
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
# The .rpm make packages wrote beside the .deb: its %preun is checked too.
rpm_pkg=$(find "$(dirname "$deb")" -maxdepth 1 -name "sluice-*-1.$(uname -m).rpm" | head -1)
[ -n "$rpm_pkg" ] || { echo "deb-check: no sluice-*-1.$(uname -m).rpm beside $deb (make packages writes both)" >&2; exit 1; }
for tool in rpm bpftool tc; do
	command -v "$tool" >/dev/null || { echo "deb-check: $tool is missing (make deps installs it)" >&2; exit 1; }
done
if dpkg-query -W sluice >/dev/null 2>&1; then
	echo "deb-check: a sluice package is installed on this host; the check works in overlays and does not need it" >&2
fi

# A network namespace of its own and a fresh bpffs too: prerm runs
# `sluice unload` with the shipped configuration (interfaces: [eth0]),
# which must not touch this host's eth0 or pins.
exec unshare --mount --net --propagation private bash -s "$deb" "$version" "$prev" "$prev_version" "$rpm_pkg" <<'INNER'
set -euo pipefail
deb=$1 version=$2 prev=$3 prev_version=$4 rpm_pkg=$5
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

say "uninstall always unloads: an agent ran and left its data path attached; the package goes with the conffile deleted, or broken and naming a custom pin_path"
# A broker-like interface in this namespace for the agent to attach to.
ip link set lo up
ip link add dc0 type veth peer name dc1
ip addr add 198.18.7.1/24 dev dc0
ip link set dc0 up
ip link set dc1 up
# devices: this namespace's (its /sys/class/net is the host's).
devices() { ip -o link show | awk -F': ' '{print $2}' | cut -d@ -f1; }
# host_state: what an agent could leave, as an operator's tools show it:
# tc's qdiscs and every device's filters, bpftool's hooks of this
# namespace, the devices (IFBs, aliases, queue lengths), the bpffs and
# sluice's state directory.
host_state() {
	echo "tc -j qdisc show: $(tc -j qdisc show)"
	for dev in $(devices); do
		for hook in ingress egress; do
			echo "tc -j filter show dev $dev $hook: $(tc -j filter show dev "$dev" "$hook" 2>&1)"
		done
	done
	echo "bpftool -j net show: $(bpftool -j net show)"
	echo "ip -j link show: $(ip -j link show)"
	echo "bpffs: $(find /sys/fs/bpf | sort | paste -sd' ')"
	echo "/var/lib/sluice: $(ls -A /var/lib/sluice 2>&1)"
}
# agent_objects PINDIR: the kernel objects the agent left, by id: programs
# under tc filters (clsact) and behind pinned links (TCX, which this
# bpftool's net show does not list), the links, the pinned maps.
agent_objects() {
	{
		for dev in $(devices); do
			for hook in ingress egress; do
				tc -j filter show dev "$dev" "$hook" 2>/dev/null | grep -o '"prog":{"id":[0-9]*' | sed 's/.*://; s/^/prog /' || true
			done
		done
		for pin in $(find "$1" -type f 2>/dev/null); do
			if out=$(bpftool -j link show pinned "$pin" 2>/dev/null); then
				echo "link $(grep -o '"id":[0-9]*' <<<"$out" | head -1 | cut -d: -f2)"
				echo "prog $(grep -o '"prog_id":[0-9]*' <<<"$out" | head -1 | cut -d: -f2)"
			elif out=$(bpftool -j map show pinned "$pin" 2>/dev/null); then
				echo "map $(grep -o '"id":[0-9]*' <<<"$out" | head -1 | cut -d: -f2)"
			fi
		done
	} | sort -u
}
agent_config() { # PIN_PATH ATTACH
	printf '%s\n' "interfaces: [dc0]" "listeners: [9092]" "exempt_peers: [198.18.8.0/24]" "mode: enforce" "attach: $2" "pin_path: $1" \
		"produce: {capacity: 100MiB}" "fetch: {capacity: 100MiB}" "bootstrap: [198.18.7.1:9092]"
}
# uninstall_case WHAT INSTALL REMOVE PIN_PATH ATTACH SPOIL CALL: the state
# before INSTALL; the packaged agent runs with PIN_PATH and ATTACH,
# attaches, shapes and stops leaving it all; SPOIL does to the conffile what
# the operator did; REMOVE asks systemd for CALL (the stub records it) and
# must leave the state as it was before INSTALL, and none of the agent's
# programs, links or maps loaded.
uninstall_case() {
	local what=$1 install=$2 remove=$3 pins=$4 attach=$5 spoil=$6 call=$7 before during after objects agent
	say "$what"
	before=$(host_state)
	$install >/dev/null
	agent_config "$pins" "$attach" > /etc/sluice/sluice.yaml
	rm -f /run/sluice-ready
	/usr/bin/sluice run --config /etc/sluice/sluice.yaml --ready-file /run/sluice-ready 2>/run/sluice-agent.log &
	agent=$!
	for _ in $(seq 150); do
		[ -e /run/sluice-ready ] && break
		kill -0 "$agent" 2>/dev/null || break
		sleep 0.1
	done
	[ -e /run/sluice-ready ] || { cat /run/sluice-agent.log >&2; fail "$what: the agent did not start"; }
	kill -TERM "$agent"
	wait "$agent" || { cat /run/sluice-agent.log >&2; fail "$what: the agent's stop failed"; }
	grep 'left attached for the next agent' /run/sluice-agent.log >/dev/null || { cat /run/sluice-agent.log >&2; fail "$what: the agent did not leave its data path attached"; }
	during=$(host_state)
	objects=$(agent_objects "$pins")
	for want in '"kind":"htb"' slifb "$pins/settings" '/var/lib/sluice: host.json'; do
		grep -F "$want" >/dev/null <<<"$during" || fail "$what: nothing left for the removal to find ($want):"$'\n'"$during"
	done
	grep '^prog ' >/dev/null <<<"$objects" || fail "$what: no program of the agent's found attached"
	echo "left attached by the stopped agent: $(grep -c . <<<"$objects") kernel objects ($(paste -sd, <<<"$objects")); $(ip -o link show | grep -o 'slifb[0-9]*' | paste -sd' '); pins in $pins; /var/lib/sluice/host.json"
	$spoil
	echo "/etc/sluice/sluice.yaml now: $(head -c 200 /etc/sluice/sluice.yaml 2>&1 | paste -sd' ')"
	: > "$calls"
	$remove
	grep -x "$call" "$calls" >/dev/null || fail "$what: the removal did not ask systemd for '$call': $(paste -sd';' "$calls")"
	after=$(host_state)
	if [ "$after" != "$before" ]; then
		diff <(echo "$before") <(echo "$after") >&2 || true
		fail "$what: the host is not as it was before install"
	fi
	for obj in $(tr ' ' : <<<"$objects"); do
		kind=${obj%%:*} id=${obj#*:}
		for _ in $(seq 50); do # a program is freed after an RCU grace period
			bpftool "$kind" show id "$id" >/dev/null 2>&1 || continue 2
			sleep 0.1
		done
		fail "$what: $kind $id is still loaded: $(bpftool "$kind" show id "$id")"
	done
	echo "as before install: tc -j, bpftool -j net show, ip -j link, the bpffs and /var/lib/sluice; the agent's programs, links and maps unloaded"
}
delete_conffile() { rm /etc/sluice/sluice.yaml; }
break_conffile() { printf 'interfaces: [dc0\nproduce: {\n' > /etc/sluice/sluice.yaml; }
uninstall_case "dpkg -r with the conffile deleted (TCX, the default pin_path)" "dpkg -i $deb" "dpkg -r sluice" /sys/fs/bpf/sluice auto delete_conffile "stop sluice.service"
dpkg -P sluice >/dev/null
uninstall_case "dpkg -r with the conffile broken, pin_path /sys/fs/bpf/sluice-custom (clsact)" "dpkg -i $deb" "dpkg -r sluice" /sys/fs/bpf/sluice-custom clsact break_conffile "stop sluice.service"
dpkg -P sluice >/dev/null
# rpm: its database in the overlaid /var (Debian's rpm keeps it in ~), no
# plugins (systemd-inhibit wants a system bus); rpm runs scriptlets with
# PATH=/sbin:/bin:/usr/sbin:/usr/bin, so the systemctl stub goes in the
# overlaid /usr/bin too.
rpm_cmd="rpm --dbpath /var/lib/rpm --noplugins"
cp /usr/local/sbin/systemctl /usr/bin/systemctl
uninstall_case "rpm -e with the conffile deleted (TCX, the default pin_path)" "$rpm_cmd -i --nodeps --force-debian $rpm_pkg" "$rpm_cmd -e sluice" /sys/fs/bpf/sluice auto delete_conffile "disable --now sluice.service"
rm -rf /etc/sluice
uninstall_case "rpm -e with the conffile broken, pin_path /sys/fs/bpf/sluice-custom (clsact)" "$rpm_cmd -i --nodeps --force-debian $rpm_pkg" "$rpm_cmd -e sluice" /sys/fs/bpf/sluice-custom clsact break_conffile "disable --now sluice.service"
rm -rf /etc/sluice
ip link del dc0

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
