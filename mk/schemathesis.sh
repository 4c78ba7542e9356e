#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs schemathesis (every check) against a real `swiftlane api` on loopback
# with a throwaway data directory, so /openapi.json is held to what the
# server does: no 5xx, every schema-valid request accepted, every
# schema-invalid one refused, responses and SSE events as documented.
#
# Usage: mk/schemathesis.sh SWIFTLANE_BINARY ST_BINARY [st run options...]
set -euo pipefail
bin=$1 st=$2
shift 2
work=$(mktemp -d)
pid=
cleanup() {
	[[ -n $pid ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT

mkfifo "$work/log"
"$bin" api --data-dir "$work/data" --insecure-http --listen 127.0.0.1:0 2>"$work/log" &
pid=$!
# The server prints its address once it listens; read up to that line.
url=
while IFS= read -r line; do
	echo "api: $line" >&2
	if [[ $line =~ control\ plane\ on\ (http://[0-9.:]+) ]]; then
		url=${BASH_REMATCH[1]}
		break
	fi
done <"$work/log"
[[ -n $url ]] || { echo "schemathesis: the server exited before listening" >&2; exit 1; }
# Keep draining the server's log so it never blocks on a full pipe.
cat "$work/log" >"$work/server.log" &

token=$("$bin" token create --data-dir "$work/data" --role admin --subject schemathesis 2>/dev/null)
status=0
# From the scratch dir: st keeps a cache (.schemathesis/) in its working directory.
(cd "$work" && "$st" run "$url/openapi.json" --checks all -H "Authorization: Bearer $token" "$@") || status=$?
if [[ $status -ne 0 ]]; then
	echo "schemathesis: failures above; the server's log:" >&2
	tail -n 50 "$work/server.log" >&2 || true
fi
exit $status
