package document

// Scans: a range of the store merged with the buffered writes of the
// documents in it.

import (
	"context"
	"encoding/json"
	"sort"
	"strconv"

	"github.com/writeback/writeback/internal/change"
	"github.com/writeback/writeback/internal/nearcache"
)

// Scan returns up to limit documents with key >= from, in key order,
// reflecting buffered writes.
//
// The store's rows of the range are merged with the documents that have
// buffered writes (pending) among them. Only the pending documents up to
// the last row fetched matter — past it, the store has rows not fetched
// that may come first — and each of those may hide a row (a buffered
// delete), so the scan fetches limit rows, then as many more as there are
// pending documents up to the last row, until that holds (usually at
// once: few documents are pending at any time). The pending documents in
// range are read through the read path in one round trip.
//
// With the collection's ScanCache, a scan that repeats a recent one (same
// from and limit) while no document was inserted or deleted reads the ids
// that one listed through the read path instead (scancache.go).
func (s *Service) Scan(ctx context.Context, coll, from string, limit int) ([]change.Doc, error) {
	c, err := s.Collection(coll)
	if err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, nil
	}
	schema := c.Table.Schema
	if from != "" {
		if from, err = schema.CanonicalID(from); err != nil {
			return nil, err
		}
	}
	// A repeat of a recent scan while no document was inserted or deleted:
	// no pending index, no store (scancache.go). Otherwise the tokens read
	// here, before the pending index, are the ones the result is cached
	// under.
	docs, hit, toks, err := s.cachedScan(ctx, c, from, limit)
	if err != nil || hit {
		return docs, err
	}
	ids, out, err := s.scan(ctx, c, from, limit)
	if err != nil {
		return nil, err
	}
	s.rememberScan(c, from, limit, toks, ids)
	return out, nil
}

// scan is Scan without the scan cache; from is canonical, limit positive.
// It returns the documents and their ids.
func (s *Service) scan(ctx context.Context, c *Collection, from string, limit int) ([]string, []change.Doc, error) {
	schema := c.Table.Schema
	less := keyLess(schema.KeyType())
	// Pending documents first: one that is applied after this step is read
	// through the read path below, which sees it either way.
	all, err := s.buf.PendingOf(ctx, c.Name)
	if err != nil {
		return nil, nil, err
	}
	var pend []string
	for _, id := range all {
		if from == "" || !less(id, from) {
			pend = append(pend, id)
		}
	}
	sort.Slice(pend, func(i, j int) bool { return less(pend[i], pend[j]) })
	var rows []change.Doc
	lastKey, truncated := "", false
	for want := limit; ; {
		if rows, err = c.Store.Scan(ctx, c.Table, from, want); err != nil {
			return nil, nil, &StoreError{Err: err, Read: true}
		}
		if truncated = len(rows) == want; !truncated {
			break
		}
		lastKey = keyOf(schema, rows[len(rows)-1])
		// The pending documents up to the last row.
		n := sort.Search(len(pend), func(i int) bool { return less(lastKey, pend[i]) })
		if want >= limit+n {
			pend = pend[:n]
			break
		}
		want = limit + n
	}
	byID := make(map[string]change.Doc, len(rows)+len(pend))
	for _, r := range rows {
		byID[keyOf(schema, r)] = r
	}
	if len(pend) > 0 {
		refs := make([]Ref, len(pend))
		for i, id := range pend {
			refs[i] = Ref{Coll: c, ID: id}
		}
		docs, err := getManyAs(s, ctx, refs, func(_ Ref, e *nearcache.Entry) change.Doc { return docOf(e.Hash) },
			func(_ Ref, h Hash) change.Doc { return docOf(h) })
		if err != nil {
			return nil, nil, err
		}
		for i, id := range pend {
			if docs[i] == nil {
				delete(byID, id)
			} else {
				byID[id] = docs[i]
			}
		}
	}
	ids := make([]string, 0, len(byID))
	for id := range byID {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return less(ids[i], ids[j]) })
	if len(ids) > limit {
		ids = ids[:limit]
	}
	out := make([]change.Doc, len(ids))
	for i, id := range ids {
		out[i] = byID[id]
	}
	return ids, out, nil
}

// keyOf returns the canonical id of a document read from the store.
func keyOf(s *change.Schema, d change.Doc) string {
	v := d[s.Key]
	if s.KeyType() == change.TypeInt {
		return string(v)
	}
	var str string
	_ = json.Unmarshal(v, &str)
	return str
}

// keyLess orders canonical ids as the store's Scan does.
func keyLess(t change.Type) func(a, b string) bool {
	if t == change.TypeInt {
		return func(a, b string) bool {
			x, _ := strconv.ParseInt(a, 10, 64)
			y, _ := strconv.ParseInt(b, 10, 64)
			return x < y
		}
	}
	return func(a, b string) bool { return a < b }
}
