package document

// The near cache (L1): documents held in this sidecar's memory under read
// leases recorded in Redis (buffer/near.go), so that a hit costs no Redis
// round trip. The protocol, and why it is linearizable:
//
//   - A copy is served only before its local deadline: the monotonic time
//     the lease request was sent, plus the lease lifetime, less
//     leaseMargin. Redis granted the lease no earlier than that and
//     recorded its expiry from its own clock, so the copy stops being
//     served before Redis lets a writer overlook it.
//   - A write with holders other than this sidecar changes nothing: the
//     write script blocks new leases, publishes a revocation to each
//     holder and answers Leased; the writer waits (awaitLeases) and sends
//     the write again. A holder that receives a revocation drops its copy
//     (nearcache.Cache.Revoke: no lease request sent before can install
//     one) and only then releases its lease in Redis and tells the writer.
//     A holder that is paused or dead simply expires. So when the write
//     takes effect, no copy older than it can be served anywhere.
//   - A sidecar's own write drops its own copy and refuses installs until
//     it is over (BeginWrite/EndWrite), so the script may drop its own
//     lease with the others.
//   - Messages lost on the way (a pub/sub reconnect) cost time, never
//     coherence: the writer then waits for the lease to expire.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/writeback/writeback/internal/buffer"
	"github.com/writeback/writeback/internal/change"
	"github.com/writeback/writeback/internal/metrics"
	"github.com/writeback/writeback/internal/nearcache"
)

// LeaseMargin is subtracted from a lease's lifetime for the local deadline:
// it covers the drift between this host's monotonic clock and Redis's.
const LeaseMargin = 100 * time.Millisecond

// NearCache configures a collection's near cache.
type NearCache struct {
	MaxBytes  int64         // the entries' budget
	LeaseTTL  time.Duration // read lease lifetime (> LeaseMargin)
	HotWindow time.Duration // a document written within it is not leased; 0: always leased
}

// nearColl is a collection's running near cache.
type nearColl struct {
	cfg    NearCache
	cache  *nearcache.Cache
	hits   prometheus.Counter
	misses prometheus.Counter
	leases map[buffer.LeaseOutcome]prometheus.Counter
	refuse prometheus.Counter
	uncach prometheus.Counter
	// extended counts renewals that extended a copy's lease (extend)
	extended prometheus.Counter
	sent     prometheus.Counter
	recv     prometheus.Counter
	wait     prometheus.Observer
	renew    chan string // documents to lease again now (after a local write)
}

// nearService is the service's side of the protocol: its holder identity,
// its channel and the writers waiting for releases.
type nearService struct {
	instance string
	gen      atomic.Uint64 // lease request numbers
	ps       *redis.PubSub
	done     chan struct{} // closed when the listener returns
	stop     chan struct{} // closed by StopNear: the renewers return
	stopped  atomic.Bool
	release  chan held // leases this sidecar keeps no copy under

	mu      sync.Mutex                 // guards waiters
	waiters map[string][]chan struct{} // lease record → writers waiting for a release
}

// StartNear starts the near caches of the collections that have one
// (Collection.Near), as holder instance: it subscribes to the sidecar's
// channel before any lease can be taken. Call StopNear at the end.
func (s *Service) StartNear(ctx context.Context, instance string) error {
	has := false
	for _, c := range s.colls {
		has = has || c.Near != nil
	}
	if !has {
		return nil
	}
	ns := &nearService{instance: instance, done: make(chan struct{}), stop: make(chan struct{}), release: make(chan held, renewQueue), waiters: map[string][]chan struct{}{}}
	for name, c := range s.colls {
		if c.Near == nil {
			continue
		}
		cache, err := nearcache.New(c.Near.MaxBytes)
		if err != nil {
			return fmt.Errorf("collections.%s.nearCache: %v", name, err)
		}
		nm := s.m.Near
		s.m.InitNear(name)
		ev := nm.Evictions.WithLabelValues(name)
		cache.OnDrop = func(id string, e *nearcache.Entry, expired bool) {
			if !expired {
				ev.Inc()
			}
			// Give the lease back rather than leave it to expire: a record
			// nobody holds is deleted, and writers find fewer holders.
			s.releaseLater(Ref{Coll: c, ID: id}, e.Gen)
		}
		lease := func(o string) prometheus.Counter { return nm.Leases.WithLabelValues(name, o) }
		c.near = &nearColl{
			cfg: *c.Near, cache: cache,
			hits: nm.Hits.WithLabelValues(name), misses: nm.Misses.WithLabelValues(name),
			leases: map[buffer.LeaseOutcome]prometheus.Counter{
				buffer.LeaseGranted:     lease(metrics.LeaseGranted),
				buffer.LeaseHot:         lease(metrics.LeaseHot),
				buffer.LeaseRevoking:    lease(metrics.LeaseRevoking),
				buffer.LeaseUnconfirmed: lease(metrics.LeaseUnconfirm),
			},
			refuse: lease(metrics.LeaseRefused), uncach: lease(metrics.LeaseUncached),
			extended: lease(metrics.LeaseExtended),
			sent:     nm.RevokesSent.WithLabelValues(name), recv: nm.RevokesRecv.WithLabelValues(name),
			wait:  nm.WriteWait.WithLabelValues(name),
			renew: make(chan string, renewQueue),
		}
		cache.KeepIdle = keepIdle
	}
	s.buf.Instance = instance
	ns.ps = s.buf.Client().Subscribe(ctx, s.buf.NearChannel(instance))
	if _, err := ns.ps.Receive(ctx); err != nil {
		ns.ps.Close()
		return fmt.Errorf("near cache: subscribing to %s: %w", s.buf.NearChannel(instance), err)
	}
	s.near = ns
	go s.listen(ns)
	for _, c := range s.colls {
		if c.near != nil {
			go s.renewer(c)
		}
	}
	go s.releaser(ns)
	return nil
}

// held is a lease to give back.
type held struct {
	r   Ref
	gen uint64
}

// releaseLater gives back, in the background, a lease of generation gen
// that this sidecar keeps no copy under (releaser).
func (s *Service) releaseLater(r Ref, gen uint64) {
	select {
	case s.near.release <- held{r, gen}:
	default: // behind: the lease expires in Redis
	}
}

// releaser gives back, in batches, the leases of releaseLater.
//
// A release deletes the holder's field only if it still names the
// generation released, but the field names only the holder's last grant:
// a copy installed under an earlier grant of the same document, from a
// request still in flight, would be left without a lease in Redis. So each
// release is preceded by a Revoke of the document, as a revocation's is:
// it drops any copy and refuses the installs of every request sent before,
// and a request sent after it is granted after the released generation,
// so the field no longer names it.
func (s *Service) releaser(ns *nearService) {
	const maxRelease = 256
	hs := make([]held, 0, maxRelease)
	rel := make([]buffer.Held, 0, maxRelease)
	for {
		hs, rel = hs[:0], rel[:0]
		select {
		case h := <-ns.release:
			hs = append(hs, h)
		case <-ns.stop:
			return
		}
	more:
		for len(hs) < maxRelease {
			select {
			case h := <-ns.release:
				hs = append(hs, h)
			default:
				break more
			}
		}
		for _, h := range hs {
			h.r.Coll.near.cache.Revoke(h.r.ID)
			rel = append(rel, buffer.Held{Record: s.buf.LeaseRecord(h.r.Coll.Name, h.r.ID), Gen: h.gen})
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = s.buf.ReleaseMany(ctx, rel)
		cancel()
	}
}

// StopNear drops every near-cache copy, gives their leases back and stops
// the near caches' goroutines; idempotent. Reads and writes must have
// ended: a lease taken after it is left to expire.
func (s *Service) StopNear() {
	if s.near == nil || !s.near.stopped.CompareAndSwap(false, true) {
		return
	}
	close(s.near.stop)
	// The copies go, and their leases back, while the listener still
	// answers revocations: a writer waits for none of them after this.
	var rel []buffer.Held
	for _, c := range s.colls {
		if c.near != nil {
			c.near.cache.Drain(func(id string, e *nearcache.Entry) {
				rel = append(rel, buffer.Held{Record: s.buf.LeaseRecord(c.Name, id), Gen: e.Gen})
			})
		}
	}
	if len(rel) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = s.buf.ReleaseMany(ctx, rel)
		cancel()
	}
	s.near.ps.Close()
	<-s.near.done
	for _, c := range s.colls {
		if c.near != nil {
			c.near.cache.Close()
		}
	}
}

// listen answers revocations and wakes writers on releases.
func (s *Service) listen(ns *nearService) {
	defer close(ns.done)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	ch := ns.ps.Channel(redis.WithChannelSize(4096))
	for {
		select {
		case msg, ok := <-ch:
			if !ok {
				return
			}
			m, ok := buffer.ParseNearMessage(msg.Payload)
			if !ok {
				continue
			}
			if !m.Revoke {
				ns.wake(m.Record)
				continue
			}
			if c := s.colls[m.Coll]; c != nil && c.near != nil {
				// The copy goes first, then the lease: once Redis hears
				// of the release, no copy of this sidecar can be served.
				c.near.cache.Revoke(m.ID)
				c.near.recv.Inc()
			}
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = s.buf.ReleaseLease(ctx, m.Record, m.Gen, m.Writer)
			}()
		case <-tick.C:
			for name, c := range s.colls {
				if c.near != nil {
					s.m.Near.Bytes.WithLabelValues(name).Set(float64(c.near.cache.Bytes()))
				}
			}
		}
	}
}

// wake wakes the writers waiting for a release of the lease record.
func (ns *nearService) wake(record string) {
	ns.mu.Lock()
	ws := ns.waiters[record]
	delete(ns.waiters, record)
	ns.mu.Unlock()
	for _, w := range ws {
		close(w)
	}
}

// View is a document read: its value and, when it came from the near
// cache, the entry its reply bytes are memoized in.
type View struct {
	doc change.Doc
	e   *nearcache.Entry
}

// Doc is the document (nil: missing). Do not modify it.
func (v View) Doc() change.Doc {
	if v.doc == nil && v.e != nil {
		return docOf(v.e.Hash)
	}
	return v.doc
}

// Memo returns build's bytes, computed once per near-cache entry (slot k,
// nearcache.Memo…) and on every call otherwise.
func (v View) Memo(k int, build func() []byte) []byte {
	if v.e == nil {
		return build()
	}
	return v.e.Memo(k, build)
}

// Tag returns build's ETag, computed once per near-cache entry and on
// every call otherwise.
func (v View) Tag(build func() string) string {
	if v.e == nil {
		return build()
	}
	return v.e.Tag(build)
}

func docOf(h map[string]string) change.Doc {
	d := make(change.Doc, len(h))
	for f, v := range h {
		d[f] = []byte(v)
	}
	return d
}

// Cached returns a document's near-cache entry if this sidecar may serve
// it now, counting the hit; ok is false on anything else (the caller reads
// through GetMany or Get).
func (s *Service) Cached(r Ref) (*nearcache.Entry, bool) {
	n := r.Coll.near
	if n == nil {
		return nil, false
	}
	e, ok := n.cache.Get(r.ID)
	if ok {
		n.hits.Inc()
	}
	return e, ok
}

// GetView is Get with the near cache's memoized reply bytes.
func (s *Service) GetView(ctx context.Context, coll, id string) (View, error) {
	r, err := s.Ref(coll, id)
	if err != nil {
		return View{}, err
	}
	return s.view(ctx, r.Coll, r.ID)
}

// view reads a document: from the near cache, else under a new lease,
// else (a miss in Redis too) through the store.
func (s *Service) view(ctx context.Context, c *Collection, id string) (View, error) {
	if n := c.near; n != nil {
		if e, ok := n.cache.Get(id); ok {
			n.hits.Inc()
			return View{e: e}, nil
		}
		if n.cache.IsHot(id) {
			n.misses.Inc()
			n.leases[buffer.LeaseHot].Inc()
			doc, err := s.getRedis(ctx, c, id)
			return View{doc: doc}, err
		}
		var v View
		found := false
		s.leaseMany(ctx, []Ref{{Coll: c, ID: id}}, []int{0}, func(_ int, e *nearcache.Entry, h Hash, err error) {
			if err == nil && (e != nil || h != nil) {
				found = true
				v = View{e: e}
				if e == nil {
					v.doc = docOf(h)
				}
			}
		}, false, false)
		if found {
			return v, nil
		}
	}
	doc, e, err := s.readThrough(ctx, c, id, true)
	if err != nil {
		return View{}, err
	}
	if e != nil {
		return View{e: e}, nil
	}
	return View{doc: doc}, nil
}

// leaseMany reads refs[is] (near-cached collections) from Redis under new
// leases, in one round trip, and installs the copies it may keep. done gets
// each hit (e when installed, h otherwise); a miss goes through getRedis
// on its own goroutine when misses is set, else done gets (nil, nil, nil).
//
// A renewal (renew) is not a read: it counts neither as a near-cache miss
// nor as a Redis cache hit.
func (s *Service) leaseMany(ctx context.Context, refs []Ref, is []int, done func(i int, e *nearcache.Entry, h Hash, err error), misses, renew bool) {
	reqs := make([]buffer.NearRead, len(is))
	tickets := make([]nearcache.Ticket, len(is))
	for k, i := range is {
		r := refs[i]
		tickets[k] = r.Coll.near.cache.Ticket(r.ID)
		reqs[k] = buffer.NearRead{Coll: r.Coll.Name, ID: r.ID, Gen: s.near.gen.Add(1), TTL: r.Coll.near.cfg.LeaseTTL}
	}
	// Ticket and send time come before the request: the deadline counts
	// from here, and a revocation from now on refuses the install.
	sent := nearcache.Now()
	res, err := s.buf.LeaseRead(ctx, reqs)
	if err != nil {
		for _, i := range is {
			done(i, nil, nil, err)
		}
		return
	}
	for k, i := range is {
		r, n := refs[i], refs[i].Coll.near
		if !renew {
			n.misses.Inc()
		}
		if !res[k].Hit {
			n.uncach.Inc()
			if !misses {
				done(i, nil, nil, nil)
				continue
			}
			go func() {
				doc, e, err := s.readThrough(ctx, r.Coll, r.ID, true)
				if e != nil {
					done(i, e, e.Hash, err)
					return
				}
				done(i, nil, hashOf(doc), err)
			}()
			continue
		}
		if !renew {
			s.m.CacheHits.WithLabelValues(r.Coll.Name).Inc()
		}
		h := res[k].Hash
		done(i, s.keepLeased(r, tickets[k], reqs[k].Gen, sent, res[k].Outcome, h), h, nil)
	}
}

// keepLeased installs h, the value of r read under a lease request of
// generation gen sent at sent (with ticket t taken before), as this
// sidecar's copy if Redis granted the lease (outcome), and returns the
// copy; nil when it keeps none (and gives back a lease it got).
func (s *Service) keepLeased(r Ref, t nearcache.Ticket, gen uint64, sent int64, outcome buffer.LeaseOutcome, h Hash) *nearcache.Entry {
	n := r.Coll.near
	if outcome != buffer.LeaseGranted {
		n.leases[outcome].Inc()
		if outcome == buffer.LeaseHot {
			// Written within the window, at most a window ago: skip the
			// lease requests for half of it.
			n.cache.MarkHot(r.ID, sent+int64(n.cfg.HotWindow/2))
		}
		if outcome == buffer.LeaseUnconfirmed {
			s.releaseLater(r, gen)
		}
		return nil
	}
	e := nearcache.NewEntry(h, gen, sent+int64(n.cfg.LeaseTTL-LeaseMargin))
	if !n.cache.Install(t, e) {
		// A revocation or a local write came in between: the value is good
		// for this read (read while the lease was valid) but no copy is
		// kept, and the lease goes back.
		n.refuse.Inc()
		s.releaseLater(r, e.Gen)
		return nil
	}
	n.leases[buffer.LeaseGranted].Inc()
	return e
}
