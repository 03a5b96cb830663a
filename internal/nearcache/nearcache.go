// Package nearcache is a sidecar's in-process first-level cache of
// documents (L1): decoded documents and their memoized reply bytes, each
// valid until the local deadline of the read lease it was installed under.
// It does no I/O: the leases themselves live in Redis (buffer's lease
// scripts), and the document service drives both.
//
// Coherence rests on three rules, enforced here under otter's per-key lock
// (Compute):
//
//   - an entry is served only before its deadline, which the caller derives
//     from the monotonic time it sent the lease request, so it is never past
//     the expiry Redis recorded;
//   - a value read under a lease is installed only with a Ticket taken
//     before the request was sent, and only if nothing revoked the key or
//     wrote it locally since (the ticket's epoch is unchanged and no local
//     write is in progress);
//   - Revoke and BeginWrite first move the key's epoch, then drop its entry,
//     so an install either sees the new epoch and refuses, or ran before the
//     drop and is dropped with it;
//   - a sidecar's own writes install the entry the latest of them left
//     (writes.go), only if nothing revoked the key while they ran.
package nearcache

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/maypok86/otter/v2"
)

// Memo slots of an Entry: reply bytes computed once per entry.
const (
	MemoJSON  = iota // the HTTP body (its ETag: Entry.Tag)
	MemoRESP2        // HGETALL's reply, RESP2
	MemoRESP3        // HGETALL's reply, RESP3
	numMemos
)

// Entry is a document held under a read lease. Its fields are read-only
// once installed.
type Entry struct {
	Hash     map[string]string // field → canonical JSON text, as the cache entry in Redis holds it
	Gen      uint64            // the lease's generation (the holder's request number)
	deadline int64             // monotonic ns (Now) until which it may be served
	size     uint32
	used     atomic.Bool // served by Get since it was installed
	idle     uint8       // lease periods in a row before this one in which the key was not read
	hot      bool        // a hot mark (MarkHot), not a copy: no Hash, no lease
	memo     [numMemos]atomic.Pointer[[]byte]
	tag      atomic.Pointer[string] // MemoJSON's ETag
}

// NewEntry returns an entry for h, servable until deadline (Now's clock).
func NewEntry(h map[string]string, gen uint64, deadline int64) *Entry {
	size := 64
	for f, v := range h {
		size += len(f) + len(v) + 32
	}
	return &Entry{Hash: h, Gen: gen, deadline: deadline, size: uint32(min(size, 1<<31))}
}

// Memo returns the bytes of memo slot k, built on first use. Concurrent
// first uses may both build; one result stays.
func (e *Entry) Memo(k int, build func() []byte) []byte {
	if p := e.memo[k].Load(); p != nil {
		return *p
	}
	b := build()
	e.memo[k].CompareAndSwap(nil, &b)
	return *e.memo[k].Load()
}

// Tag returns the ETag of MemoJSON's body, built on first use, as Memo
// does: a string, so that a hit converts nothing.
func (e *Entry) Tag(build func() string) string {
	if p := e.tag.Load(); p != nil {
		return *p
	}
	t := build()
	e.tag.CompareAndSwap(nil, &t)
	return *e.tag.Load()
}

// keepMemos makes e share old's document and reply bytes if both hold the
// same value: a renewal usually leases again what the copy held, and its
// replies need not be encoded again.
func (e *Entry) keepMemos(old *Entry) {
	if len(e.Hash) != len(old.Hash) {
		return
	}
	for f, v := range e.Hash {
		if w, ok := old.Hash[f]; !ok || w != v {
			return
		}
	}
	e.Hash = old.Hash
	for k := range e.memo {
		if p := old.memo[k].Load(); p != nil {
			e.memo[k].CompareAndSwap(nil, p)
		}
	}
	if p := old.tag.Load(); p != nil {
		e.tag.CompareAndSwap(nil, p)
	}
}

// Ticket is taken before a lease request is sent; Install honours it only
// if nothing revoked or wrote the key since.
type Ticket struct {
	key   string
	epoch uint64
}

// stripes is how many epoch counters the keys share: a revocation or local
// write of one key also refuses installs of the keys sharing its stripe,
// which costs a later Redis read, never coherence.
const stripes = 4096

type stripe struct {
	epoch   atomic.Uint64 // moved by revocations and local writes: Install's check
	revoked atomic.Uint64 // moved by revocations only: a write group's check
	writers atomic.Int64  // local writes in progress

	mu     sync.Mutex             // guards groups
	groups map[string]*writeGroup // the keys with local writes in progress
	_      [24]byte               // keep stripes on their own cache lines
}

// Cache is one collection's L1.
type Cache struct {
	c       *otter.Cache[string, *Entry]
	seed    maphash.Seed
	stripes []stripe

	// OnDrop, when set, is called for entries the cache dropped by itself:
	// past their deadline (expired) or for room — not for revocations,
	// local writes or replacements. The holder may then release the
	// entry's lease.
	OnDrop func(key string, e *Entry, expired bool)
	// KeepIdle is how many lease periods in a row an entry is renewed
	// without being read (see Due); 0 renews only entries read during
	// their lease.
	KeepIdle int

	mu    sync.Mutex  // guards queue and head
	queue []installed // the installs, in order: their deadlines nearly sorted
	head  int         // queue[:head] has been through Due
}

// installed is an install waiting for Due to look at it.
type installed struct {
	key string
	e   *Entry
}

// New returns a cache of at most maxBytes of entries.
func New(maxBytes int64) (*Cache, error) {
	nc := &Cache{seed: maphash.MakeSeed(), stripes: make([]stripe, stripes)}
	c, err := otter.New(&otter.Options[string, *Entry]{
		MaximumWeight: uint64(max(maxBytes, 1)),
		Weigher:       func(k string, e *Entry) uint32 { return e.size + uint32(len(k)) },
		// Entries go at their deadline, so that their leases can be
		// released rather than left to expire in Redis.
		ExpiryCalculator: otter.ExpiryWritingFunc(func(e otter.Entry[string, *Entry]) time.Duration {
			return time.Duration(max(e.Value.deadline-Now(), 1))
		}),
		OnDeletion: func(ev otter.DeletionEvent[string, *Entry]) {
			if nc.OnDrop == nil || ev.Value.hot {
				return
			}
			switch ev.Cause {
			case otter.CauseOverflow:
				nc.OnDrop(ev.Key, ev.Value, false)
			case otter.CauseExpiration:
				nc.OnDrop(ev.Key, ev.Value, true)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	nc.c = c
	return nc, nil
}

// base is the origin of Now.
var base = time.Now()

// Now is the clock of deadlines: monotonic, in ns.
func Now() int64 { return int64(time.Since(base)) }

func (c *Cache) stripe(key string) *stripe {
	return &c.stripes[maphash.String(c.seed, key)%stripes]
}

// Get returns the key's entry if it may be served now.
func (c *Cache) Get(key string) (*Entry, bool) {
	e, ok := c.c.GetIfPresent(key)
	if !ok || e.hot {
		return nil, false
	}
	now := Now()
	if now >= e.deadline {
		return nil, false
	}
	if !e.used.Load() {
		e.used.Store(true)
	}
	return e, true
}

// Due returns up to max keys (appended to dst) whose copies come within
// window of their deadlines and are worth a new lease: the copy installed
// is still the key's, and it was read during its lease or, for up to
// KeepIdle lease periods in a row, before. Each install is looked at once,
// in install order, when its time comes, so that the holder renews — in
// the background, in batches — the leases of the documents being read,
// before their copies expire, and lets the others go: a document read now
// and then is then served from the near cache at every read, not only
// within its lease's last moments. Installs are taken in order, so one
// whose deadline is not yet within window holds back those after it: every
// copy of a cache carries the same lease lifetime, so their deadlines are
// in install order up to a round trip's difference.
func (c *Cache) Due(window time.Duration, max int, dst []string) []string {
	horizon := Now() + int64(window)
	var due []installed
	for len(dst) < max {
		due = due[:0]
		c.mu.Lock()
		for c.head < len(c.queue) && len(dst)+len(due) < max && c.queue[c.head].e.deadline <= horizon {
			due = append(due, c.queue[c.head])
			c.queue[c.head] = installed{}
			c.head++
		}
		if c.head > 1024 && c.head > len(c.queue)/2 {
			c.queue = append(c.queue[:0], c.queue[c.head:]...)
			c.head = 0
		}
		c.mu.Unlock()
		if len(due) == 0 {
			break
		}
		for _, q := range due {
			cur, ok := c.c.GetEntryQuietly(q.key)
			if ok && cur.Value == q.e && (q.e.used.Load() || int(q.e.idle) < c.KeepIdle) {
				dst = append(dst, q.key)
			}
		}
	}
	return dst
}

// Peek returns the key's copy, servable or not, without counting a read:
// the holder's view when it renews the copy's lease.
func (c *Cache) Peek(key string) (*Entry, bool) {
	cur, ok := c.c.GetEntryQuietly(key)
	if !ok || cur.Value.hot {
		return nil, false
	}
	return cur.Value, true
}

// Ticket is taken before the lease request for key is sent.
func (c *Cache) Ticket(key string) Ticket {
	return Ticket{key: key, epoch: c.stripe(key).epoch.Load()}
}

// Install makes e the key's entry if t is still good: nothing revoked the
// key, began or ended a local write of it since t was taken, and no local
// write of it is in progress. It reports whether it installed e.
func (c *Cache) Install(t Ticket, e *Entry) bool {
	st := c.stripe(t.key)
	ok := false
	c.c.Compute(t.key, func(old *Entry, found bool) (*Entry, otter.ComputeOp) {
		// Under the key's lock: a Revoke or BeginWrite that moved the epoch
		// after this check drops the entry after this function returns.
		if st.epoch.Load() != t.epoch || st.writers.Load() > 0 {
			return old, otter.CancelOp
		}
		if found && !old.hot {
			// A renewal, or a read after the copy expired: carry on
			// counting the periods the key went unread, and keep the
			// reply bytes built for the same value.
			if !old.used.Load() {
				e.idle = min(old.idle, 254) + 1
			}
			e.keepMemos(old)
		}
		ok = true
		return e, otter.WriteOp
	})
	if ok {
		c.queued(t.key, e)
	}
	return ok
}

// queued hands an installed copy to Due.
func (c *Cache) queued(key string, e *Entry) {
	c.mu.Lock()
	c.queue = append(c.queue, installed{key, e})
	c.mu.Unlock()
}

// Revoke drops the key's entry and refuses the installs of every lease
// request sent before: the holder's step before it releases its lease.
func (c *Cache) Revoke(key string) {
	st := c.stripe(key)
	st.revoked.Add(1)
	st.epoch.Add(1)
	c.c.Invalidate(key)
}

// MarkHot records that the key was written lately, until (Now's clock):
// its readers skip the lease request, which would be refused, and read
// from Redis. A mark is advisory, never a copy: it replaces no copy, and a
// copy installed later replaces it.
func (c *Cache) MarkHot(key string, until int64) {
	c.c.Compute(key, func(old *Entry, found bool) (*Entry, otter.ComputeOp) {
		if found && !old.hot && Now() < old.deadline {
			return old, otter.CancelOp
		}
		return &Entry{hot: true, deadline: until, size: 32}, otter.WriteOp
	})
}

// IsHot reports whether the key carries a hot mark that has not expired.
func (c *Cache) IsHot(key string) bool {
	e, ok := c.c.GetIfPresent(key)
	return ok && e.hot && Now() < e.deadline
}

// Bytes is the weight of the entries held.
func (c *Cache) Bytes() uint64 { return c.c.WeightedSize() }

// Len is the number of entries held.
func (c *Cache) Len() int { return c.c.EstimatedSize() }

// Drain drops every entry and refuses the installs of every lease request
// sent before, as a Revoke of every key would; it calls held for each copy
// it dropped that was still servable, whose lease the holder may then give
// back. The holder's step before it leaves the protocol.
func (c *Cache) Drain(held func(key string, e *Entry)) {
	for i := range c.stripes {
		c.stripes[i].revoked.Add(1)
		c.stripes[i].epoch.Add(1)
	}
	now := Now()
	for k, e := range c.c.All() {
		c.c.Invalidate(k)
		if !e.hot && now < e.deadline && held != nil {
			held(k, e)
		}
	}
}

// Close stops the cache's goroutines.
func (c *Cache) Close() { c.c.StopAllGoroutines() }
