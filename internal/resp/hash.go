package resp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"sync"

	"github.com/tidwall/redcon"

	"github.com/writeback/writeback/internal/change"
	"github.com/writeback/writeback/internal/document"
)

// The document commands. A document is a hash whose fields are its
// table's columns other than the key (the key is in the document's name):
// a null column is an absent field, so HGETALL and HLEN leave it out,
// HEXISTS says 0 and HGET answers nil. Fields that are not columns read as
// absent and cannot be written.

// ref resolves a key "collection/id" or "collection:id" (collection names
// contain neither character, ids may).
func (s *Server) ref(key []byte) (document.Ref, *respError) {
	k := string(key)
	i := strings.IndexAny(k, "/:")
	if i <= 0 {
		return document.Ref{}, errf(400, "ERR key '%.128s' does not name a document: use collection/id or collection:id", k)
	}
	r, err := s.svc.Ref(k[:i], k[i+1:])
	if err != nil {
		if errors.Is(err, document.ErrUnknownCollection) {
			return document.Ref{}, errf(404, "ERR unknown collection '%.128s' in key '%.128s'", k[:i], k)
		}
		return document.Ref{}, s.toRESP(err)
	}
	return r, nil
}

// readOne prepares a one-document read of key, whose result render
// encodes.
func readOne(c *conn, j *job, key []byte, render func(j *job, schema *change.Schema, doc document.Hash)) {
	r, e := c.s.ref(key)
	if e != nil {
		j.fail(e)
		return
	}
	j.ref = r
	j.setKey(r)
	j.read = render
}

// readable returns a field's column: false when the field is not a column
// or is the key.
func readable(s *change.Schema, name []byte) (change.Column, bool) {
	col, ok := s.Column(string(name))
	return col, ok && col.Name != s.Key
}

func cmdHGet(c *conn, j *job, args [][]byte) {
	name := args[2]
	readOne(c, j, args[1], func(j *job, s *change.Schema, doc document.Hash) {
		if col, ok := readable(s, name); ok {
			if b, _, ok := appendWire(nil, col.Type, doc[col.Name], nil); ok {
				j.reply(b)
				return
			}
		}
		j.reply(appendNull(nil, j.proto))
	})
}

func cmdHMGet(c *conn, j *job, args [][]byte) {
	names := args[2:]
	readOne(c, j, args[1], func(j *job, s *change.Schema, doc document.Hash) {
		b := redcon.AppendArray(j.buffer(16+128*len(names)), len(names))
		var scratch []byte
		for _, n := range names {
			ok := false
			if col, isCol := readable(s, n); isCol {
				b, scratch, ok = appendWire(b, col.Type, doc[col.Name], scratch)
			}
			if !ok {
				b = appendNull(b, j.proto)
			}
		}
		j.reply(b)
	})
}

func cmdHGetAll(c *conn, j *job, args [][]byte) {
	j.whole = true
	readOne(c, j, args[1], func(j *job, s *change.Schema, doc document.Hash) {
		type field struct {
			col *change.Column
			v   string
		}
		fields := make([]field, 0, 16)
		size := 16
		for i := range s.Columns {
			col := &s.Columns[i]
			if v := doc[col.Name]; col.Name != s.Key && notNull(v) {
				fields = append(fields, field{col, v})
				size += len(col.Name) + len(v) + 16
			}
		}
		b := appendMap(j.buffer(size), len(fields), j.proto)
		var buf [512]byte
		scratch := buf[:0]
		for _, f := range fields {
			b = redcon.AppendBulkString(b, f.col.Name)
			b, scratch, _ = appendWire(b, f.col.Type, f.v, scratch)
		}
		j.reply(b)
	})
}

func notNull(v string) bool { return v != "" && v != "null" }

func cmdHExists(c *conn, j *job, args [][]byte) {
	name := args[2]
	readOne(c, j, args[1], func(j *job, s *change.Schema, doc document.Hash) {
		col, ok := readable(s, name)
		j.reply(redcon.AppendInt(nil, boolInt(ok && notNull(doc[col.Name]))))
	})
}

func cmdHLen(c *conn, j *job, args [][]byte) {
	readOne(c, j, args[1], func(j *job, s *change.Schema, doc document.Hash) {
		var n int64
		for _, col := range s.Columns {
			if col.Name != s.Key && notNull(doc[col.Name]) {
				n++
			}
		}
		j.reply(redcon.AppendInt(nil, n))
	})
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// writeOne prepares a one-document write of key.
func writeOne(c *conn, j *job, key []byte, build func(r document.Ref) (*document.FieldWrite, *respError), wrote func(j *job, r document.FieldResult)) {
	r, e := c.s.ref(key)
	if e != nil {
		j.fail(e)
		return
	}
	fw, e := build(r)
	if e != nil {
		j.fail(e)
		return
	}
	if fw == nil {
		return // answered by build
	}
	fw.Ref = r
	j.ref, j.writes = r, true
	j.setKey(r)
	j.fw, j.wrote = fw, wrote
}

// writableColumn is the column a write names, or the error for a field
// that is not one.
func writableColumn(s *change.Schema, coll string, name []byte) (change.Column, *respError) {
	col, ok := s.Column(string(name))
	switch {
	case !ok:
		return col, errf(400, "ERR unknown field '%.128s': collection '%s' has no such column", name, coll)
	case col.Name == s.Key:
		return col, errf(400, "ERR field '%s' is the document's key (the id in its name) and cannot be written", col.Name)
	}
	return col, nil
}

// cmdHSet is HSET and HMSET: $set the fields, creating the document (the
// other columns null) when it does not exist. HSET answers how many fields
// were absent (or null) before, HMSET OK.
func cmdHSet(c *conn, j *job, args [][]byte) {
	if len(args)%2 != 0 {
		j.fail(errArity(strings.ToLower(string(args[0]))))
		return
	}
	hmset := bytes.EqualFold(args[0], []byte("hmset"))
	pairs := args[2:]
	writeOne(c, j, args[1], func(r document.Ref) (*document.FieldWrite, *respError) {
		s := r.Coll.Table.Schema
		set := make(change.Doc, len(pairs)/2)
		for i := 0; i < len(pairs); i += 2 {
			col, e := writableColumn(s, r.Coll.Name, pairs[i])
			if e != nil {
				return nil, e
			}
			v, e := canonicalOf(col, pairs[i+1])
			if e != nil {
				return nil, e
			}
			set[col.Name] = v
		}
		return &document.FieldWrite{Op: document.SetFields, Set: set}, nil
	}, func(j *job, r document.FieldResult) {
		if hmset {
			j.reply(ok)
			return
		}
		j.reply(redcon.AppendInt(nil, r.Added))
	})
}

// cmdHDel is $unset of the fields; fields that are not columns count as
// absent, and NOT NULL columns cannot be deleted.
func cmdHDel(c *conn, j *job, args [][]byte) {
	names := args[2:]
	writeOne(c, j, args[1], func(r document.Ref) (*document.FieldWrite, *respError) {
		s := r.Coll.Table.Schema
		var unset []string
		seen := map[string]bool{}
		for _, n := range names {
			col, ok := s.Column(string(n))
			if !ok || col.Name == s.Key || seen[col.Name] {
				continue
			}
			if !col.Nullable {
				return nil, errf(400, "ERR field '%s' cannot be deleted: the column is NOT NULL", col.Name)
			}
			seen[col.Name] = true
			unset = append(unset, col.Name)
		}
		if len(unset) == 0 {
			j.reply(redcon.AppendInt(nil, 0))
			return nil, nil
		}
		return &document.FieldWrite{Op: document.UnsetFields, Unset: unset}, nil
	}, func(j *job, r document.FieldResult) {
		j.reply(redcon.AppendInt(nil, r.Removed))
	})
}

// cmdHIncrBy is $inc of an integer column, exactly once; a missing
// document is created with the field equal to the increment.
func cmdHIncrBy(c *conn, j *job, args [][]byte) {
	amount, isInt := parseInt(args[3])
	if !isInt {
		j.fail(errNotInteger)
		return
	}
	writeOne(c, j, args[1], func(r document.Ref) (*document.FieldWrite, *respError) {
		col, e := writableColumn(r.Coll.Table.Schema, r.Coll.Name, args[2])
		if e != nil {
			return nil, e
		}
		if col.Type != change.TypeInt {
			return nil, errHashNotInt
		}
		return &document.FieldWrite{Op: document.IncField, Field: col.Name, Amount: json.Number(strconv.FormatInt(amount, 10))}, nil
	}, func(j *job, r document.FieldResult) {
		n, err := strconv.ParseInt(string(r.Value), 10, 64)
		if err != nil {
			j.fail(errf(503, "ERR the new value %.40q is not an integer", r.Value))
			return
		}
		j.reply(redcon.AppendInt(nil, n))
	})
}

// cmdHIncrByFloat is $inc of a float column (or of an integer column by a
// whole number), answered with the new value as the read path computes
// it: float64, formatted as canonical JSON.
func cmdHIncrByFloat(c *conn, j *job, args [][]byte) {
	f, isFloat := parseFloat(args[3])
	if !isFloat {
		j.fail(errNotFloat)
		return
	}
	var isFloatCol bool
	writeOne(c, j, args[1], func(r document.Ref) (*document.FieldWrite, *respError) {
		col, e := writableColumn(r.Coll.Table.Schema, r.Coll.Name, args[2])
		if e != nil {
			return nil, e
		}
		switch col.Type {
		case change.TypeFloat:
			isFloatCol = true
			return &document.FieldWrite{Op: document.IncField, Field: col.Name, Amount: json.Number(floatJSON(f))}, nil
		case change.TypeInt:
			if f != math.Trunc(f) || math.Abs(f) >= 1<<63 {
				return nil, errf(400, "ERR field '%s' is an integer column: the increment must be a whole number", col.Name)
			}
			return &document.FieldWrite{Op: document.IncField, Field: col.Name, Amount: json.Number(strconv.FormatInt(int64(f), 10))}, nil
		}
		return nil, errHashNotFlt
	}, func(j *job, r document.FieldResult) {
		j.reply(redcon.AppendBulk(nil, r.Value))
	})
	j.mapErr = func(err error) *respError {
		if isFloatCol && errors.Is(err, document.ErrOverflow) {
			return errFloatInf
		}
		return nil
	}
}

// keysOf resolves the keys of a multi-key command, and its distinct
// documents for the ordering.
func (s *Server) keysOf(keys [][]byte) ([]document.Ref, []docKey, *respError) {
	refs := make([]document.Ref, len(keys))
	var ids []docKey
	seen := map[docKey]bool{}
	for i, k := range keys {
		r, e := s.ref(k)
		if e != nil {
			return nil, nil, e
		}
		refs[i] = r
		if id := keyOf(r); !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	return refs, ids, nil
}

// cmdDel deletes documents, counting those that existed. Several keys are
// deleted one after the other, each atomically (not all at once).
func cmdDel(c *conn, j *job, args [][]byte) {
	if len(args) == 2 {
		writeOne(c, j, args[1], func(document.Ref) (*document.FieldWrite, *respError) {
			return &document.FieldWrite{Op: document.DeleteDoc}, nil
		}, func(j *job, r document.FieldResult) {
			j.reply(redcon.AppendInt(nil, boolInt(r.Existed)))
		})
		return
	}
	refs, ids, e := c.s.keysOf(args[1:])
	if e != nil {
		j.fail(e)
		return
	}
	j.keys, j.writes = ids, true
	j.run = func(ctx context.Context, j *job) {
		var n int64
		for _, r := range refs {
			res, err := c.s.svc.WriteField(ctx, document.FieldWrite{Ref: r, Op: document.DeleteDoc})
			if err != nil {
				j.fail(c.s.toRESP(err))
				return
			}
			n += boolInt(res.Existed)
		}
		j.reply(redcon.AppendInt(nil, n))
	}
}

// cmdExists counts the keys naming existing documents (a key given twice
// counts twice, as in Redis).
func cmdExists(c *conn, j *job, args [][]byte) {
	if len(args) == 2 {
		readOne(c, j, args[1], func(j *job, _ *change.Schema, doc document.Hash) {
			j.reply(redcon.AppendInt(nil, boolInt(doc != nil)))
		})
		return
	}
	refs, ids, e := c.s.keysOf(args[1:])
	if e != nil {
		j.fail(e)
		return
	}
	j.keys = ids
	j.run = func(ctx context.Context, j *job) {
		var (
			wg    sync.WaitGroup
			mu    sync.Mutex // guards n, first
			n     int64
			first error
		)
		wg.Add(len(refs))
		c.s.svc.GetMany(ctx, refs, func(_ int, _ document.Hash, err error) {
			mu.Lock()
			switch {
			case err == nil:
				n++
			case !errors.Is(err, document.ErrNotFound) && first == nil:
				first = err
			}
			mu.Unlock()
			wg.Done()
		})
		wg.Wait()
		if first != nil {
			j.fail(c.s.toRESP(first))
			return
		}
		j.reply(redcon.AppendInt(nil, n))
	}
}
