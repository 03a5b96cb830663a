package document

// The scan cache: the ids a scan listed, kept in this sidecar's memory
// with the membership tokens (buffer.MembershipTokens) read before it, so
// that a scan that repeats it while no document was inserted or deleted
// reads those ids through the read path and skips the pending index and
// the store.
//
// Why a hit is as correct as a scan that queries the store. A list L of a
// range was built by a scan S that read the token vector T first, then
// the pending index, the store and the pending documents. A later scan S'
// reads the tokens T' and finds T' == T. Every put or delete deletes its
// partition's token in the same atomic step as it is buffered (the write
// script), and so does anything else that changes which documents exist
// (a rejected prefix, deadScript; a rollback, CheckRollback); tokens are
// random and never repeat. So:
//
//   - A put or delete acknowledged before S read T deleted the token before
//     S read it: S read a token created after it, and S itself, which
//     queried the index and the store after reading T, listed membership
//     as of after that write.
//   - A put or delete buffered after S read T and before S' read T' deleted
//     the token in between: S' reads a token created after it, which is not
//     T. A miss.
//   - A put or delete buffered after S' read T' is concurrent with S'.
//
// Hence, when T' == T, the set of documents in the range is the one S
// listed, and S' answers with L's documents as the read path returns them
// now (patches included); one that is gone (a delete concurrent with S')
// makes S' scan the store. Membership is fixed at S's token read and the
// values are read after it, as an uncached scan fixes it when it reads the
// pending index and reads the values after: neither is one atomic snapshot
// of many documents, and a hit is no weaker than a miss.
//
// A list built from older tokens may overwrite a newer one (two scans of
// one range racing a write): it only misses the next time.

import (
	"context"
	"slices"
	"sync/atomic"
	"time"

	"github.com/maypok86/otter/v2"

	"github.com/writeback/writeback/internal/change"
	"github.com/writeback/writeback/internal/nearcache"
)

// DefaultScanCacheBytes bounds the memory of a Service's cached scans: the
// listed ids' bytes plus a small overhead per list.
const DefaultScanCacheBytes = 8 << 20

// scanKey names a cached scan: a collection, the canonical from, the limit.
type scanKey struct {
	coll, from string
	limit      int
}

// scanList is a cached scan: the ids it returned, in order, and the
// membership tokens read before it.
type scanList struct {
	ids  []string
	toks *[]string // shared by the lists built under the same tokens
}

// scanCache is a Service's cached scans.
type scanCache struct {
	lists *otter.Cache[scanKey, *scanList]
	// last is the last token vector read, shared by the lists built under
	// it so that they cost no memory each.
	last atomic.Pointer[[]string]
	// offUntil (time.Time.UnixNano) is set when reading or creating tokens
	// failed — Redis before 7.0 has no SET NX GET; Redis may be out of
	// memory or down: scans run uncached until then, without paying a
	// failing round trip each.
	offUntil atomic.Int64
}

// scanCacheBackoff is how long scans run uncached after tokens failed.
const scanCacheBackoff = 30 * time.Second

func newScanCache(maxBytes int64) *scanCache {
	c := otter.Must(&otter.Options[scanKey, *scanList]{
		MaximumWeight: uint64(max(maxBytes, 1)),
		Weigher: func(k scanKey, l *scanList) uint32 {
			n := 64 + len(k.coll) + len(k.from) + 16*len(l.ids)
			for _, id := range l.ids {
				n += len(id)
			}
			return uint32(n)
		},
	})
	return &scanCache{lists: c}
}

// tokens reads the membership tokens, sharing the vector with the lists
// built under equal ones; nil when the cache cannot be used.
func (sc *scanCache) tokens(ctx context.Context, s *Service) *[]string {
	if time.Now().UnixNano() < sc.offUntil.Load() {
		return nil
	}
	toks, err := s.buf.MembershipTokens(ctx)
	if err != nil {
		if ctx.Err() == nil {
			sc.offUntil.Store(time.Now().Add(scanCacheBackoff).UnixNano())
		}
		return nil
	}
	if last := sc.last.Load(); last != nil && slices.Equal(*last, toks) {
		return last
	}
	sc.last.Store(&toks)
	return &toks
}

// cachedScan answers a scan of c from a cached list when the membership
// tokens are the ones it was built under; ok false: scan, then remember
// (with toks, which may be nil: do not remember).
func (s *Service) cachedScan(ctx context.Context, c *Collection, from string, limit int) (docs []change.Doc, ok bool, toks *[]string, err error) {
	sc := s.scans
	if sc == nil || !c.ScanCache {
		return nil, false, nil, nil
	}
	toks = sc.tokens(ctx, s)
	if toks == nil {
		return nil, false, nil, nil
	}
	l, found := sc.lists.GetIfPresent(scanKey{c.Name, from, limit})
	if !found || (l.toks != toks && !slices.Equal(*l.toks, *toks)) {
		s.m.ScanCacheMisses.WithLabelValues(c.Name).Inc()
		return nil, false, toks, nil
	}
	refs := make([]Ref, len(l.ids))
	for i, id := range l.ids {
		refs[i] = Ref{Coll: c, ID: id}
	}
	docs, err = getManyAs(s, ctx, refs, func(_ Ref, e *nearcache.Entry) change.Doc { return docOf(e.Hash) },
		func(_ Ref, h Hash) change.Doc { return docOf(h) })
	if err != nil {
		return nil, false, nil, err
	}
	for _, d := range docs {
		if d == nil {
			// Deleted since the tokens were read: concurrent with this
			// scan, which may or may not see it; scan the store.
			s.m.ScanCacheMisses.WithLabelValues(c.Name).Inc()
			return nil, false, toks, nil
		}
	}
	s.m.ScanCacheHits.WithLabelValues(c.Name).Inc()
	return docs, true, nil, nil
}

// rememberScan caches the ids a scan listed under toks.
func (s *Service) rememberScan(c *Collection, from string, limit int, toks *[]string, ids []string) {
	if toks == nil {
		return
	}
	s.scans.lists.Set(scanKey{c.Name, from, limit}, &scanList{ids: slices.Clip(ids), toks: toks})
}
