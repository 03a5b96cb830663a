package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"testing"
)

// nearOff turns a sidecar's near cache off (its environment).
const nearOff = "WRITEBACK_NEAR_CACHE=off"

// decodeExact decodes a document keeping numbers as written.
func decodeExact(t *testing.T, raw []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("%v in %s", err, raw)
	}
	return v
}

// TestPatchOperatorsUpdateTheEntry: document operators and operators inside
// JSON columns update the cache entry in place, so consecutive patches and
// the reads between them are hits; and the value in place is exactly the
// value a miss computes from the store and the buffered writes, and the
// value the store ends up with. The sidecars' near caches are off: the test
// is of the Redis entry, and a near-cache copy (a patch keeps its own)
// would answer the reads after the evictions instead of the miss.
func TestPatchOperatorsUpdateTheEntry(t *testing.T) {
	patches := []map[string]any{
		{"$push": map[string]any{"friends": "bob"}},
		{"$addToSet": map[string]any{"friends": "bob"}},
		{"$push": map[string]any{"friends": map[string]any{"$each": []any{"carol", 7, 2.5}}}},
		{"$pull": map[string]any{"friends": "bob"}},
		{"$set": map[string]any{"profile.city": "LA"}},
		{"$inc": map[string]any{"profile.visits": 1}},
		{"$inc": map[string]any{"profile.visits": 2}, "$push": map[string]any{"friends": "dave"}},
		{"$pull": map[string]any{"friends": map[string]any{"$in": []any{7, "carol"}}}},
	}
	check := func(t *testing.T, sc *sidecar, coll, id string, misses func() float64, evict func() error, stored func() any, field string) {
		ctx := context.Background()
		pick := func(raw []byte) any {
			v := decodeExact(t, raw)
			if field == "" {
				return v
			}
			return v.(map[string]any)[field]
		}
		raw, _, err := sc.c.Get(ctx, coll, id) // fills the entry
		if err != nil {
			t.Fatal(err)
		}
		before := misses()
		for i, p := range patches {
			if field != "" {
				p = prefixPaths(p, field)
			}
			if _, err := sc.c.Patch(ctx, coll, id, p); err != nil {
				t.Fatalf("patch %d %v: %v", i, p, err)
			}
			if raw, _, err = sc.c.Get(ctx, coll, id); err != nil {
				t.Fatal(err)
			}
			inPlace := pick(raw)
			if err := evict(); err != nil {
				t.Fatal(err)
			}
			recomputed, _, err := sc.c.Get(ctx, coll, id)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(inPlace, pick(recomputed)) {
				t.Fatalf("after patch %d %v the entry holds\n%s\nbut a miss computes\n%s", i, p, raw, recomputed)
			}
			before++ // the read after the eviction
		}
		if got := misses(); got != before {
			t.Errorf("%v misses during the patches, want only the %d reads after evictions", got, len(patches))
		}
		sc.flush(t)
		if got, want := stored(), pick(raw); !reflect.DeepEqual(got, want) {
			t.Errorf("stored %v, want %v", got, want)
		}
	}

	t.Run("mongodb", func(t *testing.T) {
		e := newMongoEnv(t)
		addr := freeAddr(t)
		sc := start(t, e.config(addr, "write-back"), addr, nearOff)
		mustWrite(t)(sc.c.Put(context.Background(), e.coll, "alice", map[string]any{"name": "alice", "friends": []string{}, "profile": map[string]any{"visits": 0}}))
		check(t, sc, e.coll, "alice",
			func() float64 {
				return metricValue(t, sc.addr, `writeback_cache_misses_total{collection="`+e.coll+`"}`)
			},
			func() error { return evictMongo(e, "alice") },
			func() any {
				b, err := json.Marshal(e.stored("alice"))
				if err != nil {
					t.Fatal(err)
				}
				return decodeExact(t, b)
			}, "")
	})
	t.Run("postgres-jsonb", func(t *testing.T) {
		e := newEnv(t, 1)
		addr := freeAddr(t)
		sc := start(t, e.config(addr, "write-back", ""), addr, nearOff)
		coll := e.coll("pg")
		mustWrite(t)(sc.c.Patch(context.Background(), coll, "1", map[string]any{"$set": map[string]any{"j": map[string]any{"friends": []string{}, "profile": map[string]any{"visits": 0}}}}))
		check(t, sc, coll, "1",
			func() float64 { return metricValue(t, sc.addr, `writeback_cache_misses_total{collection="`+coll+`"}`) },
			func() error { return evict(e, coll, "1") },
			func() any {
				var j string
				if err := e.dbs["pg"].QueryRow("SELECT j FROM " + e.table + " WHERE id = 1").Scan(&j); err != nil {
					t.Fatal(err)
				}
				return decodeExact(t, []byte(j))
			}, "j")
	})
}

// prefixPaths moves every operator's paths under field: {"$push":{"a":1}}
// becomes {"$push":{"j.a":1}}.
func prefixPaths(p map[string]any, field string) map[string]any {
	out := map[string]any{}
	for op, args := range p {
		m := map[string]any{}
		for path, v := range args.(map[string]any) {
			m[field+"."+path] = v
		}
		out[op] = m
	}
	return out
}
