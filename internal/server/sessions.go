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

// sessions is the Design 2 part of a sidecar: sessions, their queues and
// the appliers of those, and the mappings.
type sessions struct {
	svc  *session.Service
	q    *session.Queues
	app  *bgt.QueueApplier
	maps *mappings.Set
	m    *metrics.Sessions
	// pinned is the session queues' pinned bytes at the last refresh,
	// which counts toward writeback.pinnedMemoryLimit.
	pinned atomic.Int64
}

// newSessions builds the Design 2 part from the queues and mappings of the
// configuration (both may be empty: the endpoints then serve nothing).
func (s *Server) newSessions(ctx context.Context, reg prometheus.Registerer) error {
	cfg := s.cfg
	fams := map[string]*session.Family{}
	families := map[string]string{}
	for name, qc := range cfg.Queues {
		ss, ok := store.Sessions(s.stores[qc.Store])
		if !ok {
			return fmt.Errorf("queues.%s.store: store %s cannot apply sessions; use a postgres or mysql store", name, qc.Store)
		}
		if qc.Role != "" {
			if err := ss.CheckRole(ctx, qc.Role); err != nil {
				return fmt.Errorf("queues.%s.role: %w", name, err)
			}
		}
		fams[name] = &session.Family{Name: name, StoreName: qc.Store, Store: ss, Tables: qc.Tables, Role: qc.Role, WriteThrough: qc.WriteThrough()}
		families[name] = qc.Store
	}
	mstores := map[string]mappings.Store{}
	for name, st := range s.stores {
		if ss, ok := store.Sessions(st); ok {
			mstores[name] = ss
		}
	}
	maps, err := mappings.Default.Load(mappings.Context{Context: ctx, Stores: mstores, Queues: families, Logger: s.log}, cfg.Mappings)
	if err != nil {
		return err
	}
	wb := cfg.Writeback
	sm := metrics.NewSessions(reg)
	svc := session.New(s.rdb, session.Config{
		Prefix:         cfg.Redis.KeyPrefix,
		Partitions:     wb.Partitions,
		LeaseLifetime:  wb.LeaseLifetime.Duration,
		LeaseWait:      wb.LeaseWait.Duration,
		SessionTimeout: wb.SessionTimeout.Duration,
		Replicas:       cfg.Redis.Replicas,
		ReplicaTimeout: replicaTimeout,
		InSync:         s.inSync,
	}, fams, maps, sm, s.m, s.log)
	q := session.NewQueues(s.rdb, svc.Keys())
	app := bgt.NewQueueApplier(bgt.QueueConfig{
		InstanceID:   wb.InstanceID,
		Workers:      wb.Workers,
		BatchSize:    wb.BatchSize,
		OwnerLease:   wb.OwnerLease.Duration,
		PollInterval: wb.PollInterval.Duration,
		MaxRetries:   wb.MaxRetries,
		RetryBackoff: wb.RetryBackoff.Duration,
		CompactEvery: wb.SessionCompaction.Duration,
	}, q, s.buf, fams, sm, s.log)
	if err := app.Prepare(ctx); err != nil {
		_ = maps.Cleanup()
		return err
	}
	svc.Applier = app
	svc.Fallback = s.svc.Fallback
	s.sess = &sessions{svc: svc, q: q, app: app, maps: maps, m: sm}
	return nil
}

// register adds the session endpoints to the API.
func (ss *sessions) register(h *api.Handler) {
	h.RegisterSessions(api.Sessions{Service: ss.svc, Queues: ss.q, Applier: ss.app})
}

// run applies the queues (when any family is configured) and keeps the
// session gauges fresh until ctx is done.
func (ss *sessions) run(ctx context.Context, wg *sync.WaitGroup) {
	if len(ss.svc.Families()) > 0 {
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

// close runs the mappings' Cleanup.
func (ss *sessions) close() {
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
