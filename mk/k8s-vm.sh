#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The Kubernetes tests that need sched_ext: a real control plane (etcd +
# kube-apiserver, internal/kubetest) runs on the host, a lab/vm.sh --net
# guest reaches it at 10.0.2.2 and runs the agent with the scheduler
# attached. The guest's tests merge their numbers into $SWL_K8S_RESULTS.
#
# Usage: mk/k8s-vm.sh BUILD_DIR K8S_BIN_DIR KERNEL RESULTS TEST_REGEX
#
# For make test-cluster, the environment can add:
#   K8S_CONTROLLERS=1      kube-controller-manager and kube-scheduler too
#   K8S_APISERVER_ARGS=... extra kube-apiserver flags (space-separated)
#   K8S_APPLY_CRDS=0       leave the CRDs to helm install
#   K8S_VM_ARGS=...        extra lab/vm.sh options (space-separated)
#   K8S_GUEST_ENV=...      extra VAR=value words for the guest's environment
#   K8S_TEST_TIMEOUT=30m   the guest's go test -test.timeout
#   K8S_SERVE_ARGS=...     extra kubetest serve flags (space-separated)
set -euo pipefail
build=${1:?build dir} k8sbin=${2:?k8s bin dir} kernel=${3:?kernel} results=${4:?results file} run=${5:?test regex}
read -r -a serve_args <<<"${K8S_CONTROLLERS:+-controllers} ${K8S_SERVE_ARGS:-}"
read -r -a vm_args <<<"${K8S_VM_ARGS:-}"
read -r -a guest_env <<<"${K8S_GUEST_ENV:-}"
cd "$(dirname "$0")/.."

# The guest sees the repo read-write; keep the state there, not in /tmp.
state=$(mktemp -d "$build/k8s-vm.XXXXXX")
serve_pid=
cleanup() {
	local rc=$?
	[[ -n $serve_pid ]] && kill "$serve_pid" 2>/dev/null && wait "$serve_pid" 2>/dev/null
	if [[ $rc = 0 ]]; then
		rm -rf "$state"
	else
		echo "k8s-vm: the control plane's logs are kept in $state/cp" >&2
	fi
}
trap cleanup EXIT

"$build/kubetest-serve" -bin "$k8sbin" -dir "$state/cp" -kubeconfig "$state/admin.kubeconfig" \
	-guest-kubeconfig "$state/guest.kubeconfig" -apiserver-args "${K8S_APISERVER_ARGS:-}" "${serve_args[@]}" \
	>"$state/serve.out" 2>"$state/serve.log" &
serve_pid=$!
# serve prints its addresses once /readyz answers; it exits on failure.
for _ in $(seq 480); do
	grep -q '^guest_kubeconfig=' "$state/serve.out" && break
	kill -0 "$serve_pid" 2>/dev/null || { echo "k8s-vm: the control plane did not start:" >&2; tail -30 "$state/serve.log" >&2; exit 1; }
	sleep 0.5
done
grep -q '^guest_kubeconfig=' "$state/serve.out" || { echo "k8s-vm: the control plane was not ready in 4 min" >&2; exit 1; }

if [[ ${K8S_APPLY_CRDS:-1} = 1 ]]; then
	kubectl=("$k8sbin/kubectl" --kubeconfig "$state/admin.kubeconfig")
	"${kubectl[@]}" apply --server-side -f deploy/helm/swiftlane/crds >/dev/null
	"${kubectl[@]}" wait --for=condition=Established --timeout=60s crd/schedulingstrategies.swiftlane.io crd/schedulingnodes.swiftlane.io >/dev/null
fi

mkdir -p "$(dirname "$results")"
status=0
bash lab/vm.sh --net --kernel "$kernel" "${vm_args[@]}" -- env SWIFTLANE_BIN="$build/swiftlane" \
	SWL_KUBECONFIG="$state/guest.kubeconfig" SWL_REQUIRE_K8S=1 SWL_K8S_RESULTS="$(realpath -m "$results")" "${guest_env[@]}" \
	"$build/vmtest.test" -test.v -test.run "$run" -test.timeout "${K8S_TEST_TIMEOUT:-30m}" || status=$?
if [[ $status != 0 && ${K8S_CONTROLLERS:-} ]]; then
	for f in "$state"/cp/kube-controller-manager.log "$state"/cp/kube-scheduler.log; do
		[[ -f $f ]] && { echo "=== $f (last 20 lines)"; tail -20 "$f"; } >&2
	done
fi
exit "$status"
