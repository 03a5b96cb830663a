// Package writeback is the embedded mode: a Go application links it to get
// the sidecar's documents API in its own process. Reads are served from the
// process's own near cache (L1) under the same read leases as the sidecars'
// and from Redis otherwise; writes go through the same write script
// straight to Redis; the appliers run here only if asked (Options.Appliers),
// since a sidecar elsewhere may run them.
//
// A DB is one more member of the near cache's coherence protocol, with its
// own instance id and revocation channel: the document service, the buffer
// and the appliers are the sidecar's own (internal/server.Core), so a write
// through a DB is seen by every sidecar's next read and the other way
// round, and a history mixing DBs and sidecars is linearizable. Every
// member must use the same configuration of Redis, the stores and the
// collections, nearCache settings included: the simplest way is to load
// the sidecars' YAML file (Options.ConfigFile).
//
// A DB also runs sessions (Design 2) in-process when the configuration has
// queues and mappings: it reads mapped cache entries under the same leases
// and commits into the same queues as the sidecars, whose session service
// (internal/server.Sessions) it builds from the same Core. A session begun
// on a DB lives in Redis like a sidecar's, so it conflicts with theirs as
// theirs conflict with each other. The queue appliers too run here only
// with Options.Appliers.
//
// Its methods have the signatures of pkg/client's (Documents, Sessions),
// and its errors are *client.Error classified as the HTTP API's answers,
// so that client.IsNotFound, client.IsAborted, client.IsRetrySafe … work
// on both.
package writeback

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/writeback/writeback/internal/config"
	"github.com/writeback/writeback/internal/document"
	"github.com/writeback/writeback/internal/server"
	"github.com/writeback/writeback/pkg/client"
)

// Documents is the documents API that both the HTTP client
// (*client.Client) and the embedded mode (*DB) offer: an application
// written against it switches between the two by construction.
type Documents interface {
	Get(ctx context.Context, coll, id string) (json.RawMessage, string, error)
	GetMany(ctx context.Context, coll string, ids []string) ([]json.RawMessage, error)
	Put(ctx context.Context, coll, id string, doc any) (int64, error)
	Patch(ctx context.Context, coll, id string, ops any) (int64, error)
	Delete(ctx context.Context, coll, id string) (int64, error)
	Scan(ctx context.Context, coll, from string, limit int) ([]json.RawMessage, error)
}

var (
	_ Documents = (*client.Client)(nil)
	_ Documents = (*DB)(nil)
)

// Options configure a DB. Exactly one of ConfigFile and Config is set.
type Options struct {
	// ConfigFile is the path of a writeback YAML configuration: the
	// sidecars' own file, so that every member agrees on Redis, the stores
	// and the collections with their nearCache settings. The environment
	// (WRITEBACK_<FLAG>, WRITEBACK_CONFIG, the stores' dsnEnv) applies on
	// top of it as it does for `writeback serve`. The front doors' settings
	// (listen, listenResp, auth, http, resp) are not used.
	ConfigFile string
	// Config is the configuration as YAML, when there is no file (tests).
	Config []byte
	// InstanceID names this member in the coherence protocol: its lease
	// holder name and its revocation channel. It must differ from every
	// other member's. Default: "embedded-<hostname>-<pid>-<random>"; the
	// configuration's writeback.instanceID, which names a sidecar, is not
	// used.
	InstanceID string
	// Appliers runs the appliers in this process, sharing the partitions
	// with the other members that run them. Off, the buffered writes are
	// applied by the sidecars (at least one member must run appliers for
	// write-back collections).
	Appliers bool
	// Registry receives the writeback_… metrics; nil: a private registry.
	// Two DBs cannot share one.
	Registry prometheus.Registerer
	// Logger receives the log; nil: warnings and errors to stderr.
	Logger *slog.Logger
}

// ErrClosed is the error of every call after Close.
var ErrClosed = errors.New("writeback: the DB is closed")

// DB is an embedded member: the documents and sessions APIs in-process.
// It is safe for concurrent use.
type DB struct {
	core     *server.Core
	svc      *document.Service
	sessions *server.Sessions
	log      *slog.Logger

	mu     sync.RWMutex // calls hold it shared; Close exclusively
	closed bool
	cancel context.CancelFunc
	wg     sync.WaitGroup // the core's and the sessions' goroutines
	once   sync.Once
}

// Open loads the configuration, connects to Redis and the stores, joins the
// coherence protocol (subscribing to the member's channel before any lease
// is taken), builds the sessions of the configuration's queues and mappings
// and, with Options.Appliers, starts the appliers of the buffer and of the
// queues. A bad setting is refused with one sentence per problem saying
// what to fix.
func Open(ctx context.Context, o Options) (*DB, error) {
	cfg, err := loadConfig(o)
	if err != nil {
		return nil, err
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	reg := o.Registry
	if r, ok := reg.(*prometheus.Registry); reg == nil || ok && r == nil {
		reg = prometheus.NewRegistry()
	}
	core, err := server.NewCore(ctx, cfg, reg, log.With("member", cfg.Writeback.InstanceID))
	if err != nil {
		return nil, fmt.Errorf("writeback: %w", err)
	}
	sessions, err := server.NewSessions(ctx, core, reg)
	if err != nil {
		core.Close()
		return nil, fmt.Errorf("writeback: %w", err)
	}
	db := &DB{core: core, svc: core.Service(), sessions: sessions, log: log}
	runCtx, cancel := context.WithCancel(context.Background())
	db.cancel = cancel
	core.Start(runCtx, &db.wg, o.Appliers)
	sessions.Run(runCtx, &db.wg, o.Appliers)
	return db, nil
}

// loadConfig builds and validates the configuration of o.
func loadConfig(o Options) (*config.Config, error) {
	var (
		cfg *config.Config
		err error
	)
	switch {
	case o.ConfigFile != "" && o.Config != nil:
		return nil, errors.New("writeback: Options.ConfigFile and Options.Config are both set; set one of them")
	case o.ConfigFile != "":
		cfg, err = config.Load(o.ConfigFile, os.LookupEnv, nil)
	case o.Config != nil:
		cfg, err = config.Parse("writeback.Options.Config", o.Config)
	default:
		return nil, errors.New("writeback: no configuration; set Options.ConfigFile to the sidecars' configuration file, or Options.Config to YAML")
	}
	if err != nil {
		return nil, fmt.Errorf("writeback: %w", err)
	}
	id := o.InstanceID
	if id == "" {
		id = newInstanceID()
	}
	cfg.Writeback.InstanceID = id
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("writeback: the configuration is not usable: %w", err)
	}
	if len(cfg.Collections) == 0 && len(cfg.Queues) == 0 && len(cfg.Mappings) == 0 {
		return nil, errors.New("writeback: the configuration has no collections, queues or mappings; add collections.<name> with its store, table and key, or queues and mappings for sessions")
	}
	return cfg, nil
}

// newInstanceID is embedded-hostname-pid-random.
func newInstanceID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "host"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("embedded-%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// InstanceID is the member's name in the coherence protocol.
func (db *DB) InstanceID() string { return db.core.InstanceID() }

// enter admits a call unless the DB is closed; the caller runs db.mu.RUnlock
// when it returns.
func (db *DB) enter() bool {
	db.mu.RLock()
	if db.closed {
		db.mu.RUnlock()
		return false
	}
	return true
}

// Get reads a document: from the near cache while this member holds a
// lease on it, else from Redis (taking a lease), else from the store. It
// returns the document and its ETag (the HTTP API's for the same
// document); a missing document is an error for which client.IsNotFound is
// true.
func (db *DB) Get(ctx context.Context, coll, id string) (json.RawMessage, string, error) {
	if !db.enter() {
		return nil, "", ErrClosed
	}
	defer db.mu.RUnlock()
	body, tag, err := db.svc.GetJSON(ctx, coll, id)
	if err != nil {
		return nil, "", db.fail(err)
	}
	// A near-cache hit's body is the entry's: the caller gets its own.
	return slices.Clone(body), tag, nil
}

// GetIfNoneMatch reads a document unless its ETag is still etag: then it
// returns notModified, no document and the same etag. An empty etag reads
// unconditionally.
func (db *DB) GetIfNoneMatch(ctx context.Context, coll, id, etag string) (doc json.RawMessage, newEtag string, notModified bool, err error) {
	if !db.enter() {
		return nil, "", false, ErrClosed
	}
	defer db.mu.RUnlock()
	body, tag, err := db.svc.GetJSON(ctx, coll, id)
	if err != nil {
		return nil, "", false, db.fail(err)
	}
	if etag != "" && etag == tag {
		return nil, tag, true, nil
	}
	return slices.Clone(body), tag, false, nil
}

// GetMany reads several documents of a collection, their Redis entries in
// one round trip (those not in the near cache): docs[i] is ids[i]'s
// document, nil when it does not exist.
func (db *DB) GetMany(ctx context.Context, coll string, ids []string) ([]json.RawMessage, error) {
	return db.many(ctx, coll, ids, db.svc.GetManyJSON)
}

// GetFields reads a document as Get does but returns only the named fields,
// as a JSON object in the order named (those the document has): a
// projection, which a near-cache hit encodes from the copy without the rest
// of the document, so that the caller decodes only what it needs. It is
// the embedded mode's own: the HTTP API has no projection.
func (db *DB) GetFields(ctx context.Context, coll, id string, fields ...string) (json.RawMessage, error) {
	if !db.enter() {
		return nil, ErrClosed
	}
	defer db.mu.RUnlock()
	b, err := db.svc.GetFields(ctx, coll, id, fields)
	if err != nil {
		return nil, db.fail(err)
	}
	return b, nil
}

// GetManyFields is GetMany with GetFields's projection: docs[i] holds the
// named fields of ids[i]'s document, nil when it does not exist.
func (db *DB) GetManyFields(ctx context.Context, coll string, ids []string, fields ...string) ([]json.RawMessage, error) {
	return db.many(ctx, coll, ids, func(ctx context.Context, refs []document.Ref) ([]json.RawMessage, error) {
		return db.svc.GetManyFields(ctx, refs, fields)
	})
}

// GetValues reads a document as Get does and returns the JSON text of each
// named field, in the order named ("" for a field the document lacks):
// vals[i] is fields[i]'s value as json.Marshal would write it. It is the
// cheapest read of the embedded mode: a near-cache hit hands over the
// copy's own immutable strings — no object is encoded for the caller to
// decode again — so an application decodes only the values it uses.
func (db *DB) GetValues(ctx context.Context, coll, id string, fields ...string) (vals []string, err error) {
	if !db.enter() {
		return nil, ErrClosed
	}
	defer db.mu.RUnlock()
	vals, err = db.svc.GetValues(ctx, coll, id, fields)
	if err != nil {
		return nil, db.fail(err)
	}
	return vals, nil
}

// GetManyValues is GetMany with GetValues's result: docs[i] holds the
// named fields' texts of ids[i]'s document, nil when it does not exist.
func (db *DB) GetManyValues(ctx context.Context, coll string, ids []string, fields ...string) (docs [][]string, err error) {
	if !db.enter() {
		return nil, ErrClosed
	}
	defer db.mu.RUnlock()
	refs, err := db.refs(coll, ids)
	if err != nil {
		return nil, err
	}
	if docs, err = db.svc.GetManyValues(ctx, refs, fields); err != nil {
		return nil, db.fail(err)
	}
	return docs, nil
}

// refs resolves the ids of a multi-read.
func (db *DB) refs(coll string, ids []string) ([]document.Ref, error) {
	refs := make([]document.Ref, len(ids))
	for i, id := range ids {
		if id == "" {
			return nil, invalid(fmt.Sprintf("id %d of the multi-read is empty", i+1))
		}
		var err error
		if refs[i], err = db.svc.Ref(coll, id); err != nil {
			return nil, db.fail(err)
		}
	}
	return refs, nil
}

// many resolves ids and reads them with read; "null" becomes nil, and a
// body shared with the near cache is copied.
func (db *DB) many(ctx context.Context, coll string, ids []string, read func(context.Context, []document.Ref) ([]json.RawMessage, error)) ([]json.RawMessage, error) {
	if !db.enter() {
		return nil, ErrClosed
	}
	defer db.mu.RUnlock()
	refs, err := db.refs(coll, ids)
	if err != nil {
		return nil, err
	}
	docs, err := read(ctx, refs)
	if err != nil {
		return nil, db.fail(err)
	}
	for i, d := range docs {
		if string(d) == "null" {
			docs[i] = nil
		} else {
			docs[i] = slices.Clone(d) // a near-cache hit's may be the entry's
		}
	}
	return docs, nil
}

// Put inserts or replaces a whole document and returns the change's
// sequence number once it is durable (buffered in Redis for a write-back
// collection, applied for the others). doc is encoded as JSON; a
// json.RawMessage or []byte is taken as it is.
func (db *DB) Put(ctx context.Context, coll, id string, doc any) (int64, error) {
	return db.write(ctx, coll, id, doc, db.svc.Put)
}

// Patch applies update operators ({"$set": {...}, "$inc": {...}, "$push":
// …}, as in docs/api.md) to a document and returns the change's sequence
// number.
func (db *DB) Patch(ctx context.Context, coll, id string, ops any) (int64, error) {
	return db.write(ctx, coll, id, ops, db.svc.Patch)
}

// Delete deletes a document and returns the change's sequence number.
func (db *DB) Delete(ctx context.Context, coll, id string) (int64, error) {
	return db.write(ctx, coll, id, nil, func(ctx context.Context, coll, id string, _ []byte) (int64, error) {
		return db.svc.Delete(ctx, coll, id)
	})
}

func (db *DB) write(ctx context.Context, coll, id string, v any, do func(context.Context, string, string, []byte) (int64, error)) (int64, error) {
	if id == "" {
		return 0, invalid("empty document id")
	}
	var body []byte
	if v != nil {
		var err error
		if body, err = encode(v); err != nil {
			return 0, invalid("the document cannot be encoded as JSON: " + err.Error())
		}
	}
	if !db.enter() {
		return 0, ErrClosed
	}
	defer db.mu.RUnlock()
	seq, err := do(ctx, coll, id, body)
	if err != nil {
		return 0, db.fail(err)
	}
	return seq, nil
}

func encode(v any) ([]byte, error) {
	switch b := v.(type) {
	case json.RawMessage:
		return b, nil
	case []byte:
		return b, nil
	}
	return json.Marshal(v)
}

// DefaultScanLimit is Scan's page size when limit <= 0, as the HTTP API's.
const DefaultScanLimit = 100

// Scan returns up to limit documents of a collection in key order, starting
// at the key from (inclusive; "" from the first), reflecting buffered
// writes. limit <= 0 is DefaultScanLimit.
func (db *DB) Scan(ctx context.Context, coll, from string, limit int) ([]json.RawMessage, error) {
	if limit <= 0 {
		limit = DefaultScanLimit
	}
	if !db.enter() {
		return nil, ErrClosed
	}
	defer db.mu.RUnlock()
	c, err := db.svc.Collection(coll)
	if err != nil {
		return nil, db.fail(err)
	}
	ds, err := db.svc.Scan(ctx, coll, from, limit)
	if err != nil {
		return nil, db.fail(err)
	}
	out := make([]json.RawMessage, len(ds))
	for i, d := range ds {
		out[i] = document.EncodeJSON(c.Table.Schema, d)
	}
	return out, nil
}

// Close leaves the protocol cleanly: it waits for the calls in flight,
// stops the appliers (they finish their batch and give their partitions
// back), runs the mappings' Cleanup, drops the near-cache copies and gives
// their leases back, so that no writer waits for them, and closes the
// connections. Sessions begun here and not committed stay in Redis until
// they time out (writeback.sessionTimeout), as a sidecar's do when it
// stops. Later calls fail with ErrClosed. It is idempotent.
func (db *DB) Close() error {
	db.once.Do(func() {
		db.mu.Lock()
		db.closed = true
		db.mu.Unlock()
		db.cancel()
		db.wg.Wait()
		db.sessions.Close()
		db.core.Close()
	})
	return nil
}

// fail turns a document service error into the HTTP API's answer, as a
// *client.Error whose Cause is err, and logs what the API would log.
func (db *DB) fail(err error) error {
	return db.answer(document.Classify(err), err)
}

// answer renders a Failure as the HTTP client returns the API's answer (a
// retry-safe one with the API's Retry-After of 1 s), with err as Cause,
// and logs what the API would log.
func (db *DB) answer(f document.Failure, err error) error {
	switch {
	case f.Internal:
		db.log.Error(f.Log, "err", err)
	case f.Log != "":
		db.log.Warn(f.Log, "err", err)
	}
	e := &client.Error{StatusCode: f.Status, Code: f.Code, Message: f.Msg, Retry: f.Retry == document.RetrySafe, Cause: err}
	if e.Retry {
		e.RetryAfter = time.Second
	}
	return e
}

// invalid is a 400 invalid_argument answer.
func invalid(msg string) error {
	return &client.Error{StatusCode: 400, Code: client.CodeInvalidArgument, Message: msg}
}
