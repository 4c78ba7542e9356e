// SPDX-License-Identifier: Apache-2.0

package kubesource

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// NodeAddresses reads the Node's InternalIP and ExternalIP addresses, IPv4
// and (with ipv6) IPv6, where NodePorts answer. It is read once (RBAC: get
// on nodes, nothing more): node addresses change only with a node's restart
// in practice, and the load balancer restarts with it.
func NodeAddresses(ctx context.Context, client kubernetes.Interface, name string, ipv6 bool) ([]netip.Addr, error) {
	n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("--node %s: %w", name, err)
	}
	var out []netip.Addr
	for _, t := range []corev1.NodeAddressType{corev1.NodeInternalIP, corev1.NodeExternalIP} {
		for _, a := range n.Status.Addresses {
			if a.Type != t {
				continue
			}
			ip, err := netip.ParseAddr(a.Address)
			if err == nil && (ip.Is4() || ipv6 && ip.Is6() && !ip.Is4In6()) {
				out = AppendUnique(out, ip)
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--node %s: the Node has no InternalIP or ExternalIP address of a served family; set nodeAddresses in --config", name)
	}
	return out, nil
}

// AppendUnique appends the addresses dst does not hold yet.
func AppendUnique(dst []netip.Addr, add ...netip.Addr) []netip.Addr {
	for _, a := range add {
		if !slices.Contains(dst, a) {
			dst = append(dst, a)
		}
	}
	return dst
}
