package change

import (
	"encoding/json"
	"strings"
)

// Updates renders a document collection's operators as MongoDB update
// documents, to be applied in order (for instance as one ordered
// bulkWrite of updateOne): each holds operators on paths that do not
// overlap, in the order the server itself applies the fields of one update,
// so that every update does exactly what applying its operators in order
// does.
// Values are canonical JSON (see value.go): integers fit int32 or int64,
// doubles carry a '.' or an exponent; a store converts them to BSON with that
// distinction (int32 when it fits, else int64; double).
func Updates(ops []Op) []json.RawMessage {
	var out []json.RawMessage
	for i := 0; i < len(ops); {
		j := i + 1
		for j < len(ops) && fitsGroup(ops[i:j], ops[j]) {
			j++
		}
		out = append(out, renderUpdate(ops[i:j]))
		i = j
	}
	return out
}

// fitsGroup reports whether o may join group: no overlap, and after every
// path of the group both in MongoDB's order (5.0+: numbers in numeric order)
// and in plain string order (MongoDB 4.4, FerretDB), so that the server
// applies the group's fields in list order whichever it uses.
func fitsGroup(group []Op, o Op) bool {
	p := segments(o.Path)
	for _, g := range group {
		q := segments(g.Path)
		if related(p, q) || comparePaths(q, p) > 0 || g.Path > o.Path {
			return false
		}
	}
	return true
}

// renderUpdate writes one update document: operators in a fixed order,
// each with its fields in path order.
func renderUpdate(ops []Op) json.RawMessage {
	var b strings.Builder
	b.WriteByte('{')
	first := true
	for _, name := range []Operator{OpSet, OpUnset, OpInc, OpPush, OpAddToSet, OpPull} {
		var fields []Op
		for _, o := range ops {
			if o.Op == name {
				fields = append(fields, o)
			}
		}
		if len(fields) == 0 {
			continue
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		b.Write(appendString(nil, string(name)))
		b.WriteString(":{")
		for k, o := range fields {
			if k > 0 {
				b.WriteByte(',')
			}
			b.Write(appendString(nil, o.Path))
			b.WriteByte(':')
			switch o.Op {
			case OpSet, OpInc:
				b.Write(o.Value)
			case OpUnset:
				b.WriteString(`""`)
			case OpPush, OpAddToSet:
				b.WriteString(`{"$each":`)
				writeList(&b, o.Values)
				b.WriteByte('}')
			case OpPull:
				if o.In || len(o.Values) != 1 {
					b.WriteString(`{"$in":`)
					writeList(&b, o.Values)
					b.WriteByte('}')
				} else {
					b.Write(o.Values[0])
				}
			}
		}
		b.WriteByte('}')
	}
	b.WriteByte('}')
	return json.RawMessage(b.String())
}

func writeList(b *strings.Builder, vals []json.RawMessage) {
	b.WriteByte('[')
	for i, v := range vals {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(v)
	}
	b.WriteByte(']')
}
