// SPDX-License-Identifier: Apache-2.0

// Package kubeenv finds the Kubernetes API server and namespace a
// command talks to, the same way for the API server's store, the agents
// and the load balancer.
package kubeenv

import (
	"fmt"
	"os"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// DefaultNamespace is where swiftlane's objects live outside a pod.
const DefaultNamespace = "swiftlane-system"

// podNamespaceFile is the service account's namespace in a pod.
const podNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// Config is the kubeconfig at path (--kubeconfig), else the in-cluster
// service account, else kubectl's rules ($KUBECONFIG, then
// ~/.kube/config).
func Config(path string) (*rest.Config, error) {
	if path != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig %s: %w", path, err)
		}
		return cfg, nil
	}
	if cfg, err := rest.InClusterConfig(); err == nil {
		return cfg, nil
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(clientcmd.NewDefaultClientConfigLoadingRules(), nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("no Kubernetes API server: not in a pod and no kubeconfig (%v): pass --kubeconfig or set KUBECONFIG", err)
	}
	return cfg, nil
}

// PodNamespace is the namespace of the pod we run in, else
// DefaultNamespace.
func PodNamespace() string {
	if b, err := os.ReadFile(podNamespaceFile); err == nil && strings.TrimSpace(string(b)) != "" {
		return strings.TrimSpace(string(b))
	}
	return DefaultNamespace
}
