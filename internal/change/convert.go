package change

import (
	"errors"
	"fmt"
)

// Convert compacts a document's pending changes and makes them idempotent
// against its stored value doc (nil: no document), as Algorithm 2 does
// before applying: a patch that finds no document does nothing (MongoDB's
// update matches nothing), so it becomes an empty patch; a change that
// cannot apply to the value it meets is an error wrapping *TypeError.
func Convert(doc Doc, changes []Change) ([]Change, error) {
	compacted := CompactDoc(changes)
	out := make([]Change, len(compacted))
	live := make([]Change, 0, len(compacted)) // the changes that do something
	var at []int                              // their positions in out
	cur := doc
	for j, c := range compacted {
		next, err := Apply(cur, c)
		switch {
		case errors.Is(err, ErrNotFound):
			out[j] = Change{Seq: c.Seq, Kind: Patch}
		case err != nil:
			return nil, fmt.Errorf("change seq %d: %w", c.Seq, err)
		default:
			cur = next
			live = append(live, c)
			at = append(at, j)
		}
	}
	conv, err := Idempotent(doc, live)
	if err != nil {
		return nil, err
	}
	for k, j := range at {
		out[j] = conv[k]
	}
	return out, nil
}

// AllIdempotent reports whether every change of cs is idempotent
// (IsIdempotent): Convert returns such changes as they are when it does
// not compact them either, and the buffered write needs no replacement.
func AllIdempotent(cs []Change) bool {
	for _, c := range cs {
		if !IsIdempotent(c) {
			return false
		}
	}
	return true
}
