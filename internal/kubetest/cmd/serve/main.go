// SPDX-License-Identifier: Apache-2.0

// Command serve runs the kubetest control plane (etcd + kube-apiserver, and
// with -controllers kube-controller-manager + kube-scheduler) on this host
// until interrupted, for VM test drivers, benchmarks and manual poking. Once
// it is ready it prints shell assignments on stdout:
//
//	server=https://127.0.0.1:PORT
//	kubeconfig=PATH
//	guest_kubeconfig=PATH   (with -guest-kubeconfig)
//
// Example, a lab/vm.sh --net guest listing namespaces on the host's server:
//
//	go run ./internal/kubetest/cmd/serve -guest-kubeconfig .cache/kubetest/guest.kubeconfig &
//	bash lab/vm.sh --net -- .cache/k8s/bin/kubectl --kubeconfig .cache/kubetest/guest.kubeconfig get ns
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/swiftlane/swiftlane/internal/kubetest"
)

type ipList []net.IP

func (l *ipList) String() string { return fmt.Sprint([]net.IP(*l)) }
func (l *ipList) Set(v string) error {
	ip := net.ParseIP(v)
	if ip == nil {
		return fmt.Errorf("%q is not an IP address", v)
	}
	*l = append(*l, ip)
	return nil
}

func main() {
	var (
		opts     kubetest.Options
		extraIPs ipList
		dir      = flag.String("dir", "", "state directory (default: a temporary one, removed on exit)")
		kc       = flag.String("kubeconfig", "", "also write the admin kubeconfig here")
		guestKC  = flag.String("guest-kubeconfig", "", "write a kubeconfig for a lab/vm.sh --net guest (server "+kubetest.GuestHost+") here")
		apiArgs  = flag.String("apiserver-args", "", "extra kube-apiserver flags, space-separated")
		egress   = flag.String("egress-forward", "", "HOST:PORT of an HTTP CONNECT proxy inside the cluster's network (a lab VM's, through QEMU's port forward): the apiserver reaches kubelets, pods and Services through it, for exec, logs and proxy")
	)
	flag.StringVar(&opts.BinDir, "bin", "", "directory with etcd, kube-apiserver, kubectl (default $"+kubetest.EnvBinDir+")")
	flag.Var(&extraIPs, "extra-ip", "extra IP SAN for the serving certificate (repeatable)")
	flag.BoolVar(&opts.Controllers, "controllers", false, "also run kube-controller-manager and kube-scheduler, for kubelets that join")
	flag.Parse()
	if err := run(opts, extraIPs, *dir, *kc, *guestKC, *egress, strings.Fields(*apiArgs)); err != nil {
		fmt.Fprintln(os.Stderr, "serve:", err)
		os.Exit(1)
	}
}

func run(opts kubetest.Options, extraIPs []net.IP, dir, kc, guestKC, egress string, apiArgs []string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if dir == "" {
		tmp, err := os.MkdirTemp("", "kubetest-serve.")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	opts.ExtraIPs = extraIPs
	if guestKC != "" {
		opts.ExtraIPs = append(opts.ExtraIPs, net.ParseIP(kubetest.GuestHost))
	}
	if egress != "" {
		arg, err := kubetest.ForwardEgress(ctx, dir, egress)
		if err != nil {
			return err
		}
		apiArgs = append(apiArgs, arg)
	}
	opts.APIServerArgs = apiArgs

	s, err := kubetest.Run(ctx, dir, opts)
	if err != nil {
		return err
	}
	defer func() {
		if err := s.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "serve:", err)
		}
	}()

	fmt.Printf("server=%s\n", s.ServerURL)
	if kc != "" {
		if err := s.WriteKubeconfig(kc, s.ServerURL); err != nil {
			return err
		}
		fmt.Printf("kubeconfig=%s\n", abs(kc))
	} else {
		fmt.Printf("kubeconfig=%s\n", s.Kubeconfig())
	}
	if guestKC != "" {
		if err := s.WriteKubeconfig(guestKC, s.URLFor(kubetest.GuestHost)); err != nil {
			return err
		}
		fmt.Printf("guest_kubeconfig=%s\n", abs(guestKC))
	}
	fmt.Fprintf(os.Stderr, "serve: ready (logs in %s); SIGINT or SIGTERM stops it\n", dir)
	<-ctx.Done()
	return nil
}

func abs(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}
