// SPDX-License-Identifier: Apache-2.0

package serve

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/swiftlane/swiftlane/internal/lb/balancer"
	"github.com/swiftlane/swiftlane/internal/lb/kubesource"
	"github.com/swiftlane/swiftlane/internal/lb/services"
)

// FileFeed re-reads the services file on SIGHUP and when its modification
// time changes (checked every interval); a bad file is rejected and the
// running services stay. count is how many services the first read found.
func FileFeed(path string, count int, interval time.Duration, log *slog.Logger) Feed {
	return func(ctx context.Context, a Applier) error {
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		reload := func(why string) {
			next, err := services.Load(path)
			if err != nil {
				log.Error("reload rejected; keeping the current services", "why", why, "err", err)
				return
			}
			ch, err := a.Apply(next)
			if err != nil {
				log.Error("apply", "err", err)
				return
			}
			log.Info("reloaded", "why", why, "changes", ch.String())
		}
		modTime := func() time.Time {
			st, err := os.Stat(path)
			if err != nil {
				return time.Time{}
			}
			return st.ModTime()
		}
		last := modTime()
		log.Info("serving", "file", path, "services", count)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-hup:
				reload("SIGHUP")
			case <-t.C:
				if m := modTime(); !m.Equal(last) {
					last = m
					reload("file changed")
				}
			}
		}
	}
}

// KubeOptions choose what KubeFeed serves.
type KubeOptions struct {
	// Node names this node: its InternalIP/ExternalIP addresses answer
	// NodePorts and its endpoints are local. Empty: only cfg's addresses.
	Node      string
	ProxyName string        // kubesource.Options.ProxyName
	Debounce  time.Duration // kubesource.Options.Debounce
	Log       *slog.Logger
}

// KubeFeed serves the cluster's Services and EndpointSlices with cfg's node
// settings, which it completes with the Node's addresses.
func KubeFeed(ctx context.Context, cs kubernetes.Interface, cfg *services.Config, o KubeOptions) (Feed, error) {
	log := o.Log
	if o.Node != "" {
		addrs, err := kubesource.NodeAddresses(ctx, cs, o.Node, cfg.IPv6)
		if err != nil {
			return nil, err
		}
		cfg.NodeAddresses = kubesource.AppendUnique(cfg.NodeAddresses, addrs...)
		cfg.NodeName = o.Node // endpoints on this node are local (traffic policies)
		log.Info("node addresses", "node", o.Node, "addresses", cfg.NodeAddresses)
	} else if len(cfg.NodeAddresses) == 0 {
		log.Warn("no node addresses (--node or nodeAddresses in --config): NodePorts are not served")
	}
	src, err := kubesource.New(cs, kubesource.Options{Node: cfg, ProxyName: o.ProxyName, Debounce: o.Debounce, Log: log})
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, a Applier) error {
		return src.Run(ctx, func(next *services.Config) error {
			ch, err := a.Apply(next)
			if err != nil {
				return err
			}
			if ch != (balancer.Changes{}) {
				log.Info("applied", "services", len(next.Services), "changes", ch.String())
			}
			return nil
		})
	}, nil
}
