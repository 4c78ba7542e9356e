// SPDX-License-Identifier: Apache-2.0

package kubetest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"time"
)

// pki is the key material one server is started with, as files in dir.
type pki struct {
	caPEM []byte // also in the kubeconfigs, so clients verify the server

	caCert, serverCert, serverKey, saPub, saKey string // paths
	// The apiserver's client certificate for kubelets (exec, logs,
	// port-forward), in group system:masters: a kubelet that trusts the CA
	// (x509.clientCAFile) and authorizes by webhook lets it in.
	kubeletClientCert, kubeletClientKey string
}

// Throwaway certificates: valid from an hour back (a VM guest's clock may lag)
// for long enough that a server left running by cmd/serve does not expire.
const certLifetime = 365 * 24 * time.Hour

func newPKI(dir string, serviceCIDR netip.Prefix, extraIPs []net.IP) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &pki{
		caCert:     filepath.Join(dir, "ca.crt"),
		serverCert: filepath.Join(dir, "apiserver.crt"),
		serverKey:  filepath.Join(dir, "apiserver.key"),
		saPub:      filepath.Join(dir, "sa.pub"),
		saKey:      filepath.Join(dir, "sa.key"),

		kubeletClientCert: filepath.Join(dir, "apiserver-kubelet-client.crt"),
		kubeletClientKey:  filepath.Join(dir, "apiserver-kubelet-client.key"),
	}
	now := time.Now()

	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "kubetest-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(certLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, ca, err := sign(caTmpl, nil, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	p.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})

	// The names clients use for the apiserver: loopback for the host, the
	// in-cluster names and the Service IP for pods, extra IPs for VM guests.
	ips := []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback, firstIP(serviceCIDR)}
	ips = append(ips, extraIPs...)
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	srvDER, _, err := sign(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:   now.Add(-time.Hour),
		NotAfter:    now.Add(certLifetime),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local"},
		IPAddresses: ips,
	}, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}

	kcKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	kcDER, _, err := sign(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}},
		NotBefore:   now.Add(-time.Hour),
		NotAfter:    now.Add(certLifetime),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, ca, &kcKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("kubelet client certificate: %w", err)
	}

	// Service-account tokens (TokenRequest) are signed with this pair.
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	saPubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}

	for _, f := range []struct {
		path, typ string
		der       []byte
		key       crypto.Signer
	}{
		{path: p.caCert, typ: "CERTIFICATE", der: caDER},
		{path: p.serverCert, typ: "CERTIFICATE", der: srvDER},
		{path: p.serverKey, key: srvKey},
		{path: p.saPub, typ: "PUBLIC KEY", der: saPubDER},
		{path: p.saKey, key: saKey},
		{path: p.kubeletClientCert, typ: "CERTIFICATE", der: kcDER},
		{path: p.kubeletClientKey, key: kcKey},
	} {
		if f.key != nil {
			if f.der, err = x509.MarshalPKCS8PrivateKey(f.key); err != nil {
				return nil, err
			}
			f.typ = "PRIVATE KEY"
		}
		if err := os.WriteFile(f.path, pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der}), 0o600); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func sign(tmpl, parent *x509.Certificate, pub crypto.PublicKey, key crypto.Signer) ([]byte, *x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}
	tmpl.SerialNumber = serial
	if parent == nil {
		parent = tmpl
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, key)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return der, cert, err
}

// firstIP is the address kube-apiserver gives the "kubernetes" Service.
func firstIP(p netip.Prefix) net.IP {
	return net.IP(p.Masked().Addr().Next().AsSlice())
}
