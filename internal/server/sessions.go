package server

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/writeback/writeback/internal/api"
	"github.com/writeback/writeback/internal/bgt"
	"github.com/writeback/writeback/internal/metrics"
	"github.com/writeback/writeback/internal/session"
	"github.com/writeback/writeback/internal/store"
	"github.com/writeback/writeback/mappings"
	_ "github.com/writeback/writeback/mappings/standard" // the built-in mapping plugins
)

// Sessions is the Design 2 part of a member, a sidecar and an application
// embedding writeback (pkg/writeback) alike: the session service, its
// queues and their applier (run or not), and the mappings.
type Sessions struct {
	svc  *session.Service
	q    *session.Queues
	app  *bgt.QueueApplier
	maps *mappings.Set
	m    *metrics.Sessions
	// pinned is the session queues' pinned bytes at the last refresh,
	// which counts toward writeback.pinnedMemoryLimit.
	pinned atomic.Int64
}

// NewSessions builds the Design 2 part of core's member from the queues
// and mappings of its configuration (both may be empty: the sessions then
// serve nothing), and counts the queues' pinned bytes toward core's
// pinned memory limit. Call it before core.Start; Close runs the mappings'
// Cleanup.
func NewSessions(ctx context.Context, core *Core, reg prometheus.Registerer) (*Sessions, error) {
	cfg := core.cfg
	fams := map[string]*session.Family{}
	families := map[string]string{}
	for name, qc := range cfg.Queues {
		ss, ok := store.Sessions(core.stores[qc.Store])
		if !ok {
			return nil, fmt.Errorf("queues.%s.store: store %s cannot apply sessions; use a postgres or mysql store", name, qc.Store)
		}
		if qc.Role != "" {
			if err := ss.CheckRole(ctx, qc.Role); err != nil {
				return nil, fmt.Errorf("queues.%s.role: %w", name, err)
			}
		}
		fams[name] = &session.Family{Name: name, StoreName: qc.Store, Store: ss, Tables: qc.Tables, Role: qc.Role, WriteThrough: qc.WriteThrough(), Serial: qc.Serial}
		families[name] = qc.Store
	}
	mstores := map[string]mappings.Store{}
	for name, st := range core.stores {
		if ss, ok := store.Sessions(st); ok {
			mstores[name] = ss
		}
	}
	maps, err := mappings.Default.Load(mappings.Context{Context: ctx, Stores: mstores, Queues: families, Logger: core.log}, cfg.Mappings)
	if err != nil {
		return nil, err
	}
	wb := cfg.Writeback
	sm := metrics.NewSessions(reg)
	svc := session.New(core.rdb, session.Config{
		Prefix:         cfg.Redis.KeyPrefix,
		Partitions:     wb.Partitions,
		LeaseLifetime:  wb.LeaseLifetime.Duration,
		LeaseWait:      wb.LeaseWait.Duration,
		SessionTimeout: wb.SessionTimeout.Duration,
		Replicas:       cfg.Redis.Replicas,
		ReplicaTimeout: replicaTimeout,
		InSync:         core.inSync,
		FixedBytes:     int64(wb.ImmutableCache),
	}, fams, maps, sm, core.m, core.log)
	q := session.NewQueues(core.rdb, svc.Keys())
	app := bgt.NewQueueApplier(bgt.QueueConfig{
		InstanceID:   wb.InstanceID,
		Workers:      wb.Workers,
		BatchSize:    wb.BatchSize,
		OwnerLease:   wb.OwnerLease.Duration,
		PollInterval: wb.PollInterval.Duration,
		MaxRetries:   wb.MaxRetries,
		RetryBackoff: wb.RetryBackoff.Duration,
		CompactEvery: wb.SessionCompaction.Duration,
	}, q, core.buf, fams, sm, core.log)
	if err := app.Prepare(ctx); err != nil {
		_ = maps.Cleanup()
		return nil, err
	}
	svc.Applier = app
	svc.Fallback = core.svc.Fallback
	ss := &Sessions{svc: svc, q: q, app: app, maps: maps, m: sm}
	core.pinned = ss.pinned.Load
	return ss, nil
}

// Service is the member's session service.
func (ss *Sessions) Service() *session.Service { return ss.svc }

// register adds the session endpoints to the API.
func (ss *Sessions) register(h *api.Handler) {
	h.RegisterSessions(api.Sessions{Service: ss.svc, Queues: ss.q, Applier: ss.app})
}

// Run keeps the session gauges (and the pinned bytes that count toward the
// pinned memory limit) fresh until ctx is done and, with appliers and at
// least one family configured, applies the queues; wg counts the
// goroutines.
func (ss *Sessions) Run(ctx context.Context, wg *sync.WaitGroup, appliers bool) {
	if appliers && len(ss.svc.Families()) > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = ss.app.Run(ctx)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			if st, err := ss.q.Stats(ctx); err == nil {
				ss.m.PendingSessions.Set(float64(st.PendingSessions))
				ss.m.PinnedBytes.Set(float64(st.PinnedBytes))
				ss.pinned.Store(st.PinnedBytes)
				ss.m.OldestPendingAge.Set(st.OldestPending.Seconds())
				ss.m.StoppedQueues.Set(float64(st.StoppedQueues))
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// Close runs the mappings' Cleanup. Call it after the goroutines of Run
// have returned, before the Core's Close.
func (ss *Sessions) Close() {
	if ss != nil {
		_ = ss.maps.Cleanup()
	}
}

// mappingStores returns the stores the configured mappings name (under
// their "store" key, as the built-in sql plugin does).
func mappingStores(maps []map[string]any) []string {
	var out []string
	for _, m := range maps {
		if name, ok := m["store"].(string); ok {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}
