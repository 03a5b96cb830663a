package ycsbrun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/writeback/writeback/benchmarks/bench"
	"github.com/writeback/writeback/benchmarks/sidecar"
	"github.com/writeback/writeback/benchmarks/ycsb"
	"github.com/writeback/writeback/internal/config"
)

// env is one store's connections and settings, shared by its runs.
type env struct {
	o      *options
	store  string
	db     *ycsb.DB
	spec   ycsb.Spec
	chsr   map[string]ycsb.Chooser // by distribution
	stderr io.Writer
	logf   func(format string, args ...any) // a line to stderr
	log    *slog.Logger                     // the sidecars'
	traced map[string]int                   // --trace: the runs traced so far, by tag
}

// keyField is the key of the sidecar's collection.
func (e *env) keyField() string {
	if e.store == ycsb.MongoDB {
		return "_id"
	}
	return ycsb.KeyColumn
}

func (e *env) open(ctx context.Context, dsn string) (*ycsb.DB, error) {
	if e.store == ycsb.MongoDB {
		return ycsb.OpenMongo(ctx, dsn, e.o.mongoDatabase)
	}
	return ycsb.Open(ctx, e.store, dsn)
}

// runStore runs the comparison and the sweep on one store. On a failure it
// returns the report so far and the error; the table is then kept.
func runStore(ctx context.Context, o *options, store string, stderr io.Writer) (*report, error) {
	e := &env{o: o, store: store, spec: o.spec(), stderr: stderr, logf: bench.Logf(stderr), log: sidecarLog(stderr)}
	var err error
	e.chsr = map[string]ycsb.Chooser{}
	for _, d := range o.distributions {
		if e.chsr[d], err = ycsb.NewChooser(d, o.records); err != nil {
			return nil, err
		}
	}
	if e.db, err = e.open(ctx, o.dsn(store)); err != nil {
		return nil, err
	}
	defer e.db.Close()
	if err := bench.PingRedis(ctx, o.redis); err != nil {
		return nil, err
	}
	rep := newReport(o, store)
	e.logf("ycsb: %s, %d records × %d fields × %d B, %v threads, %v keys, %v cache, store latency %v each way, updates of %s, write-back-resp over %s; per run %v warm-up (cold runs: none) + %v measured; %d CPUs",
		store, o.records, o.fields, o.fieldSize, o.threads, o.distributions, o.caches, o.latencies, map[bool]string{true: "every field", false: "one field"}[o.updateAll],
		map[bool]string{true: "a Unix socket", false: "loopback TCP"}[o.respSocket], o.warmup, o.duration, runtime.NumCPU())
	fail := func(err error) (*report, error) {
		e.logf("ycsb: kept %s for inspection", o.table)
		rep.sortRuns()
		return rep, err
	}
	// series runs workloads one after another on one fresh table and one
	// sidecar (or set of direct clients): each workload with each
	// distribution, each in each cache state.
	series := func(p string, workers int, c conn, names, dists, caches []string, duration time.Duration, into *[]*Run) error {
		var todo []workload
		for _, wn := range names {
			w := workloadByName(wn)
			if why := skipReason(store, p, w); why != "" {
				for _, d := range dists {
					for _, cs := range runCaches(p, caches) {
						v := Variant{Distribution: d, Cache: cs, StoreLatencyMs: c.latency.Milliseconds(), Threads: c.threads}
						*into = append(*into, &Run{Store: store, Policy: p, Workload: w.name, Variant: v, Skipped: why})
					}
				}
				e.logf("[ycsb-%s %s %s] not applicable: %s", w.name, p, store, why)
				continue
			}
			todo = append(todo, w)
		}
		if len(todo) == 0 {
			return nil
		}
		s, err := e.setup(ctx, p, workers, c)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		defer s.close()
		for _, w := range todo {
			for _, d := range dists {
				for _, cs := range runCaches(p, caches) {
					v := Variant{Distribution: d, Cache: cs, StoreLatencyMs: c.latency.Milliseconds(), Threads: c.threads}
					r, err := s.run(ctx, w, v, duration)
					if r != nil {
						*into = append(*into, r)
					}
					if err != nil {
						return fmt.Errorf("workload %s, %s: %w", w.name, s.tag(w, v), err)
					}
					if !r.ok() {
						return fmt.Errorf("workload %s, %s: verification failed: %s", w.name, s.tag(w, v), r.problem())
					}
				}
			}
		}
		return nil
	}
	for i, lat := range o.latencies {
		c := conn{latency: lat, dsn: o.dsn(store)}
		if lat > 0 {
			addr, err := bench.StoreAddr(store, c.dsn)
			if err != nil {
				return fail(fmt.Errorf("--store-latency: %w", err))
			}
			proxy, err := bench.StartLatencyProxy(addr, lat)
			if err != nil {
				return fail(err)
			}
			defer proxy.Close()
			if c.dsn, err = bench.WithStoreAddr(store, c.dsn, proxy.Addr); err != nil {
				return fail(err)
			}
			e.logf("ycsb: %s behind a latency proxy at %s adding %v each way (toxiproxy)", store, proxy.Addr, lat)
		}
		for j, threads := range o.threads {
			c.threads = threads
			for round := 1; o.compare && round <= o.rounds; round++ {
				for _, p := range o.policies {
					n := len(rep.Runs)
					err := series(p, 0, c, o.workloads, o.distributions, o.caches, o.duration, &rep.Runs)
					if o.rounds > 1 {
						for _, r := range rep.Runs[n:] {
							r.Round = round
						}
					}
					if err != nil {
						return fail(err)
					}
				}
			}
			// The sweep: warm, with the first distribution, latency and
			// number of threads.
			if i > 0 || j > 0 {
				continue
			}
			for _, n := range o.sweepWorkers {
				if err := series(bench.WriteBack, n, c, o.sweepWorkloads, o.distributions[:1], []string{cacheWarm}, o.sweepDuration, &rep.Sweep); err != nil {
					return fail(fmt.Errorf("sweep: %w", err))
				}
			}
		}
	}
	rep.sortRuns()
	cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.db.Drop(cctx, o.table); err != nil {
		e.logf("ycsb: dropping %s: %v", o.table, err)
	}
	if err := sidecar.ForgetApplied(cctx, e.db, o.table); err != nil {
		e.logf("ycsb: deleting the applied records of %s: %v", o.table, err)
	}
	return rep, nil
}

// conn is how a series reaches the store, and with how many clients.
type conn struct {
	latency time.Duration // added each way by the proxy
	dsn     string        // the store's, through the proxy if latency > 0
	threads int
}

// runCaches are the cache states policy p runs in: the database alone has
// no cache and runs once.
func runCaches(p string, caches []string) []string {
	if _, ok := bench.Sidecar(p); !ok {
		return []string{cacheNone}
	}
	return caches
}

// setup is a freshly loaded table and the clients of one policy: direct
// database clients, or the clients of a fresh sidecar (with workers
// appliers when workers > 0).
type setup struct {
	e       *env
	policy  string
	workers int  // the sidecar's appliers; 0 for the database alone
	sweep   bool // a run of the applier sweep
	conn    conn
	loadS   float64
	warmed  bool // every record has been read through the clients
	clients []ycsb.Client
	sc      *sidecar.Sidecar
	closers []func()
}

func (s *setup) tag(w workload, v Variant) string {
	if s.sweep {
		return fmt.Sprintf("ycsb-%s %s %s %s, %s", w.name, s.policy, s.e.store, v.label(), plural(s.workers, "applier"))
	}
	return fmt.Sprintf("ycsb-%s %s %s %s", w.name, s.policy, s.e.store, v.label())
}

func (s *setup) close() {
	for _, c := range s.clients {
		if c != nil {
			c.Close()
		}
	}
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
}

func (e *env) setup(ctx context.Context, p string, workers int, c conn) (_ *setup, err error) {
	o := e.o
	s := &setup{e: e, policy: p, sweep: workers > 0, conn: c, clients: make([]ycsb.Client, c.threads)}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	start := time.Now()
	if err := e.db.Load(ctx, e.spec, o.seed, nil); err != nil {
		return nil, err
	}
	s.loadS = time.Since(start).Seconds()
	if err := sidecar.ForgetApplied(ctx, e.db, e.spec.Table); err != nil {
		return nil, err
	}
	collPolicy, viaSidecar := bench.Sidecar(p)
	switch {
	case viaSidecar:
		so := sidecar.Options{
			Policy: collPolicy, Driver: e.store, DSN: c.dsn, Database: o.mongoDatabase,
			RedisAddr: o.redis, Collection: e.spec.Table, Key: e.keyField(), PrefixBase: "ycsb", Log: e.log,
		}
		if p == bench.WriteBackRESP {
			so.ListenResp = "127.0.0.1:0"
			if o.respSocket {
				dir, err := os.MkdirTemp("", "ycsb-resp")
				if err != nil {
					return nil, err
				}
				s.closers = append(s.closers, func() { os.RemoveAll(dir) })
				so.ListenResp = "unix:" + filepath.Join(dir, "resp.sock")
			}
		}
		so.Embedded = p == bench.WriteBackEmbedded
		so.Configure = o.configure(workers, o.batch(e.store))
		s.workers = sidecarWorkers(workers)
		sc, err := sidecar.Start(ctx, so)
		if err != nil {
			return nil, err
		}
		s.sc = sc
		s.closers = append(s.closers, func() {
			if err := sc.Close(); err != nil {
				e.logf("[%s %s] stopping the sidecar: %v", p, e.store, err)
			}
		})
		for i := range s.clients {
			if p == bench.WriteBackRESP {
				if s.clients[i], err = sc.NewRespClient(o.fields); err != nil {
					return nil, err
				}
			} else {
				s.clients[i] = sc.NewClient(o.fields)
			}
		}
	case p == bench.DatabaseAsync:
		db := e.db
		if e.store == ycsb.MySQL {
			restore, err := bench.MySQLAsync(ctx, o.dsn(e.store))
			if err != nil {
				return nil, err
			}
			s.closers = append(s.closers, func() {
				rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := restore(rctx); err != nil {
					e.logf("[%s %s] restoring innodb_flush_log_at_trx_commit: %v", p, e.store, err)
				}
			})
		} else {
			dsn, err := bench.AsyncDSN(e.store, c.dsn)
			if err != nil {
				return nil, err
			}
			if db, err = e.open(ctx, dsn); err != nil {
				return nil, err
			}
			s.closers = append(s.closers, func() { db.Close() })
		}
		if err := e.directClients(ctx, db, s.clients); err != nil {
			return nil, err
		}
	default:
		db := e.db
		if c.latency > 0 {
			if db, err = e.open(ctx, c.dsn); err != nil {
				return nil, err
			}
			s.closers = append(s.closers, func() { db.Close() })
		}
		if err := e.directClients(ctx, db, s.clients); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// run prepares the cache as v says, runs workload w for a warm-up and
// duration, then drains the sidecar and verifies the table. The buffer is
// empty when it starts: the previous run flushed it.
//
// Warm (and the database alone): every record is read once through the
// clients first, unless the cache is still warm from the previous run of
// the series (entries live an hour and writes update them; write-around's
// writes delete entries, so it is always warmed again). Cold: the
// collection's cache entries are dropped from Redis and the run has no
// warm-up, so its measured window starts on an empty cache; the database's
// buffer pool stays warm from the load and the runs before.
func (s *setup) run(ctx context.Context, w workload, v Variant, duration time.Duration) (*Run, error) {
	e, o, sc := s.e, s.e.o, s.sc
	tag := s.tag(w, v)
	warmup := o.warmup
	if v.Cache == cacheCold {
		warmup = 0
	}
	r := &Run{Store: e.store, Policy: s.policy, Workload: w.name, Workers: s.workers, Variant: v, WarmupS: warmup.Seconds(), LoadS: s.loadS, Sidecar: sc != nil}
	s.loadS = 0 // the next workload of the series reuses the table

	switch {
	case v.Cache == cacheCold:
		if _, err := sc.DropCache(ctx); err != nil {
			return nil, err
		}
		s.warmed = false
	case !s.warmed || s.policy == bench.WriteAround:
		t := time.Now()
		if err := ycsb.Warm(ctx, s.clients, e.spec.Records); err != nil {
			return nil, err
		}
		r.WarmS = time.Since(t).Seconds()
		s.warmed = true
	}
	if sc != nil {
		n, err := sc.CacheEntries(ctx)
		if err != nil {
			return nil, err
		}
		r.CacheEntriesAtStart = n
	}

	prog := &bench.Progress{Label: tag, Out: e.stderr}
	wl := &ycsb.Workload{
		Spec: e.spec, Clients: len(s.clients), ReadRatio: w.read, ScanRatio: w.scan, ScanLength: o.scanLength,
		UpdateAll: o.updateAll, Chooser: e.chsr[v.Distribution], Warmup: warmup, Duration: duration, Seed: o.seed + 1,
		OnOp: func() { prog.Add(1) },
	}
	var sampler *bench.Sampler
	var hits0, misses0, hits1, misses1, applied0 float64
	var near0, nearMiss0, near1, nearMiss1 float64
	var batches0, batches1 uint64
	var docs0, docs1, secs0, secs1 float64
	var buffered0, buffered1 float64
	var scripts0, scripts1 time.Duration
	var scriptsErr error
	metric := func(name string) float64 { v, _, _ := sc.Metric(name); return v }
	if sc != nil {
		applied0 = metric("writeback_applied_changes_total")
		prog.Extra = func() string {
			return fmt.Sprintf("pending %.0f  pinned %s", metric("writeback_pending_changes"), kib(metric("writeback_pinned_bytes")))
		}
		// The gauge is refreshed every 250 ms from Redis's exact counters.
		sampler = &bench.Sampler{Every: 250 * time.Millisecond, Read: func() (float64, error) {
			v, _, err := sc.Metric("writeback_pinned_bytes")
			return v, err
		}}
		wl.OnMeasure = func() {
			hits0, misses0 = metric("writeback_cache_hits_total"), metric("writeback_cache_misses_total")
			near0, nearMiss0 = metric("writeback_nearcache_hits_total"), metric("writeback_nearcache_misses_total")
			docs0, batches0, _ = sc.Metric("writeback_apply_batch_size")
			secs0 = metric("writeback_apply_duration_seconds")
			buffered0 = metric("writeback_buffered_changes_total")
			scripts0, scriptsErr = bench.ScriptTime(ctx, sc.Redis())
		}
		wl.OnMeasureEnd = func() {
			hits1, misses1 = metric("writeback_cache_hits_total"), metric("writeback_cache_misses_total")
			near1, nearMiss1 = metric("writeback_nearcache_hits_total"), metric("writeback_nearcache_misses_total")
			docs1, batches1, _ = sc.Metric("writeback_apply_batch_size")
			secs1 = metric("writeback_apply_duration_seconds")
			buffered1 = metric("writeback_buffered_changes_total")
			var err error
			if scripts1, err = bench.ScriptTime(ctx, sc.Redis()); scriptsErr == nil {
				scriptsErr = err
			}
		}
		sampler.Start()
	}
	// The processes' CPU time over the measured window (Run.CPUPerOp),
	// and its execution trace (--trace).
	var cpu0, cpu bench.CPU
	stopTrace := func() {}
	onMeasure, onMeasureEnd := wl.OnMeasure, wl.OnMeasureEnd
	wl.OnMeasure = func() {
		if onMeasure != nil {
			onMeasure()
		}
		if o.trace != "" {
			if e.traced == nil {
				e.traced = map[string]int{}
			}
			e.traced[tag]++
			path := tracePath(o.trace, tag, e.traced[tag])
			stop, err := bench.StartTrace(path)
			if err != nil {
				e.logf("[%s] trace: %v", tag, err)
			} else {
				stopTrace = func() {
					stop()
					e.logf("[%s] wrote the measured window's execution trace to %s", tag, path)
				}
			}
		}
		cpu0 = bench.TakeCPU()
	}
	wl.OnMeasureEnd = func() {
		cpu = bench.TakeCPU().Sub(cpu0)
		stopTrace()
		if onMeasureEnd != nil {
			onMeasureEnd()
		}
	}
	e.logf("[%s] loaded in %.1fs, warmed in %.1fs (0: still warm, or cold); %d cache entries; running %v warm-up + %v measured", tag, r.LoadS, r.WarmS, r.CacheEntriesAtStart, warmup, duration)
	prog.Start()
	res, err := wl.Run(ctx, s.clients)
	prog.Stop()
	if sc != nil {
		// The buffer as the run left it: exact counters, before the flush.
		st, serr := sc.Client.Status(ctx)
		applied, _, merr := sc.Metric("writeback_applied_changes_total")
		r.PinnedOverTime = sampler.Stop()
		if err == nil {
			err = errors.Join(serr, merr)
		}
		r.PendingChanges, r.PendingDocuments, r.PinnedBytes = st.Pending, st.PendingDocuments, st.PinnedBytes
		r.AppliedChanges = applied - applied0
		if total := r.AppliedChanges + float64(st.Pending); total > 0 {
			r.AppliedPercent = 100 * r.AppliedChanges / total
		}
		if n := (hits1 - hits0) + (misses1 - misses0); n > 0 {
			r.CacheHitPercent = 100 * (hits1 - hits0) / n
		}
		if n := (near1 - near0) + (nearMiss1 - nearMiss0); n > 0 {
			r.NearHitPercent = 100 * (near1 - near0) / n
		}
		if r.ApplierBatches = batches1 - batches0; r.ApplierBatches > 0 {
			r.ApplierBatchDocs = (docs1 - docs0) / float64(r.ApplierBatches)
			r.ApplierBatchMeanS = (secs1 - secs0) / float64(r.ApplierBatches)
		}
	}
	if err != nil {
		return nil, err
	}
	r.fill(res)
	r.setCPU(cpu)
	if r.BufferedChanges = buffered1 - buffered0; r.BufferedChanges > 0 {
		if scriptsErr == nil {
			r.RedisScriptUsPerWr = float64((scripts1 - scripts0).Microseconds()) / r.BufferedChanges
		} else {
			e.logf("[%s] reading Redis's commandstats: %v", tag, scriptsErr)
		}
		r.RedisCPUUsPerWr = float64(cpu["redis-server"].Microseconds()) / r.BufferedChanges
	}

	if sc != nil {
		fctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		t := time.Now()
		fr, err := sc.Flush(fctx)
		cancel()
		if err != nil {
			return r, err
		}
		r.FlushS, r.FlushApplied = time.Since(t).Seconds(), fr.Applied
	}
	if o.beforeVerify != nil {
		if err := o.beforeVerify(ctx, e.db, e.spec, res.Model.Keys()); err != nil {
			return r, err
		}
	}
	vr, err := res.Model.Verify(ctx, e.db, e.spec, 5)
	if err != nil {
		return r, fmt.Errorf("verifying: %w", err)
	}
	r.Verified, r.Mismatched = vr.Checked, vr.Bad
	for _, m := range vr.First {
		r.Mismatches = append(r.Mismatches, m.String())
	}
	if vr.Checked != res.Model.Len() {
		r.Mismatched++
		r.Mismatches = append(r.Mismatches, fmt.Sprintf("verified %d fields of the %d updated", vr.Checked, res.Model.Len()))
	}
	line := fmt.Sprintf("[%s] %.0f ops/s; verify: %d updated fields match the database, %d reads of own records fresh", tag, r.Throughput, r.Verified-r.Mismatched, r.ReadChecks-r.StaleReads)
	if r.Sidecar {
		line += fmt.Sprintf("; at the end %d pending, %s pinned, %.1f%% applied; flush %.2fs", r.PendingChanges, kib(float64(r.PinnedBytes)), r.AppliedPercent, r.FlushS)
		if r.BufferedChanges > 0 {
			line += fmt.Sprintf("; Redis per buffered write %.1f µs in scripts, %.1f µs of CPU", r.RedisScriptUsPerWr, r.RedisCPUUsPerWr)
		}
	}
	if !r.ok() {
		line += "; FAILED: " + r.problem()
	}
	e.logf("%s", line)
	return r, nil
}

// plural is "1 applier", "4 appliers".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// sidecarWorkers is the number of appliers of a sidecar started with
// workers (0: the configuration's default).
func sidecarWorkers(workers int) int {
	if workers > 0 {
		return workers
	}
	return config.Default().Writeback.Workers
}

// sidecarBatch is the writeback.batchSize of a sidecar started with batch
// (0: the configuration's default).
func sidecarBatch(batch int) int {
	if batch > 0 {
		return batch
	}
	return config.Default().Writeback.BatchSize
}

func (e *env) directClients(ctx context.Context, db *ycsb.DB, clients []ycsb.Client) error {
	for i := range clients {
		c, err := db.NewClient(ctx, e.spec)
		if err != nil {
			return err
		}
		clients[i] = c
	}
	return nil
}

// kib formats bytes as KiB with one decimal, or MiB above 10 MiB.
func kib(b float64) string {
	if b >= 10<<20 {
		return fmt.Sprintf("%.1fMiB", b/(1<<20))
	}
	return fmt.Sprintf("%.1fKiB", b/1024)
}

// tracePath is --trace's path named after the run (bench.NamedPath): its
// tag, spaces and punctuation turned into dashes, and "-<n>" for the nth
// run with that tag (the rounds after the first, as TPC-C names them).
func tracePath(path, tag string, n int) string {
	name := strings.Join(strings.FieldsFunc(tag, func(r rune) bool {
		return !(r == '-' || r == '+' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	}), "-")
	if n > 1 {
		name += fmt.Sprintf("-%d", n)
	}
	return bench.NamedPath(path, name)
}

// configure returns the sidecar settings of a run with workers appliers
// (0: the default) and batch documents per store transaction (0: the
// default): the options' round trips, near cache and held appliers.
func (o *options) configure(workers, batch int) func(*config.Config) {
	return func(c *config.Config) {
		if workers > 0 {
			c.Writeback.Workers = workers
		}
		if batch > 0 {
			c.Writeback.BatchSize = batch
		}
		c.Writeback.ApplyDelay = config.Duration{Duration: o.delay()}
		if o.pollInterval > 0 {
			c.Writeback.PollInterval = config.Duration{Duration: o.pollInterval}
		}
		if o.holdAppliers {
			// No poll within a run, and no round without one: only
			// the flush applies (it ignores the schedule).
			c.Writeback.PollInterval = config.Duration{Duration: heldPoll}
			c.Writeback.OwnerLease = config.Duration{Duration: 3 * heldPoll}
		}
		c.Redis.ShareRoundTrips = o.share
		c.Writeback.NearCache = config.NearCacheOff
		if o.nearCache {
			c.Writeback.NearCache = config.NearCacheOn
			for name, coll := range c.Collections {
				if o.nearLease > 0 {
					coll.NearCache.LeaseTTL = config.Duration{Duration: o.nearLease}
				}
				if o.nearHot >= 0 {
					coll.NearCache.HotWindow = config.Duration{Duration: o.nearHot}
				}
				c.Collections[name] = coll
			}
		}
	}
}
