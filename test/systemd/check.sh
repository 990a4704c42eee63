#!/bin/bash
# make systemd-check: the unit under a real systemd. This machine's own
# systemd boots as PID 1 of a new PID + mount + network namespace, with
# fresh tmpfs over /tmp, /var/tmp, /run and the directories `make install`
# writes (so the host's files are untouched: its tmpfiles setup would
# otherwise empty the shared /tmp). Then: make install; start on an empty
# bpffs (a fresh boot) reaches active through sd_notify, a start the host
# refuses is not restarted and leaves nothing (a missing interface, a
# metrics_address in use, a socket outside /run/sluice, programs the
# verifier rejects, a configuration file that is not there: each exits 78
# with one line, check-config predicting the first two), a start that exits
# 1 every time ends failed at the start limit; systemctl reload
# applies an edit, fails with the reason on a refused file and reaches an
# agent at a socket: of its own; systemctl restart re-adopts what the agent left
# (keep_attached_on_exit, the default); kill -9 is restarted by
# Restart=on-failure and re-adopts; a hung agent is restarted by the
# watchdog; `sluice unload` refuses while the agent runs; the agent's record
# of what it made is written in /var/lib/sluice under the unit's sandbox,
# and with it `sluice unload` removes everything with the configuration
# deleted; make uninstall leaves nothing attached or installed. Prints a transcript; exits non-zero
# on the first failure, always tearing down.
set -euo pipefail
# Pipelines read their input to the end (grep >/dev/null, never grep -q):
# under pipefail, grep -q exits at its first match and a writer still
# writing dies of SIGPIPE, failing a check that matched.
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /var/tmp/sluice-systemd-check.XXXXXX)
canary=/tmp/sluice-systemd-check-canary.$$
touch "$canary"
made_etc_sluice= made_var_lib_sluice=
[ -d /etc/sluice ] || { mkdir /etc/sluice; made_etc_sluice=1; }
# The unit's StateDirectory: a tmpfs inside, over a directory that must
# exist here.
[ -d /var/lib/sluice ] || { mkdir -m 0700 /var/lib/sluice; made_var_lib_sluice=1; }
sdpid=

say() { printf '\n== %s\n' "$*"; }
fail() { echo "FAIL: $*" >&2; exit 1; }
ns() { nsenter -t "$sdpid" -m -p -n "$@"; }
# wait_for_new_main PID: until the unit is active again under another main
# process (at most 30 s).
wait_for_new_main() {
	for _ in $(seq 150); do
		now=$(ns systemctl show -p MainPID --value sluice)
		[ "$now" != "$1" ] && [ "$now" != 0 ] && ns systemctl is-active sluice >/dev/null && return 0
		sleep 0.2
	done
}

teardown() {
	if [ -n "$sdpid" ] && kill -0 "$sdpid" 2>/dev/null; then
		ns systemctl stop sluice >/dev/null 2>&1 || true
		kill -KILL "$sdpid" 2>/dev/null || true # PID 1 of its namespace: every process in it goes too
		for _ in $(seq 50); do kill -0 "$sdpid" 2>/dev/null || break; sleep 0.1; done
	fi
	[ -n "$made_etc_sluice" ] && rmdir /etc/sluice 2>/dev/null || true
	[ -n "$made_var_lib_sluice" ] && rmdir /var/lib/sluice 2>/dev/null || true
	rm -rf "$work"
	if [ -e "$canary" ]; then rm -f "$canary"; else echo "FAIL: the host's /tmp was emptied" >&2; exit 1; fi
}
trap teardown EXIT

cat > "$work/boot.sh" <<'BOOT'
#!/bin/bash
set -e
for d in /tmp /var/tmp /run /etc/systemd/system /var/log/journal /var/lib/systemd /var/lib/sluice /usr/local/bin /usr/local/share /etc/sluice /usr/share/doc; do
	[ -d "$d" ] && mount -t tmpfs tmpfs "$d"
done
ip link set lo up
# What PID 1 does at boot on a systemd host (this machine's init does not):
# an empty bpffs at /sys/fs/bpf, private to this namespace.
mount -t bpf -o mode=0700 bpf /sys/fs/bpf
exec /lib/systemd/systemd --system --unit=basic.target
BOOT
chmod +x "$work/boot.sh"
# The boot script lives in /var/tmp/…, which the namespace covers with a
# tmpfs only after it started.
setsid unshare --pid --fork --mount --net --mount-proc --propagation private "$work/boot.sh" >"$work/boot.log" 2>&1 &
for _ in $(seq 100); do
	sdpid=$(pgrep -f '^/lib/systemd/systemd --system --unit=basic.target' | head -1 || true)
	[ -n "$sdpid" ] && ns systemctl is-system-running --wait >/dev/null 2>&1 && break
	sleep 0.2
done
[ -n "$sdpid" ] || fail "systemd did not boot: $(cat "$work/boot.log")"
say "systemd $(ns systemctl --version | sed -n 1p | cut -d' ' -f2) booted as PID 1 of its namespace: $(ns systemctl is-system-running)"

say "make install"
ns make -C "$repo" --no-print-directory install >/dev/null
ns ls -l /usr/local/bin/sluice /etc/systemd/system/sluice.service /etc/sluice/sluice.yaml
# A broker-like interface for the agent to attach to.
ns ip link add sd0 type veth peer name sd1
ns ip addr add 198.18.5.1/24 dev sd0
ns ip link set sd0 up
ns ip link set sd1 up
cat > "$work/sluice.yaml" <<YAML
interfaces: [sd0]
listeners: [9092]
mode: enforce
produce: {capacity: 100MiB}
fetch: {capacity: 100MiB}
bootstrap: [198.18.5.1:9092]
YAML
ns sh -c "cat > /etc/sluice/sluice.yaml" < "$work/sluice.yaml" # $work is hidden inside (tmpfs over /var/tmp)
ns systemctl daemon-reload

say "a start the host refuses (interfaces: [absent0]) exits 78, is not restarted, and leaves nothing"
ns sed -i 's/^interfaces: .*/interfaces: [absent0]/' /etc/sluice/sluice.yaml
if ns systemctl start sluice; then fail "started with an interface that does not exist"; fi
# A restart would come RestartSec=2 s after the exit: watch three times that.
for _ in $(seq 30); do
	[ "$(ns systemctl show -p NRestarts --value sluice)" = 0 ] || fail "a refused start was restarted"
	sleep 0.2
done
ns systemctl show -p ExecMainStatus -p NRestarts -p ActiveState sluice
[ "$(ns systemctl show -p ExecMainStatus --value sluice)" = 78 ] || fail "exit status of a refused start is not 78"
ns journalctl -u sluice --no-pager -o cat | grep 'refused (not restarted): interfaces: absent0' || fail "no reason in the journal"
ns test ! -e /sys/fs/bpf/sluice || fail "a refused start left its pins"
ns ip -o link | grep >/dev/null slifb && fail "a refused start left an IFB"
ns sh -c "cat > /etc/sluice/sluice.yaml" < "$work/sluice.yaml"
ns systemctl reset-failed sluice

# refused_start WHAT LINE: started as the file and the host are now, the unit
# exits 78, is not restarted, ends failed (not activating), the agent logs
# exactly one line and it holds LINE, and the qdiscs, pins and socket are as
# they were.
refused_start() {
	local what=$1 line=$2 qdiscs pid logged
	qdiscs=$(ns tc -j qdisc show)
	if ns systemctl start sluice; then fail "started with $what"; fi
	for _ in $(seq 30); do
		[ "$(ns systemctl show -p NRestarts --value sluice)" = 0 ] || fail "$what: restarted"
		sleep 0.2
	done
	ns systemctl show -p ExecMainStatus -p NRestarts -p ActiveState -p Result sluice
	[ "$(ns systemctl show -p ActiveState --value sluice)" = failed ] || fail "$what: the unit is not failed"
	[ "$(ns systemctl show -p ExecMainStatus --value sluice)" = 78 ] || fail "$what: the exit status is not 78"
	# What the agent itself logged in this start: its stderr lines carry its
	# pid (systemd's own lines about it carry 1).
	pid=$(ns systemctl show -p ExecMainPID --value sluice)
	logged=$(ns journalctl --no-pager -o cat _PID="$pid")
	echo "$logged"
	[ "$(printf '%s\n' "$logged" | wc -l)" = 1 ] || fail "$what: the agent logged more than the one line"
	printf '%s\n' "$logged" | grep -F >/dev/null "$line" || fail "$what: the line does not say '$line'"
	[ "$(ns tc -j qdisc show)" = "$qdiscs" ] || fail "$what: the qdiscs changed: $(ns tc -j qdisc show)"
	ns test ! -e /sys/fs/bpf/sluice || fail "$what: pins left"
	ns test ! -e /run/sluice/sluice.sock || fail "$what: the socket left"
	ns test ! -e /var/lib/sluice/host.json || fail "$what: a record of what it made left in /var/lib/sluice: $(ns cat /var/lib/sluice/host.json)"
	ns systemctl reset-failed sluice
}

say "no crash loop: a metrics_address in use exits 78 with one line, and check-config says so"
ns systemd-run --quiet --unit=porthog /usr/bin/perl -MIO::Socket::INET -e \
	'my $s = IO::Socket::INET->new(LocalAddr => "127.0.0.1:7359", Listen => 1, ReuseAddr => 1) or die "$!"; sleep 600'
for _ in $(seq 50); do ns ss -ltnH 'sport = :7359' | grep >/dev/null 7359 && break; sleep 0.1; done
ns ss -ltnH 'sport = :7359' | grep 7359 || { ns systemctl status porthog --no-pager || true; fail "nothing listens on 127.0.0.1:7359"; }
refused_start "metrics_address in use" "refused (not restarted): metrics_address 127.0.0.1:7359 is in use by another process"
if out=$(ns sluice check-config --config /etc/sluice/sluice.yaml 2>&1); then fail "check-config passed with metrics_address in use: $out"; fi
echo "$out" | grep -F 'metrics_address 127.0.0.1:7359 is in use by another process (perl, pid' || fail "check-config did not name the port's holder: $out"
ns systemctl stop porthog

say "no crash loop: a socket outside /run/sluice (read-only under ProtectSystem=strict) exits 78 with one line, and check-config says so"
ns sh -c 'echo "socket: /etc/sluice/sluice.sock" >> /etc/sluice/sluice.yaml'
refused_start "socket: /etc/sluice/sluice.sock" "refused (not restarted): socket /etc/sluice/sluice.sock cannot be created: its directory is on a read-only file system"
ns test ! -e /etc/sluice/sluice.sock || fail "a socket was made"
if out=$(ns sluice check-config --config /etc/sluice/sluice.yaml 2>&1); then fail "check-config passed with socket in /etc: $out"; fi
echo "$out" | grep -F 'socket /etc/sluice/sluice.sock is outside the directories /etc/systemd/system/sluice.service lets the agent write' || fail "check-config did not predict the sandbox: $out"
ns sh -c "cat > /etc/sluice/sluice.yaml" < "$work/sluice.yaml"

say "no crash loop: programs the verifier rejects (a drop-in takes CAP_PERFMON away) exit 78 with one line"
ns mkdir -p /etc/systemd/system/sluice.service.d
ns sh -c 'printf "[Service]\nCapabilityBoundingSet=\nCapabilityBoundingSet=CAP_BPF CAP_NET_ADMIN\nAmbientCapabilities=\nAmbientCapabilities=CAP_BPF CAP_NET_ADMIN\n" > /etc/systemd/system/sluice.service.d/no-perfmon.conf'
ns systemctl daemon-reload
refused_start "no CAP_PERFMON" "refused (not restarted): the kernel's verifier (Linux $(uname -r)) rejects sluice's BPF programs: program sluice_"
ns rm -r /etc/systemd/system/sluice.service.d
ns systemctl daemon-reload

say "no crash loop: a configuration file that is not there exits 78 with one line"
ns mv /etc/sluice/sluice.yaml /etc/sluice/sluice.yaml.away
refused_start "no /etc/sluice/sluice.yaml" "refused (not restarted): /etc/sluice/sluice.yaml: read configuration: open /etc/sluice/sluice.yaml: no such file or directory: restore it"
ns mv /etc/sluice/sluice.yaml.away /etc/sluice/sluice.yaml

say "no crash loop even at exit 1: a start that fails every time ends failed at the start limit"
# Every start failure the agent knows a restart cannot fix exits 78; the
# start limit is for the rest. A drop-in stands in for such an agent: its
# ExecStart exits 1 every time.
ns mkdir -p /etc/systemd/system/sluice.service.d
ns sh -c 'printf "[Service]\nExecStart=\nExecStart=/bin/sh -c \"echo start-limit stand-in exits 1; exit 1\"\n" > /etc/systemd/system/sluice.service.d/exit1.conf'
ns systemctl daemon-reload
qdiscs=$(ns tc -j qdisc show)
since=$(ns date +%s)
ns systemctl start sluice || true
# Five starts 2 s apart, then StartLimitBurst=5 in StartLimitIntervalSec=60
# refuses the sixth (systemd 252 keeps Result=exit-code, from the last run,
# and says why in the journal).
limited() { ns journalctl -u sluice --no-pager -o cat --since "@$since" | grep 'Start request repeated too quickly'; }
for _ in $(seq 150); do
	[ "$(ns systemctl show -p ActiveState --value sluice)" = failed ] && limited >/dev/null && break
	sleep 0.2
done
ns systemctl show -p ExecMainStatus -p NRestarts -p ActiveState -p Result sluice
limited || fail "an exit-1 loop did not end at the start limit"
[ "$(ns systemctl show -p ActiveState --value sluice)" = failed ] || fail "an exit-1 loop did not end failed"
[ "$(ns journalctl -u sluice --no-pager -o cat --since "@$since" | grep -c 'start-limit stand-in exits 1')" = 5 ] || fail "not five starts"
restarts=$(ns systemctl show -p NRestarts --value sluice)
sleep 3 # RestartSec=2: no further start comes
[ "$(ns systemctl show -p ActiveState --value sluice)" = failed ] || fail "started again after the start limit"
[ "$(ns systemctl show -p NRestarts --value sluice)" = "$restarts" ] || fail "restarted after the start limit"
[ "$(ns tc -j qdisc show)" = "$qdiscs" ] || fail "the qdiscs changed"
ns rm -r /etc/systemd/system/sluice.service.d
ns systemctl daemon-reload
ns systemctl reset-failed sluice

say "start on an empty bpffs (a fresh boot)"
ns test ! -e /sys/fs/bpf/sluice || fail "sluice pins present before the first start"  # a fresh bpffs holds only the kernel's maps.debug, progs.debug
ns systemctl start sluice || { ns journalctl -u sluice --no-pager | tail -30; ns stat -f -c "bpffs type: %T" /sys/fs/bpf; ns findmnt /sys/fs/bpf; fail "start"; }
ns systemctl is-active sluice
ns sluice status --socket /run/sluice/sluice.sock | sed -n 1,3p
ns ls /sys/fs/bpf/sluice | sed -n 1,3p

say "systemctl reload applies an edit (produce capacity 100MiB -> 50MiB)"
ns sed -i 's/produce: {capacity: 100MiB}/produce: {capacity: 50MiB}/' /etc/sluice/sluice.yaml
ns systemctl reload sluice
for _ in $(seq 50); do
	ns sluice status --socket /run/sluice/sluice.sock 2>/dev/null | grep >/dev/null 'produce.*50MiB' && break
	sleep 0.2
done
ns sluice status --socket /run/sluice/sluice.sock | grep produce || true
ns sluice status --socket /run/sluice/sluice.sock | grep >/dev/null 'produce.*50MiB' || fail "reload not applied"

say "systemctl reload of a refused file fails, saying why; the running configuration stays"
ns cp /etc/sluice/sluice.yaml /etc/sluice/sluice.yaml.good
ns sed -i 's/produce: {capacity: 50MiB}/produce: {capacity: 1e300TiB}/' /etc/sluice/sluice.yaml
if ns systemctl reload sluice; then fail "systemctl reload of a refused file exited 0"; fi
ns systemctl is-active sluice || fail "a refused reload stopped the agent"
ns journalctl -u sluice --no-pager -o cat | grep 'reload refused, the running configuration stays: .*produce.capacity' || fail "the refusal's reason is not in the journal"
ns sluice status --socket /run/sluice/sluice.sock | grep 'last reload.*REFUSED.*produce.capacity' || fail "sluice status does not show the refused reload"
ns sluice status --socket /run/sluice/sluice.sock | grep >/dev/null 'produce.*50MiB' || fail "the running configuration changed"
ns mv /etc/sluice/sluice.yaml.good /etc/sluice/sluice.yaml
ns systemctl reload sluice || fail "reload of the restored file"
ns sluice status --socket /run/sluice/sluice.sock | grep 'last reload.*applied' || fail "sluice status does not show the applied reload"

say "systemctl reload honours a socket: of the file's own (ExecReload passes --config)"
ns sh -c 'echo "socket: /run/sluice/other.sock" >> /etc/sluice/sluice.yaml'
ns systemctl restart sluice
ns test -S /run/sluice/other.sock || fail "the agent is not at its configured socket"
ns systemctl reload sluice || { ns journalctl -u sluice --no-pager -o cat | tail -5; fail "systemctl reload with socket: /run/sluice/other.sock"; }
ns sluice status --socket /run/sluice/other.sock | grep 'last reload.*applied' || fail "the reload did not reach the agent at its socket"
ns sed -i '/^socket: \/run\/sluice\/other.sock$/d' /etc/sluice/sluice.yaml

say "systemctl restart: the new agent re-adopts the programs and pins the old one left"
since=$(ns date +%s)
ns systemctl restart sluice
ns systemctl is-active sluice
ns journalctl -u sluice --no-pager -o cat --since "@$since" | grep -E 're-adopted' || fail "restart did not re-adopt"

say "kill -9 of the agent: Restart=on-failure brings it back"
main=$(ns systemctl show -p MainPID --value sluice)
ns kill -KILL "$main"
wait_for_new_main "$main"
ns systemctl show -p NRestarts -p ActiveState sluice
[ "$(ns systemctl show -p NRestarts --value sluice)" -ge 1 ] || fail "not restarted after kill -9"
ns journalctl -u sluice --no-pager -o cat | grep -E 're-adopted|attached' | tail -2 || true

say "a hung agent: the watchdog restarts it (WatchdogSec shortened to 2s by a drop-in)"
# The starts so far stay under StartLimitBurst=5 in 60 s; this section adds
# two more.
ns systemctl reset-failed sluice
ns mkdir -p /etc/systemd/system/sluice.service.d
ns sh -c 'printf "[Service]\nWatchdogSec=2s\nTimeoutAbortSec=2s\n" > /etc/systemd/system/sluice.service.d/watchdog.conf'
ns systemctl daemon-reload
ns systemctl restart sluice
restarts=$(ns systemctl show -p NRestarts --value sluice)
main=$(ns systemctl show -p MainPID --value sluice)
ns kill -STOP "$main"
wait_for_new_main "$main"
ns systemctl show -p NRestarts -p ActiveState sluice
[ "$(ns systemctl show -p NRestarts --value sluice)" -gt "$restarts" ] || fail "the watchdog did not restart a hung agent"
ns journalctl -u sluice --no-pager -o cat | grep -i 'watchdog timeout' | tail -1 || fail "no watchdog timeout in the journal"
ns rm -r /etc/systemd/system/sluice.service.d
ns systemctl daemon-reload

say "sluice unload refuses while the agent runs"
if out=$(ns sluice unload --config /etc/sluice/sluice.yaml 2>&1); then fail "unload under a running agent: $out"; fi
echo "$out"
ns test -e /sys/fs/bpf/sluice || fail "a refused unload removed the pins"

say "stop: the data path stays for the next start (keep_attached_on_exit: true, the default)"
ns systemctl stop sluice
ns systemctl is-active sluice || true
ns test -e /sys/fs/bpf/sluice || fail "pins gone after stop"
ns tc qdisc show dev sd0 | grep >/dev/null htb || fail "the htb tree went with the agent"

say "the agent's record in /var/lib/sluice, written under the unit's sandbox: sluice unload with the configuration deleted removes everything"
ns cat /var/lib/sluice/host.json
ns grep '"pin_path": "/sys/fs/bpf/sluice"' /var/lib/sluice/host.json >/dev/null || fail "the record does not name the pins"
ns grep '"name": "sd0"' /var/lib/sluice/host.json >/dev/null || fail "the record does not name sd0"
ns mv /etc/sluice/sluice.yaml /etc/sluice/sluice.yaml.away
ns sluice unload --config /etc/sluice/sluice.yaml || fail "unload without the configuration"
ns mv /etc/sluice/sluice.yaml.away /etc/sluice/sluice.yaml
left=$(ns tc qdisc show dev sd0 | grep -v -E 'noqueue|^$' || true)
[ -z "$left" ] || fail "qdiscs left on sd0: $left"
ns ip -o link | grep >/dev/null slifb && fail "IFB device left"
ns test ! -e /sys/fs/bpf/sluice || fail "pins left in /sys/fs/bpf/sluice"
ns test ! -e /var/lib/sluice/host.json || fail "the record stayed after everything it names was removed"
echo "nothing left attached; the record is gone"

say "systemd-analyze security sluice"
ns systemd-analyze security sluice --no-pager | tail -1

say "make uninstall: nothing left attached or installed"
ns make -C "$repo" --no-print-directory uninstall
left=$(ns tc qdisc show dev sd0 | grep -v -E 'noqueue|^$' || true)
[ -z "$left" ] || fail "qdiscs left on sd0: $left"
ns ip -o link | grep >/dev/null slifb && fail "IFB device left"
ns test ! -e /sys/fs/bpf/sluice || fail "pins left in /sys/fs/bpf/sluice"
ns test ! -e /usr/local/bin/sluice || fail "binary left"
ns test ! -e /etc/systemd/system/sluice.service || fail "unit left"
ns test -e /etc/sluice/sluice.yaml || fail "uninstall removed the configuration"
echo "nothing left attached or installed; /etc/sluice/sluice.yaml kept"

echo
echo "systemd-check: PASS"
