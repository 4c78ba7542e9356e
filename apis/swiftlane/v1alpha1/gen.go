// SPDX-License-Identifier: Apache-2.0

package v1alpha1

// Deep-copy methods and the CRD manifests (with their OpenAPI schema and CEL
// rules, from the markers on the types) are generated; `make verify-generate`
// fails if the committed ones are stale.
//go:generate go run sigs.k8s.io/controller-tools/cmd/controller-gen@v0.22.0 object paths=. crd:crdVersions=v1 output:crd:artifacts:config=../../../deploy/helm/swiftlane/crds
