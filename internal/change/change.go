// Package change owns the change operators of Design 1: it validates a
// client's update against a collection's schema, applies changes to a
// document, compacts a sequence of changes (into one store effect, or into
// a shorter sequence), makes a sequence idempotent for stores without
// transactions (the paper's Algorithm 2), and encodes changes for the
// buffered write. It does no I/O.
//
// A collection's schema is either a table's columns (SQL stores: a document
// is a row) or dynamic (document stores such as MongoDB: any field, any JSON
// value, nested paths). The operators and their MongoDB semantics are
// described on Op; values and numbers in value.go.
package change

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Kind is what a change does to its document.
type Kind byte

const (
	// Put inserts or replaces the whole document.
	Put Kind = 'P'
	// Patch applies update operators to an existing document.
	Patch Kind = 'U'
	// Delete removes the document.
	Delete Kind = 'D'
)

func (k Kind) String() string {
	switch k {
	case Put:
		return "put"
	case Patch:
		return "patch"
	case Delete:
		return "delete"
	}
	return fmt.Sprintf("kind(%d)", byte(k))
}

const (
	TypeText    Type = iota // JSON string
	TypeInt                 // JSON integer (int64)
	TypeFloat               // JSON number (float64)
	TypeDecimal             // JSON number, kept as written
	TypeBool                // JSON true/false
	TypeJSON                // any JSON value
	TypeOther               // JSON string in the store's text form (dates, uuids, ...)
)

// Doc is a document: field name to its canonical JSON value. A nil Doc means
// the document does not exist.
type Doc map[string]json.RawMessage

// Clone returns a copy of d that shares no map with it.
func (d Doc) Clone() Doc {
	if d == nil {
		return nil
	}
	c := make(Doc, len(d))
	for k, v := range d {
		c[k] = v
	}
	return c
}

// Change is one write to one document.
//
// A patch of a table's row uses Set, Unset and Inc for whole columns, and
// JSON for operators inside JSON columns; a patch of a document collection's
// document uses Ops only. Within one client's patch no two paths overlap, so
// the order in which its parts apply does not matter; a patch made by
// CompactDoc may hold overlapping Ops, which apply in order.
type Change struct {
	Seq   int64                  // per-document order, assigned when buffered
	Kind  Kind                   // Put, Patch or Delete
	Doc   Doc                    // Put: the whole document (tables: every column present)
	Set   Doc                    // Patch (table): $set of whole columns
	Unset []string               // Patch (table): $unset of whole columns, which become null (sorted)
	Inc   map[string]json.Number // Patch (table): $inc of numeric columns
	// JSON holds, per JSON column, the operators on the column's value
	// (paths relative to it, "" for the value itself), in order. A NULL
	// column counts as a missing value.
	JSON map[string][]Op
	Ops  []Op // Patch (document collection): the operators, paths from the document's root, in order
}

// Error is a client's mistake: the request is rejected with a 400 and this
// one-sentence message.
type Error struct{ Msg string }

func (e *Error) Error() string { return e.Msg }

func invalid(format string, args ...any) error { return &Error{Msg: fmt.Sprintf(format, args...)} }

// ErrNotFound is returned by Apply when a patch meets a missing document.
var ErrNotFound = errors.New("change: document not found")

var null = json.RawMessage("null")

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
