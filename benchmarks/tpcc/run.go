package tpcc

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
)

// RunOptions say how to drive one policy.
type RunOptions struct {
	Label     string // progress lines' label
	Store     string // Postgres (default) or MySQL: how the store prints values back
	Scale     Scale
	Terminals int // per warehouse
	Warmup    time.Duration
	Duration  time.Duration // measured
	Seed      uint64
	Constants constants // NURand's run-time C values, from Load
	Exec      Executor
	// Memory, if set, reads the sidecar's pinned bytes and pending
	// sessions; it is sampled every second and shown on progress lines.
	Memory   func(context.Context) (pinned, pending int64, err error)
	Progress io.Writer
	// CPUProfile, if set, is a file that receives a CPU profile of the
	// measured run (this process: the terminals and, in-process, the
	// sidecar and its appliers), not of the warm-up.
	CPUProfile string
}

// Sample is a point of a time series: T seconds after the measured run
// started (negative during the warm-up).
type Sample struct {
	T float64 `json:"t_s"`
	V float64 `json:"v"`
}

// Stats are one transaction type's figures over the measured run.
type Stats struct {
	Committed int64         `json:"committed"`
	Rollbacks int64         `json:"rollbacks,omitempty"` // New-Order's intended 1 %
	Retries   int64         `json:"retries"`             // attempts aborted by a conflict and run again
	Latency   bench.Latency `json:"latency"`             // from the first attempt to the commit, retries included
}

// Result is a run's outcome.
type Result struct {
	Policy     string           `json:"policy"`
	Terminals  int              `json:"terminals"` // in all
	Seconds    float64          `json:"seconds"`   // measured
	TpmC       float64          `json:"tpmC"`      // New-Orders committed per minute
	TxPerSec   float64          `json:"tx_per_s"`  // all transactions
	Kinds      map[string]Stats `json:"transactions"`
	NotApplied int64            `json:"not_applied,omitempty"` // write-through commits answered 503 (committed, applied later)
	Pinned     []Sample         `json:"pinned_bytes,omitempty"`
	Pending    []Sample         `json:"pending_sessions,omitempty"`
	Work       Work             `json:"work"` // everything committed, warm-up included
	// CPUPerTx is the processor time per transaction of the measured run,
	// in ms, by process (bench.CPU's names; "self" is the terminals and an
	// in-process sidecar): where a saturated machine's time goes.
	CPUPerTx map[string]float64 `json:"cpu_ms_per_tx,omitempty"`
}

// terminalStats is what one terminal counts; merged at the end.
type terminalStats struct {
	committed, rollbacks, retries [kinds]int64
	lat                           [kinds][]time.Duration
	work                          Work
	notApplied                    int64
}

// Run drives W × Terminals terminals for Warmup + Duration. Transactions
// in flight when the time is up finish (a commit is never cut short, so
// the committed work is known exactly); a transaction failing other than
// by a conflict or New-Order's rollback stops the run with its error.
func Run(ctx context.Context, o RunOptions) (Result, error) {
	n := o.Scale.Warehouses * o.Terminals
	res := Result{Policy: o.Label, Terminals: n, Kinds: map[string]Stats{}}
	var (
		measuring atomic.Bool
		stop      atomic.Bool
		failed    error
		failOnce  sync.Once
		wg        sync.WaitGroup
		stats     = make([]terminalStats, n)
	)
	prog := &bench.Progress{Label: o.Label, Out: o.Progress}
	var memMu sync.Mutex // guards lastPinned, lastPending
	var lastPinned, lastPending int64
	if o.Memory != nil {
		prog.Extra = func() string {
			memMu.Lock()
			defer memMu.Unlock()
			return fmt.Sprintf("pending %d sessions, pinned %s", lastPending, kib(lastPinned))
		}
	}
	start := time.Now()
	measureAt := start.Add(o.Warmup)
	end := measureAt.Add(o.Duration)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := &terminal{r: rand.New(rand.NewPCG(o.Seed, uint64(i)+1)), s: o.Scale, c: o.Constants,
				w: i/o.Terminals + 1, d: i%Districts + 1, stamp: time.Now, mysql: o.Store == MySQL}
			st := &stats[i]
			for !stop.Load() {
				k := mix(t.r)
				in := t.draw(k)
				began := time.Now()
				counted := measuring.Load()
				out, retries, err := attempt(ctx, o.Exec, t, in)
				if err != nil {
					failOnce.Do(func() { failed = fmt.Errorf("%s: %w", k, err) })
					stop.Store(true)
					return
				}
				st.work.NewOrders += b2i(out.newOrder)
				if out.payment > 0 {
					st.work.Payments++
					st.work.Paid += out.payment
				}
				if out.notApplied {
					st.notApplied++
				}
				if counted && measuring.Load() {
					st.retries[k] += int64(retries)
					if out.rollback {
						st.rollbacks[k]++
					} else {
						st.committed[k]++
					}
					st.lat[k] = append(st.lat[k], time.Since(began))
					prog.Add(1)
				}
			}
		}()
	}
	// The clock: warm-up, measured run, memory samples every second.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	sample := func(now time.Time) {
		if o.Memory == nil {
			return
		}
		pinned, pending, err := o.Memory(ctx)
		if err != nil {
			return
		}
		memMu.Lock()
		lastPinned, lastPending = pinned, pending
		memMu.Unlock()
		at := now.Sub(measureAt).Seconds()
		res.Pinned = append(res.Pinned, Sample{T: at, V: float64(pinned)})
		res.Pending = append(res.Pending, Sample{T: at, V: float64(pending)})
	}
	sample(time.Now())
	var cpu0 bench.CPU
	stopProfile := func() {}
	startMeasuring := func() error {
		measuring.Store(true)
		prog.Start()
		cpu0 = bench.TakeCPU()
		if o.CPUProfile == "" {
			return nil
		}
		stop, err := bench.StartCPUProfile(o.CPUProfile)
		if err != nil {
			return fmt.Errorf("tpcc: cpu profile: %w", err)
		}
		stopProfile = stop
		return nil
	}
	if o.Warmup == 0 {
		if err := startMeasuring(); err != nil {
			stop.Store(true)
			failOnce.Do(func() { failed = err })
		}
	}
	for !stop.Load() {
		now := <-tick.C
		if ctx.Err() != nil {
			stop.Store(true)
			break
		}
		if !measuring.Load() && !now.Before(measureAt) {
			if err := startMeasuring(); err != nil {
				stop.Store(true)
				failOnce.Do(func() { failed = err })
			}
		}
		sample(now)
		if !now.Before(end) {
			stop.Store(true)
		}
	}
	measuring.Store(false)
	measured := time.Since(measureAt)
	cpu := bench.TakeCPU().Sub(cpu0)
	stopProfile()
	prog.Stop()
	wg.Wait()
	sample(time.Now())
	if failed != nil {
		return res, failed
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	res.Seconds = min(measured, o.Duration+time.Second).Seconds()
	var all [kinds][]time.Duration
	var total int64
	for i := range stats {
		st := &stats[i]
		res.Work.NewOrders += st.work.NewOrders
		res.Work.Payments += st.work.Payments
		res.Work.Paid += st.work.Paid
		res.NotApplied += st.notApplied
		for _, k := range Kinds {
			all[k] = append(all[k], st.lat[k]...)
		}
	}
	for _, k := range Kinds {
		var s Stats
		for i := range stats {
			s.Committed += stats[i].committed[k]
			s.Rollbacks += stats[i].rollbacks[k]
			s.Retries += stats[i].retries[k]
		}
		s.Latency = Summarize(all[k])
		total += s.Committed + s.Rollbacks
		res.Kinds[k.String()] = s
	}
	res.TpmC = float64(res.Kinds[NewOrder.String()].Committed) / (res.Seconds / 60)
	res.TxPerSec = float64(total) / res.Seconds
	if total > 0 && len(cpu) > 0 {
		res.CPUPerTx = map[string]float64{}
		for p, d := range cpu {
			res.CPUPerTx[p] = float64(d.Microseconds()) / 1000 / float64(total)
		}
	}
	return res, nil
}

// attempt runs a transaction until it commits or rolls back, running it
// again after each conflict (with a short random backoff); it returns how
// many attempts were aborted.
func attempt(ctx context.Context, ex Executor, t *terminal, in input) (out outcomeFull, retries int, err error) {
	for a := 1; ; a++ {
		tx, err := ex.Begin(ctx)
		if err != nil {
			return out, retries, err
		}
		o, err := t.run(ctx, tx, in)
		switch {
		case err == nil:
			return outcomeFull{outcome: o}, retries, nil
		case errors.Is(err, errRollback):
			tx.Rollback(ctx)
			return outcomeFull{outcome: o}, retries, nil
		case IsNotApplied(err):
			// Committed in its queue, applied later: it happened.
			return outcomeFull{outcome: o.committedAnyway(in), notApplied: true}, retries, nil
		case ex.Retryable(err):
			tx.Rollback(ctx)
			retries++
			select {
			case <-ctx.Done():
				return out, retries, ctx.Err()
			case <-time.After(time.Duration(t.r.IntN(1<<min(a, 6))) * time.Millisecond):
			}
		default:
			tx.Rollback(ctx)
			return out, retries, err
		}
	}
}

// outcomeFull is an outcome and whether a write-through commit was
// answered "committed, not applied".
type outcomeFull struct {
	outcome
	notApplied bool
}

// committedAnyway is the outcome of a transaction whose commit returned a
// not-applied error: what it would have returned on success.
func (o outcome) committedAnyway(in input) outcome {
	switch in.kind {
	case NewOrder:
		o.newOrder = true
	case Payment:
		o.payment = in.amount
	}
	return o
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func kib(b int64) string { return fmt.Sprintf("%.1fKiB", float64(b)/1024) }

// Summarize is the latency summary of a sample of durations.
func Summarize(d []time.Duration) bench.Latency {
	if len(d) == 0 {
		return bench.Latency{}
	}
	s := slices.Clone(d)
	slices.Sort(s)
	q := func(p float64) float64 { return bench.Ms(s[min(len(s)-1, int(p*float64(len(s))))]) }
	var sum time.Duration
	for _, v := range s {
		sum += v
	}
	return bench.Latency{Count: int64(len(s)), P50: q(0.50), P90: q(0.90), P95: q(0.95), P99: q(0.99), Mean: bench.Ms(sum / time.Duration(len(s)))}
}
