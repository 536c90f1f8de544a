package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/devcluster"
	"github.com/krabka/krole/internal/explain"
	"github.com/krabka/krole/internal/faultnet"
	"github.com/krabka/krole/view"
)

// EnvOptions say where a bench runs.
type EnvOptions struct {
	// Config names the cluster and the role topic. Unless External, the
	// embedded cluster is started, and its addresses replace Brokers.
	Config   fencing.Config
	External bool
	// PipelineSet: Config.Pipeline was asked for; otherwise the embedded
	// cluster pipelines, as Apache Kafka answers a connection's requests
	// in order.
	PipelineSet bool
	// Delay holds every request that long on its way to the embedded
	// cluster (0: none).
	Delay time.Duration
	// CPUProfile, when set, is where a CPU profile of this process goes
	// until [Env.Close].
	CPUProfile string
	// Env is added to each member's environment; Log receives the status
	// line and the notes of a run (stderr).
	Env []string
	Log io.Writer
}

// Env is where a bench runs: the cluster, the role topic and the bench's
// own view of it, caught up.
type Env struct {
	cfg      fencing.Config
	brokers  string
	exe      string
	env      []string
	view     *view.View
	stops    []func()
	log      io.Writer
	run      string // a tag unique to this run, for role and member names
	embedded bool   // the cluster runs in this process
}

// StartEnv starts the embedded cluster (unless o.External) and the
// bench's view, and returns once the view has caught up. The caller
// closes the environment.
func StartEnv(ctx context.Context, o EnvOptions) (*Env, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("cannot find the krole executable to start the members: %w", err)
	}
	cfg := o.Config
	e := &Env{exe: exe, env: o.Env, log: o.Log, run: fmt.Sprintf("%x", time.Now().UnixNano()&0xffffffffff)}
	if o.CPUProfile != "" {
		stop, err := StartCPUProfile(o.CPUProfile)
		if err != nil {
			return nil, err
		}
		e.stops = append(e.stops, stop)
	}
	if !o.External {
		opts := devcluster.Options{Topic: cfg.Topic, Partitions: 3}
		if o.Delay > 0 {
			fn := faultnet.New()
			fn.SetDelay(o.Delay)
			opts.WrapListener = fn.Wrap
			e.stops = append(e.stops, func() { fn.Close() })
		}
		cluster, err := devcluster.Start(ctx, opts)
		if err != nil {
			e.Close()
			return nil, fmt.Errorf("starting the embedded cluster: %w", err)
		}
		e.stops = append(e.stops, func() { cluster.Close() })
		e.embedded = true
		cfg.Brokers = cluster.ListenAddrs()
		if !o.PipelineSet {
			// The bench's own kfake answers each connection's requests
			// one at a time, in order, as Apache Kafka does (and would
			// report transaction.partition.verification.enable, which
			// kfake does not know).
			cfg.Pipeline = fencing.PipelineOn
		}
	}
	e.cfg = cfg
	e.brokers = strings.Join(cfg.Brokers, ",")
	v, err := view.New(view.Options{Config: cfg})
	if err != nil {
		e.Close()
		return nil, err
	}
	vctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = v.Run(vctx)
	}()
	e.stops = append(e.stops, func() { cancel(); <-done })
	if err := v.WaitCaughtUp(ctx); err != nil {
		e.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, explain.RunError(cfg, err)
	}
	e.view = v
	return e, nil
}

// Close stops what StartEnv started, in reverse order.
func (e *Env) Close() {
	for i := len(e.stops) - 1; i >= 0; i-- {
		e.stops[i]()
	}
	e.stops = nil
}

// Run is a tag unique to this run, for the names of its roles and
// members.
func (e *Env) Run() string { return e.run }

// Log is where the run's status line and notes go.
func (e *Env) Log() io.Writer { return e.log }

// Cluster is the environment as the benches take it.
func (e *Env) Cluster() Cluster {
	return Cluster{Exe: e.exe, Env: e.env, Brokers: e.brokers, Topic: e.cfg.Topic, TxnPrefix: e.cfg.TxnPrefix, Pipeline: e.cfg.Pipeline,
		Embedded: e.embedded, Progress: e.progress, Log: e.log, View: e.view, Connect: e.connect}
}

// Name is the cluster as a result names it.
func (e *Env) Name() string {
	if e.embedded {
		return "embedded (kfake, in the bench process)"
	}
	return e.brokers
}

// progress rewrites the progress line.
func (e *Env) progress(format string, args ...any) {
	fmt.Fprintf(e.log, "\r%-70s", fmt.Sprintf(format, args...))
}

// connect opens a transport on the bench's cluster, with e's whole
// configuration (TLS and SASL included); see Cluster.Connect.
func (e *Env) connect(clientID string, txnTimeout time.Duration) (*fencing.BrokerTransport, error) {
	cfg := e.cfg
	cfg.ClientID = clientID
	if txnTimeout > 0 {
		cfg.TxnTimeout = txnTimeout
	}
	bt, err := fencing.NewBrokerTransport(cfg)
	if err != nil {
		return nil, explain.RunError(cfg, err)
	}
	return bt, nil
}

// StartCPUProfile profiles this process into path until the returned
// func is called.
func StartCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
