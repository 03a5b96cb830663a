package tpcc

import (
	"context"
	"fmt"

	"github.com/writeback/writeback/benchmarks/bench"
	"github.com/writeback/writeback/benchmarks/sidecar"
	"github.com/writeback/writeback/internal/config"
)

// SidecarOptions configure the sidecar a session policy runs through.
type SidecarOptions struct {
	// Policy is bench.WriteBack or bench.WriteThrough, the queue family's
	// policy, or bench.WriteBackEmbedded: write-back, and an embedded
	// member (the sidecar's Embedded, without appliers) on the same
	// configuration for the terminals' sessions.
	Policy    string
	Store     string // Postgres (default) or MySQL
	DSN       string // the TPC-C database
	RedisAddr string
	// Configure, if set, adjusts the configuration further (applier
	// settings, say).
	Configure func(*config.Config)
}

// StartSidecar starts an in-process sidecar serving the TPC-C sessions:
// the queue family tpcc over the nine tables, with the given policy, and
// the mappings of Mappings, their queries translated to MySQL's dialect on
// MySQL (MyMappingQuery). (The sidecar also needs one collection: item,
// which no run writes through it.) The sidecar runs the appliers; with
// bench.WriteBackEmbedded so does no embedded member.
func StartSidecar(ctx context.Context, o SidecarOptions) (*sidecar.Sidecar, error) {
	collPolicy, ok := bench.Sidecar(o.Policy)
	if !ok || o.Policy == bench.WriteAround || o.Policy == bench.WriteBackRESP {
		return nil, fmt.Errorf("tpcc: policy %q has no sessions; use %s, %s or %s", o.Policy, bench.WriteThrough, bench.WriteBack, bench.WriteBackEmbedded)
	}
	policy := config.PolicyWriteBack
	if collPolicy == bench.WriteThrough {
		policy = config.PolicyWriteThrough
	}
	if o.Store == "" {
		o.Store = Postgres
	}
	var mappings []map[string]any
	for _, m := range Mappings {
		c := m.Config("db")
		if o.Store == MySQL {
			q, err := MyMappingQuery(m.Query)
			if err != nil {
				return nil, err
			}
			c["query"] = q
		}
		mappings = append(mappings, c)
	}
	return sidecar.Start(ctx, sidecar.Options{
		Policy:     collPolicy,
		Embedded:   o.Policy == bench.WriteBackEmbedded,
		Driver:     o.Store,
		DSN:        o.DSN,
		RedisAddr:  o.RedisAddr,
		Collection: "item",
		Key:        "i_id",
		PrefixBase: "tpcc",
		Configure: func(c *config.Config) {
			// Serial: the warehouses' queues share rows. A Payment goes to
			// its customer's warehouse's queue (it changes the customer's
			// entry) but adds to its own warehouse's and district's totals,
			// so every batch of one queue updates the other warehouses'
			// rows too, in its own order: two batches at once would wait
			// on each other and, on PostgreSQL, deadlock until
			// lock_timeout.
			c.Queues = map[string]config.Queue{Family: {Store: "db", Tables: Tables, Policy: policy, Serial: true}}
			c.Mappings = mappings
			if o.Configure != nil {
				o.Configure(c)
			}
		},
	})
}

// SessionMemory reads a sidecar's pinned session bytes and pending
// sessions (GET /v1/queues), for RunOptions.Memory.
func SessionMemory(s *sidecar.Sidecar) func(context.Context) (int64, int64, error) {
	return func(ctx context.Context) (int64, int64, error) {
		st, err := s.Client.Queues(ctx)
		return st.PinnedBytes, st.PendingSessions, err
	}
}

// FlushQueues applies every pending session, again and again until the
// sidecar reports its queues drained; a stopped queue (a session the store
// rejected) is an error.
func FlushQueues(ctx context.Context, s *sidecar.Sidecar) (applied int64, err error) {
	for {
		res, err := s.Client.FlushQueues(ctx, 0)
		applied += res.Applied
		if err != nil {
			return applied, err
		}
		if res.Stopped > 0 {
			dls, _ := s.Client.QueueDeadLetters(ctx, 1)
			msg := ""
			if len(dls) > 0 {
				msg = ": " + dls[0].Queue + " " + dls[0].Error
			}
			return applied, &StoppedError{Queues: res.Stopped, Msg: msg}
		}
		if res.Drained && res.Pending == 0 {
			return applied, nil
		}
		if err := ctx.Err(); err != nil {
			return applied, err
		}
	}
}

// StoppedError says the store rejected a session, which stopped its queue.
type StoppedError struct {
	Queues int64
	Msg    string
}

func (e *StoppedError) Error() string {
	return "tpcc: the store rejected a session and stopped its queue (" + itoa(int(e.Queues)) + " stopped)" + e.Msg
}
