// SPDX-License-Identifier: Apache-2.0

// Package v1alpha1 holds swiftlane's Kubernetes API: SchedulingStrategy (what
// to prioritise, namespaced) and SchedulingNode (what each node's agent runs
// and reports, cluster-scoped). The CRD manifests in deploy/helm/swiftlane/crds
// are generated from these types by controller-gen (make generate).
//
// +kubebuilder:object:generate=true
// +groupName=swiftlane.io
package v1alpha1
