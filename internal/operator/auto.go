// SPDX-License-Identifier: Apache-2.0

package operator

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/swiftlane/swiftlane/internal/config"
	"github.com/swiftlane/swiftlane/internal/strategy"
	"github.com/swiftlane/swiftlane/internal/trace"
)

// Automatic is the tracer and the operator running in the scheduler's
// process: events go from the ring buffer straight to the scheduler's map.
type Automatic struct {
	Tracer   *trace.Tracer
	Operator *Operator
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

// EmitInterval is the tracer's per-(process, function) event gap for an idle
// timeout: several events per timeout keep a busy carrier's entry alive.
func EmitInterval(idle time.Duration) time.Duration {
	return min(idle/4, time.Second)
}

// Companions turns the companion regexes into strategies.
func Companions(cfg config.Automatic) []strategy.Strategy {
	out := make([]strategy.Strategy, 0, len(cfg.Companions))
	for i, re := range cfg.Companions {
		class := cfg.Class
		out = append(out, strategy.Strategy{
			Name: fmt.Sprintf("auto-companion-%d", i), Class: &class, ExecutionTime: cfg.SliceNs, CommandRegex: re,
		})
	}
	return out
}

// StartAutomatic loads the tracer and runs the operator over applier until
// Stop. While GTP-U traffic is carried, the companions are matched after
// the applier's strategies, whatever those are then (the config's or an
// agent's).
func StartAutomatic(cfg config.Automatic, applier *strategy.Applier, log *slog.Logger) (*Automatic, error) {
	companions, err := strategy.Compile(Companions(cfg))
	if err != nil {
		return nil, fmt.Errorf("automatic.companions: %w", err)
	}
	idle := time.Duration(cfg.IdleTimeoutMs) * time.Millisecond
	tr, err := trace.Load(trace.Options{Functions: cfg.Functions, EmitInterval: EmitInterval(idle), Log: log})
	if err != nil {
		return nil, fmt.Errorf("automatic.enabled: %w (or set automatic.enabled: false)", err)
	}
	op := New(applier, Options{
		Class: cfg.Class, SliceNs: cfg.SliceNs, IdleTimeout: idle, Log: log,
		OnActive: func(active bool) {
			if companions.Len() == 0 {
				return
			}
			var extra *strategy.Set
			if active {
				extra = companions
			}
			if err := applier.SetExtra(extra); err != nil {
				log.Warn("companion strategies", "active", active, "err", err)
			}
		},
	})
	applier.OnExit(op.HandleExit)
	ctx, cancel := context.WithCancel(context.Background())
	a := &Automatic{Tracer: tr, Operator: op, cancel: cancel}
	a.wg.Add(2)
	go func() {
		defer a.wg.Done()
		if err := tr.Run(ctx, op.Handle); err != nil {
			log.Warn("GTP-U tracer stopped", "err", err)
		}
	}()
	go func() {
		defer a.wg.Done()
		op.Run(ctx)
	}()
	log.Info("automatic mode: tracing GTP-U", "functions", tr.Functions(), "class", cfg.Class, "idle_timeout", idle)
	return a, nil
}

// Stop detaches the tracer and stops the operator.
func (a *Automatic) Stop() error {
	a.cancel()
	a.wg.Wait()
	return a.Tracer.Close()
}
