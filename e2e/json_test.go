package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
)

// Operators inside JSON columns ($push, $addToSet, $pull, nested paths)
// under write-back: concurrent non-idempotent $push of distinct values is
// applied exactly once each, reads see every acknowledged change before
// and after the flush, and a type error the current value already shows
// is a 400 that buffers nothing.
func TestJSONColumnOperators(t *testing.T) {
	e := newEnv(t, 2)
	addr := freeAddr(t)
	sc := start(t, e.config(addr, "write-back", ""), addr)
	ctx := context.Background()
	for _, db := range []string{"pg", "maria"} {
		coll := e.coll(db)
		mustWrite(t)(sc.c.Patch(ctx, coll, "1", map[string]any{"$set": map[string]any{"j": map[string]any{"tags": []string{"seed"}, "n": 0}}}))
		var mu sync.Mutex // guards acked
		var acked []string
		var wg sync.WaitGroup
		for c := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 25 {
					v := fmt.Sprintf("c%d-%d", c, i)
					if _, err := sc.c.Patch(ctx, coll, "1", map[string]any{"$push": map[string]any{"j.tags": v}, "$inc": map[string]any{"j.n": 1}}); err != nil {
						t.Errorf("push: %v", err)
						return
					}
					mu.Lock()
					acked = append(acked, v)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		mustWrite(t)(sc.c.Patch(ctx, coll, "1", map[string]any{"$addToSet": map[string]any{"j.tags": "seed"}}))
		mustWrite(t)(sc.c.Patch(ctx, coll, "1", map[string]any{"$pull": map[string]any{"j.tags": "c0-0"}}))
		want := append([]string{"seed"}, acked...)
		want = slices.DeleteFunc(want, func(s string) bool { return s == "c0-0" })
		check := func(when string, raw json.RawMessage) {
			t.Helper()
			var j struct {
				Tags []string
				N    int
			}
			if err := json.Unmarshal(raw, &j); err != nil {
				t.Fatalf("%s: %v in %s", when, err, raw)
			}
			got := slices.Clone(j.Tags)
			sort.Strings(got)
			w := slices.Clone(want)
			sort.Strings(w)
			if !slices.Equal(got, w) || j.N != len(acked) {
				t.Errorf("%s %s: %d tags (n=%d), want %d acknowledged once each (n=%d)", db, when, len(j.Tags), j.N, len(w), len(acked))
			}
		}
		check("read while pending", json.RawMessage(jsonField(t, getDoc(t, sc.c, coll, "1"))))
		sc.flush(t)
		check("read after flush", json.RawMessage(jsonField(t, getDoc(t, sc.c, coll, "1"))))
		var stored string
		if err := e.dbs[db].QueryRow(fmt.Sprintf("SELECT j FROM %s WHERE id = 1", e.table)).Scan(&stored); err != nil {
			t.Fatal(err)
		}
		check("in the database", json.RawMessage(stored))

		// $push onto a number the sidecar can see: a 400, nothing buffered.
		before, _ := sc.c.Status(ctx)
		_, err := sc.c.Patch(ctx, coll, "1", map[string]any{"$push": map[string]any{"j.n": 1}})
		if !errIs(err, http.StatusBadRequest) || !strings.Contains(err.Error(), "array") {
			t.Errorf("$push onto a number: %v; want a 400 about arrays", err)
		}
		if after, _ := sc.c.Status(ctx); after.Pending != before.Pending {
			t.Errorf("the rejected $push was buffered")
		}
	}
}

func jsonField(t *testing.T, d map[string]any) []byte {
	t.Helper()
	b, err := json.Marshal(d["j"])
	if err != nil {
		t.Fatal(err)
	}
	return b
}
