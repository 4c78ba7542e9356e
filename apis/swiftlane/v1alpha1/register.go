// SPDX-License-Identifier: Apache-2.0

package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the API group and version of these types.
var GroupVersion = schema.GroupVersion{Group: "swiftlane.io", Version: "v1alpha1"}

// Resource names as the API server knows them.
var (
	StrategiesResource  = GroupVersion.WithResource("schedulingstrategies")
	NodesResource       = GroupVersion.WithResource("schedulingnodes")
	RevocationsResource = GroupVersion.WithResource("tokenrevocations")
	AuditResource       = GroupVersion.WithResource("auditentries")
)

var (
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme registers the types with a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&SchedulingStrategy{}, &SchedulingStrategyList{},
		&SchedulingNode{}, &SchedulingNodeList{},
		&TokenRevocation{}, &TokenRevocationList{},
		&AuditEntry{}, &AuditEntryList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
