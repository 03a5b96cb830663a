// Package document serves Design 1's documents: the read path (cache hit, or a
// miss merged from the store row and the buffered write under an I lease)
// and the write path under each collection's policy. It composes the
// buffer, the appliers and the stores; it speaks no HTTP.
package document

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/writeback/writeback/internal/bgt"
	"github.com/writeback/writeback/internal/buffer"
	"github.com/writeback/writeback/internal/change"
	"github.com/writeback/writeback/internal/fault"
	"github.com/writeback/writeback/internal/metrics"
	"github.com/writeback/writeback/internal/store"
)

// Policy is how a collection's writes reach the store.
type Policy string

const (
	// WriteBack acknowledges once buffered; appliers apply later.
	WriteBack Policy = "write-back"
	// WriteThrough applies to the store before acknowledging and updates
	// the cache entry.
	WriteThrough Policy = "write-through"
	// WriteAround applies to the store before acknowledging and deletes the
	// cache entry.
	WriteAround Policy = "write-around"
)

// Collection is a collection as the service sees it.
type Collection struct {
	Name      string
	Policy    Policy
	TTL       time.Duration // cache entry lifetime (jittered ±10 %)
	StoreName string
	Store     store.Store
	Table     *store.Table
}

// Errors the API maps to status codes.
var (
	ErrUnknownCollection = errors.New("document: unknown collection")
	ErrNotFound          = errors.New("document: document not found")
	ErrConflict          = errors.New("document: too many concurrent writes to the document; retry")
)

// StoreError is a store failure during a synchronous write (write-through,
// write-around). Permanent ones mean the store rejected the change, which
// was then discarded.
//
// Buffered is the sequence number of a change that is buffered and will be
// applied once the store recovers (a transient failure after buffering):
// the client must not retry it.
type StoreError struct {
	Err      error
	Buffered int64
}

func (e *StoreError) Error() string { return e.Err.Error() }
func (e *StoreError) Unwrap() error { return e.Err }

// Service reads and writes documents.
type Service struct {
	buf   *buffer.Buffer
	app   *bgt.Applier
	colls map[string]*Collection
	m     *metrics.Metrics

	// fallback is set while pinned memory is above writeback's limit:
	// write-back collections then write through, so that the buffer
	// drains instead of growing until Redis runs out of memory.
	fallback atomic.Bool
}

// SetFallback switches write-back collections to write-through (on) or
// back (off).
func (s *Service) SetFallback(on bool) { s.fallback.Store(on) }

// Fallback reports whether write-back collections currently write through.
func (s *Service) Fallback() bool { return s.fallback.Load() }

// policy is the policy a write to c follows now.
func (s *Service) policy(c *Collection) Policy {
	if c.Policy == WriteBack && s.fallback.Load() {
		return WriteThrough
	}
	return c.Policy
}

// New returns a service over colls.
func New(buf *buffer.Buffer, app *bgt.Applier, colls map[string]*Collection, m *metrics.Metrics) *Service {
	return &Service{buf: buf, app: app, colls: colls, m: m}
}

// Collection returns the named collection.
func (s *Service) Collection(name string) (*Collection, error) {
	c, ok := s.colls[name]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownCollection, name)
	}
	return c, nil
}

// Collections returns every collection, by name.
func (s *Service) Collections() map[string]*Collection { return s.colls }

func (s *Service) resolve(coll, id string) (*Collection, string, error) {
	c, err := s.Collection(coll)
	if err != nil {
		return nil, "", err
	}
	cid, err := c.Table.Schema.CanonicalID(id)
	if err != nil {
		return nil, "", err
	}
	return c, cid, nil
}

func (c *Collection) ttl() time.Duration {
	j := time.Duration(rand.Int64N(int64(c.TTL)/5+1)) - c.TTL/10
	return c.TTL + j
}

// Get returns the latest acknowledged value of a document, hit or miss.
func (s *Service) Get(ctx context.Context, coll, id string) (change.Doc, error) {
	c, id, err := s.resolve(coll, id)
	if err != nil {
		return nil, err
	}
	return s.get(ctx, c, id)
}

func (s *Service) get(ctx context.Context, c *Collection, id string) (change.Doc, error) {
	tok := buffer.NewToken()
	r, err := s.buf.Read(ctx, c.Name, id, tok)
	if err != nil {
		return nil, err
	}
	if r.Hit {
		s.m.CacheHits.WithLabelValues(c.Name).Inc()
		return r.Doc, nil
	}
	s.m.CacheMisses.WithLabelValues(c.Name).Inc()
	doc, err := s.merge(ctx, c, id, r.Pending)
	if err != nil {
		_, _ = s.buf.Fill(ctx, c.Name, id, tok, nil, 0)
		return nil, err
	}
	// Installs doc only if no write voided the lease since the miss.
	if _, err := s.buf.Fill(ctx, c.Name, id, tok, doc, c.ttl()); err != nil {
		return nil, err
	}
	if doc == nil {
		return nil, ErrNotFound
	}
	return doc, nil
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
		if row, applied, err = c.Store.Read(ctx, c.Table, c.Name, id); err != nil {
			return nil, err
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

// Put inserts or replaces a whole document.
func (s *Service) Put(ctx context.Context, coll, id string, body []byte) (int64, error) {
	c, id, err := s.resolve(coll, id)
	if err != nil {
		return 0, err
	}
	ch, err := change.ParsePut(c.Table.Schema, id, body)
	if err != nil {
		return 0, err
	}
	return s.write(ctx, c, id, ch, nil)
}

// Patch applies update operators to an existing document.
func (s *Service) Patch(ctx context.Context, coll, id string, body []byte) (int64, error) {
	c, id, err := s.resolve(coll, id)
	if err != nil {
		return 0, err
	}
	ch, err := change.ParsePatch(c.Table.Schema, body)
	if err != nil {
		return 0, err
	}
	var replace map[string]buffer.Replace
	if len(ch.JSON) > 0 || len(ch.Ops) > 0 {
		// A type error the current value already shows ($push onto a
		// number …) is the client's: a 400 now rather than a dead letter
		// later. A concurrent write can still change the value; then only
		// the store can tell, and the change becomes a dead letter.
		cur, err := s.get(ctx, c, id)
		switch {
		case errors.Is(err, ErrNotFound):
			return 0, ErrNotFound
		case err != nil:
			return 0, err
		}
		next, err := change.Apply(cur, ch)
		var te *change.TypeError
		switch {
		case errors.As(err, &te):
			return 0, &change.Error{Msg: te.Msg}
		case err == nil:
			replace = replacements(ch, cur, next)
		}
	}
	return s.write(ctx, c, id, ch, replace)
}

// replacements are the cache-entry fields a patch's JSON-column or
// document operators change, from the value the patch read to the value
// it computed: the write script sets them only if the entry still holds
// what was read (buffer.WriteOptions.Replace), so consecutive patches of a
// document stay cache hits.
func replacements(ch change.Change, cur, next change.Doc) map[string]buffer.Replace {
	rs := map[string]buffer.Replace{}
	add := func(f string) {
		rs[f] = buffer.Replace{Old: cur[f], New: next[f]}
	}
	for f := range ch.JSON {
		add(f)
	}
	for _, op := range ch.Ops {
		f, _, _ := strings.Cut(op.Path, ".")
		add(f)
	}
	return rs
}

// Delete removes a document.
func (s *Service) Delete(ctx context.Context, coll, id string) (int64, error) {
	c, id, err := s.resolve(coll, id)
	if err != nil {
		return 0, err
	}
	return s.write(ctx, c, id, change.Change{Kind: change.Delete}, nil)
}

// maxVoided bounds how often a patch starts over because concurrent writes
// kept voiding its I lease while it read the store.
const maxVoided = 16

// write buffers ch; replace (see replacements) updates the cache entry's
// fields that the write script cannot compute.
func (s *Service) write(ctx context.Context, c *Collection, id string, ch change.Change, replace map[string]buffer.Replace) (int64, error) {
	if c.Policy == WriteBack && s.fallback.Load() {
		// Over the pinned-memory limit: apply this document's pending
		// changes first (to keep its order), and refuse — before buffering
		// anything — when the store cannot take them.
		if err := s.app.ApplyDoc(ctx, c.Name, id, math.MaxInt64); err != nil {
			return 0, &StoreError{Err: err}
		}
	}
	o := buffer.WriteOptions{TTL: c.ttl(), Invalidate: c.Policy == WriteAround, Token: buffer.NewToken(), Replace: replace}
	for attempt := 0; attempt < maxVoided; attempt++ {
		seq, out, err := s.buf.Write(ctx, c.Name, id, ch, c.Table.Schema, o)
		if err != nil {
			return 0, err
		}
		switch out {
		case buffer.Buffered:
			return s.acknowledge(ctx, c, id, seq)
		case buffer.NotFound:
			return 0, ErrNotFound
		case buffer.NeedBase:
			// Neither cached nor pending: the store has the current value.
			// Our token is now an I lease; if a write slips in before we
			// come back, it voids it and we start over.
			row, _, err := c.Store.Read(ctx, c.Table, c.Name, id)
			if err != nil {
				return 0, &StoreError{Err: err}
			}
			o.HaveBase, o.Base = true, row
		case buffer.Voided:
			o.HaveBase, o.Base, o.Token = false, nil, buffer.NewToken()
			s.m.LeaseConflicts.WithLabelValues("i").Inc()
		}
	}
	return 0, ErrConflict
}

func (s *Service) acknowledge(ctx context.Context, c *Collection, id string, seq int64) (int64, error) {
	fault.Hit(fault.AfterBuffer)
	s.m.BufferedChanges.WithLabelValues(c.Name).Inc()
	if s.policy(c) == WriteBack {
		return seq, nil
	}
	if err := s.app.ApplyDoc(ctx, c.Name, id, seq); err != nil {
		if store.IsPermanent(err) {
			return 0, &StoreError{Err: err} // rejected: a dead letter now
		}
		return 0, &StoreError{Err: err, Buffered: seq}
	}
	return seq, nil
}

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
		return nil, err
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

// ReplayDeadLetter buffers the changes of a dead letter again, as new
// writes (new sequence numbers) after whatever was written since, and
// removes the dead letter once they are buffered. Use it after fixing what
// made the store reject them (a constraint, a column's size …).
func (s *Service) ReplayDeadLetter(ctx context.Context, d buffer.DeadLetter) error {
	c, err := s.Collection(d.Collection)
	if err != nil {
		return err
	}
	changes, err := d.DeadChanges()
	if err != nil {
		return err
	}
	for _, ch := range changes {
		ch.Seq = 0
		if _, err := s.write(ctx, c, d.ID, ch, nil); err != nil {
			return err
		}
	}
	_, err = s.buf.DropDeadLetter(ctx, d.Collection, d.ID, d.Seq)
	return err
}
