// SPDX-License-Identifier: Apache-2.0

package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AuditEntry is one change made through the control plane (a strategy
// created, updated or deleted, a token issued, renewed or revoked): who,
// with which token, to what, and how it ended. The API creates one per
// change, named after its ID (the recording time in hex, so names sort
// oldest first), and deletes the oldest beyond its bound (--audit-max-entries);
// every replica watches them and serves GET /api/v2/audit from its copy.
// The spec cannot be changed once written.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=audit,categories=swiftlane
// +kubebuilder:printcolumn:name="Time",type=string,JSONPath=`.spec.time`
// +kubebuilder:printcolumn:name="Subject",type=string,JSONPath=`.spec.subject`
// +kubebuilder:printcolumn:name="Role",type=string,JSONPath=`.spec.role`
// +kubebuilder:printcolumn:name="Operation",type=string,JSONPath=`.spec.operation`
// +kubebuilder:printcolumn:name="Object",type=string,JSONPath=`.spec.object.name`
// +kubebuilder:printcolumn:name="Outcome",type=string,JSONPath=`.spec.outcome`
type AuditEntry struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec AuditEntrySpec `json:"spec"`
}

// AuditEntrySpec is the recorded change (the API's AuditEntry, less its ID,
// which is the object's name).
//
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="audit entries are not changed once written"
type AuditEntrySpec struct {
	// Time is when the replica recorded the change.
	Time metav1.MicroTime `json:"time"`
	// Subject, Role, Node and TokenID are the caller's token's.
	// +kubebuilder:validation:MaxLength=512
	Subject string `json:"subject"`
	// +kubebuilder:validation:MaxLength=32
	Role string `json:"role"`
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Node string `json:"node,omitempty"`
	// +kubebuilder:validation:MaxLength=128
	// +optional
	TokenID string `json:"tokenID,omitempty"`
	// Operation is e.g. strategy.create, token.revoke.
	// +kubebuilder:validation:MaxLength=64
	Operation string           `json:"operation"`
	Object    AuditEntryObject `json:"object"`
	// Outcome is ok, refused (4xx) or failed (5xx).
	// +kubebuilder:validation:MaxLength=16
	Outcome string `json:"outcome"`
	// Status is the HTTP status the caller got.
	// +optional
	Status int32 `json:"status,omitempty"`
	// +kubebuilder:validation:MaxLength=2048
	// +optional
	Error string `json:"error,omitempty"`
	// +kubebuilder:validation:MaxLength=2048
	// +optional
	Detail string `json:"detail,omitempty"`
	// Revision is the strategy revision the change made.
	// +optional
	Revision int64 `json:"revision,omitempty"`
	// Server is the replica that made the change, Source the client's
	// address as it saw it.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Server string `json:"server,omitempty"`
	// +kubebuilder:validation:MaxLength=256
	// +optional
	Source string `json:"source,omitempty"`
}

// AuditEntryObject is what the change was made to.
type AuditEntryObject struct {
	// Kind is strategy, token or node.
	// +kubebuilder:validation:MaxLength=32
	Kind string `json:"kind"`
	// Name is the strategy's or node's name, or the token's id.
	// +kubebuilder:validation:MaxLength=512
	Name string `json:"name"`
}

// +kubebuilder:object:root=true

// AuditEntryList is a list of AuditEntry.
type AuditEntryList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AuditEntry `json:"items"`
}
