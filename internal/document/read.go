package document

// The read path: a hit returns the cache entry; a miss takes an I lease in
// the same step as it reads the buffered write, merges it onto the store
// row, and installs the result only if no write voided the lease since.

import (
	"context"
	"errors"

	"github.com/writeback/writeback/internal/buffer"
	"github.com/writeback/writeback/internal/change"
	"github.com/writeback/writeback/internal/nearcache"
)

// Get returns the latest acknowledged value of a document, hit or miss.
func (s *Service) Get(ctx context.Context, coll, id string) (change.Doc, error) {
	r, err := s.Ref(coll, id)
	if err != nil {
		return nil, err
	}
	return s.get(ctx, r.Coll, r.ID)
}

func (s *Service) get(ctx context.Context, c *Collection, id string) (change.Doc, error) {
	if c.near == nil {
		return s.getRedis(ctx, c, id)
	}
	v, err := s.view(ctx, c, id)
	if err != nil {
		return nil, err
	}
	return v.Doc(), nil
}

// getRedis is the read path without the near cache.
func (s *Service) getRedis(ctx context.Context, c *Collection, id string) (change.Doc, error) {
	doc, _, err := s.readThrough(ctx, c, id, false)
	return doc, err
}

// readThrough reads a document from Redis, or on a miss there computes it
// from its buffered write and store row and installs it in Redis. With
// lease (a near-cached collection) the install also leases the value to
// this sidecar, which keeps it as its near-cache copy (e) when Redis
// granted the lease: a document read once is served from the near cache
// from its next read on, whether Redis held it or not.
func (s *Service) readThrough(ctx context.Context, c *Collection, id string, lease bool) (doc change.Doc, e *nearcache.Entry, err error) {
	tok := buffer.NewToken()
	var t nearcache.Ticket
	if lease = lease && c.near != nil; lease {
		// Before any request: a revocation or local write of the
		// document from now on refuses the copy.
		t = c.near.cache.Ticket(id)
	}
	r, err := s.buf.Read(ctx, c.Name, id, tok)
	if err != nil {
		return nil, nil, err
	}
	if r.Hit {
		s.m.CacheHits.WithLabelValues(c.Name).Inc()
		return r.Doc, nil, nil
	}
	s.m.CacheMisses.WithLabelValues(c.Name).Inc()
	doc, err = s.merge(ctx, c, id, r.Pending)
	if err != nil {
		_, _ = s.buf.Fill(ctx, c.Name, id, tok, nil, 0)
		return nil, nil, err
	}
	// Installs doc only if no write voided the lease since the miss.
	switch {
	case !lease:
		_, err = s.buf.Fill(ctx, c.Name, id, tok, doc, c.ttl())
	default: // FillLease of a missing document (nil) only gives the I lease back
		nr := buffer.NearRead{Coll: c.Name, ID: id, Gen: s.near.gen.Add(1), TTL: c.near.cfg.LeaseTTL}
		sent := nearcache.Now() // the copy's deadline counts from here
		var installed bool
		var outcome buffer.LeaseOutcome
		installed, outcome, err = s.buf.FillLease(ctx, nr, tok, doc, c.ttl())
		if err == nil && installed && outcome != 0 {
			e = s.keepLeased(Ref{Coll: c, ID: id}, t, nr.Gen, sent, outcome, hashOf(doc))
		}
	}
	if err != nil {
		return nil, nil, err
	}
	if doc == nil {
		return nil, nil, ErrNotFound
	}
	return doc, e, nil
}

// merge computes a document's value from its buffered write, read at the
// miss, and, when needed, its store row.
//
// The buffered write was read before the row. Changes trimmed between the
// two reads were applied first, so the row contains them; changes still in
// our snapshot may or may not be in the row — the applied seq, read in the
// same snapshot as the row, tells which: exactly those with a greater seq
// are not. A change buffered after our snapshot is concurrent with this
// read and voided our I lease, so the value is returned but not cached.
func (s *Service) merge(ctx context.Context, c *Collection, id string, pending []change.Change) (change.Doc, error) {
	// After a Put or Delete the store row does not matter.
	var row change.Doc
	i := -1
	for k := len(pending) - 1; k >= 0; k-- {
		if pending[k].Kind != change.Patch {
			i = k
			break
		}
	}
	if i < 0 {
		var applied int64
		var err error
		if row, applied, err = c.Store.Read(ctx, c.Table, c.Name, id, s.buf.Partition(c.Name, id)); err != nil {
			return nil, &StoreError{Err: err, Read: true}
		}
		i = 0
		for i < len(pending) && pending[i].Seq <= applied {
			i++
		}
	}
	doc := row
	for _, ch := range pending[i:] {
		next, err := change.Apply(doc, ch)
		var te *change.TypeError
		switch {
		case errors.As(err, &te):
			continue // the store will reject it too: a dead letter, not part of the value
		case errors.Is(err, change.ErrNotFound):
			return nil, nil // the row was deleted behind the cache
		case err != nil:
			return nil, err
		}
		doc = next
	}
	return doc, nil
}

// Hash is a document as its cache entry holds it: field → the canonical
// JSON text of its value (a null column holds "null").
type Hash map[string]string

// hashOf is the Hash of a document.
func hashOf(d change.Doc) Hash {
	if d == nil {
		return nil
	}
	h := make(Hash, len(d))
	for f, v := range d {
		h[f] = string(v)
	}
	return h
}

// GetMany reads documents as Get does, their cache entries in one round
// trip, and hands them over as the cache holds them (no copy on a hit).
// done is called exactly once per ref, with ErrNotFound for a missing
// document: for hits before GetMany returns, for misses — each read through
// the store concurrently — possibly after, from other goroutines.
func (s *Service) GetMany(ctx context.Context, refs []Ref, done func(i int, doc Hash, err error)) {
	var near, plain []int
	for i, r := range refs {
		if n := r.Coll.near; n != nil {
			if e, ok := n.cache.Get(r.ID); ok {
				n.hits.Inc()
				done(i, e.Hash, nil)
				continue
			}
			if !n.cache.IsHot(r.ID) {
				near = append(near, i)
				continue
			}
			// Hot: read from Redis as without a near cache.
			n.misses.Inc()
			n.leases[buffer.LeaseHot].Inc()
		}
		plain = append(plain, i)
	}
	if len(near) > 0 {
		s.leaseMany(ctx, refs, near, func(i int, _ *nearcache.Entry, h Hash, err error) {
			if err == nil && h == nil {
				err = ErrNotFound
			}
			done(i, h, err)
		}, true, false)
	}
	if len(plain) > 0 {
		s.peekMany(ctx, refs, plain, done)
	}
}

// peekMany is GetMany for refs[is], which have no near cache.
func (s *Service) peekMany(ctx context.Context, refs []Ref, is []int, done func(i int, doc Hash, err error)) {
	drefs := make([]buffer.DocRef, len(is))
	for k, i := range is {
		drefs[k] = s.buf.Ref(refs[i].Coll.Name, refs[i].ID)
	}
	hashes, err := s.buf.Peek(ctx, drefs)
	if err != nil {
		for _, i := range is {
			done(i, nil, err)
		}
		return
	}
	var (
		hitColl *Collection // hits are counted per run of one collection
		hits    int
	)
	countHits := func() {
		if hits > 0 {
			s.m.CacheHits.WithLabelValues(hitColl.Name).Add(float64(hits))
		}
	}
	defer countHits()
	for k, h := range hashes {
		i := is[k]
		if h != nil {
			if c := refs[i].Coll; c != hitColl {
				countHits()
				hitColl, hits = c, 0
			}
			hits++
			done(i, h, nil)
			continue
		}
		// A miss: the whole read path, which looks at the entry again
		// (it may have been filled meanwhile) under an I lease.
		go func() {
			doc, err := s.getRedis(ctx, refs[i].Coll, refs[i].ID)
			done(i, hashOf(doc), err)
		}()
	}
}
