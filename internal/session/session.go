// Package session serves Design 2: sessions that read mapped cache entries
// under S leases and commit SQL DML, cache changes and the keys they affect
// into a queue, atomically in Redis; the queues' pending sessions, read by
// the appliers (package bgt) and by misses, which apply the queue through
// the last session a missing entry depends on before loading it through
// its mapping (package mappings). It composes Redis scripts, the lease
// library and the mappings; it speaks no HTTP and runs no DML itself.
package session

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/writeback/writeback/internal/gopool"
	"github.com/writeback/writeback/internal/lease"
	"github.com/writeback/writeback/internal/metrics"
	"github.com/writeback/writeback/internal/rscript"
	"github.com/writeback/writeback/internal/sqlcheck"
	"github.com/writeback/writeback/internal/store"
	"github.com/writeback/writeback/mappings"
)

// Family is a configured family of queues: a commit names "<family>/<key>"
// and its statements may change only Tables of Store.
type Family struct {
	Name      string
	StoreName string
	Store     store.SessionStore
	Tables    []string
	// Role is the database role its statements run under ("": the
	// store's user).
	Role string
	// WriteThrough: a commit is acknowledged only once the store has
	// applied its session (and every session before it in its queue);
	// otherwise once the session is durable in Redis (write-back).
	WriteThrough bool
	// Serial: the family's batches are applied one at a time (see
	// store.Session.Lock, which names the family).
	Serial bool
}

// PrefixApplier applies a queue's pending sessions up to and including seq
// to the store (bgt.QueueApplier). A miss calls it before loading an entry
// whose mapping names pending sessions, and a write-through commit before
// it answers.
type PrefixApplier interface {
	ApplyThrough(ctx context.Context, queue string, seq int64) error
}

// Config tunes the service.
type Config struct {
	Prefix        string
	Partitions    int
	LeaseLifetime time.Duration // S, X and I leases
	// LeaseWait bounds how long a session waits for a lease another holds
	// (writeback.leaseWait; 0: DefaultLeaseWait); never past the expiry of
	// the session's first lease.
	LeaseWait      time.Duration
	SessionTimeout time.Duration // a session not committed or aborted within it is forgotten
	Replicas       int           // WAIT for this many replicas before acknowledging a commit
	ReplicaTimeout time.Duration
	// InSync, when set, tracks the in-sync replicas a commit waits for
	// (rscript.InSync).
	InSync *rscript.InSync
	// FixedBytes bounds the entries of immutable mappings kept in process
	// (writeback.immutableCache); 0 keeps none.
	FixedBytes int64
}

// Service serves sessions.
type Service struct {
	rdb    redis.UniversalClient
	keys   Keys
	cfg    Config
	fams   map[string]*Family
	maps   *mappings.Set
	leases *lease.Client
	m      *metrics.Sessions
	base   *metrics.Metrics
	log    *slog.Logger
	wakes  wakeups // of requests waiting for leases this process releases
	valid  checked // statements CheckDML accepted
	gone   forgets // records of committed sessions to delete
	known  knownSessions
	fixed  *fixedCopies // entries of immutable mappings read outside sessions
	// cluster: Redis Cluster, where a session's record and its queue's
	// partition are in different slots, so no script reads both.
	cluster bool

	// Applier applies queue prefixes for misses; set before serving.
	Applier PrefixApplier
	// Fallback, if set before serving, reports that pinned memory is over
	// writeback.pinnedMemoryLimit: every family then writes through.
	Fallback func() bool
}

// New returns the service.
func New(rdb redis.UniversalClient, cfg Config, fams map[string]*Family, maps *mappings.Set, m *metrics.Sessions, base *metrics.Metrics, log *slog.Logger) *Service {
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = 30 * time.Second
	}
	if cfg.ReplicaTimeout <= 0 {
		cfg.ReplicaTimeout = 2 * time.Second
	}
	if cfg.LeaseWait <= 0 {
		cfg.LeaseWait = DefaultLeaseWait
	}
	_, cluster := rdb.(*redis.ClusterClient)
	return &Service{rdb: rdb, keys: NewKeys(cfg.Prefix, cfg.Partitions), cfg: cfg, fams: fams, maps: maps,
		leases: lease.NewClient(rdb), m: m, base: base, log: log, cluster: cluster, fixed: newFixedCopies(cfg.FixedBytes)}
}

// Keys is the service's Redis layout.
func (s *Service) Keys() Keys { return s.keys }

// Families returns the configured queue families by name.
func (s *Service) Families() map[string]*Family { return s.fams }

// newID returns a random session id: 32 hex digits.
func newID() string {
	var b [16]byte
	_, _ = crand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// newToken returns an I-lease token: unique among one key's fillers.
func newToken() string { return strconv.FormatUint(rand.Uint64(), 36) }

// validID says whether id can be a session id (it names a Redis key).
func validID(id string) bool {
	if len(id) != 32 {
		return false
	}
	_, err := hex.DecodeString(id)
	return err == nil
}

// Begin starts a session and returns its id.
func (s *Service) Begin(ctx context.Context) (string, error) {
	id := newID()
	pipe := s.rdb.Pipeline()
	pipe.HSet(ctx, s.keys.Record(id), "_", time.Now().UnixMicro()) // its start, µs: its age for the wound-wait rule
	pipe.PExpire(ctx, s.keys.Record(id), s.cfg.SessionTimeout)
	if _, err := pipe.Exec(ctx); err != nil {
		return "", fmt.Errorf("session: begin: %w", err)
	}
	s.m.Begun.Inc()
	return id, nil
}

// ref is a cache key resolved through its mapping.
type ref struct {
	key     string
	part    int
	queue   string // "" when the value depends on no queue
	mapping mappings.Mapping
	params  mappings.Params
	fixed   bool // the mapping's entries are immutable (fixedCopies)
}

// checkKey refuses keys that cannot name a cache entry.
func checkKey(key string) error {
	if key == "" || len(key) > 512 {
		return invalid("a cache key must be 1 to 512 bytes long")
	}
	for _, r := range key {
		if r < 0x20 || r == 0x7f || r == 0xfffd {
			return invalid("cache key %q holds a control character or invalid UTF-8", truncate(key))
		}
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

func (s *Service) resolve(key string) (ref, error) {
	if err := checkKey(key); err != nil {
		return ref{}, err
	}
	m, p, ok := s.maps.Match(key)
	if !ok {
		return ref{}, ErrNoMapping
	}
	r := ref{key: key, mapping: m, params: p, queue: m.Queue(p), fixed: mappings.Immutable(m)}
	if r.queue != "" {
		r.part = s.keys.Partition(r.queue)
	} else {
		r.part = s.keys.Partition(key)
	}
	return r, nil
}

// record reads session id's record: the keys it read under leases, each
// with its lease mode, and the session's start (its age for the wound-wait
// rule).
func (s *Service) record(ctx context.Context, id string) (map[string]string, int64, error) {
	if !validID(id) {
		return nil, 0, ErrUnknownSession
	}
	h, err := s.rdb.HGetAll(ctx, s.keys.Record(id)).Result()
	if err != nil {
		return nil, 0, fmt.Errorf("session: %w", err)
	}
	return parseRecord(h)
}

// parseRecord returns the keys and age of a session record read with
// HGETALL (see record).
func parseRecord(h map[string]string) (map[string]string, int64, error) {
	if len(h) == 0 {
		return nil, 0, ErrUnknownSession
	}
	out := map[string]string{}
	for f, mode := range h {
		if k, ok := strings.CutPrefix(f, "k:"); ok {
			out[k] = mode
		}
	}
	start, _ := strconv.ParseInt(h["_"], 10, 64)
	return out, start, nil
}

// byPartition groups the session's read keys by partition, each group
// sorted. Keys whose mapping is gone (a configuration change) keep the
// partition of their own name: their leases, if any, are there.
func (s *Service) byPartition(read map[string]string) map[int][]string {
	out := map[int][]string{}
	for k := range read {
		p := s.keys.Partition(k)
		if r, err := s.resolve(k); err == nil {
			p = r.part
		}
		out[p] = append(out[p], k)
	}
	for p := range out {
		sort.Strings(out[p])
	}
	return out
}

func (s *Service) leaseKeys(p int, keys []string) []lease.Key {
	out := make([]lease.Key, len(keys))
	for i, k := range keys {
		out[i] = s.keys.LeaseKey(p, k)
	}
	return out
}

// Validate makes the session's S leases golden if it still holds every
// lease it took: from then on no writer can void them, until the session
// commits, aborts or its leases expire. A session whose lease was voided
// is aborted (AbortedError).
func (s *Service) Validate(ctx context.Context, id string) error {
	read, _, err := s.record(ctx, id)
	if err != nil {
		return err
	}
	groups := s.byPartition(read)
	err = s.validate(ctx, id, groups, -1)
	var ae *AbortedError
	if errors.As(err, &ae) {
		// A lease was voided: the session is over. (After another error —
		// Redis unreachable — it stays, and validate may be asked again.)
		s.release(ctx, id, groups, -1)
		s.m.Aborts.WithLabelValues(metrics.AbortVoided).Inc()
	}
	return err
}

// validate makes the session's S leases golden in every partition of
// groups but skip (-1: none), all in one round trip; a lease voided or
// expired is an AbortedError naming its key.
func (s *Service) validate(ctx context.Context, id string, groups map[int][]string, skip int) error {
	var calls []rscript.Call
	var keys [][]string
	for _, p := range sortedParts(groups) {
		if p == skip {
			continue
		}
		calls = append(calls, lease.ValidateCall(s.leaseKeys(p, groups[p]), id))
		keys = append(keys, groups[p])
	}
	if len(calls) == 0 {
		return nil
	}
	replies, errs, _ := rscript.Durable{Client: s.rdb}.RunAll(ctx, calls)
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("session: validate: %w", err)
		}
		if n, _ := replies[i].(int64); n > 0 {
			return &AbortedError{Reason: ReasonVoided, Key: keys[i][n-1]}
		}
	}
	return nil
}

// checkRelease ends a session that commits nothing: it gives up every
// lease of the session, checking that it still held each one
// (lease.CheckReleaseCall), one step per partition in one round trip, and
// wakes the requests of this process waiting for those leases. A lease
// lost — voided by an older session's X, or expired — is an AbortedError
// (ReasonVoided), as validate's: what the session read may not be one
// state of the cache. Releasing one partition's leases before the next
// is checked changes nothing: a session that changes keys of both needs X
// leases on the second's too, which it gets only by voiding them (and
// this one then aborts) or after this release.
//
// b is the session's record, read from Redis (b.notes is 0), or as this
// process knows it (b.notes counts its notes): then each step first checks
// that the record still counts b.notes notes, and one that finds notes made
// elsewhere changes nothing; the record is read, and the keys not yet
// released are checked and released as above. The record is deleted in the
// same round trip, or, when known, with other commits' (forgetLater).
func (s *Service) checkRelease(ctx context.Context, id string, b commitBasis, groups map[int][]string) error {
	known := b.notes > 0
	parts := sortedParts(groups)
	calls := make([]rscript.Call, 0, len(parts)+1)
	var released []string
	notes := strconv.FormatInt(b.notes, 10)
	for _, p := range parts {
		lks := s.leaseKeys(p, groups[p])
		if known {
			calls = append(calls, lease.CheckReleaseIfCall(lks, id, s.keys.Record(id), "n", notes))
		} else {
			calls = append(calls, lease.CheckReleaseCall(lks, id))
		}
		for _, k := range lks {
			released = append(released, k.Lease)
		}
	}
	if !known {
		calls = append(calls, rscript.Call{Script: forgetScript, Keys: []string{s.keys.Record(id)}})
	}
	replies, errs, _ := rscript.Durable{Client: s.rdb}.RunAll(ctx, calls)
	s.wakes.wake(released...)
	var moved []int // partitions whose step found notes made elsewhere
	var lost error  // the first lease lost
	for i, p := range parts {
		if errs[i] != nil {
			return fmt.Errorf("session: validate: %w", errs[i])
		}
		switch n, _ := replies[i].(int64); {
		case n < 0:
			moved = append(moved, p)
		case n > 0 && lost == nil:
			lost = &AbortedError{Reason: ReasonVoided, Key: groups[p][n-1]}
		}
	}
	if !known {
		if err := errs[len(parts)]; err != nil {
			s.log.Debug("deleting a session's record", "err", err)
		}
		return lost
	}
	if len(moved) == 0 {
		s.forgetLater(id)
		return lost
	}
	// Notes made elsewhere: the record says which keys the session holds
	// leases on; those of the partitions released above are done.
	read, _, err := s.record(ctx, id)
	if err != nil {
		return err
	}
	if lost != nil {
		s.release(ctx, id, s.byPartition(read), -1)
		return lost
	}
	for _, p := range parts {
		if !slices.Contains(moved, p) {
			for _, k := range groups[p] {
				delete(read, k)
			}
		}
	}
	return s.checkRelease(ctx, id, commitBasis{read: read}, s.byPartition(read))
}

// Abort releases the session's leases and forgets it.
func (s *Service) Abort(ctx context.Context, id string) error {
	s.known.forget(id)
	read, _, err := s.record(ctx, id)
	if err != nil {
		return err
	}
	s.release(ctx, id, s.byPartition(read), -1)
	s.m.Aborts.WithLabelValues(metrics.AbortClient).Inc()
	return nil
}

// abortQuietly releases a session's leases after a failure, on a context of
// its own (the request's may be done).
func (s *Service) abortQuietly(id, reason string) {
	s.known.forget(id)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if read, _, err := s.record(ctx, id); err == nil {
		s.release(ctx, id, s.byPartition(read), -1)
	}
	s.m.Aborts.WithLabelValues(reason).Inc()
}

// release gives up every lease of the session and deletes its record, in
// one round trip, and wakes the requests of this process waiting for
// them; the leases in partition done (-1: none) are gone already (its
// commit script released them). Failures are logged: the leases expire
// anyway. A committed session with no lease left (all were in its
// queue's partition) only has its record to delete: that joins the
// deletions of other commits, off the request's path (forgetLater).
func (s *Service) release(ctx context.Context, id string, groups map[int][]string, done int) {
	var calls []rscript.Call
	var released []string
	for p, keys := range groups {
		lks := s.leaseKeys(p, keys)
		if p != done {
			calls = append(calls, lease.ReleaseCall(lks, id))
		}
		for _, k := range lks {
			released = append(released, k.Lease)
		}
	}
	if len(calls) == 0 && done >= 0 {
		s.wakes.wake(released...)
		s.forgetLater(id)
		return
	}
	calls = append(calls, rscript.Call{Script: forgetScript, Keys: []string{s.keys.Record(id)}})
	_, errs, _ := rscript.Durable{Client: s.rdb}.RunAll(ctx, calls)
	if err := errors.Join(errs...); err != nil {
		s.log.Debug("releasing a session's leases", "err", err)
	}
	s.wakes.wake(released...)
}

// forgets batches the deletion of committed sessions' records: the
// commits that end while one batch is in Redis go together in the next, a
// round trip for many instead of one each.
type forgets struct {
	mu      sync.Mutex
	ids     []string
	running bool
}

// forgetTimeout bounds a batch of record deletions.
const forgetTimeout = 5 * time.Second

// forgetLater deletes the record of session id, committed with no lease
// left to release, in the next batch. Until then the record only says
// which keys the session read: its leases are gone, and its object,
// until the appliers pop it, refuses a second commit (commitScript's
// -4); a batch runs as soon as the one before it ends, a round trip or
// so after the commit, long before an applier has applied and popped the
// session. A deletion that fails, or that a stopping process never sends,
// leaves the record to expire with the session timeout, as a failed
// release does.
func (s *Service) forgetLater(id string) {
	s.gone.mu.Lock()
	s.gone.ids = append(s.gone.ids, id)
	start := !s.gone.running
	s.gone.running = true
	s.gone.mu.Unlock()
	if start {
		gopool.Go(s.forgetBatches)
	}
}

// forgetBatches deletes the queued records, a batch per round trip, until
// none is left.
func (s *Service) forgetBatches() {
	for {
		s.gone.mu.Lock()
		ids := s.gone.ids
		s.gone.ids = nil
		if len(ids) == 0 {
			s.gone.running = false
			s.gone.mu.Unlock()
			return
		}
		s.gone.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), forgetTimeout)
		pipe := s.rdb.Pipeline()
		for _, id := range ids {
			pipe.Del(ctx, s.keys.Record(id)) // one key each: a Cluster's slots differ
		}
		if _, err := pipe.Exec(ctx); err != nil {
			s.log.Debug("forgetting committed sessions", "sessions", len(ids), "err", err)
		}
		cancel()
	}
}

// forgetScript deletes a session's record (a script, so that it shares
// release's round trip). KEYS: 1 record.
var forgetScript = redis.NewScript(`return redis.call('DEL', KEYS[1])`)

// runWrite runs a script that changes pinned state and, when replicas are
// required and the script succeeded (its first reply is positive), fails
// unless they confirmed it (rscript.Durable).
func (s *Service) runWrite(ctx context.Context, sc *redis.Script, keys []string, args []any) ([]any, error) {
	d := rscript.Durable{Client: s.rdb, Replicas: s.cfg.Replicas, Timeout: s.cfg.ReplicaTimeout, InSync: s.cfg.InSync}
	reply, repl, err := d.Run(ctx, rscript.Call{Script: sc, Keys: keys, Args: args})
	if err != nil {
		return nil, err
	}
	v, ok := reply.([]any)
	if !ok {
		return nil, fmt.Errorf("session: unexpected script reply %T", reply)
	}
	if len(v) > 0 {
		if code, _ := v[0].(int64); code > 0 && repl != nil {
			return nil, repl
		}
	}
	return v, nil
}

// checkQueue validates a queue name and returns its family.
func (s *Service) checkQueue(q string) (*Family, error) {
	family, key, ok := strings.Cut(q, "/")
	if !ok || key == "" {
		return nil, invalid("queue %q must be <family>/<key>, e.g. \"bank/3\"", truncate(q))
	}
	f := s.fams[family]
	if f == nil {
		names := make([]string, 0, len(s.fams))
		for n := range s.fams {
			names = append(names, n)
		}
		sort.Strings(names)
		return nil, invalid("queue family %q is not configured; use one of: %s", truncate(family), strings.Join(names, ", "))
	}
	if len(q) > 200 {
		return nil, invalid("queue %q is longer than 200 bytes", truncate(q))
	}
	for _, r := range key {
		if r < 0x20 || r == 0x7f || r == '{' || r == '}' || r == 0xfffd {
			return nil, invalid("queue %q holds braces, a control character or invalid UTF-8", truncate(q))
		}
	}
	return f, nil
}

// checkStatement validates one statement against a family. A statement
// text that was accepted before with as many arguments is not parsed
// again (see checked): an application sends the same few texts over and
// over, with different arguments, which are checked every time.
func (s *Service) checkStatement(f *Family, i int, st store.Statement) error {
	k := checkedKey{family: f.Name, sql: st.SQL, nargs: len(st.Args)}
	if !s.valid.has(k) {
		if _, err := sqlcheck.CheckDML(sqlcheck.Dialect(f.Store.Dialect()), st.SQL, f.Tables, len(st.Args)); err != nil {
			return invalid("statements[%d]: %v", i, err)
		}
		s.valid.add(k)
	}
	for j, a := range st.Args {
		if !json.Valid(a) {
			return invalid("statements[%d].args[%d] is not a JSON value", i, j)
		}
	}
	return nil
}

// checked remembers statements CheckDML accepted, up to maxChecked of them
// no longer than maxCheckedSQL bytes each: a client sending ever new texts
// (or refused ones, which are never remembered) gets each one parsed, and
// the memory stays bounded. A family's tables come from the configuration
// and do not change while the service runs, so an accepted text stays
// acceptable.
type checked struct {
	m sync.Map // checkedKey → struct{}
	n atomic.Int64
}

type checkedKey struct {
	family string
	sql    string
	nargs  int
}

const (
	maxChecked    = 4096
	maxCheckedSQL = 4096
)

func (c *checked) has(k checkedKey) bool {
	_, ok := c.m.Load(k)
	return ok
}

func (c *checked) add(k checkedKey) {
	if len(k.sql) > maxCheckedSQL || c.n.Load() >= maxChecked {
		return
	}
	if _, loaded := c.m.LoadOrStore(k, struct{}{}); !loaded {
		c.n.Add(1)
	}
}
