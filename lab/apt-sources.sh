#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Adds trixie-backports (sched_ext kernels) and bookworm-backports (QEMU 10,
# bpftool) as low-priority apt sources, using the mirror this machine already
# uses, so nothing else on the machine gets upgraded.
set -euo pipefail

list=/etc/apt/sources.list.d/swiftlane-lab.sources
pref=/etc/apt/preferences.d/swiftlane-lab

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
uri=$(debian_mirror)

want="Types: deb
URIs: $uri
Suites: trixie-backports bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg"

# Backports are NotAutomatic already; pin them low explicitly anyway.
wantpref="Package: *
Pin: release n=trixie-backports
Pin-Priority: 50

Package: *
Pin: release n=bookworm-backports
Pin-Priority: 100"

changed=0
if [[ "$(cat "$list" 2>/dev/null)" != "$want" ]]; then echo "$want" >"$list"; changed=1; fi
if [[ "$(cat "$pref" 2>/dev/null)" != "$wantpref" ]]; then echo "$wantpref" >"$pref"; changed=1; fi
stamp=/var/lib/apt/swiftlane-lab.updated
if [[ $changed = 1 || ! -e $stamp || -n "$(find "$stamp" -mmin +720)" ]]; then
	apt-get update -qq
	touch "$stamp"
fi
