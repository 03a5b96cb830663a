package document

// The JSON form of a document, shared by the HTTP API and the embedded
// mode (pkg/writeback): the same bytes and the same ETag for the same
// document, whichever member of the protocol serves it.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"hash/fnv"
	"sort"
	"strconv"
	"sync"

	"github.com/writeback/writeback/internal/change"
	"github.com/writeback/writeback/internal/nearcache"
)

// EncodeJSON writes a document's fields in the table's column order; a
// document collection's with the key first and the other fields in name
// order (a stable order, so that ETags are).
func EncodeJSON(s *change.Schema, d change.Doc) []byte {
	names := make([]string, 0, len(d))
	if s.Dynamic() {
		for name := range d {
			if name != s.Key {
				names = append(names, name)
			}
		}
		sort.Strings(names)
		names = append([]string{s.Key}, names...)
	} else {
		for _, c := range s.Columns {
			names = append(names, c.Name)
		}
	}
	var b bytes.Buffer
	b.WriteByte('{')
	first := true
	for _, name := range names {
		v, ok := d[name]
		if !ok {
			continue
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		k, _ := json.Marshal(name)
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes()
}

// ETag is the entity tag of a document's JSON body, quoted.
func ETag(body []byte) string {
	h := fnv.New64a()
	h.Write(body)
	return `"` + strconv.FormatUint(h.Sum64(), 16) + `"`
}

// GetJSON reads a document as Get does and returns its JSON body and ETag.
// A near-cache hit encodes nothing: both are the entry's, computed once, so
// the body is shared: do not modify it.
func (s *Service) GetJSON(ctx context.Context, coll, id string) (body []byte, etag string, err error) {
	r, err := s.Ref(coll, id)
	if err != nil {
		return nil, "", err
	}
	v, err := s.view(ctx, r.Coll, r.ID)
	if err != nil {
		return nil, "", err
	}
	sch := r.Coll.Table.Schema
	body = v.Memo(nearcache.MemoJSON, func() []byte { return EncodeJSON(sch, v.Doc()) })
	etag = v.Tag(func() string { return ETag(body) })
	return body, etag, nil
}

// GetManyJSON reads refs as GetMany does and returns their JSON bodies in
// order, "null" for a missing document; any other failure fails the whole
// read. A near-cache hit's body is the entry's, encoded once, so the bodies
// may be shared: do not modify them.
func (s *Service) GetManyJSON(ctx context.Context, refs []Ref) ([]json.RawMessage, error) {
	return s.getManyEncoded(ctx, refs,
		func(r Ref, e *nearcache.Entry) []byte {
			return e.Memo(nearcache.MemoJSON, func() []byte { return EncodeJSON(r.Coll.Table.Schema, docOf(e.Hash)) })
		},
		func(r Ref, doc Hash) []byte { return EncodeJSON(r.Coll.Table.Schema, docOf(doc)) })
}

// getManyEncoded reads refs as GetMany does and returns each document
// encoded — from its near-cache entry by hit, from its value by fromDoc —
// in order, "null" for a missing document; any other failure fails the
// whole read.
func (s *Service) getManyEncoded(ctx context.Context, refs []Ref, hit func(Ref, *nearcache.Entry) []byte, fromDoc func(Ref, Hash) []byte) ([]json.RawMessage, error) {
	out, err := getManyAs(s, ctx, refs, func(r Ref, e *nearcache.Entry) json.RawMessage { return hit(r, e) },
		func(r Ref, doc Hash) json.RawMessage { return fromDoc(r, doc) })
	if err != nil {
		return nil, err
	}
	for i, b := range out {
		if b == nil {
			out[i] = json.RawMessage("null")
		}
	}
	return out, nil
}

// getManyAs reads refs as GetMany does — near-cache hits first, the rest
// in one round trip — and returns each document as hit or fromDoc makes
// it, in order, the zero T for a missing document; any other failure
// fails the whole read.
func getManyAs[T any](s *Service, ctx context.Context, refs []Ref, hit func(Ref, *nearcache.Entry) T, fromDoc func(Ref, Hash) T) ([]T, error) {
	out := make([]T, len(refs))
	var rest []Ref
	var at []int // rest[k] is refs[at[k]]
	for i, r := range refs {
		if e, ok := s.Cached(r); ok {
			out[i] = hit(r, e)
			continue
		}
		rest, at = append(rest, r), append(at, i)
	}
	if len(rest) == 0 {
		return out, nil
	}
	errs := make([]error, len(rest))
	var wg sync.WaitGroup
	wg.Add(len(rest))
	s.GetMany(ctx, rest, func(k int, doc Hash, err error) {
		defer wg.Done()
		switch {
		case errors.Is(err, ErrNotFound):
		case err != nil:
			errs[k] = err
		default:
			out[at[k]] = fromDoc(rest[k], doc)
		}
	})
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// EncodeFields writes the named fields of a document that has them as a
// JSON object, in the order named: a projection. get returns a field's
// JSON text and whether the document has it.
func EncodeFields(fields []string, get func(f string) (string, bool)) []byte {
	n := 2
	for _, f := range fields {
		if v, ok := get(f); ok {
			n += len(f) + len(v) + 4
		}
	}
	b := make([]byte, 0, n)
	b = append(b, '{')
	first := true
	for _, f := range fields {
		v, ok := get(f)
		if !ok {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = appendName(b, f)
		b = append(b, ':')
		b = append(b, v...)
	}
	return append(b, '}')
}

// appendName appends a field name as a JSON string, as json.Marshal writes
// it.
func appendName(b []byte, name string) []byte {
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			k, _ := json.Marshal(name)
			return append(b, k...)
		}
	}
	b = append(b, '"')
	b = append(b, name...)
	return append(b, '"')
}

// GetFields reads a document as Get does and returns only the named
// fields, as a JSON object (EncodeFields): a near-cache hit encodes them
// from the entry without the rest of the document.
func (s *Service) GetFields(ctx context.Context, coll, id string, fields []string) ([]byte, error) {
	v, err := s.viewOf(ctx, coll, id)
	if err != nil {
		return nil, err
	}
	return EncodeFields(fields, v.field), nil
}

// viewOf resolves coll and id and reads the document (view).
func (s *Service) viewOf(ctx context.Context, coll, id string) (View, error) {
	r, err := s.Ref(coll, id)
	if err != nil {
		return View{}, err
	}
	return s.view(ctx, r.Coll, r.ID)
}

// field returns a field's JSON text and whether the document has it.
func (v View) field(f string) (string, bool) {
	if v.e != nil {
		t, ok := v.e.Hash[f]
		return t, ok
	}
	t, ok := v.doc[f]
	return string(t), ok
}

// GetManyFields reads refs as GetManyJSON does and returns only the named
// fields of each document, "null" for a missing one.
func (s *Service) GetManyFields(ctx context.Context, refs []Ref, fields []string) ([]json.RawMessage, error) {
	return s.getManyEncoded(ctx, refs,
		func(_ Ref, e *nearcache.Entry) []byte { return EncodeFields(fields, hashGetter(e.Hash)) },
		func(_ Ref, doc Hash) []byte { return EncodeFields(fields, hashGetter(doc)) })
}

func hashGetter(h map[string]string) func(string) (string, bool) {
	return func(f string) (string, bool) { v, ok := h[f]; return v, ok }
}

// GetValues reads a document as Get does and returns the JSON text of each
// named field, in the order named, "" for a field the document lacks: what
// a near-cache hit holds, with no encoding and no copy (strings are
// immutable), for an application in the process that decodes only what it
// uses.
func (s *Service) GetValues(ctx context.Context, coll, id string, fields []string) ([]string, error) {
	v, err := s.viewOf(ctx, coll, id)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(fields))
	for i, f := range fields {
		out[i], _ = v.field(f)
	}
	return out, nil
}

// GetManyValues reads refs as GetManyJSON does and returns GetValues's
// field texts of each document, nil for a missing one.
func (s *Service) GetManyValues(ctx context.Context, refs []Ref, fields []string) ([][]string, error) {
	get := func(_ Ref, h map[string]string) []string { return values(fields, h) }
	return getManyAs(s, ctx, refs, func(r Ref, e *nearcache.Entry) []string { return get(r, e.Hash) },
		func(r Ref, doc Hash) []string { return get(r, doc) })
}

// values is the texts of fields in h, "" where h lacks one.
func values(fields []string, h map[string]string) []string {
	out := make([]string, len(fields))
	for i, f := range fields {
		out[i] = h[f]
	}
	return out
}
