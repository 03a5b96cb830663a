package document

// Scans: a range of the store merged with the buffered writes of the
// documents in it.

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"strconv"

	"github.com/writeback/writeback/internal/change"
)

// Scan returns up to limit documents with key >= from, in key order,
// reflecting buffered writes.
func (s *Service) Scan(ctx context.Context, coll, from string, limit int) ([]change.Doc, error) {
	c, err := s.Collection(coll)
	if err != nil {
		return nil, err
	}
	schema := c.Table.Schema
	if from != "" {
		if from, err = schema.CanonicalID(from); err != nil {
			return nil, err
		}
	}
	less := keyLess(schema.KeyType())
	// Pending documents first: one that is applied after this step is read
	// through the read path below, which sees it either way.
	all, err := s.buf.PendingOf(ctx, c.Name)
	if err != nil {
		return nil, err
	}
	var pend []string
	for _, id := range all {
		if from == "" || !less(id, from) {
			pend = append(pend, id)
		}
	}
	want := limit + len(pend) // each pending document hides at most one row
	rows, err := c.Store.Scan(ctx, c.Table, from, want)
	if err != nil {
		return nil, &StoreError{Err: err, Read: true}
	}
	byID := make(map[string]change.Doc, len(rows)+len(pend))
	lastKey, truncated := "", len(rows) == want
	for _, r := range rows {
		k := keyOf(schema, r)
		byID[k] = r
		lastKey = k
	}
	for _, id := range pend {
		doc, err := s.get(ctx, c, id)
		switch {
		case errors.Is(err, ErrNotFound):
			delete(byID, id)
		case err != nil:
			return nil, err
		default:
			byID[id] = doc
		}
	}
	ids := make([]string, 0, len(byID))
	for id := range byID {
		// Past the last row fetched, rows we did not fetch may come first.
		if truncated && less(lastKey, id) {
			continue
		}
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
	return out, nil
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
