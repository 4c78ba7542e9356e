// SPDX-License-Identifier: Apache-2.0

package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TokenRevocation puts one control-plane token on the deny list: every API
// replica watches these objects and refuses the token. The API creates one
// per revocation (named after the token id, see the API's store) and
// deletes it once the token has expired anyway. Deleting one by hand
// un-revokes the token.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=trev,categories=swiftlane
// +kubebuilder:printcolumn:name="Token",type=string,JSONPath=`.spec.tokenID`
// +kubebuilder:printcolumn:name="Until",type=date,JSONPath=`.spec.expiresAt`
// +kubebuilder:printcolumn:name="By",type=string,JSONPath=`.spec.revokedBy`
type TokenRevocation struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec TokenRevocationSpec `json:"spec"`
}

// TokenRevocationSpec names the revoked token.
type TokenRevocationSpec struct {
	// TokenID is the token's id (its jti claim).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_-]+$`
	TokenID string `json:"tokenID"`
	// ExpiresAt is when the token expires: the entry is needed until then.
	ExpiresAt metav1.Time `json:"expiresAt"`
	// RevokedBy is the subject of the token that revoked it ("" from the
	// command line with the store's credentials).
	// +kubebuilder:validation:MaxLength=256
	// +optional
	RevokedBy string `json:"revokedBy,omitempty"`
}

// +kubebuilder:object:root=true

// TokenRevocationList is a list of TokenRevocation.
type TokenRevocationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TokenRevocation `json:"items"`
}
