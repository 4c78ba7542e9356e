// SPDX-License-Identifier: Apache-2.0

package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const nginxAddr = "127.0.0.1:8088"

// nginxWorkload serves a small static page with nginx (a worker per CPU) to
// wrk, first on the idle machine, then while hogs saturate every CPU. In the
// swiftlane-critical and scx_layered variants nginx is critical.
//
// Each state has two phases. Requests/s come from wrk at full speed (a closed
// loop: every connection sends its next request as soon as the answer
// arrives), where nginx itself uses every CPU it gets, so its p99 there is
// the length of its own queue, and a critical nginx that spins runs through
// the critical budget by design. The p99 comes from a paced phase: wrk offers
// -nginx-rate requests/s, well under what nginx serves idle, so the latency is
// what the scheduler adds to a server with CPU time to spare.
func nginxWorkload(*VariantRun) (map[string]float64, error) {
	m := map[string]float64{}
	srv, err := startNginx()
	if err != nil {
		return m, err
	}
	defer srv.stop()
	var errs []error
	measure := func(state, rps, p99, fullP99 string) error {
		full, err := wrk(0)
		if err != nil {
			return fmt.Errorf("%s, full speed: %w", state, err)
		}
		paced, err := wrk(*nginxRate)
		if err != nil {
			return fmt.Errorf("%s, paced: %w", state, err)
		}
		m[rps], m[p99], m[fullP99] = full.rps, paced.p99Us, full.p99Us
		for _, r := range []struct {
			phase string
			res   wrkResult
		}{{"full speed", full}, {"paced", paced}} {
			if r.res.socketErrors > 0 {
				errs = append(errs, fmt.Errorf("%s, %s: wrk counted %d socket errors (the numbers are kept)", state, r.phase, r.res.socketErrors))
			}
		}
		return nil
	}
	if err := measure("idle", "nginx_idle_rps", "nginx_idle_p99_us", "nginx_idle_full_p99_us"); err != nil {
		return m, err
	}
	hog, err := startHogs(2**phase + 10*time.Second)
	if err != nil {
		return m, err
	}
	defer hog.stop()
	if err := measure("loaded", "nginx_rps", "nginx_p99_us", "nginx_full_p99_us"); err != nil {
		return m, err
	}
	return m, errors.Join(errs...)
}

// nginxConf keeps everything nginx writes in its own directory (the lab's
// root is read-only) and runs the workers as root so they can read it.
const nginxConf = `daemon off;
master_process on;
worker_processes %[1]d;
user root;
pid %[2]s/nginx.pid;
error_log %[2]s/error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    keepalive_requests 1000000;
    client_body_temp_path %[2]s/body;
    proxy_temp_path %[2]s/proxy;
    fastcgi_temp_path %[2]s/fastcgi;
    uwsgi_temp_path %[2]s/uwsgi;
    scgi_temp_path %[2]s/scgi;
    server {
        listen %[3]s;
        location / { root %[2]s/html; }
    }
}
`

type nginx struct {
	cmd  *exec.Cmd
	dir  string
	done chan error
}

func startNginx() (*nginx, error) {
	bin, err := exec.LookPath("nginx")
	if err != nil {
		if bin, err = exec.LookPath("/usr/sbin/nginx"); err != nil {
			return nil, fmt.Errorf("nginx not found (make deps installs it): %w", err)
		}
	}
	dir, err := os.MkdirTemp("", "nginx-")
	if err != nil {
		return nil, err
	}
	if err := os.Mkdir(filepath.Join(dir, "html"), 0o755); err != nil {
		return nil, err
	}
	page := strings.Repeat("swiftlane benchmark page\n", 40) // ~1 KiB
	if err := os.WriteFile(filepath.Join(dir, "html", "index.html"), []byte(page), 0o644); err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, nginxConf, runtime.NumCPU(), dir, nginxAddr), 0o644); err != nil {
		return nil, err
	}
	n := &nginx{dir: dir, done: make(chan error, 1)}
	// -e: nginx opens its compiled-in error log before reading the config.
	n.cmd = exec.Command(bin, "-p", dir, "-c", conf, "-e", filepath.Join(dir, "error.log"))
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := n.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { n.done <- n.cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", nginxAddr, time.Second)
		if err == nil {
			c.Close()
			return n, nil
		}
		select {
		case err := <-n.done:
			n.done <- err
			return nil, fmt.Errorf("nginx exited (%v): %s", err, n.log())
		default:
		}
		if time.Now().After(deadline) {
			n.stop()
			return nil, fmt.Errorf("nginx not listening on %s after 30 s: %s", nginxAddr, n.log())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (n *nginx) log() string {
	b, _ := os.ReadFile(filepath.Join(n.dir, "error.log"))
	return tail(b, 400)
}

// stop shuts nginx down (SIGTERM, its fast shutdown), then kills what is left.
func (n *nginx) stop() {
	select {
	case err := <-n.done:
		n.done <- err
		return
	default:
	}
	n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-n.done:
		n.done <- err
	case <-time.After(10 * time.Second):
		syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
		n.done <- <-n.done
	}
}

type wrkResult struct {
	rps, p50Us, p99Us float64
	socketErrors      int
}

// wrk loads nginx for one phase: at full speed (rate 0) or paced to about
// rate requests/s. SCHED_FIFO (-wrk-rt) puts it above every variant's
// scheduler: it stands for a client on another machine, so the numbers are
// nginx's own scheduling, not the load generator's.
func wrk(rate int) (wrkResult, error) {
	secs := max(1, int(phase.Round(time.Second).Seconds()))
	args := []string{"-t1", "-c" + strconv.Itoa(*wrkConns), "-d" + strconv.Itoa(secs) + "s",
		"--latency", "--timeout", "10s"}
	if rate > 0 {
		script, err := wrkPaceScript(*wrkConns, rate)
		if err != nil {
			return wrkResult{}, err
		}
		defer os.Remove(script)
		args = append(args, "-s", script)
	}
	args = append(args, "http://"+nginxAddr+"/")
	name := "wrk"
	if *wrkRT {
		name, args = "chrt", append([]string{"--fifo", "1", "wrk"}, args...)
	}
	out, err := run(time.Duration(secs)*time.Second+time.Minute, name, args...)
	if err != nil {
		return wrkResult{}, err
	}
	return parseWrk(out)
}

// wrkPaceScript writes a wrk script that makes each of conns connections wait
// conns/rate seconds before each request, so together they offer at most
// rate requests/s. wrk times a request from its send, so the pause is not in
// the latency; a slow answer lowers the rate a little instead.
func wrkPaceScript(conns, rate int) (string, error) {
	f, err := os.CreateTemp("", "wrk-pace-*.lua")
	if err != nil {
		return "", err
	}
	ms := max(1, conns*1000/rate)
	_, err = fmt.Fprintf(f, "function delay()\n  return %d\nend\n", ms)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

var (
	wrkRPSRE    = regexp.MustCompile(`(?m)^Requests/sec:\s+([0-9.]+)`)
	wrkPctRE    = regexp.MustCompile(`(?m)^\s+(50|99)%\s+([0-9.]+)(us|ms|s|m)\s*$`)
	wrkErrRE    = regexp.MustCompile(`Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`)
	wrkNon2xxRE = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)
)

// parseWrk reads wrk --latency's report.
func parseWrk(out []byte) (wrkResult, error) {
	var r wrkResult
	rps, err := positive(wrkRPSRE, out)
	if err != nil {
		return r, fmt.Errorf("wrk: %w", err)
	}
	r.rps = rps
	unit := map[string]float64{"us": 1, "ms": 1e3, "s": 1e6, "m": 60e6}
	for _, m := range wrkPctRE.FindAllSubmatch(out, -1) {
		v, _ := strconv.ParseFloat(string(m[2]), 64)
		v *= unit[string(m[3])]
		if string(m[1]) == "50" {
			r.p50Us = v
		} else {
			r.p99Us = v
		}
	}
	if r.p99Us == 0 {
		return r, fmt.Errorf("wrk: no latency distribution in %q", tail(out, 300))
	}
	if m := wrkErrRE.FindSubmatch(out); m != nil {
		for _, g := range m[1:] {
			n, _ := strconv.Atoi(string(g))
			r.socketErrors += n
		}
	}
	if m := wrkNon2xxRE.FindSubmatch(out); m != nil {
		return r, fmt.Errorf("wrk: nginx answered %s requests with an error status", m[1])
	}
	return r, nil
}
