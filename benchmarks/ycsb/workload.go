package ycsb

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// Workload is YCSB's core workload reduced to reads and single-field
// updates, run by concurrent clients for a warm-up and then a measured
// window.
//
// Reads choose any record. Updates of client i choose only records whose
// number is ≡ i (mod clients): each record has a single writer issuing one
// update at a time, so the last acknowledged value of every field is known
// exactly (the Model) and a read of a client's own record must return it
// (read-your-writes, checked on every such read).
type Workload struct {
	Spec      Spec
	Clients   int
	ReadRatio float64       // fraction of operations that are reads
	Chooser   Chooser       // record popularity
	Warmup    time.Duration // run, unmeasured, before the window
	Duration  time.Duration // the measured window
	Seed      uint64
	OpTimeout time.Duration // per operation; default 10 s

	// OnMeasure and OnMeasureEnd, if set, are called when the measured
	// window opens and closes (to start and stop a CPU profile, say).
	OnMeasure, OnMeasureEnd func()
}

// Result is what a run measured. Operations count in the window when they
// started in it.
type Result struct {
	Window  time.Duration // length of the measured window
	Ops     int64         // operations completed successfully in the window
	Reads   Latencies     // successful reads in the window
	Updates Latencies     // successful updates in the window

	Errors       int64    // failed operations, window or not
	ErrorSamples []string // the first few errors
	ReadChecks   int64    // reads of a client's own updated records, compared with the model
	StaleReads   int64    // of which returned a value the model rules out
	StaleSamples []string // the first few stale reads

	Model *Model // every acknowledged update, warm-up included
}

// Throughput is operations per second in the window.
func (r *Result) Throughput() float64 {
	if r.Window <= 0 {
		return 0
	}
	return float64(r.Ops) / r.Window.Seconds()
}

const maxSamples = 5

const (
	phaseWarmup int32 = iota
	phaseMeasure
	phaseStop
)

// Run runs the workload with one Client per client goroutine
// (len(clients) == w.Clients) and returns when the window is over and every
// client has finished its last operation. Cancelling ctx ends the run
// early, with an error.
func (w *Workload) Run(ctx context.Context, clients []Client) (*Result, error) {
	if len(clients) != w.Clients || w.Clients < 1 {
		return nil, fmt.Errorf("ycsb: %d clients for a workload of %d", len(clients), w.Clients)
	}
	if w.Spec.Records < int64(w.Clients) {
		return nil, fmt.Errorf("ycsb: %d records for %d clients; every client needs a record of its own", w.Spec.Records, w.Clients)
	}
	if w.OpTimeout <= 0 {
		w.OpTimeout = 10 * time.Second
	}
	var phase atomic.Int32
	runs := make([]*clientRun, w.Clients)
	var wg sync.WaitGroup
	for i := range runs {
		runs[i] = &clientRun{w: w, id: i, c: clients[i], phase: &phase, model: NewModel(w.Spec.Fields),
			r: rand.New(rand.NewPCG(w.Seed, uint64(i)+1))}
		wg.Add(1)
		go func() {
			defer wg.Done()
			runs[i].loop(ctx)
		}()
	}
	sleep := func(d time.Duration) {
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
	sleep(w.Warmup)
	if w.OnMeasure != nil {
		w.OnMeasure()
	}
	start := time.Now()
	phase.Store(phaseMeasure)
	sleep(w.Duration)
	phase.Store(phaseStop)
	window := time.Since(start)
	if w.OnMeasureEnd != nil {
		w.OnMeasureEnd()
	}
	wg.Wait()

	res := &Result{Window: window, Model: NewModel(w.Spec.Fields)}
	var reads, updates [][]time.Duration
	for _, r := range runs {
		res.Ops += int64(len(r.reads) + len(r.updates))
		reads = append(reads, r.reads)
		updates = append(updates, r.updates)
		res.Errors += r.errors
		res.ReadChecks += r.checks
		res.StaleReads += r.stale
		res.ErrorSamples = appendSamples(res.ErrorSamples, r.errorSamples)
		res.StaleSamples = appendSamples(res.StaleSamples, r.staleSamples)
		res.Model.Merge(r.model)
	}
	res.Reads, res.Updates = merge(reads), merge(updates)
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("ycsb: run interrupted: %w", err)
	}
	return res, nil
}

func appendSamples(to, from []string) []string {
	for _, s := range from {
		if len(to) < maxSamples {
			to = append(to, s)
		}
	}
	return to
}

// clientRun is one client goroutine's state; nothing in it is shared.
type clientRun struct {
	w     *Workload
	id    int
	c     Client
	r     *rand.Rand
	phase *atomic.Int32
	model *Model

	reads, updates []time.Duration
	errors         int64
	errorSamples   []string
	checks, stale  int64
	staleSamples   []string
}

func (cr *clientRun) loop(ctx context.Context) {
	w := cr.w
	n := int64(w.Clients)
	for ctx.Err() == nil {
		ph := cr.phase.Load()
		if ph == phaseStop {
			return
		}
		rec := w.Chooser.Next(cr.r)
		if cr.r.Float64() < w.ReadRatio {
			cr.read(ctx, rec, ph == phaseMeasure)
			continue
		}
		// Move the chosen record to the nearest one of this client's:
		// popularity stays as skewed, and each record keeps one writer.
		own := rec - rec%n + int64(cr.id)
		if own >= w.Spec.Records {
			own -= n
		}
		cr.update(ctx, own, ph == phaseMeasure)
	}
}

func (cr *clientRun) read(ctx context.Context, rec int64, measured bool) {
	check := rec%int64(cr.w.Clients) == int64(cr.id) && cr.model.Has(rec)
	key := Key(rec)
	octx, cancel := context.WithTimeout(ctx, cr.w.OpTimeout)
	start := time.Now()
	row, err := cr.c.Read(octx, key, check)
	took := time.Since(start)
	cancel()
	if err != nil {
		cr.fail(ctx, "read", key, err)
		return
	}
	if measured {
		cr.reads = append(cr.reads, took)
	}
	if check {
		cr.checks++
		if f := cr.model.Check(rec, row); f >= 0 {
			cr.stale++
			if len(cr.staleSamples) < maxSamples {
				c := cr.model.recs[rec][f]
				cr.staleSamples = append(cr.staleSamples, fmt.Sprintf("%s.%s: read %s, last acknowledged %s", key, FieldName(f), quote(row[f]), c.want()))
			}
		}
	}
}

func (cr *clientRun) update(ctx context.Context, rec int64, measured bool) {
	key := Key(rec)
	field := cr.r.IntN(cr.w.Spec.Fields)
	value := RandomValue(cr.r, cr.w.Spec.FieldSize)
	octx, cancel := context.WithTimeout(ctx, cr.w.OpTimeout)
	start := time.Now()
	err := cr.c.Update(octx, key, field, value)
	took := time.Since(start)
	cancel()
	if err != nil {
		cr.model.Fail(rec, field, value)
		cr.fail(ctx, "update", key, err)
		return
	}
	cr.model.Ack(rec, field, value)
	if measured {
		cr.updates = append(cr.updates, took)
	}
}

func (cr *clientRun) fail(ctx context.Context, op, key string, err error) {
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return // the run was interrupted; Run reports it
	}
	cr.errors++
	if len(cr.errorSamples) < maxSamples {
		cr.errorSamples = append(cr.errorSamples, fmt.Sprintf("%s %s: %v", op, key, err))
	}
}
