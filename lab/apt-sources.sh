#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Adds trixie-backports (sched_ext kernels) and bookworm-backports (QEMU 10,
# bpftool) as low-priority apt sources, using the mirror this machine already
# uses, so nothing else on the machine gets upgraded.
set -euo pipefail

list=/etc/apt/sources.list.d/swiftlane-lab.sources
pref=/etc/apt/preferences.d/swiftlane-lab

# The Debian mirror this machine already uses (deb822 or one-line format).
uri=$(awk '/^URIs:/ && $2 ~ /debian\/?$/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
if [[ -z "$uri" ]]; then
	uri=$(awk '$1=="deb" && $2 !~ /^\[/ && $2 ~ /debian\/?$/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
fi
[[ -n "$uri" ]] || { echo "apt-sources: no Debian mirror found in /etc/apt/sources.list*; add one first" >&2; exit 1; }

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
