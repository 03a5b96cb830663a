package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/writeback/writeback/internal/config"
	"github.com/writeback/writeback/internal/linear"
	"github.com/writeback/writeback/internal/testenv"
	"github.com/writeback/writeback/pkg/client"
	"github.com/writeback/writeback/pkg/writeback"
)

// The near cache's linearizability test: three sidecars and one embedded
// client (pkg/writeback) on one Redis and one PostgreSQL table, each with a
// near cache and appliers, clients on every member writing ($set/$inc
// through both front doors and the embedded Patch) and reading (GET, the
// multi-read, HGETALL, the embedded Get and GetMany) a few hot documents
// while a goroutine deletes cache entries behind the members' backs. The
// history must be linearizable for a register of (n, s) per document.

func TestNearCacheLinearizable(t *testing.T) {
	for _, hot := range []time.Duration{0, 2 * time.Second} {
		t.Run("hotWindow="+hot.String(), func(t *testing.T) {
			for run := range 2 {
				t.Run(strconv.Itoa(run), func(t *testing.T) { nearLinearRun(t, hot) })
			}
		})
	}
}

const nearDocs = 3

func nearLinearRun(t *testing.T, hot time.Duration) {
	f := newFixture(t)
	for id := 2; id <= nearDocs; id++ {
		if _, err := f.pg.Exec(fmt.Sprintf("INSERT INTO %s VALUES (%d, 1, 'one')", f.table, id)); err != nil {
			t.Fatal(err)
		}
	}
	const sidecars = 3
	var srvs []*running
	for i := range sidecars {
		cfg, err := config.Parse("test", nearYAML(t, f, hot, strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		srvs = append(srvs, run(t, cfg))
	}

	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Second)
	defer cancel()
	history := linear.NewHistory()
	var wg sync.WaitGroup
	// Evictions behind the sidecars' backs.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			time.Sleep(time.Duration(rand.IntN(40)) * time.Millisecond)
			keys, _ := f.rdb.Keys(ctx, f.prefix+":{*}:c:*").Result()
			if len(keys) > 0 {
				f.rdb.Del(ctx, keys[rand.IntN(len(keys))])
			}
		}
	}()
	// The members: the sidecars, through both front doors, and one
	// embedded client (pkg/writeback) running appliers too.
	var members []nearMember
	for _, srv := range srvs {
		rc := redis.NewClient(&redis.Options{Addr: srv.srv.RespAddr(), MaxRetries: -1})
		t.Cleanup(func() { rc.Close() })
		members = append(members, &sidecarMember{table: f.table, hc: client.New(srv.url), rc: rc})
	}
	reg := prometheus.NewRegistry()
	db, err := writeback.Open(context.Background(), writeback.Options{Config: nearYAML(t, f, hot, "embedded"), Appliers: true, Registry: reg, Logger: quietLog(), InstanceID: f.prefix + "-embedded"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	members = append(members, &embeddedMember{table: f.table, db: db})
	const perMember = 3
	// Each client stops after maxOps: the embedded clients' hits take
	// microseconds, and an unbounded history outgrows porcupine's minute.
	const maxOps = 3000
	for s, m := range members {
		for k := range perMember {
			cl := s*perMember + k
			wg.Add(1)
			go func() {
				defer wg.Done()
				seq := 0
				for ctx.Err() == nil && seq < maxOps {
					doc := 1 + rand.IntN(nearDocs)
					call := history.Now()
					seq++
					r := rand.IntN(10)
					if doc == nearDocs && r < 4 && rand.IntN(2000) > 0 {
						// The last document is read-mostly: written now and
						// then, so that it is leased even with a hot window.
						r = 4 + rand.IntN(6)
					}
					switch {
					case r < 2:
						v := fmt.Sprintf("c%d-%d", cl, seq)
						err := m.set(ctx, doc, v, r)
						history.Add(cl, linear.Op{Doc: doc, Kind: linear.Set, S: v}, call, linear.State{}, err != nil)
						if err != nil && ctx.Err() == nil {
							t.Errorf("client %d: write doc %d: %v", cl, doc, err)
						}
					case r < 4:
						in := linear.Op{Doc: doc, Kind: linear.Inc, N: 1 + int64(rand.IntN(5))}
						err := m.inc(ctx, doc, in.N, r)
						history.Add(cl, in, call, linear.State{}, err != nil)
						if err != nil && ctx.Err() == nil {
							t.Errorf("client %d: write doc %d: %v", cl, doc, err)
						}
					default:
						st, err := m.get(ctx, doc, r)
						if err != nil {
							if ctx.Err() == nil {
								t.Errorf("client %d: read doc %d: %v", cl, doc, err)
							}
							continue
						}
						history.Add(cl, linear.Op{Doc: doc, Kind: linear.Get}, call, st, false)
					}
				}
			}()
		}
	}
	wg.Wait()
	reads, writes := history.Counts()
	hits := 0.0
	for _, srv := range srvs {
		hits += max(srv.metric(t, `writeback_nearcache_hits_total{collection="`+f.table+`"}`), 0)
	}
	embHits := 0.0
	if mfs, err := reg.Gather(); err == nil {
		for _, mf := range mfs {
			if mf.GetName() == "writeback_nearcache_hits_total" {
				for _, m := range mf.GetMetric() {
					embHits += m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Logf("%d reads (%.0f near-cache hits in the sidecars, %.0f in the embedded client), %d writes", reads, hits, embHits, writes)
	if reads < 100 || writes < 20 {
		t.Fatalf("too few operations to tell: %d reads, %d writes", reads, writes)
	}
	// Copies the sidecars drop on their own (at their deadline) give their
	// leases back; what a request cut short at the end leaves is one
	// expired field per holder and document at most. A write the clients
	// gave up on at the end goes on in its sidecar: it may wait up to a
	// lease (500ms) for the holders' revocations, then lease its own new
	// copy for another (CI saw one expire 1.015s after the end).
	time.Sleep(2 * time.Second) // every lease (500ms) has expired
	keys, err := f.rdb.Keys(context.Background(), f.prefix+":{*}:l:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	left := 0
	now := time.Now().UnixMilli()
	for _, k := range keys {
		h, _ := f.rdb.HGetAll(context.Background(), k).Result()
		for holder, v := range h {
			if holder == "x" {
				continue
			}
			left++
			exp, _, _ := strings.Cut(v, ":")
			if ms, _ := strconv.ParseInt(exp, 10, 64); ms > now {
				t.Errorf("%s: %s holds a lease until %d, after every lease of 500ms should have expired (now %d)", k, holder, ms, now)
			}
		}
	}
	if left > nearDocs*(sidecars+1) {
		t.Errorf("%d lease fields left, more than one per document and member", left)
	}
	t.Logf("%d expired lease fields left", left)
	if err := history.Check(linear.State{N: 1, S: "one"}, t.TempDir()+"/history.html"); err != nil {
		t.Fatal(err)
	}
}

// nearYAML is the configuration every member shares; name ends the
// sidecar's instance id.
func nearYAML(t *testing.T, f *fixture, hot time.Duration, name string) []byte {
	return fmt.Appendf(nil, `listen: 127.0.0.1:0
listenResp: 127.0.0.1:0
redis: {addrs: [%q], keyPrefix: %q}
stores: {pg: {driver: postgres, dsn: %q, maxConns: 4}}
collections:
  %s: {store: pg, key: id, nearCache: {maxBytes: 1MiB, leaseTTL: 500ms, hotWindow: %s}}
writeback: {partitions: 4, workers: 1, pollInterval: 20ms, ownerLease: 3s, instanceID: %s-%s, nearCache: on}
`, testenv.RedisAddr(t), f.prefix, f.dsn, f.table, hot, f.prefix, name)
}

// nearMember is a member's clients: r picks the front door or call.
type nearMember interface {
	set(ctx context.Context, doc int, v string, r int) error
	inc(ctx context.Context, doc int, n int64, r int) error
	get(ctx context.Context, doc int, r int) (linear.State, error)
}

// sidecarMember is a sidecar through its HTTP API and its Redis protocol.
type sidecarMember struct {
	table string
	hc    *client.Client
	rc    *redis.Client
}

func (m *sidecarMember) set(ctx context.Context, doc int, v string, r int) error {
	id := strconv.Itoa(doc)
	if r == 0 {
		_, err := m.hc.Patch(ctx, m.table, id, map[string]any{"$set": map[string]any{"s": v}})
		return err
	}
	return m.rc.HSet(ctx, m.table+"/"+id, "s", v).Err()
}

func (m *sidecarMember) inc(ctx context.Context, doc int, n int64, r int) error {
	id := strconv.Itoa(doc)
	if r == 2 {
		_, err := m.hc.Patch(ctx, m.table, id, map[string]any{"$inc": map[string]any{"n": n}})
		return err
	}
	return m.rc.HIncrBy(ctx, m.table+"/"+id, "n", n).Err()
}

func (m *sidecarMember) get(ctx context.Context, doc int, r int) (st linear.State, err error) {
	id := strconv.Itoa(doc)
	switch r {
	case 4, 5:
		var raw json.RawMessage
		if raw, _, err = m.hc.Get(ctx, m.table, id); err == nil {
			err = json.Unmarshal(raw, &st)
		}
	case 6:
		var docs []json.RawMessage
		if docs, err = m.hc.GetMany(ctx, m.table, []string{id}); err == nil {
			err = json.Unmarshal(docs[0], &st)
		}
	default:
		var h map[string]string
		if h, err = m.rc.HGetAll(ctx, m.table+"/"+id).Result(); err == nil {
			st.S = h["s"]
			st.N, err = strconv.ParseInt(h["n"], 10, 64)
		}
	}
	return st, err
}

// embeddedMember is an application embedding writeback.
type embeddedMember struct {
	table string
	db    *writeback.DB
}

func (m *embeddedMember) set(ctx context.Context, doc int, v string, _ int) error {
	_, err := m.db.Patch(ctx, m.table, strconv.Itoa(doc), map[string]any{"$set": map[string]any{"s": v}})
	return err
}

func (m *embeddedMember) inc(ctx context.Context, doc int, n int64, _ int) error {
	_, err := m.db.Patch(ctx, m.table, strconv.Itoa(doc), map[string]any{"$inc": map[string]any{"n": n}})
	return err
}

func (m *embeddedMember) get(ctx context.Context, doc int, r int) (st linear.State, err error) {
	id := strconv.Itoa(doc)
	if r == 6 {
		var docs []json.RawMessage
		if docs, err = m.db.GetMany(ctx, m.table, []string{id}); err == nil {
			err = json.Unmarshal(docs[0], &st)
		}
		return st, err
	}
	var raw json.RawMessage
	if raw, _, err = m.db.Get(ctx, m.table, id); err == nil {
		err = json.Unmarshal(raw, &st)
	}
	return st, err
}
