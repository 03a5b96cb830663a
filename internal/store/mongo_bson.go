package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/writeback/writeback/internal/change"
)

// Documents cross between the change package's canonical JSON and BSON
// here. Numbers keep their kind (change/value.go): an integer literal
// becomes an int32 when it fits, else an int64; any other number a double;
// and back, int32 and int64 become integer literals and a double the
// canonical double form. BSON types JSON has no literal for (ObjectId,
// dates, decimals, binary …) are read as their canonical Extended JSON
// object ({"$oid": "…"}) and written back as the same BSON value, so a
// document written by another program survives a round trip through the
// cache untouched.

// ToBSON converts a canonical JSON value to BSON. The driver's Extended
// JSON parser (relaxed mode) reads plain JSON numbers exactly by the
// change package's rule, and turns {"$oid": …} and the like into their
// BSON types; client values never hold such objects (their field names
// cannot start with '$').
func ToBSON(v json.RawMessage) (bson.RawValue, error) {
	var holder bson.Raw
	wrapped := make([]byte, 0, len(v)+6)
	wrapped = append(append(append(wrapped, `{"v":`...), v...), '}')
	if err := bson.UnmarshalExtJSON(wrapped, false, &holder); err != nil {
		return bson.RawValue{}, fmt.Errorf("store: value %.60s: %w", v, err)
	}
	return holder.Lookup("v"), nil
}

// docToBSON converts a document (a Put's) to BSON with _id first and the
// other top-level fields in name order (a Doc is a map: its order is not
// the client's), followed by the applied-seq stamp.
func docToBSON(d change.Doc, stamp int64) (bson.Raw, error) {
	keys := make([]string, 0, len(d))
	size := 64
	for k, v := range d {
		if k != mongoKey {
			keys = append(keys, k)
		}
		size += len(k) + len(v) + 4
	}
	sort.Strings(keys)
	b := bytes.NewBuffer(make([]byte, 0, size))
	b.WriteByte('{')
	if id, ok := d[mongoKey]; ok {
		b.WriteString(`"` + mongoKey + `":`)
		b.Write(id)
		b.WriteByte(',')
	}
	for _, k := range keys {
		writeString(b, k)
		b.WriteByte(':')
		b.Write(d[k])
		b.WriteByte(',')
	}
	fmt.Fprintf(b, `"%s":{"$numberLong":"%d"}}`, StampField, stamp)
	var out bson.Raw
	if err := bson.UnmarshalExtJSON(b.Bytes(), false, &out); err != nil {
		return nil, fmt.Errorf("store: document: %w", err)
	}
	return out, nil
}

// stampUpdate returns the update document u (JSON, as change.Updates
// renders it: "$set" first when present) with the stamp added to its $set,
// as BSON.
func stampUpdate(u json.RawMessage, stamp int64) (bson.Raw, error) {
	st := fmt.Sprintf(`"%s":{"$numberLong":"%d"}`, StampField, stamp)
	var b []byte
	switch {
	case bytes.HasPrefix(u, []byte(`{"$set":{`)):
		b = append(append([]byte(`{"$set":{`), st...), ',')
		b = append(b, u[len(`{"$set":{`):]...)
	case len(u) <= 2: // {}
		b = []byte(`{"$set":{` + st + `}}`)
	default:
		b = append([]byte(`{"$set":{`+st+`},`), u[1:]...)
	}
	var out bson.Raw
	if err := bson.UnmarshalExtJSON(b, false, &out); err != nil {
		return nil, fmt.Errorf("store: update %.80s: %w", u, err)
	}
	return out, nil
}

// FromBSON converts a stored document to a Doc and its applied-seq stamp
// (0 when it has none), leaving the stamp out of the Doc.
func FromBSON(raw bson.Raw) (change.Doc, int64, error) {
	elems, err := raw.Elements()
	if err != nil {
		return nil, 0, fmt.Errorf("store: malformed document: %w", err)
	}
	doc := make(change.Doc, len(elems))
	var stamp int64
	var b bytes.Buffer
	for _, e := range elems {
		if e.Key() == StampField {
			stamp, _ = e.Value().AsInt64OK()
			continue
		}
		b.Reset()
		if err := writeJSON(&b, e.Value()); err != nil {
			return nil, 0, fmt.Errorf("store: field %s: %w", e.Key(), err)
		}
		doc[e.Key()] = json.RawMessage(bytes.Clone(b.Bytes()))
	}
	return doc, stamp, nil
}

// writeJSON writes a BSON value as canonical JSON.
func writeJSON(b *bytes.Buffer, v bson.RawValue) error {
	switch v.Type {
	case bson.TypeDouble:
		b.WriteString(change.FormatDouble(v.Double()))
	case bson.TypeInt32:
		b.WriteString(strconv.FormatInt(int64(v.Int32()), 10))
	case bson.TypeInt64:
		b.WriteString(strconv.FormatInt(v.Int64(), 10))
	case bson.TypeString:
		writeString(b, v.StringValue())
	case bson.TypeBoolean:
		b.WriteString(strconv.FormatBool(v.Boolean()))
	case bson.TypeNull:
		b.WriteString("null")
	case bson.TypeEmbeddedDocument:
		elems, err := v.Document().Elements()
		if err != nil {
			return err
		}
		b.WriteByte('{')
		for i, e := range elems {
			if i > 0 {
				b.WriteByte(',')
			}
			writeString(b, e.Key())
			b.WriteByte(':')
			if err := writeJSON(b, e.Value()); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	case bson.TypeArray:
		vals, err := v.Array().Values()
		if err != nil {
			return err
		}
		b.WriteByte('[')
		for i, e := range vals {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := writeJSON(b, e); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	default:
		ext, err := bson.MarshalExtJSON(bson.D{{Key: "v", Value: v}}, true, false)
		if err != nil {
			return err
		}
		// {"v":<value>}
		inner := bytes.TrimSpace(ext[bytes.IndexByte(ext, ':')+1 : len(ext)-1])
		var canon bytes.Buffer
		if err := json.Compact(&canon, inner); err != nil {
			return err
		}
		b.Write(canon.Bytes())
	}
	return nil
}

// writeString writes s as encoding/json does (the canonical form of
// strings).
func writeString(b *bytes.Buffer, s string) {
	q, _ := json.Marshal(s)
	b.Write(q)
}
