// SPDX-License-Identifier: Apache-2.0

// Package e2e holds the load balancer's end-to-end tests: real TCP and UDP
// clients and servers in network namespaces around a node namespace that
// runs the BPF program, checking translation and that nf_conntrack stays
// empty. Run as root (make test-lb).
package e2e
