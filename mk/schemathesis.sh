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

mint() { "$bin" token create --data-dir "$work/data" --role admin --subject "$1" 2>/dev/null; }
# An operation that got only 401/403 was not tested at all: fail on it
# rather than pass with less coverage than the summary suggests. The login
# takes no token but the admin credential, which no fuzzer guesses: about
# half of its cases get the real one, so it is tested past the 401.
cat >"$work/schemathesis.toml" <<TOML
[warnings]
fail-on = ["missing_auth"]

[dictionaries.user]
values = ["admin"]
[dictionaries.credential]
values = ['$(tr -d '\n' <"$work/data/admin.credential")']

[[operations]]
include-operation-id = "login"
parameters = { "body.username" = { dictionary = "user", probability = 0.7 }, "body.password" = { dictionary = "credential", probability = 0.7 } }
TOML
st() { (cd "$work" && "$st" --config-file "$work/schemathesis.toml" run "$url/openapi.json" --checks all "$@"); }

# Two phases, because revoking any token of a renewal chain revokes the
# whole chain: with revokeToken and renewToken in one run the fuzzer can
# renew the harness's token and revoke the renewal, which kills the
# harness's token and leaves every later request a 401. Phase 1 fuzzes
# everything but revokeToken (renewToken included) with one admin token;
# phase 2 fuzzes revokeToken alone with a throwaway admin token, which no
# request of that phase can name (it is neither sent in a body nor renewed).
# A phase whose token died midway would pass on 401s: check it still works.
alive() {
	local code
	code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $1" "$url/api/v1/strategies")
	[[ $code == 200 ]] || { echo "schemathesis: the $2 phase's token is refused ($code) after the run: its later requests tested nothing" >&2; return 1; }
}
status=0
main=$(mint schemathesis) revoker=$(mint schemathesis-revoke)
# From the scratch dir: st keeps a cache (.schemathesis/) in its working directory.
st -H "Authorization: Bearer $main" --exclude-operation-id revokeToken "$@" || status=$?
alive "$main" main || status=1
# revokeToken has one small body: a shorter budget covers it (the flags' own
# --max-time, which bounds phase 1, would double the run).
st -H "Authorization: Bearer $revoker" --include-operation-id revokeToken "$@" \
	--max-time "${SCHEMATHESIS_REVOKE_MAX_TIME:-30}" || status=$?
alive "$revoker" revoke || status=1
if [[ $status -ne 0 ]]; then
	echo "schemathesis: failures above; the server's log:" >&2
	tail -n 50 "$work/server.log" >&2 || true
fi
exit $status
