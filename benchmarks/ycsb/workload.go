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

// Workload is YCSB's core workload reduced to reads, short scans and
// updates, run by concurrent clients for a warm-up and then a measured
// window.
//
// Reads and scans choose any record. Updates of client i choose only
// records whose number is ≡ i (mod clients): each record has a single
// writer issuing one update at a time, so the last acknowledged value of
// every field is known exactly (the Model) and a read of a client's own
// record must return it (read-your-writes, checked on every such read, and
// on every such record a scan returns).
type Workload struct {
	Spec      Spec
	Clients   int
	ReadRatio float64 // fraction of operations that are reads
	// ScanRatio is the fraction of operations that are scans of
	// ScanLength records from a chosen key (YCSB's workload E, the paper's
	// workload S); every client must then be a Scanner. The operations
	// that are neither reads nor scans are updates.
	ScanRatio  float64
	ScanLength int // records per scan; default 5, the paper's
	// UpdateAll makes an update set every field of the record, as the
	// paper's YCSB does, in one operation (every client must then be a
	// RecordUpdater); by default an update sets one random field, as
	// YCSB's core workload does (writeallfields=false).
	UpdateAll bool
	Chooser   Chooser       // record popularity
	Warmup    time.Duration // run, unmeasured, before the window
	Duration  time.Duration // the measured window
	Seed      uint64
	OpTimeout time.Duration // per operation; default 10 s

	// OnMeasure and OnMeasureEnd, if set, are called when the measured
	// window opens and closes (to start and stop a CPU profile, say).
	OnMeasure, OnMeasureEnd func()
	// OnOp, if set, is called after every successful operation, warm-up
	// included, from the client goroutines (a progress counter, say).
	OnOp func()
}

// Scanner is a Client that also scans: up to n records in key order from
// the key from, inclusive.
type Scanner interface {
	Scan(ctx context.Context, from string, n int) ([]Record, error)
}

// Record is a record a scan returned.
type Record struct {
	Key string
	Row Row
}

// RecordUpdater is a Client that also sets every field of an existing
// record in one operation.
type RecordUpdater interface {
	UpdateRecord(ctx context.Context, key string, row Row) error
}

// Result is what a run measured. Operations count in the window when they
// started in it.
type Result struct {
	Window  time.Duration // length of the measured window
	Ops     int64         // operations completed successfully in the window
	Reads   Latencies     // successful reads in the window
	Updates Latencies     // successful updates in the window
	Scans   Latencies     // successful scans in the window

	Errors       int64    // failed operations, window or not
	ErrorSamples []string // the first few errors
	ReadChecks   int64    // reads (and scanned records) of a client's own updated records, compared with the model
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
	if w.ScanLength <= 0 {
		w.ScanLength = 5
	}
	if w.ReadRatio < 0 || w.ScanRatio < 0 || w.ReadRatio+w.ScanRatio > 1 {
		return nil, fmt.Errorf("ycsb: read ratio %v and scan ratio %v; use fractions that add up to at most 1", w.ReadRatio, w.ScanRatio)
	}
	for _, c := range clients {
		if _, ok := c.(Scanner); w.ScanRatio > 0 && !ok {
			return nil, fmt.Errorf("ycsb: a %T cannot scan; the workload scans", c)
		}
		if _, ok := c.(RecordUpdater); w.UpdateAll && !ok {
			return nil, fmt.Errorf("ycsb: a %T cannot update whole records; the workload does", c)
		}
	}
	var phase atomic.Int32
	runs := make([]*clientRun, w.Clients)
	var wg sync.WaitGroup
	for i := range runs {
		runs[i] = &clientRun{w: w, id: i, c: clients[i], phase: &phase, model: NewModel(w.Spec.Fields),
			r: rand.New(rand.NewPCG(w.Seed, uint64(i)+1))}
	}
	watched := make(chan struct{})
	go w.watch(runs, watched)
	defer close(watched)
	for i := range runs {
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
	var reads, updates, scans [][]time.Duration
	for _, r := range runs {
		res.Ops += int64(len(r.reads) + len(r.updates) + len(r.scans))
		reads = append(reads, r.reads)
		updates = append(updates, r.updates)
		scans = append(scans, r.scans)
		res.Errors += r.errors
		res.ReadChecks += r.checks
		res.StaleReads += r.stale
		res.ErrorSamples = appendSamples(res.ErrorSamples, r.errorSamples)
		res.StaleSamples = appendSamples(res.StaleSamples, r.staleSamples)
		res.Model.Merge(r.model)
	}
	res.Reads, res.Updates, res.Scans = merge(reads), merge(updates), merge(scans)
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
	scans          []time.Duration
	errors         int64
	errorSamples   []string
	checks, stale  int64
	staleSamples   []string

	// The operations' context: one per client, cancelled by the run's
	// watchdog once an operation has run for OpTimeout (opCtx).
	mu      sync.Mutex // guards ocancel against the watchdog
	octx    context.Context
	ocancel context.CancelCauseFunc
	opStart atomic.Int64 // Unix ns of the operation in flight; 0: none
}

// errOpTimeout is the cause of an operation's cancellation by the watchdog.
var errOpTimeout = errors.New("no answer within the operation timeout")

// opCtx returns the context of the client's next operation, and its start.
// A per-operation context.WithTimeout costs a timer per operation — more
// than a near-cache hit of the embedded mode — so the run has one watchdog
// instead (watch), which cancels an operation's context once it has run
// for OpTimeout; the next operation gets a fresh one.
func (cr *clientRun) opCtx(ctx context.Context) (context.Context, time.Time) {
	if cr.octx == nil || cr.octx.Err() != nil {
		octx, cancel := context.WithCancelCause(ctx)
		cr.mu.Lock()
		if cr.ocancel != nil {
			cr.ocancel(nil)
		}
		cr.octx, cr.ocancel = octx, cancel
		cr.mu.Unlock()
	}
	start := time.Now()
	cr.opStart.Store(start.UnixNano())
	return cr.octx, start
}

// opDone ends the operation opCtx began; an error of an operation the
// watchdog cancelled says so.
func (cr *clientRun) opDone(err error) error {
	cr.opStart.Store(0)
	if err != nil && errors.Is(context.Cause(cr.octx), errOpTimeout) {
		return fmt.Errorf("%w (%v): %v", errOpTimeout, cr.w.OpTimeout, err)
	}
	return err
}

// watch cancels, until done is closed, the operations of runs that have
// run for OpTimeout.
func (w *Workload) watch(runs []*clientRun, done <-chan struct{}) {
	t := time.NewTicker(max(w.OpTimeout/10, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case now := <-t.C:
			for _, cr := range runs {
				if s := cr.opStart.Load(); s != 0 && now.UnixNano()-s >= int64(w.OpTimeout) {
					cr.mu.Lock()
					if cr.ocancel != nil {
						cr.ocancel(errOpTimeout)
					}
					cr.mu.Unlock()
				}
			}
		}
	}
}

func (cr *clientRun) loop(ctx context.Context) {
	defer func() {
		cr.mu.Lock()
		if cr.ocancel != nil {
			cr.ocancel(nil)
		}
		cr.mu.Unlock()
	}()
	w := cr.w
	n := int64(w.Clients)
	for ctx.Err() == nil {
		ph := cr.phase.Load()
		if ph == phaseStop {
			return
		}
		rec := w.Chooser.Next(cr.r)
		switch x := cr.r.Float64(); {
		case x < w.ReadRatio:
			cr.read(ctx, rec, ph == phaseMeasure)
			continue
		case x < w.ReadRatio+w.ScanRatio:
			cr.scan(ctx, rec, ph == phaseMeasure)
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
	check := cr.own(rec)
	key := Key(rec)
	octx, start := cr.opCtx(ctx)
	row, err := cr.c.Read(octx, key, check)
	took := time.Since(start)
	err = cr.opDone(err)
	if err != nil {
		cr.fail(ctx, "read", key, err)
		return
	}
	if measured {
		cr.reads = append(cr.reads, took)
	}
	cr.done()
	if check {
		cr.check(rec, row, "read")
	}
}

// own reports whether rec is one of this client's records with an update
// the model knows: a read of it must return the last acknowledged values.
func (cr *clientRun) own(rec int64) bool {
	return rec%int64(cr.w.Clients) == int64(cr.id) && cr.model.Has(rec)
}

// check compares a read of one of the client's own records with the model.
func (cr *clientRun) check(rec int64, row Row, op string) {
	cr.checks++
	if f := cr.model.Check(rec, row); f >= 0 {
		cr.stale++
		if len(cr.staleSamples) < maxSamples {
			c := cr.model.recs[rec][f]
			cr.staleSamples = append(cr.staleSamples, fmt.Sprintf("%s.%s: %s %s, last acknowledged %s", Key(rec), FieldName(f), op, quote(row[f]), c.want()))
		}
	}
}

func (cr *clientRun) done() {
	if cr.w.OnOp != nil {
		cr.w.OnOp()
	}
}

// scan reads ScanLength records from rec on. Nothing inserts or deletes
// records, so the keys a scan must return are known: any other answer is
// an error.
func (cr *clientRun) scan(ctx context.Context, rec int64, measured bool) {
	n := cr.w.ScanLength
	key := Key(rec)
	octx, start := cr.opCtx(ctx)
	recs, err := cr.c.(Scanner).Scan(octx, key, n)
	took := time.Since(start)
	err = cr.opDone(err)
	if err != nil {
		cr.fail(ctx, "scan", key, err)
		return
	}
	want := min(int64(n), cr.w.Spec.Records-rec)
	if int64(len(recs)) != want {
		cr.fail(ctx, "scan", key, fmt.Errorf("returned %d records, want %d", len(recs), want))
		return
	}
	for i, r := range recs {
		if r.Key != Key(rec+int64(i)) {
			cr.fail(ctx, "scan", key, fmt.Errorf("record %d is %q, want %q", i, r.Key, Key(rec+int64(i))))
			return
		}
	}
	if measured {
		cr.scans = append(cr.scans, took)
	}
	cr.done()
	for i, r := range recs {
		if got := rec + int64(i); cr.own(got) {
			cr.check(got, r.Row, "scanned")
		}
	}
}

func (cr *clientRun) update(ctx context.Context, rec int64, measured bool) {
	if cr.w.UpdateAll {
		cr.updateAll(ctx, rec, measured)
		return
	}
	key := Key(rec)
	field := cr.r.IntN(cr.w.Spec.Fields)
	value := RandomValue(cr.r, cr.w.Spec.FieldSize)
	octx, start := cr.opCtx(ctx)
	err := cr.opDone(cr.c.Update(octx, key, field, value))
	took := time.Since(start)
	if err != nil {
		cr.model.Fail(rec, field, value)
		cr.fail(ctx, "update", key, err)
		return
	}
	cr.model.Ack(rec, field, value)
	if measured {
		cr.updates = append(cr.updates, took)
	}
	cr.done()
}

// updateAll sets every field of rec to a new value in one operation.
func (cr *clientRun) updateAll(ctx context.Context, rec int64, measured bool) {
	key := Key(rec)
	row := make(Row, cr.w.Spec.Fields)
	for f := range row {
		row[f] = RandomValue(cr.r, cr.w.Spec.FieldSize)
	}
	octx, start := cr.opCtx(ctx)
	err := cr.opDone(cr.c.(RecordUpdater).UpdateRecord(octx, key, row))
	took := time.Since(start)
	for f, v := range row {
		if err != nil {
			cr.model.Fail(rec, f, v)
		} else {
			cr.model.Ack(rec, f, v)
		}
	}
	if err != nil {
		cr.fail(ctx, "update", key, err)
		return
	}
	if measured {
		cr.updates = append(cr.updates, took)
	}
	cr.done()
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
