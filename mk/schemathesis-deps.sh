#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs schemathesis (pinned) from PyPI into a venv of its own. Debian's
# python3 needs python3-venv for that; it is installed when missing.
# Usage: mk/schemathesis-deps.sh VENV VERSION
set -euo pipefail
venv=$1 version=$2
[[ -x $venv/bin/st ]] && exit 0
command -v python3 >/dev/null && python3 -c 'import ensurepip, venv' 2>/dev/null || {
	[[ $(id -u) -eq 0 ]] || { echo "schemathesis-deps: python3 with venv missing; run as root to install python3-venv" >&2; exit 1; }
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends python3 python3-venv
}
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check "schemathesis==$version"
"$venv/bin/st" --version
