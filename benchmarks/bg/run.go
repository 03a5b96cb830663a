package bg

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/writeback/writeback/benchmarks/bench"
	"github.com/writeback/writeback/benchmarks/sidecar"
	"github.com/writeback/writeback/internal/config"
)

// Config is one run: one policy on one store, the mixes in turn, each a
// ramp of thread counts.
type Config struct {
	Policy  string // bench.Database, DatabaseAsync, WriteAround, WriteThrough or WriteBack
	Graph   Graph
	Mixes   []Mix
	Threads []int         // the ramp, increasing
	Step    time.Duration // measured time per ramp step
	// SLA: SLAPct % of actions within SLALatency.
	SLALatency time.Duration
	SLAPct     float64
	Seed       uint64
	RedisAddr  string    // for the sidecar
	Progress   io.Writer // a line per second while a step runs; nil: none
	Log        func(format string, args ...any)
	Samples    int // stale reads and final differences to describe
	// Configure, if set, adjusts the sidecar's configuration.
	Configure func(*config.Config)
	// WrapConn, if set, wraps the run's Conn. Tests use it to serve stale
	// reads on purpose and see the validation catch them.
	WrapConn func(Conn) Conn
}

// Step is one step of a ramp: Threads threads for a while.
type Step struct {
	Threads    int              `json:"threads"`
	Actions    int64            `json:"actions"`
	Seconds    float64          `json:"seconds"`
	Throughput float64          `json:"throughput_actions_per_s"`
	Latency    bench.Latency    `json:"latency"`
	WithinSLA  float64          `json:"within_sla_pct"` // % of actions within the SLA's latency
	SLAMet     bool             `json:"sla_met"`
	ByAction   map[string]int64 `json:"by_action"`
	// Fallbacks counts write actions that found no relationship to act on
	// (none free) and ran View Profile instead.
	Fallbacks int64 `json:"fallbacks"`
	// NearHitPct is the share of document reads the near caches served
	// during the step (writeback_nearcache_hits_total over hits and
	// misses); -1 without a near cache.
	NearHitPct float64 `json:"near_hit_pct"`
}

// MixResult is the ramp of one mix.
type MixResult struct {
	Mix         string  `json:"mix"`
	Steps       []Step  `json:"steps"`
	SoAR        float64 `json:"soar_actions_per_s"` // 0 when no step met the SLA
	SoARThreads int     `json:"soar_threads"`
	P95         float64 `json:"p95_ms_at_soar"`
	NearHitPct  float64 `json:"near_hit_pct_at_soar"` // Step.NearHitPct of the SoAR's step
	Validation  Counts  `json:"validation"`
	// Pending and PinnedBytes are the sidecar's buffered changes when the
	// ramp ended (-1 without a sidecar).
	Pending     int64 `json:"pending"`
	PinnedBytes int64 `json:"pinned_bytes"`
	// FlushSeconds is how long draining them took, after the ramp.
	FlushSeconds float64 `json:"flush_s"`
}

// StalePct is the mix's percentage of stale reads.
func (m MixResult) StalePct() float64 {
	if m.Validation.Reads == 0 {
		return 0
	}
	return 100 * float64(m.Validation.Stale) / float64(m.Validation.Reads)
}

// Result is a run's outcome.
type Result struct {
	Store       string      `json:"store"`
	Policy      string      `json:"policy"`
	Mixes       []MixResult `json:"mixes"`
	Validation  Validation  `json:"validation"`
	Changes     int         `json:"changes"`     // acknowledged relationship changes
	FinalBad    int         `json:"final_bad"`   // member lists the store holds wrongly after the run
	FinalDiffs  []string    `json:"final_diffs"` // the first of them, explained
	FinalLists  int         `json:"final_lists"` // member lists checked
	LoadSeconds float64     `json:"load_s"`
}

// Failed reports whether the validation or the final check found anomalies.
func (r *Result) Failed() bool { return r.Validation.Stale > 0 || r.FinalBad > 0 }

// Run loads the graph into st, serves it through cfg.Policy, runs every mix's
// ramp, drains the sidecar, and validates the reads and the store's final
// state. Errors of the benchmark itself (a failed action, a service down)
// end the run; anomalies are in the Result.
func Run(ctx context.Context, st Store, cfg Config) (res *Result, err error) {
	logf := cfg.Log
	if logf == nil {
		logf = func(string, ...any) {}
	}
	res = &Result{Store: st.Name(), Policy: cfg.Policy}
	t0 := time.Now()
	if err := st.Load(ctx, cfg.Graph, cfg.Seed); err != nil {
		return nil, err
	}
	res.LoadSeconds = time.Since(t0).Seconds()
	logf("bg: %s %s: loaded %d members × %d friends + %d pending in %.1fs", st.Name(), cfg.Policy, cfg.Graph.Members, cfg.Graph.Friends, cfg.Graph.Pending, res.LoadSeconds)

	var conn Conn
	var sc *sidecar.Sidecar
	if p, ok := bench.Sidecar(cfg.Policy); ok {
		if cfg.Policy == bench.WriteBackRESP {
			return nil, errors.New(NotApplicableRESP)
		}
		sc, err = sidecar.Start(ctx, sidecar.Options{
			Policy: p, Driver: st.Name(), DSN: st.DSN(), Database: st.Database(), RedisAddr: cfg.RedisAddr,
			Collection: st.Collection(), Key: st.Key(), PrefixBase: "bg", Configure: cfg.Configure,
			Embedded: cfg.Policy == bench.WriteBackEmbedded,
		})
		if err != nil {
			return nil, err
		}
		defer func() {
			if cerr := sc.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("bg: closing the sidecar: %w", cerr)
			}
		}()
		if sc.Embedded != nil {
			conn = NewEmbeddedConn(sc.Embedded, st.Collection())
		} else {
			conn = NewSidecarConn(sc.Client, st.Collection())
		}
	} else {
		if conn, err = st.Open(ctx, cfg.Policy == bench.DatabaseAsync); err != nil {
			return nil, err
		}
		defer conn.Close()
	}
	if cfg.WrapConn != nil {
		conn = cfg.WrapConn(conn)
	}
	if sc != nil {
		// The database was just loaded, so its pages are in memory; the
		// sidecar's cache starts empty and is warmed, as in the paper.
		t := time.Now()
		if err := warm(ctx, conn, cfg.Graph.Members); err != nil {
			return nil, err
		}
		logf("bg: %s %s: warmed the cache in %.1fs", st.Name(), cfg.Policy, time.Since(t).Seconds())
	}

	r := &runner{cfg: cfg, conn: conn, sc: sc, store: st.Name(), base: time.Now()}
	r.social = NewSocial(cfg.Graph, NewChooser(cfg.Graph.Members, cfg.Seed))
	for k, mix := range cfg.Mixes {
		t := time.Now()
		mr, err := r.ramp(ctx, k, mix)
		if err != nil {
			return nil, err
		}
		logf("bg: %s %s: %s%% reads ramp took %.1fs", st.Name(), cfg.Policy, mix.Name, time.Since(t).Seconds())
		mr.Pending, mr.PinnedBytes = -1, -1
		if sc != nil {
			s, err := sc.Client.Status(ctx)
			if err != nil {
				return nil, fmt.Errorf("bg: reading the sidecar's status: %w", err)
			}
			mr.Pending, mr.PinnedBytes = s.Pending, s.PinnedBytes
			// Drain before the next mix, so that its ramp does not share
			// the machine with the appliers working off this one's backlog.
			if mr.FlushSeconds, err = flush(ctx, sc); err != nil {
				return nil, err
			}
			logf("bg: %s %s: %d pending changes (%d bytes pinned) drained in %.1fs", st.Name(), cfg.Policy, mr.Pending, mr.PinnedBytes, mr.FlushSeconds)
		}
		res.Mixes = append(res.Mixes, mr)
	}
	stored, err := st.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	res.Changes = len(r.hist.Changes)
	res.FinalBad, res.FinalDiffs = CheckFinal(cfg.Graph, r.hist.Changes, stored, cfg.Samples)
	res.FinalLists = 2 * cfg.Graph.Members
	res.Validation = Validate(cfg.Graph, &r.hist, cfg.Samples)
	for k := range res.Mixes {
		if k < len(res.Validation.ByMix) {
			res.Mixes[k].Validation = res.Validation.ByMix[k]
		}
	}
	return res, nil
}

// flush drains the sidecar and returns how long it took.
func flush(ctx context.Context, sc *sidecar.Sidecar) (float64, error) {
	t := time.Now()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if _, err := sc.Flush(ctx); err != nil {
		return 0, err
	}
	return time.Since(t).Seconds(), nil
}

// NotApplicableRESP says why write-back-resp does not run BG.
const NotApplicableRESP = "the Redis-protocol front door has no list operators ($push, $pull) and refuses MongoDB collections"

// warm reads every member once, so that the database's buffer pool and the
// sidecar's cache start warm, as in the paper.
func warm(ctx context.Context, c Conn, members int) error {
	var next atomic.Int32
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for w := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				m := next.Add(1) - 1
				if int(m) >= members || errs[w] != nil {
					return
				}
				_, _, errs[w] = c.Profile(ctx, m)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

type runner struct {
	cfg    Config
	conn   Conn
	sc     *sidecar.Sidecar
	store  string
	social *Social
	base   time.Time // the run's clock: History's times are since base
	hist   History
	steps  int // steps run so far: seeds each step's threads differently
}

func (r *runner) now() time.Duration { return time.Since(r.base) }

// ramp runs the mix with each thread count in turn, until the SLA fails or
// the throughput stops rising (less than 5 % above the best step so far).
func (r *runner) ramp(ctx context.Context, k int, mix Mix) (MixResult, error) {
	mr := MixResult{Mix: mix.Name}
	best := 0.0
	for _, n := range r.cfg.Threads {
		s, err := r.step(ctx, k, mix, n)
		if err != nil {
			return mr, err
		}
		mr.Steps = append(mr.Steps, s)
		if s.SLAMet && s.Throughput > mr.SoAR {
			mr.SoAR, mr.SoARThreads, mr.P95, mr.NearHitPct = s.Throughput, n, s.Latency.P95, s.NearHitPct
		}
		if !s.SLAMet || s.Throughput < 1.05*best {
			break
		}
		best = max(best, s.Throughput)
	}
	return mr, nil
}

// nearCounts are the near caches' hit and miss counters.
type nearCounts struct{ hits, misses float64 }

// nearReads reads the near caches' counters (zero without a sidecar).
func (r *runner) nearReads() nearCounts {
	if r.sc == nil {
		return nearCounts{}
	}
	h, _, _ := r.sc.Metric("writeback_nearcache_hits_total")
	m, _, _ := r.sc.Metric("writeback_nearcache_misses_total")
	return nearCounts{h, m}
}

// thread is what one thread of a step records.
type thread struct {
	lat       []time.Duration
	reads     []Read
	changes   []Change
	byAction  [numActions]int64
	fallbacks int64
	err       error
}

// actionTimeout bounds one action: far beyond any SLA, it only keeps a
// stuck service from hanging the benchmark.
const actionTimeout = 30 * time.Second

func (r *runner) step(ctx context.Context, k int, mix Mix, n int) (Step, error) {
	r.steps++
	prog := &bench.Progress{Label: fmt.Sprintf("bg %s %s %s%% reads, %d threads", r.store, r.cfg.Policy, mix.Name, n), Out: r.cfg.Progress}
	if prog.Out == nil {
		prog.Out = io.Discard
	}
	if r.sc != nil {
		prog.Extra = func() string {
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			if s, err := r.sc.Client.Status(sctx); err == nil {
				return fmt.Sprintf("pending %d", s.Pending)
			}
			return ""
		}
	}
	near0 := r.nearReads()
	threads := make([]thread, n)
	var stop atomic.Bool
	var wg sync.WaitGroup
	start := time.Now()
	prog.Start()
	for i := range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := &threads[i]
			rnd := rand.New(rand.NewPCG(r.cfg.Seed, uint64(r.steps)<<20|uint64(i)))
			for !stop.Load() {
				if t.err = r.action(ctx, t, rnd, k, mix); t.err != nil {
					stop.Store(true)
					return
				}
				prog.Add(1)
			}
		}()
	}
	select {
	case <-time.After(r.cfg.Step):
	case <-ctx.Done():
	}
	stop.Store(true)
	wg.Wait()
	prog.Stop()
	elapsed := time.Since(start)

	s := Step{Threads: n, Seconds: elapsed.Seconds(), ByAction: map[string]int64{}, NearHitPct: -1}
	if near1 := r.nearReads(); near1.hits+near1.misses > near0.hits+near0.misses {
		s.NearHitPct = 100 * (near1.hits - near0.hits) / (near1.hits + near1.misses - near0.hits - near0.misses)
	}
	var lat []time.Duration
	var errs []error
	for i := range threads {
		t := &threads[i]
		errs = append(errs, t.err)
		lat = append(lat, t.lat...)
		r.hist.Reads = append(r.hist.Reads, t.reads...)
		r.hist.Changes = append(r.hist.Changes, t.changes...)
		for a, c := range t.byAction {
			if c > 0 {
				s.ByAction[Action(a).String()] += c
			}
		}
		s.Fallbacks += t.fallbacks
	}
	if err := errors.Join(errs...); err != nil {
		return s, err
	}
	if err := ctx.Err(); err != nil {
		return s, err
	}
	s.Actions = int64(len(lat))
	s.Throughput = float64(s.Actions) / elapsed.Seconds()
	s.Latency = summarize(lat)
	within := 0
	for _, d := range lat {
		if d <= r.cfg.SLALatency {
			within++
		}
	}
	if len(lat) > 0 {
		s.WithinSLA = 100 * float64(within) / float64(len(lat))
	}
	s.SLAMet = len(lat) > 0 && s.WithinSLA >= r.cfg.SLAPct
	return s, nil
}

func summarize(lat []time.Duration) bench.Latency {
	if len(lat) == 0 {
		return bench.Latency{}
	}
	slices.Sort(lat)
	pct := func(p float64) float64 { return bench.Ms(lat[min(len(lat)-1, int(p*float64(len(lat))))]) }
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	return bench.Latency{Count: int64(len(lat)), P50: pct(0.50), P90: pct(0.90), P95: pct(0.95), P99: pct(0.99),
		Mean: bench.Ms(sum / time.Duration(len(lat)))}
}

// action runs one action of mix and records it.
func (r *runner) action(ctx context.Context, t *thread, rnd *rand.Rand, k int, mix Mix) error {
	ctx, cancel := context.WithTimeout(ctx, actionTimeout)
	defer cancel()
	a := mix.Pick(rnd)
	start := r.now()
	if a.Write() {
		p, ok := r.social.Plan(a, rnd)
		if ok {
			err := r.write(ctx, t, p)
			r.social.Done(p, err == nil)
			if err != nil {
				return fmt.Errorf("%s by %s on %s: %w", a, ID(p.I), ID(p.J), err)
			}
			t.lat = append(t.lat, r.now()-start)
			t.byAction[a]++
			return nil
		}
		t.fallbacks++
		a = ViewProfile
	}
	m := r.social.chooser.Next(rnd)
	rd := Read{Action: a, M: m, Start: start, Mix: k, Friends: -1, Pending: -1}
	var err error
	switch a {
	case ViewProfile:
		var f, p int
		f, p, err = r.conn.Profile(ctx, m)
		rd.Friends, rd.Pending = int32(f), int32(p)
	case ListFriends, ListPending:
		l := Friends
		if a == ListPending {
			l = Pending
		}
		var c int
		var shown []int32
		c, shown, err = r.conn.List(ctx, m, l, ListLimit)
		if shown == nil {
			shown = []int32{}
		}
		rd.Listed = shown
		if l == Friends {
			rd.Friends = int32(c)
		} else {
			rd.Pending = int32(c)
		}
	}
	if err != nil {
		return fmt.Errorf("%s of %s: %w", a, ID(m), err)
	}
	rd.End = r.now()
	t.lat = append(t.lat, rd.End-start)
	t.reads = append(t.reads, rd)
	t.byAction[a]++
	return nil
}

// write applies p's updates, together when the Conn can, and logs each
// acknowledged change with the interval of the request that made it.
func (r *runner) write(ctx context.Context, t *thread, p Plan) error {
	logU := func(u Update, s, e time.Duration) {
		for _, op := range u.Ops {
			t.changes = append(t.changes, Change{M: u.M, X: op.X, List: op.List, Add: op.Add, Start: s, End: e})
		}
	}
	if b, ok := r.conn.(Batcher); ok && len(p.Updates) > 1 {
		s := r.now()
		if err := b.UpdateAll(ctx, p.Updates); err != nil {
			return err
		}
		e := r.now()
		for _, u := range p.Updates {
			logU(u, s, e)
		}
		return nil
	}
	for _, u := range p.Updates {
		s := r.now()
		if err := r.conn.Update(ctx, u); err != nil {
			return err
		}
		logU(u, s, r.now())
	}
	return nil
}
