// Package sidecar runs a writeback sidecar inside a benchmark's process: one
// collection over one table with a chosen write policy, a fresh Redis key
// prefix of its own and a free loopback port, with ycsb.Clients over its
// HTTP API (pkg/client) or its Redis protocol (go-redis). It drains the
// buffer on request and deletes its Redis keys when done; it never touches
// keys outside its prefix, and in the database only the table it serves
// and that table's applied records (ForgetApplied).
package sidecar

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	dto "github.com/prometheus/client_model/go"
	"github.com/writeback/writeback/benchmarks/ycsb"
	"github.com/writeback/writeback/internal/config"
	"github.com/writeback/writeback/internal/server"
	"github.com/writeback/writeback/internal/store"
	"github.com/writeback/writeback/pkg/client"
	"github.com/writeback/writeback/pkg/writeback"
	"gopkg.in/yaml.v3"
)

// Options say what the sidecar serves.
type Options struct {
	Policy     string // write-back | write-through | write-around
	Driver     string // postgres | mysql | mongodb
	DSN        string // for mongodb: the URI
	Database   string // mongodb: the database; default "test"
	RedisAddr  string // host:port
	Collection string // collection name; also the table's
	Key        string // the table's key column
	// PrefixBase starts the Redis key prefix, "<base>-<policy>-<random>";
	// default "bench".
	PrefixBase string
	// Log receives the sidecar's log; default: warnings and errors to
	// stderr.
	Log *slog.Logger
	// Configure, if set, adjusts the configuration before it is validated.
	Configure func(*config.Config)
	// ListenResp is the address of the Redis-protocol front door, e.g.
	// "127.0.0.1:0" for a free port or "unix:/tmp/x/resp.sock" for a Unix
	// socket; empty disables it.
	ListenResp string
	// Embedded also opens an embedded member (pkg/writeback) on the same
	// configuration, without appliers (the sidecar runs them): NewClient's
	// clients then call it in-process.
	Embedded bool
}

// Sidecar is a running in-process sidecar.
type Sidecar struct {
	Client *client.Client // of this sidecar's API
	Prefix string         // Redis key prefix of everything it stores
	// Embedded is the embedded member of Options.Embedded, else nil.
	Embedded *writeback.DB
	embReg   *prometheus.Registry

	coll   string
	key    string // the collection's key field
	reg    *prometheus.Registry
	srv    *server.Server
	rdb    *redis.Client
	cancel context.CancelFunc
	done   chan error // Run's result; closed after
}

// Start builds the sidecar, binds a free port on 127.0.0.1 and serves in a
// goroutine until Stop. Failures to reach a service say how to start them.
func Start(ctx context.Context, o Options) (*Sidecar, error) {
	if o.PrefixBase == "" {
		o.PrefixBase = "bench"
	}
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	s := &Sidecar{Prefix: fmt.Sprintf("%s-%s-%s", o.PrefixBase, o.Policy, hex.EncodeToString(rnd[:])), coll: o.Collection, key: o.Key}

	s.rdb = redis.NewClient(&redis.Options{Addr: o.RedisAddr})
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	err := s.rdb.Ping(pctx).Err()
	cancel()
	if err != nil {
		s.rdb.Close()
		return nil, fmt.Errorf("cannot connect to Redis at %s (%v); start the services with `make services`", o.RedisAddr, err)
	}

	storeYAML := fmt.Sprintf("{driver: %s, dsn: %q}", o.Driver, o.DSN)
	if o.Driver == "mongodb" {
		if o.Database == "" {
			o.Database = "test"
		}
		storeYAML = fmt.Sprintf("{driver: mongodb, uri: %q, database: %q}", o.DSN, o.Database)
	}
	yml := fmt.Sprintf(`listen: 127.0.0.1:0
listenResp: %q
redis:
  addrs: [%q]
  keyPrefix: %q
stores:
  db: %s
collections:
  %s: {store: db, table: %s, key: %s, policy: %s}
`, o.ListenResp, o.RedisAddr, s.Prefix, storeYAML, o.Collection, o.Collection, o.Key, o.Policy)
	cfg, err := config.Parse("sidecar.Options", []byte(yml))
	if err != nil {
		s.rdb.Close()
		return nil, err
	}
	if o.Configure != nil {
		o.Configure(cfg)
	}
	if err := cfg.Validate(); err != nil {
		s.rdb.Close()
		return nil, err
	}
	s.reg = prometheus.NewRegistry()
	s.srv, err = server.New(ctx, cfg, s.reg, o.Log)
	if err != nil {
		s.rdb.Close()
		return nil, fmt.Errorf("starting the %s sidecar: %w", o.Policy, err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	s.cancel = stop
	s.done = make(chan error, 1)
	go func() {
		s.done <- s.srv.Run(runCtx)
		close(s.done)
	}()
	// The application keeps immutable entries as the sidecar does, in the
	// same budget: an HTTP application's client is as near as the data
	// gets to it (client.WithImmutableCache).
	s.Client = client.New(s.srv.Addr(), client.WithImmutableCache(int64(cfg.Writeback.ImmutableCache)))
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		err := s.Client.Readyz(rctx)
		if err == nil && o.Embedded {
			err = s.openEmbedded(ctx, cfg, o.Log)
			if err != nil {
				_ = s.Close()
				return nil, err
			}
		}
		if err == nil {
			return s, nil
		}
		if rctx.Err() != nil {
			_ = s.Close()
			return nil, fmt.Errorf("the %s sidecar did not become ready: %v", o.Policy, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// openEmbedded opens the embedded member on the sidecar's configuration
// (its own instance id), without appliers.
func (s *Sidecar) openEmbedded(ctx context.Context, cfg *config.Config, log *slog.Logger) error {
	y, err := yaml.Marshal(cfg)
	if err != nil {
		return err
	}
	s.embReg = prometheus.NewRegistry()
	s.Embedded, err = writeback.Open(ctx, writeback.Options{Config: y, Registry: s.embReg, Logger: log})
	if err != nil {
		return fmt.Errorf("opening the embedded member: %w", err)
	}
	return nil
}

// Addr is the address of the sidecar's API.
func (s *Sidecar) Addr() string { return s.srv.Addr() }

// RespAddr is the address of the sidecar's Redis-protocol front door,
// host:port or unix:<path>; "" unless Options.ListenResp was set.
func (s *Sidecar) RespAddr() string { return s.srv.RespAddr() }

// Metric reads one of the sidecar's metrics by its full name
// ("writeback_cache_hits_total"), summed over its label values: for a
// counter or gauge the value, for a histogram the sum and the count of its
// observations. A metric with no series reads as zero. With an embedded
// member, its counters and histograms add to the sidecar's (its gauges of
// Redis state repeat the sidecar's and are left out).
func (s *Sidecar) Metric(name string) (sum float64, count uint64, err error) {
	mfs, err := s.reg.Gather()
	if err != nil {
		return 0, 0, err
	}
	if s.embReg != nil {
		emb, err := s.embReg.Gather()
		if err != nil {
			return 0, 0, err
		}
		for _, mf := range emb {
			if mf.GetType() != dto.MetricType_GAUGE {
				mfs = append(mfs, mf)
			}
		}
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			case m.Histogram != nil:
				sum += m.Histogram.GetSampleSum()
				count += m.Histogram.GetSampleCount()
			}
		}
	}
	return sum, count, nil
}

// Flush asks the sidecar to apply everything pending, again and again
// until it reports the buffer drained or ctx ends.
func (s *Sidecar) Flush(ctx context.Context) (client.FlushResult, error) {
	var total client.FlushResult
	for {
		res, err := s.Client.Flush(ctx, 60*time.Second)
		total.Applied += res.Applied
		total.Pending, total.DeadLetters, total.Drained = res.Pending, res.DeadLetters, res.Drained
		if err != nil {
			return total, fmt.Errorf("flush: %w", err)
		}
		if res.DeadLetters > 0 {
			return total, fmt.Errorf("flush: %d changes are dead letters: the store rejected them", res.DeadLetters)
		}
		if res.Drained && res.Pending == 0 {
			return total, nil
		}
		if err := ctx.Err(); err != nil {
			return total, fmt.Errorf("flush: %d changes still pending: %w", res.Pending, err)
		}
	}
}

// Stop shuts the sidecar down gracefully and waits until it has.
func (s *Sidecar) Stop() error {
	if s.Embedded != nil {
		_ = s.Embedded.Close()
	}
	if s.cancel == nil {
		return nil
	}
	s.cancel()
	s.cancel = nil
	return <-s.done
}

// DeleteKeys deletes every Redis key under the sidecar's prefix and returns
// how many there were. Call it after Stop, or the appliers may write more.
func (s *Sidecar) DeleteKeys(ctx context.Context) (int64, error) {
	return s.unlinkMatching(ctx, s.Prefix+":*")
}

// unlinkMatching deletes the keys matching pattern and returns how many
// there were.
func (s *Sidecar) unlinkMatching(ctx context.Context, pattern string) (int64, error) {
	var n int64
	iter := s.rdb.Scan(ctx, 0, pattern, 1000).Iterator()
	batch := make([]string, 0, 100) // small UNLINKs: never stall a shared Redis
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		d, err := s.rdb.Unlink(ctx, batch...).Result()
		n += d
		batch = batch[:0]
		return err
	}
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == cap(batch) {
			if err := flush(); err != nil {
				return n, err
			}
		}
	}
	if err := iter.Err(); err != nil {
		return n, err
	}
	return n, flush()
}

// Redis is the sidecar's own connection to its Redis, for the benchmarks'
// reads of Redis's statistics.
func (s *Sidecar) Redis() *redis.Client { return s.rdb }

// Close stops the sidecar and deletes its keys.
func (s *Sidecar) Close() error {
	err := s.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, derr := s.DeleteKeys(ctx); derr != nil && err == nil {
		err = fmt.Errorf("deleting the keys of prefix %s: %w", s.Prefix, derr)
	}
	s.rdb.Close()
	return err
}

// ForgetApplied deletes the store's applied records and floors of a
// collection (store.AppliedTable, store.FloorsTable). The demo and the
// benchmarks recreate their tables, so the records of the old rows mean
// nothing; the sidecar would cope with them anyway, since it raises its
// sequences above every applied record and floor.
func ForgetApplied(ctx context.Context, db *ycsb.DB, collection string) error {
	for _, table := range []string{store.AppliedTable, store.FloorsTable} {
		ok, err := db.TableExists(ctx, table)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if err := db.Exec(ctx, "DELETE FROM "+table+" WHERE collection = "+db.Placeholder(1), collection); err != nil {
			return err
		}
	}
	return nil
}

// NewClient returns a ycsb.Client of the sidecar's collection (through the
// embedded member if there is one, with the same calls): read = GET
// /v1/docs/{collection}/{key}, update = PATCH with {"$set":{"field<n>":v}}
// (of every field, for ycsb.RecordUpdater), scan = GET
// /v1/docs/{collection}?from={key}&limit={n} (ycsb.Scanner). A 409 aborted
// answer to a PATCH is retried after a short backoff, as an application
// would; any other error is returned.
func (s *Sidecar) NewClient(fields int) ycsb.Client {
	names := make([]string, fields)
	prefixes := make([]string, fields)
	for i := range names {
		names[i] = ycsb.FieldName(i)
		prefixes[i] = `{"$set":{"` + names[i] + `":`
	}
	var c writeback.Documents = s.Client
	if s.Embedded != nil {
		c = s.Embedded
	}
	return &docClient{c: c, coll: s.coll, key: s.key, names: names, setPrefix: prefixes}
}

type docClient struct {
	c         writeback.Documents // the HTTP client, or the embedded member
	coll      string
	key       string // the key field, which scanned documents name themselves by
	names     []string
	setPrefix []string // `{"$set":{"field<n>":`
}

func (d *docClient) Read(ctx context.Context, key string, decode bool) (ycsb.Row, error) {
	raw, _, err := d.c.Get(ctx, d.coll, key)
	if err != nil || !decode {
		return nil, err
	}
	_, row, err := d.decode(raw)
	if err != nil {
		return nil, fmt.Errorf("decoding %s: %w", key, err)
	}
	return row, nil
}

// decode returns a document's key and fields.
func (d *docClient) decode(raw json.RawMessage) (string, ycsb.Row, error) {
	var doc map[string]*string
	if err := json.Unmarshal(raw, &doc); err != nil {
		return "", nil, err
	}
	row := make(ycsb.Row, len(d.names))
	for i, n := range d.names {
		if v := doc[n]; v != nil {
			row[i] = *v
		}
	}
	var key string
	if k := doc[d.key]; k != nil {
		key = *k
	}
	return key, row, nil
}

func (d *docClient) Scan(ctx context.Context, from string, n int) ([]ycsb.Record, error) {
	docs, err := d.c.Scan(ctx, d.coll, from, n)
	if err != nil {
		return nil, err
	}
	out := make([]ycsb.Record, len(docs))
	for i, raw := range docs {
		if out[i].Key, out[i].Row, err = d.decode(raw); err != nil {
			return nil, fmt.Errorf("decoding a scanned document: %w", err)
		}
	}
	return out, nil
}

func (d *docClient) Update(ctx context.Context, key string, field int, value string) error {
	v, err := json.Marshal(value)
	if err != nil {
		return err
	}
	var b strings.Builder
	b.Grow(len(d.setPrefix[field]) + len(v) + 2)
	b.WriteString(d.setPrefix[field])
	b.Write(v)
	b.WriteString("}}")
	return d.patch(ctx, key, json.RawMessage(b.String()))
}

func (d *docClient) UpdateRecord(ctx context.Context, key string, row ycsb.Row) error {
	set := make(map[string]string, len(row))
	for i, v := range row {
		set[d.names[i]] = v
	}
	body, err := json.Marshal(map[string]any{"$set": set})
	if err != nil {
		return err
	}
	return d.patch(ctx, key, json.RawMessage(body))
}

// patch sends a PATCH, retrying 409 aborted answers with backoff.
func (d *docClient) patch(ctx context.Context, key string, body json.RawMessage) error {
	return retry(ctx, func() (bool, error) {
		_, err := d.c.Patch(ctx, d.coll, key, body)
		return client.IsAborted(err), err
	})
}

// retry calls try until it says not to try again, then returns its error;
// in between it waits 1 ms, doubling up to 100 ms, unless ctx ends. The
// sidecar answers "try again" (HTTP 409 aborted, RESP TRYAGAIN) to a write
// it could not take just then, as an application would retry it.
func retry(ctx context.Context, try func() (again bool, err error)) error {
	backoff := time.Millisecond
	for {
		again, err := try()
		if !again {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 100*time.Millisecond)
	}
}

func (d *docClient) Close() error { return nil }

var (
	_ ycsb.Client        = (*docClient)(nil)
	_ ycsb.Scanner       = (*docClient)(nil)
	_ ycsb.RecordUpdater = (*docClient)(nil)
)
