package server

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/writeback/writeback/internal/bgt"
	"github.com/writeback/writeback/internal/buffer"
	"github.com/writeback/writeback/internal/config"
	"github.com/writeback/writeback/internal/document"
	"github.com/writeback/writeback/internal/metrics"
	"github.com/writeback/writeback/internal/pipeshare"
	"github.com/writeback/writeback/internal/rscript"
	"github.com/writeback/writeback/internal/store"
)

// Core is what every member of the near cache's coherence protocol
// assembles, a sidecar and an application embedding writeback
// (pkg/writeback) alike: the Redis client and its rollback guard, the
// stores, the buffer, the appliers (run or not), the document service with
// its near caches subscribed to the member's channel, and the watch loop
// (gauges, rollback checks, the write-through fallback).
type Core struct {
	cfg      *config.Config
	log      *slog.Logger
	rdb      redis.UniversalClient
	guard    *guard // checks every new Redis server for a rollback
	inSync   *rscript.InSync
	mem      memoryState
	stores   map[string]store.Store
	buf      *buffer.Buffer
	app      *bgt.Applier
	svc      *document.Service
	m        *metrics.Metrics
	warnMu   sync.Mutex // guards warnings: the watch loop adds to them
	warnings []string
	// pinned is the pinned memory outside the buffer (the session
	// queues') that counts toward writeback.pinnedMemoryLimit.
	pinned func() int64
}

// NewCore connects to Redis and the stores, checks them (Redis's eviction
// policy, every collection's table), prepares the appliers (without
// running them: Start) and starts the near caches as member
// writeback.instanceID. cfg must be valid (config.Validate). Errors are one
// sentence saying what to fix; Close releases what it holds.
func NewCore(ctx context.Context, cfg *config.Config, reg prometheus.Registerer, log *slog.Logger) (_ *Core, err error) {
	s := &Core{cfg: cfg, log: log, stores: map[string]store.Store{}, pinned: func() int64 { return 0 }}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	s.guard = newGuard()
	s.inSync = rscript.NewInSync()
	if s.rdb, err = newRedis(cfg.Redis, s.guard.onConnect); err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := s.rdb.Ping(pctx).Err(); err != nil {
		return nil, redisRefused(pctx, cfg.Redis, err)
	}
	warn, err := buffer.CheckEvictionPolicy(pctx, s.rdb)
	if err != nil {
		return nil, err
	}
	if warn != "" {
		s.warn(warn)
	}
	if cfg.Redis.Replicas == 0 {
		if p, err := s.rdb.ConfigGet(pctx, "appendonly").Result(); err == nil && p["appendonly"] == "no" {
			if sv, err := s.rdb.ConfigGet(pctx, "save").Result(); err == nil && sv["save"] == "" {
				s.warn("Redis has no persistence (appendonly no, save \"\") and redis.replicas is 0: a Redis restart loses acknowledged writes; enable AOF or replicas")
			}
		}
	}

	names := make([]string, 0, len(cfg.Stores))
	for name := range cfg.Stores {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		sc := cfg.Stores[name]
		if !storeUsed(cfg, name) {
			continue
		}
		st, err := store.OpenWith(ctx, sc.Driver, dsnOf(sc), store.Options{MaxConns: sc.MaxConns, Database: sc.Database})
		if err != nil {
			return nil, fmt.Errorf("store %s: %v", name, err)
		}
		s.stores[name] = st
	}

	s.m = metrics.New(reg)
	s.m.SetBuildInfo(Version, Commit)
	if rc, ok := s.rdb.(*redis.Client); ok && cfg.Redis.ShareRoundTrips {
		pipeshare.Share(rc, s.m.SharedCalls, s.m.SharedRounds)
	}
	colls := map[string]*document.Collection{}
	applied := map[string]*bgt.Collection{}
	for name, cc := range cfg.Collections {
		st := s.stores[cc.Store]
		t, err := st.Describe(ctx, cc.Table, cc.Key)
		if err != nil {
			return nil, fmt.Errorf("collections.%s: %v", name, err)
		}
		colls[name] = &document.Collection{Name: name, Policy: document.Policy(cc.Policy), TTL: cc.CacheTTL.Duration, StoreName: cc.Store, Store: st, Table: t}
		if nc := cc.NearCache; cfg.Writeback.NearCacheOn() && nc.MaxBytes > 0 {
			colls[name].Near = &document.NearCache{MaxBytes: int64(nc.MaxBytes), LeaseTTL: nc.LeaseTTL.Duration, HotWindow: nc.HotWindow.Duration}
			// Only with the near cache: a hit then reads the listed
			// documents from it, with no round trip after the tokens'.
			// Without it a hit costs a second round trip in place of the
			// store's query, and the near cache off keeps the scans as
			// they were.
			colls[name].ScanCache = cc.ScanCache
		}
		applied[name] = &bgt.Collection{Name: name, StoreName: cc.Store, Store: st, Table: t}
		s.m.InitCollection(name)
	}

	wb := cfg.Writeback
	s.buf = buffer.New(s.rdb, cfg.Redis.KeyPrefix, wb.Partitions, wb.LeaseLifetime.Duration)
	s.inSync.OnRefuse = s.m.ReplicaShortfalls.Inc
	s.buf.Replicas, s.buf.ReplicaTimeout, s.buf.InSync = cfg.Redis.Replicas, replicaTimeout, s.inSync
	s.buf.MaxDeadLetters, s.buf.Combine = wb.MaxDeadLetters, wb.CombineWrites
	s.app = bgt.New(bgt.Config{
		InstanceID:   wb.InstanceID,
		Workers:      wb.Workers,
		BatchSize:    wb.BatchSize,
		OwnerLease:   wb.OwnerLease.Duration,
		PollInterval: wb.PollInterval.Duration,
		ApplyDelay:   wb.ApplyDelay.Duration,
		MaxRetries:   wb.MaxRetries,
		RetryBackoff: wb.RetryBackoff.Duration,
		RecordsOnly:  !wb.ApplyCuts,
	}, s.buf, applied, s.m, log)
	s.buf.Reseed = s.app.Prepare
	// From here on every Redis server the sidecar connects to is checked
	// for a rollback before its first command; Prepare checks the ones it
	// is connected to already.
	s.guard.start(s.app, s.checkNewServer)
	if err := s.app.Prepare(ctx); err != nil {
		return nil, err
	}
	s.checkMemory(ctx)
	s.svc = document.New(s.buf, s.app, colls, s.m)
	// Subscribed before the front doors open: no lease is taken before
	// this sidecar can hear its revocations.
	if err := s.svc.StartNear(ctx, wb.InstanceID); err != nil {
		return nil, err
	}
	return s, nil
}

// Service is the member's document service.
func (s *Core) Service() *document.Service { return s.svc }

// Applier is the member's appliers (running only if Start was told to).
func (s *Core) Applier() *bgt.Applier { return s.app }

// Buffer is the member's Redis buffer.
func (s *Core) Buffer() *buffer.Buffer { return s.buf }

// InstanceID is the member's name in the protocol (its holder name and
// channel).
func (s *Core) InstanceID() string { return s.cfg.Writeback.InstanceID }

// Start runs, until ctx is done, the watch loop and, with appliers, the
// appliers; wg counts the goroutines.
func (s *Core) Start(ctx context.Context, wg *sync.WaitGroup, appliers bool) {
	if appliers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = s.app.Run(ctx)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.watch(ctx)
	}()
}

// Close gives the near caches' leases back and closes the stores and the
// Redis client. Call it after the goroutines of Start have returned.
func (s *Core) Close() { s.close() }

func (s *Core) close() {
	if s.svc != nil {
		s.svc.StopNear()
	}
	for _, st := range s.stores {
		_ = st.Close()
	}
	if s.rdb != nil {
		_ = s.rdb.Close()
	}
}

func (s *Core) warn(msg string) {
	s.warnMu.Lock()
	s.warnings = append(s.warnings, msg)
	s.warnMu.Unlock()
	s.log.Warn(msg)
}

func (s *Core) currentWarnings() []string {
	s.warnMu.Lock()
	defer s.warnMu.Unlock()
	return slices.Clone(s.warnings)
}

// watch refreshes the gauges that reflect Redis state, and switches
// write-back collections and queue families to write-through while pinned
// memory (buffered writes and pending sessions) is above
// writeback.pinnedMemoryLimit (back once it drains below 80 % of it).
func (s *Core) watch(ctx context.Context) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	limit := int64(s.cfg.Writeback.PinnedMemoryLimit)
	// A Redis that rolls back without dropping connections (DEBUG RELOAD,
	// a replica resync) is caught by the periodic check.
	nextCheck := time.Now().Add(rollbackCheckEvery)
	for {
		if time.Now().After(nextCheck) {
			nextCheck = time.Now().Add(rollbackCheckEvery)
			if err := s.app.Prepare(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("periodic Redis rollback check failed", "err", err)
			}
			s.checkMemory(ctx)
		}
		if s.cfg.Redis.Replicas > 0 {
			// A failed read leaves the last count: WAIT still guards.
			if n, err := s.inSync.Refresh(ctx, s.rdb); err == nil {
				s.m.ReplicasInSync.Set(float64(n))
			}

		}
		st, err := s.buf.Stats(ctx)
		switch {
		case err == nil:
			s.m.RedisUp.Set(1)
		case ctx.Err() == nil:
			s.m.RedisUp.Set(0)
		}
		if err == nil {
			s.m.PendingChanges.Set(float64(st.PendingChanges))
			s.m.PendingDocuments.Set(float64(st.PendingDocuments))
			s.m.PinnedBytes.Set(float64(st.PinnedBytes))
			s.m.OldestPendingAge.Set(st.OldestPending.Seconds())
			s.m.DeadLetters.Set(float64(st.DeadLetters))
			s.m.DeadLettersDropped.Set(float64(st.DeadLettersDropped))
			s.fallback(st.PinnedBytes+s.pinned(), limit)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
