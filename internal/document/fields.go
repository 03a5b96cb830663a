package document

// Field-level writes, for the Redis-protocol front door (internal/resp): a
// document is a hash whose fields are its columns. The writes answer what
// Redis's hash commands answer — how many fields HSET added, HDEL removed
// or DEL deleted, HINCRBY's new value — exactly and atomically with the
// write (buffer.WriteOptions.Count), and the first attempts of the writes
// of a whole pipeline go to Redis in one round trip.

import (
	"context"
	"encoding/json"
	"errors"
	"sync"

	"github.com/writeback/writeback/internal/buffer"
	"github.com/writeback/writeback/internal/change"
)

// FieldOp is what a field write does.
type FieldOp int

const (
	// SetFields is HSET: $set the fields of the document, or create it with
	// them (other columns null) when it does not exist. Result: Added.
	SetFields FieldOp = iota
	// UnsetFields is HDEL: $unset the fields of an existing document (a
	// missing document is left alone). Result: Removed.
	UnsetFields
	// IncField is HINCRBY and HINCRBYFLOAT: $inc one integer or float field,
	// creating the document (with the field equal to the amount) when it
	// does not exist. Result: Value.
	IncField
	// DeleteDoc is DEL: delete the document if it exists. Result: Existed.
	DeleteDoc
)

// FieldWrite is one field write to one document.
type FieldWrite struct {
	Ref Ref
	Op  FieldOp
	// Set holds SetFields' canonical values (change.Canonical); a null
	// (e.g. JSON "null" for a JSON column) unsets the field.
	Set change.Doc
	// Unset holds UnsetFields' fields: nullable, non-key columns.
	Unset []string
	// Field and Amount are IncField's: an integer or float column and a
	// JSON number (an integer for an integer column).
	Field  string
	Amount json.Number
}

// FieldResult is what a field write found, as Redis would report it.
type FieldResult struct {
	Added   int64           // SetFields: fields that were absent or null and now are not
	Removed int64           // UnsetFields: fields that were not null and now are
	Existed bool            // DeleteDoc: the document existed
	Value   json.RawMessage // IncField: the field's new value
}

// WriteFields runs field writes under their collections' policies. The first
// attempt of every write goes to Redis in one round trip; a write that needs
// more (a store read because the document was neither cached nor pending, a
// retry after a concurrent write) continues on its own goroutine. done is
// called exactly once per write, possibly after WriteFields returns and
// from other goroutines. The writes must not depend on each other: two
// writes to one document must not be in the same call (they would run
// concurrently).
func (s *Service) WriteFields(ctx context.Context, ws []FieldWrite, done0 func(i int, r FieldResult, err error)) {
	done := done0
	states := make([]*fieldState, len(ws))
	var nws []*nearWrite // near caches: each write's (Service.beginWrite)
	for i := range ws {
		if c := ws[i].Ref.Coll; c != nil && c.near != nil {
			if nws == nil {
				nws = make([]*nearWrite, len(ws))
			}
			nws[i] = s.beginWrite(c, ws[i].Ref.ID)
		}
	}
	if nws != nil {
		done = func(i int, r FieldResult, err error) {
			var entry map[string]string
			var seq int64
			if st := states[i]; st != nil && err == nil {
				entry, seq = st.entry, st.seq
			}
			nws[i].end(entry, seq, err != nil)
			done0(i, r, err)
		}
	}
	reqs := make([]buffer.WriteRequest, 0, len(ws))
	idx := make([]int, 0, len(ws))
	for i := range ws {
		st, err := s.newFieldState(&ws[i])
		if err != nil {
			done(i, FieldResult{}, err)
			continue
		}
		if nws != nil {
			st.nw = nws[i]
			st.nw.options(&st.o)
		}
		states[i] = st
		if st.c.Policy == WriteBack && st.pol != WriteBack {
			// Writing through, it goes to the store first (applyFirst),
			// not to Redis with the others.
			go func() {
				r, err := s.runField(ctx, st, nil)
				done(i, r, err)
			}()
			continue
		}
		reqs = append(reqs, st.request())
		idx = append(idx, i)
	}
	if len(reqs) == 0 {
		return
	}
	results, errs := s.buf.WriteBatch(ctx, reqs)
	for k, i := range idx {
		st := states[i]
		if errs[k] != nil {
			done(i, FieldResult{}, errs[k])
			continue
		}
		// A buffered write-back change needs nothing more; the rest (store
		// reads, retries, synchronous policies) would hold up the others.
		if results[k].Outcome == buffer.Buffered && s.policy(st.c) == WriteBack {
			r, err := s.fieldDone(ctx, st, results[k])
			done(i, r, err)
			continue
		}
		go func() {
			r, err := s.runField(ctx, st, &results[k])
			done(i, r, err)
		}()
	}
}

// WriteField runs one field write; see WriteFields.
func (s *Service) WriteField(ctx context.Context, w FieldWrite) (FieldResult, error) {
	st, err := s.newFieldState(&w)
	if err != nil {
		return FieldResult{}, err
	}
	st.nw = s.beginWrite(st.c, st.id)
	st.nw.options(&st.o)
	r, err := s.runField(ctx, st, nil)
	st.nw.end(st.entry, st.seq, err != nil)
	return r, err
}

// fieldState is a field write in progress: it starts as a patch (or a
// delete) of an existing document and becomes a create when the document
// turns out not to exist, and back again if someone else creates it first.
type fieldState struct {
	s      *Service
	w      *FieldWrite
	c      *Collection
	id     string
	patch  change.Change // $set/$unset/$inc, or the delete
	pol    Policy        // the policy the write follows, decided at its start
	create bool          // the next attempt creates the document (IfAbsent put)
	o      buffer.WriteOptions

	once   sync.Once
	put    change.Change // the create, built on first need
	putErr error

	nw    *nearWrite        // the near cache's side of the write (nil: none)
	entry map[string]string // the entry the write left, leased to this sidecar (buffer.WriteResult.Entry)
	seq   int64             // the write's sequence number, once buffered
}

func (s *Service) newFieldState(w *FieldWrite) (*fieldState, error) {
	c, id := w.Ref.Coll, w.Ref.ID
	if c == nil {
		return nil, ErrUnknownCollection
	}
	st := &fieldState{s: s, w: w, c: c, id: id, pol: s.policy(c)}
	schema := c.Table.Schema
	switch w.Op {
	case SetFields:
		if len(w.Set) == 0 {
			return nil, &change.Error{Msg: "the write sets no fields"}
		}
		for f := range w.Set {
			if err := writable(schema, f); err != nil {
				return nil, err
			}
		}
		st.patch = change.Change{Kind: change.Patch, Set: w.Set}
	case UnsetFields:
		if len(w.Unset) == 0 {
			return nil, &change.Error{Msg: "the write unsets no fields"}
		}
		for _, f := range w.Unset {
			if err := writable(schema, f); err != nil {
				return nil, err
			}
			if col, _ := schema.Column(f); !col.Nullable {
				return nil, &change.Error{Msg: "field \"" + f + "\" cannot be unset: the column is NOT NULL"}
			}
		}
		st.patch = change.Change{Kind: change.Patch, Unset: w.Unset}
	case IncField:
		if err := writable(schema, w.Field); err != nil {
			return nil, err
		}
		col, _ := schema.Column(w.Field)
		if col.Type != change.TypeInt && col.Type != change.TypeFloat {
			return nil, &change.Error{Msg: "$inc needs a numeric column, but \"" + w.Field + "\" is a " + col.Type.String() + " column"}
		}
		st.patch = change.Change{Kind: change.Patch, Inc: map[string]json.Number{w.Field: w.Amount}}
	case DeleteDoc:
		st.patch = change.Change{Kind: change.Delete}
	default:
		return nil, errors.New("document: unknown field operation")
	}
	st.restart()
	return st, nil
}

// writable checks that f is a column other than the key.
func writable(s *change.Schema, f string) error {
	if _, ok := s.Column(f); !ok {
		return &change.Error{Msg: "unknown field \"" + f + "\": the collection has no such column"}
	}
	if f == s.Key {
		return &change.Error{Msg: "field \"" + f + "\" is the key and cannot be changed"}
	}
	return nil
}

// reset starts the next attempt afresh: a new I-lease token, no base.
func (st *fieldState) restart() {
	st.o = buffer.WriteOptions{TTL: st.c.ttl(), Invalidate: st.c.Policy == WriteAround, Token: buffer.NewToken(), Count: !st.create, IfAbsent: st.create}
	st.nw.options(&st.o)
}

// createChange is the put that creates the document: the key, the written
// field(s), and null elsewhere; NOT NULL columns without a value refuse it.
func (st *fieldState) createChange() (change.Change, error) {
	st.once.Do(func() {
		schema := st.c.Table.Schema
		doc := change.Doc{schema.Key: schema.KeyValue(st.id)}
		switch st.w.Op {
		case SetFields:
			for f, v := range st.w.Set {
				doc[f] = v
			}
		case IncField:
			col, _ := schema.Column(st.w.Field)
			v, err := change.Canonical(col, json.RawMessage(st.w.Amount))
			if err != nil {
				st.putErr = err
				return
			}
			doc[st.w.Field] = v
		}
		for _, col := range schema.Columns {
			v, ok := doc[col.Name]
			if !ok {
				v = json.RawMessage("null")
				doc[col.Name] = v
			}
			if string(v) == "null" && !col.Nullable {
				st.putErr = &change.Error{Msg: "field \"" + col.Name + "\" is required: the column is NOT NULL"}
				return
			}
		}
		st.put = change.Change{Kind: change.Put, Doc: doc}
	})
	return st.put, st.putErr
}

// request is the next attempt as a buffer write.
func (st *fieldState) request() buffer.WriteRequest {
	ch := st.patch
	if st.create {
		ch = st.put
	}
	return buffer.WriteRequest{Coll: st.c.Name, ID: st.id, Change: ch, Schema: st.c.Table.Schema, Options: st.o}
}

func (st *fieldState) ref() Ref { return Ref{Coll: st.c, ID: st.id} }

func (st *fieldState) setBase(row change.Doc) { st.o.HaveBase, st.o.Base = true, row }

// decide is what the answers other than Buffered, NeedBase and Voided mean
// for a field write. A patch of a missing document becomes a create, which
// only creates (IfAbsent): if another client created the document in
// between (Exists), it becomes a patch again. A counting patch of a
// document that is pending but not cached reads it through first
// (NeedCache), and the entry it installs may be evicted or voided before
// the write comes back: then it goes round again.
func (st *fieldState) decide(ctx context.Context, out buffer.Outcome) (next, error) {
	switch out {
	case buffer.NotFound:
		if st.w.Op == UnsetFields || st.w.Op == DeleteDoc {
			return stop, nil // nothing to unset or delete
		}
		if err := st.toCreate(); err != nil {
			return stop, err
		}
		return again, nil
	case buffer.Exists:
		st.create = false
		return restart, nil
	case buffer.NeedCache:
		_, err := st.s.get(ctx, st.c, st.id)
		switch {
		case errors.Is(err, ErrNotFound):
			// Deleted by a buffered write since the attempt.
			if st.w.Op == UnsetFields {
				return stop, nil
			}
			if err := st.toCreate(); err != nil {
				return stop, err
			}
			return again, nil
		case err != nil:
			return stop, err
		}
		return restart, nil
	case buffer.Overflow:
		return stop, ErrOverflow
	}
	return stop, errors.New("document: unexpected answer of the write script")
}

// runField drives a field write to its end (drive), starting from the
// answer to its first attempt when first is not nil; without one it takes
// the fallback's first step (applyFirst).
func (s *Service) runField(ctx context.Context, st *fieldState, first *buffer.WriteResult) (FieldResult, error) {
	if first == nil {
		if err := s.applyFirst(ctx, st.ref(), st.pol); err != nil {
			return FieldResult{}, err
		}
	}
	r, err := s.drive(ctx, st, first)
	if err != nil || r.Outcome != buffer.Buffered {
		return FieldResult{}, err
	}
	return s.fieldDone(ctx, st, r)
}

// toCreate turns the write into a create of the document.
func (st *fieldState) toCreate() error {
	if _, err := st.createChange(); err != nil {
		return err
	}
	st.create = true
	st.restart()
	return nil
}

// fieldDone acknowledges a buffered field write and computes its result.
func (s *Service) fieldDone(ctx context.Context, st *fieldState, r buffer.WriteResult) (FieldResult, error) {
	st.entry, st.seq = r.Entry, r.Seq
	if _, err := s.acknowledge(ctx, st.ref(), r.Seq, st.pol); err != nil {
		return FieldResult{}, err
	}
	var res FieldResult
	switch st.w.Op {
	case SetFields:
		if !st.create {
			res.Added = r.Added
			break
		}
		for _, v := range st.w.Set {
			if string(v) != "null" {
				res.Added++
			}
		}
	case UnsetFields:
		res.Removed = r.Removed
	case DeleteDoc:
		res.Existed = true
	case IncField:
		if st.create {
			res.Value = st.put.Doc[st.w.Field]
			break
		}
		if col, _ := st.c.Table.Schema.Column(st.w.Field); col.Type == change.TypeInt {
			res.Value = r.Value
			break
		}
		// A float: the script dropped the entry and reported the value
		// before the write; the sum is computed exactly as a read merges it.
		before := r.Value
		if before == nil {
			before = json.RawMessage("null")
		}
		d, err := change.Apply(change.Doc{st.w.Field: before}, st.patch)
		if err != nil {
			// The change is buffered; only the reply cannot be computed.
			return FieldResult{}, err
		}
		res.Value = d[st.w.Field]
	}
	return res, nil
}
