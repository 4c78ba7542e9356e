// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/swiftlane/swiftlane/internal/apiclient"
	"github.com/swiftlane/swiftlane/internal/auth"
)

// CheckServers refuses a --server list the agent could not fail over along.
func CheckServers(servers []string) error {
	if len(servers) == 0 {
		return errors.New("--server is empty: give the API server's URL, e.g. https://127.0.0.1:8443")
	}
	for _, s := range servers {
		if u, err := url.Parse(s); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("--server %q is not an http(s) URL: give each replica's URL, comma-separated, e.g. https://10.0.0.1:8443,https://10.0.0.2:8443", s)
		}
	}
	return nil
}

// Token is the agent's first token: read from tokenFile, else minted for
// node with the signing key in the server's dataDir (an agent on the
// server's machine), else $SWIFTLANE_TOKEN.
func Token(dataDir, tokenFile, node string) (string, error) {
	if tokenFile != "" {
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			return "", fmt.Errorf("--token-file: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	if dataDir != "" {
		a, err := auth.LoadSigner(dataDir)
		if err != nil {
			return "", err
		}
		tok, _, err := a.Issue("agent:"+node, auth.Agent, node, auth.DefaultAgentTTL)
		return tok, err
	}
	if t := os.Getenv("SWIFTLANE_TOKEN"); t != "" {
		return t, nil
	}
	return "", errors.New("no token: pass --token-file (swiftlane token create --role agent --node NAME), or --data-dir on the server's machine")
}

// Servers says how an agent reaches the API: its replicas' URLs (the
// first, then the failover ones) and its credentials.
type Servers struct {
	URLs []string
	// Node is the node the token is for.
	Node string
	// TokenFile, DataDir: see Token. CAFile is the certificate to trust;
	// with DataDir and https it defaults to the server's generated one.
	TokenFile, DataDir, CAFile string
	Log                        *slog.Logger
}

// Connect makes the clients for s.URLs, all sending the token that the
// returned Renewer keeps fresh through whichever of them answers; run the
// renewer beside the agent. With a token file the token is re-read when
// the file changes, so a rotated token is used from the next request on,
// and renewals are written back to it.
func Connect(s Servers) (client *apiclient.Client, failover []*apiclient.Client, renewer *apiclient.Renewer, err error) {
	token, err := Token(s.DataDir, s.TokenFile, s.Node)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := CheckServers(s.URLs); err != nil {
		return nil, nil, nil, err
	}
	ca := s.CAFile
	if ca == "" && s.DataDir != "" && strings.HasPrefix(s.URLs[0], "https:") {
		ca = filepath.Join(s.DataDir, auth.CertFile)
	}
	tlsCfg, err := auth.ClientTLS(ca)
	if err != nil {
		return nil, nil, nil, err
	}
	client = apiclient.NewClient(s.URLs[0], token, tlsCfg)
	src := func() (string, error) { return token, nil }
	if s.TokenFile != "" {
		src = apiclient.TokenFile(s.TokenFile)
	}
	renewer = apiclient.NewRenewer(client, src, s.TokenFile, s.Log)
	for _, u := range s.URLs[1:] {
		c := apiclient.NewClient(u, token, tlsCfg)
		renewer.Failover = append(renewer.Failover, c)
		failover = append(failover, c.WithTokenSource(renewer.Token))
	}
	return client.WithTokenSource(renewer.Token), failover, renewer, nil
}

// ParseLabels reads --labels' key=value pairs.
func ParseLabels(kvs []string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--labels %q: use key=value", kv)
		}
		out[k] = v
	}
	return out, nil
}
