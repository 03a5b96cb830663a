package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"github.com/writeback/writeback/internal/change"
)

var jsonNull = json.RawMessage("null")

// docValue converts the text form of a column's value, as both drivers read
// it (PostgreSQL: col::text; MySQL: the text protocol's bytes), into the
// canonical JSON of the column's type. null is SQL NULL.
func docValue(c change.Column, text []byte, null bool) (json.RawMessage, error) {
	if null {
		return jsonNull, nil
	}
	switch c.Type {
	case change.TypeInt:
		// Integers are already canonical: no sign noise, no leading zeros.
		return json.RawMessage(text), nil
	case change.TypeFloat:
		// Re-encode so that the value reads exactly as change.Canonical
		// writes it (json.Marshal of the float64), whatever the server's
		// spelling (1e21, 1e+21, 1.0).
		f, err := strconv.ParseFloat(string(text), 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return nil, fmt.Errorf("store: column %q holds %.40q, which is not a finite number JSON can represent", c.Name, text)
		}
		b, _ := json.Marshal(f)
		return b, nil
	case change.TypeDecimal:
		// The database's own text (12.50) is kept: it is what the column
		// holds, digit for digit. NaN and Infinity have no JSON form.
		if !isJSONNumber(text) {
			return nil, fmt.Errorf("store: column %q holds %.40q, which is not a number JSON can represent", c.Name, text)
		}
		return json.RawMessage(text), nil
	case change.TypeBool:
		switch string(text) {
		case "true", "t", "1":
			return json.RawMessage("true"), nil
		case "false", "f", "0":
			return json.RawMessage("false"), nil
		}
		return nil, fmt.Errorf("store: column %q holds %.40q, which is not a boolean", c.Name, text)
	case change.TypeJSON:
		var buf bytes.Buffer
		if err := json.Compact(&buf, text); err != nil {
			return nil, fmt.Errorf("store: column %q holds invalid JSON: %w", c.Name, err)
		}
		return buf.Bytes(), nil
	default: // TypeText, TypeOther
		b, _ := json.Marshal(string(text))
		return b, nil
	}
}

// textCell is one column of a row read as text: Valid is false for NULL.
type textCell struct {
	Bytes []byte
	Valid bool
}

// buildDoc turns a row of text cells, one per column of t in schema order,
// into a document.
func buildDoc(t *Table, cells []textCell) (change.Doc, error) {
	doc := make(change.Doc, len(cells))
	for i, c := range t.Schema.Columns {
		v, err := docValue(c, cells[i].Bytes, !cells[i].Valid)
		if err != nil {
			return nil, fmt.Errorf("%w (table %s)", err, t.Name)
		}
		doc[c.Name] = v
	}
	return doc, nil
}
