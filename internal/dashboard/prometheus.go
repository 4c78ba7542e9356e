// SPDX-License-Identifier: Apache-2.0

package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"gopkg.in/yaml.v3"
)

// ScrapeInterval is the test Prometheus' scrape interval and timeout.
const ScrapeInterval = "5s"

// Target is one scrape job of one endpoint.
type Target struct {
	Job  string
	Addr string // host:port
	// HTTPS with a bearer token, as the API server's /metrics needs: the
	// token's file and the CA to trust (the server's tls.crt).
	TokenFile, CAFile string
}

// Prometheus is a Prometheus server (Debian's prometheus package) scraping
// the targets every 5 s, with its data in a directory of its own. A scrape
// may take 5 s: in a loaded TCG guest a 1 s timeout failed scrapes of the
// agent, and each failure makes its gauges stale until the next one.
type Prometheus struct {
	URL  string
	api  promv1.API
	cmd  *exec.Cmd
	done chan struct{}
	mu   sync.Mutex
	log  strings.Builder
	jobs []string
}

// Binary is the prometheus executable: $SWIFTLANE_PROMETHEUS, else
// prometheus on PATH (lab/deps.sh installs Debian's).
func Binary() (string, error) {
	if b := os.Getenv("SWIFTLANE_PROMETHEUS"); b != "" {
		return b, nil
	}
	b, err := exec.LookPath("prometheus")
	if err != nil {
		return "", errors.New("no prometheus on PATH: install Debian's package (make deps) or set SWIFTLANE_PROMETHEUS")
	}
	return b, nil
}

type scrapeConfig struct {
	JobName        string         `yaml:"job_name"`
	ScrapeInterval string         `yaml:"scrape_interval"`
	ScrapeTimeout  string         `yaml:"scrape_timeout"`
	Scheme         string         `yaml:"scheme,omitempty"`
	Authorization  *authorization `yaml:"authorization,omitempty"`
	TLSConfig      *tlsConfig     `yaml:"tls_config,omitempty"`
	StaticConfigs  []staticConfig `yaml:"static_configs"`
}

type authorization struct {
	CredentialsFile string `yaml:"credentials_file"`
}

type tlsConfig struct {
	CAFile string `yaml:"ca_file"`
}

type staticConfig struct {
	Targets []string `yaml:"targets"`
}

// StartPrometheus runs bin with a config scraping targets, its TSDB and
// config in dir, and returns once it is ready to answer queries.
func StartPrometheus(ctx context.Context, bin, dir string, targets []Target) (*Prometheus, error) {
	var cfg struct {
		ScrapeConfigs []scrapeConfig `yaml:"scrape_configs"`
	}
	p := &Prometheus{done: make(chan struct{})}
	for _, t := range targets {
		sc := scrapeConfig{JobName: t.Job, ScrapeInterval: ScrapeInterval, ScrapeTimeout: ScrapeInterval,
			StaticConfigs: []staticConfig{{Targets: []string{t.Addr}}}}
		if t.TokenFile != "" {
			sc.Scheme = "https"
			sc.Authorization = &authorization{CredentialsFile: t.TokenFile}
			sc.TLSConfig = &tlsConfig{CAFile: t.CAFile}
		}
		cfg.ScrapeConfigs = append(cfg.ScrapeConfigs, sc)
		p.jobs = append(p.jobs, t.Job)
	}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	cfgFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgFile, data, 0o600); err != nil {
		return nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	p.URL = "http://" + addr
	client, err := api.NewClient(api.Config{Address: p.URL})
	if err != nil {
		return nil, err
	}
	p.api = promv1.NewAPI(client)
	p.cmd = exec.Command(bin, "--config.file="+cfgFile, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	p.cmd.Stdout, p.cmd.Stderr = (*logWriter)(p), (*logWriter)(p)
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	err = p.poll(ctx, "Prometheus to be ready", func() (bool, error) {
		resp, err := http.Get(p.URL + "/-/ready")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		p.Stop()
		return nil, err
	}
	return p, nil
}

// freeAddr is a loopback address with a port free a moment ago
// (Prometheus does not report the port it bound for :0).
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

type logWriter Prometheus

func (w *logWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.log.Write(b)
}

// Log is what Prometheus has written so far.
func (p *Prometheus) Log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// Stop ends Prometheus and waits for it.
func (p *Prometheus) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Kill()
	<-p.done
}

// poll calls cond every 200 ms until it is true, fails, Prometheus exits
// or ctx ends.
func (p *Prometheus) poll(ctx context.Context, what string, cond func() (bool, error)) error {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("prometheus exited (%v) while waiting for %s:\n%s", p.cmd.ProcessState, what, p.Log())
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w; prometheus:\n%s", what, ctx.Err(), p.Log())
		case <-tick.C:
		}
	}
}

// WaitScraped waits until every target is up and has been scraped n times,
// so rate() over the test's windows has samples to work on. On a timeout
// the error has each target's last scrape error.
func (p *Prometheus) WaitScraped(ctx context.Context, n int) error {
	var health string
	err := p.poll(ctx, "every target to be up", func() (bool, error) {
		res, err := p.api.Targets(ctx)
		if err != nil {
			return false, nil
		}
		up := map[string]bool{}
		var b strings.Builder
		for _, t := range res.Active {
			up[t.ScrapePool] = t.Health == promv1.HealthGood
			fmt.Fprintf(&b, "\n  %s %s: %s %s", t.ScrapePool, t.ScrapeURL, t.Health, t.LastError)
		}
		health = b.String()
		for _, j := range p.jobs {
			if !up[j] {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("%w; targets:%s", err, health)
	}
	return p.poll(ctx, fmt.Sprintf("%d scrapes of every target", n), func() (bool, error) {
		v, _, _, err := p.api.Query(ctx, "count_over_time(up[5m])", time.Now())
		if err != nil {
			return false, nil
		}
		vec, _ := v.(model.Vector)
		if len(vec) < len(p.jobs) {
			return false, nil
		}
		for _, s := range vec {
			if int(s.Value) < n {
				return false, nil
			}
		}
		return true, nil
	})
}

// Series runs expr as an instant query and returns how many series it
// gave; Prometheus' warnings are errors too (a query Grafana would flag).
func (p *Prometheus) Series(ctx context.Context, expr string) (int, error) {
	v, warnings, _, err := p.api.Query(ctx, expr, time.Now())
	if err != nil {
		return 0, err
	}
	if len(warnings) > 0 {
		return 0, fmt.Errorf("warnings: %s", strings.Join(warnings, "; "))
	}
	switch v := v.(type) {
	case model.Vector:
		return len(v), nil
	case model.Matrix:
		return len(v), nil
	case *model.Scalar, *model.String:
		return 1, nil
	}
	return 0, fmt.Errorf("result of type %s", v.Type())
}

// Check runs every query and returns an error per query that fails or
// gives no series, each naming its row and panel; keep selects the
// queries (nil: all). It fails when keep leaves nothing to check. A query
// without series is asked again for up to 15 s, three scrapes (a scrape
// that failed leaves gauges stale until the next one).
func Check(ctx context.Context, p *Prometheus, queries []Query, keep func(Query) bool) error {
	var errs []error
	n := 0
	for _, q := range queries {
		if keep != nil && !keep(q) {
			continue
		}
		n++
		var series int
		var err error
		deadline := time.Now().Add(15 * time.Second)
		for {
			series, err = p.Series(ctx, q.Expr)
			if err != nil || series > 0 || time.Now().After(deadline) || ctx.Err() != nil {
				break
			}
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w\n    %s", q, err, q.Expr))
		case series == 0:
			errs = append(errs, fmt.Errorf("%s: no series\n    %s", q, q.Expr))
		}
	}
	if n == 0 {
		return errors.New("no query selected")
	}
	return errors.Join(errs...)
}
