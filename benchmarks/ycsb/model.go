package ycsb

import (
	"context"
	"fmt"
	"slices"
)

// Model is the last acknowledged value of every (record, field) a workload
// updated. The workload makes it exact: every record is updated by one
// client only, one update at a time, so acknowledgements are totally
// ordered per record. After a failed update the field may hold the
// attempted value or the previous one, and the model accepts either.
type Model struct {
	fields int
	recs   map[int64][]cell // record number → one cell per field
}

type cell struct {
	acked bool     // val is the last acknowledged value
	val   string   // meaningful when acked
	maybe []string // values of failed updates since val: each may have been applied
}

// NewModel returns an empty model of records with the given field count.
func NewModel(fields int) *Model { return &Model{fields: fields, recs: map[int64][]cell{}} }

func (m *Model) cells(rec int64) []cell {
	cs := m.recs[rec]
	if cs == nil {
		cs = make([]cell, m.fields)
		m.recs[rec] = cs
	}
	return cs
}

// Ack records an acknowledged update.
func (m *Model) Ack(rec int64, field int, v string) {
	m.cells(rec)[field] = cell{acked: true, val: v}
}

// Fail records an update whose outcome is unknown (an error or a timeout).
func (m *Model) Fail(rec int64, field int, v string) {
	c := &m.cells(rec)[field]
	c.maybe = append(c.maybe, v)
}

// Has reports whether the model knows anything of record rec.
func (m *Model) Has(rec int64) bool { return m.recs[rec] != nil }

// Check compares a read of record rec with the model and returns the first
// field whose value the model rules out, or -1.
func (m *Model) Check(rec int64, row Row) int {
	for f, c := range m.recs[rec] {
		if f < len(row) && !c.accepts(row[f]) {
			return f
		}
	}
	return -1
}

// accepts reports whether got is a value the field may hold. A field with
// failed updates and no acknowledged one may also hold its loaded value,
// which the model does not know, so it accepts anything.
func (c cell) accepts(got string) bool {
	if !c.acked || got == c.val {
		return true
	}
	return slices.Contains(c.maybe, got)
}

// want describes the values the model accepts, for messages.
func (c cell) want() string {
	if len(c.maybe) == 0 {
		return quote(c.val)
	}
	return fmt.Sprintf("%s (or one of %d failed updates)", quote(c.val), len(c.maybe))
}

// Len is the number of (record, field) pairs updated at least once.
func (m *Model) Len() int {
	n := 0
	for _, cs := range m.recs {
		for _, c := range cs {
			if c.acked || len(c.maybe) > 0 {
				n++
			}
		}
	}
	return n
}

// Keys are the keys of the records the model knows, in key order.
func (m *Model) Keys() []string {
	recs := make([]int64, 0, len(m.recs))
	for rec := range m.recs {
		recs = append(recs, rec)
	}
	slices.Sort(recs)
	keys := make([]string, len(recs))
	for i, rec := range recs {
		keys[i] = Key(rec)
	}
	return keys
}

// Merge adds the records of o, which must not overlap m's.
func (m *Model) Merge(o *Model) {
	for rec, cs := range o.recs {
		m.recs[rec] = cs
	}
}

// Mismatch is a field whose database value the model rules out.
type Mismatch struct {
	Key     string
	Field   int
	Want    string
	Got     string
	Missing bool // the record is not in the table at all
}

func (x Mismatch) String() string {
	if x.Missing {
		return fmt.Sprintf("%s: the record is missing from the table", x.Key)
	}
	return fmt.Sprintf("%s.%s: want %s, the database has %s", x.Key, FieldName(x.Field), x.Want, quote(x.Got))
}

func quote(s string) string {
	if len(s) > 24 {
		return fmt.Sprintf("%q…", s[:24])
	}
	return fmt.Sprintf("%q", s)
}

// Verification is what Verify found.
type Verification struct {
	Checked int        // updated fields compared with the table
	Bad     int        // of which the table holds a value the model rules out
	First   []Mismatch // the first mismatches, in key order
}

// Verify reads every updated record from the table and compares each
// updated field with the model, keeping up to keep mismatches.
func (m *Model) Verify(ctx context.Context, db *DB, s Spec, keep int) (Verification, error) {
	var v Verification
	keys := m.Keys()
	recs := make([]int64, 0, len(m.recs))
	for rec := range m.recs {
		recs = append(recs, rec)
	}
	slices.Sort(recs)
	rows, err := db.ReadRows(ctx, s, keys)
	if err != nil {
		return v, err
	}
	for i, rec := range recs {
		row, ok := rows[keys[i]]
		for f, c := range m.recs[rec] {
			if !c.acked && len(c.maybe) == 0 {
				continue
			}
			v.Checked++
			var x *Mismatch
			switch {
			case !ok:
				x = &Mismatch{Key: keys[i], Field: f, Missing: true}
			case !c.accepts(row[f]):
				x = &Mismatch{Key: keys[i], Field: f, Want: c.want(), Got: row[f]}
			default:
				continue
			}
			v.Bad++
			if len(v.First) < keep {
				v.First = append(v.First, *x)
			}
		}
	}
	return v, nil
}
