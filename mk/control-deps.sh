#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Host packages the control plane's UI test needs: Chromium (Debian package),
# driven headless over the DevTools protocol. Idempotent: apt is only touched
# when the browser is missing.
set -euo pipefail

[[ -x /usr/bin/chromium ]] && exit 0
[[ $(id -u) -eq 0 ]] || { echo "control-deps: /usr/bin/chromium missing; run as root to install the chromium package" >&2; exit 1; }
export DEBIAN_FRONTEND=noninteractive
# Refresh the package lists only if chromium is unknown to apt.
apt-cache show chromium >/dev/null 2>&1 || apt-get update -qq
apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core
