#!/usr/bin/env bash
# Refreshes the vendored libbpf headers from Debian's libbpf-dev package.
# Pinned: libbpf 1.1.2 (Debian 12 "bookworm", package 1:1.1.2-0+deb12u1).
# The headers are dual-licensed LGPL-2.1 OR BSD-2-Clause (see LICENSE.BSD-2-Clause).
set -euo pipefail
cd "$(dirname "$0")"
want="1:1.1.2-0+deb12u1"
have=$(dpkg-query -W -f='${Version}' libbpf-dev 2>/dev/null || true)
if [ "$have" != "$want" ]; then
	apt-get install -y "libbpf-dev=$want"
fi
for h in bpf_helpers.h bpf_helper_defs.h bpf_endian.h; do
	cp "/usr/include/bpf/$h" "$h"
done
echo "vendored libbpf headers from libbpf-dev $want"
