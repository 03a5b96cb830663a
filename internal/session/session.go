// Package session serves Design 2: sessions that read mapped cache entries
// under S leases and commit SQL DML, cache changes and the keys they affect
// into a queue, atomically in Redis; the queues' pending sessions, read by
// the appliers (package bgt) and by misses, which apply the queue through
// the last session a missing entry depends on before loading it through
// its mapping (package mappings). It composes Redis scripts, the lease
// library and the mappings; it speaks no HTTP and runs no DML itself.
package session

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/writeback/writeback/internal/jitter"
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
	return &Service{rdb: rdb, keys: NewKeys(cfg.Prefix, cfg.Partitions), cfg: cfg, fams: fams, maps: maps,
		leases: lease.NewClient(rdb), m: m, base: base, log: log}
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
	r := ref{key: key, mapping: m, params: p, queue: m.Queue(p)}
	if r.queue != "" {
		r.part = s.keys.Partition(r.queue)
	} else {
		r.part = s.keys.Partition(key)
	}
	return r, nil
}

// readAttempts bounds the tries of a read whose lease is refused by a
// golden S (a commit in progress): a few short backoffs ride it out;
// longer conflicts abort.
const readAttempts = 4

// Read returns the value of a mapped cache key. In a session (id not
// empty) it first takes an S lease on it (X with forUpdate), which the
// commit validates, waiting for a conflicting lease under the wound-wait
// rule (package lease) for at most Config.LeaseWait; a lease not granted
// within it aborts the session (AbortedError). On a miss it applies the
// key's queue through the last pending session the key depends on, loads
// the value through the mapping and installs it under an I lease.
func (s *Service) Read(ctx context.Context, id, key string, forUpdate bool) (json.RawMessage, error) {
	vals, err := s.ReadMany(ctx, id, []string{key}, forUpdate)
	if err != nil {
		return nil, err
	}
	if vals[0] == nil {
		return nil, ErrNotFound
	}
	return vals[0], nil
}

// peek serves reads outside a session from the entries that are cached:
// one round trip of plain GETs, no script. Such a read takes no lease, and
// an entry changes only inside the commit that changes it (one script), so
// a cached entry is the latest committed value whatever leases its key
// has. vals[i] is nil for a miss, which goes through readScript (the I
// lease of its fill).
func (s *Service) peek(ctx context.Context, refs []ref) ([]json.RawMessage, error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(refs))
	for i, r := range refs {
		cmds[i] = pipe.Get(ctx, s.keys.Entry(r.part, r.key))
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	vals := make([]json.RawMessage, len(refs))
	for i, c := range cmds {
		v, err := c.Result()
		switch {
		case errors.Is(err, redis.Nil):
		case err != nil:
			return nil, fmt.Errorf("session: read: %w", err)
		default:
			s.m.Reads.WithLabelValues("hit").Inc()
			vals[i] = json.RawMessage(v)
		}
	}
	return vals, nil
}

// readCall is one run of readScript for r with the I token tok.
func (s *Service) readCall(r ref, id, mode string, wp waitPlan, tok string) rscript.Call {
	lk := s.keys.LeaseKey(r.part, r.key)
	return rscript.Call{
		Script: readScript,
		Keys:   []string{lk.Lease, lk.Entry, s.keys.Mapping(r.part, r.key), lk.Wait},
		Args:   []any{id, mode, s.cfg.LeaseLifetime.Milliseconds(), tok, wp.start, wp.deadline},
	}
}

// firstRead is a reply of readScript already obtained (ReadMany's shared
// round trip) and the I token it ran with.
type firstRead struct {
	reply []any
	tok   string
}

// readLeased runs readScript for r until it answers (waiting for leases,
// retrying refusals) and computes a miss; first, if not nil, is the reply
// of its first run.
func (s *Service) readLeased(ctx context.Context, r ref, id, mode string, wp waitPlan, first *firstRead) (json.RawMessage, error) {
	key := r.key
	lk := s.keys.LeaseKey(r.part, key)
	w := lease.Waiter{ID: id, Start: wp.start, Deadline: wp.deadline}
	if mode != "" {
		w.Mode = lease.Mode(mode[0])
	}
	since, waits, refusals := time.Now(), 0, 0
	for {
		var woke <-chan struct{}
		if mode != "" {
			woke = s.wakes.watch(lk.Lease)
		}
		var (
			v   []any
			tok string
			err error
		)
		if first != nil {
			v, tok, first = first.reply, first.tok, nil
		} else {
			tok = newToken()
			c := s.readCall(r, id, mode, wp, tok)
			v, err = c.Script.Run(ctx, s.rdb, c.Keys, c.Args...).Slice()
		}
		if err != nil {
			if waits > 0 {
				s.leave(ctx, lk, w)
			}
			return nil, fmt.Errorf("session: read: %w", err)
		}
		code, _ := v[0].(int64)
		if code >= 0 && waits > 0 {
			s.waited(ctx, id, wp, since, lk.Lease)
		}
		switch code {
		case -2: // queued: wait for a release, or poll
			if waits++; waits == 1 {
				conflict, _ := v[1].(string)
				s.base.LeaseConflicts.WithLabelValues(conflict).Inc()
			}
			if err := pause(ctx, woke, waits); err != nil {
				s.endWait(metrics.WaitCancelled, since)
				s.leave(ctx, lk, w)
				return nil, err
			}
			continue
		case -1, -3:
			conflict, _ := v[1].(string)
			s.base.LeaseConflicts.WithLabelValues(conflict).Inc()
			if refusals++; code == -1 && refusals < readAttempts {
				if err := sleep(ctx, lease.Backoff(time.Millisecond, s.cfg.LeaseLifetime/8, refusals)); err != nil {
					return nil, err
				}
				continue
			}
			s.m.Reads.WithLabelValues("conflict").Inc()
			if id != "" {
				s.abortQuietly(id, metrics.AbortConflict)
			}
			ae := &AbortedError{Reason: ReasonConflict, Conflict: lease.Conflict(conflict), Key: key}
			if code == -3 {
				s.endWait(metrics.WaitTimeout, since)
				ae.Waited = time.Since(since)
			}
			return nil, ae
		case 1:
			s.m.Reads.WithLabelValues("hit").Inc()
			val, _ := v[1].(string)
			return json.RawMessage(val), nil
		default:
			s.m.Reads.WithLabelValues("miss").Inc()
			seqText, _ := v[1].(string)
			mapped, _ := strconv.ParseInt(seqText, 10, 64)
			filler, _ := v[2].(int64)
			return s.miss(ctx, r, mapped, filler == 1, tok)
		}
	}
}

// miss computes a missing entry: the queue through the mapped session is
// applied first, so that the store holds every acknowledged session the
// value depends on; sessions committed since the miss voided the I lease
// if they change the key, so a value older than them is never installed.
func (s *Service) miss(ctx context.Context, r ref, mapped int64, filler bool, tok string) (json.RawMessage, error) {
	lk := []string{s.keys.Lease(r.part, r.key), s.keys.Entry(r.part, r.key)}
	giveBack := func() {
		if filler {
			_ = fillScript.Run(context.WithoutCancel(ctx), s.rdb, lk, tok, "", 0).Err()
		}
	}
	if mapped > 0 {
		if s.Applier == nil {
			giveBack()
			return nil, fmt.Errorf("session: %s has pending sessions and no applier runs here", r.key)
		}
		if err := s.Applier.ApplyThrough(ctx, r.queue, mapped); err != nil {
			giveBack()
			return nil, err
		}
	}
	val, err := r.mapping.Load(ctx, r.params)
	if err != nil {
		giveBack()
		return nil, fmt.Errorf("session: loading %q through its mapping: %w", truncate(r.key), err)
	}
	if val != nil {
		val, err = compactJSON(val)
		if err != nil {
			giveBack()
			return nil, fmt.Errorf("session: the mapping of %q returned invalid JSON: %w", truncate(r.key), err)
		}
	}
	if filler {
		text := ""
		if val != nil {
			text = string(val)
		}
		if err := fillScript.Run(ctx, s.rdb, lk, tok, text, jitter.TTL(mappings.TTL(r.mapping)).Milliseconds()).Err(); err != nil {
			return nil, fmt.Errorf("session: fill: %w", err)
		}
	}
	if val == nil {
		return nil, ErrNotFound
	}
	return val, nil
}

func compactJSON(v json.RawMessage) (json.RawMessage, error) {
	var b bytes.Buffer
	if err := json.Compact(&b, v); err != nil {
		return nil, err
	}
	return json.RawMessage(b.Bytes()), nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// record returns the keys a session read and the lease mode of each, and
// the session's start (its age for the wound-wait rule).
func (s *Service) record(ctx context.Context, id string) (map[string]string, int64, error) {
	if !validID(id) {
		return nil, 0, ErrUnknownSession
	}
	h, err := s.rdb.HGetAll(ctx, s.keys.Record(id)).Result()
	if err != nil {
		return nil, 0, fmt.Errorf("session: %w", err)
	}
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

// Abort releases the session's leases and forgets it.
func (s *Service) Abort(ctx context.Context, id string) error {
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
// anyway.
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
	calls = append(calls, rscript.Call{Script: forgetScript, Keys: []string{s.keys.Record(id)}})
	_, errs, _ := rscript.Durable{Client: s.rdb}.RunAll(ctx, calls)
	if err := errors.Join(errs...); err != nil {
		s.log.Debug("releasing a session's leases", "err", err)
	}
	s.wakes.wake(released...)
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

// checkStatement validates one statement against a family.
func checkStatement(f *Family, i int, st store.Statement) error {
	if _, err := sqlcheck.CheckDML(sqlcheck.Dialect(f.Store.Dialect()), st.SQL, f.Tables, len(st.Args)); err != nil {
		return invalid("statements[%d]: %v", i, err)
	}
	for j, a := range st.Args {
		if !json.Valid(a) {
			return invalid("statements[%d].args[%d] is not a JSON value", i, j)
		}
	}
	return nil
}
