// SPDX-License-Identifier: Apache-2.0

package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
)

// Scheme knows these types (and nothing else): enough for a REST client of
// the swiftlane.io group.
var Scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := AddToScheme(s); err != nil {
		panic(err) // static registration; cannot fail at run time
	}
	return s
}()

// NewRESTClient returns a client for swiftlane.io/v1alpha1 resources that
// decodes into the typed objects of this package. A generated clientset
// would add a layer per resource for the two resources we have.
func NewRESTClient(base *rest.Config) (*rest.RESTClient, error) {
	cfg := rest.CopyConfig(base)
	gv := GroupVersion
	cfg.GroupVersion = &gv
	cfg.APIPath = "/apis"
	cfg.ContentType = runtime.ContentTypeJSON
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(Scheme).WithoutConversion()
	if cfg.UserAgent == "" {
		cfg.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	return rest.RESTClientFor(cfg)
}
