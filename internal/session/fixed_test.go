package session

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The entries of an immutable mapping that reads outside a session find
// are served again from this process, without Redis, until the mapping's
// TTL: with the entry gone from Redis and the store answering another
// value (a change behind the sidecar's back, which the mapping declares
// does not happen), a peek still answers the kept value and fills nothing;
// once the TTL is over it reads the store's. Entries of other mappings,
// and every entry when the budget is 0, are read from Redis each time.
func TestImmutableEntriesServedInProcess(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		bytes int64
		key   string
		kept  bool
	}{
		{"immutable", 1 << 20, "fix:none:a", true},
		{"another mapping", 1 << 20, "k:none:a", false},
		{"no budget", 0, "fix:none:a", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, func(c *Config) { c.FixedBytes = tc.bytes })
			peek := func() string {
				t.Helper()
				_, vals, err := w.svc.ReadAll(ctx, "", Reads{Peek: []string{tc.key}})
				if err != nil {
					t.Fatal(err)
				}
				return string(vals[0])
			}
			if got := peek(); got != `{"v":0}` {
				t.Fatalf("first peek: %s", got)
			}
			changed := func(string) (json.RawMessage, error) { return json.RawMessage(`{"v":1}`), nil }
			w.load.Store(&changed)
			r, err := w.svc.resolve(tc.key)
			if err != nil {
				t.Fatal(err)
			}
			entry := w.svc.keys.Entry(r.part, r.key)
			if err := w.rdb.Del(ctx, entry).Err(); err != nil {
				t.Fatal(err)
			}
			near := testutil.ToFloat64(w.svc.m.Reads.WithLabelValues("near"))
			got := peek()
			switch {
			case tc.kept && got != `{"v":0}`:
				t.Fatalf("a peek within the TTL read %s, want the kept {\"v\":0}", got)
			case !tc.kept && got != `{"v":1}`:
				t.Fatalf("a peek read %s, want the store's {\"v\":1} (nothing kept)", got)
			}
			filled := w.rdb.Exists(ctx, entry).Val() == 1
			if tc.kept == filled {
				t.Errorf("kept %v, and the peek filled Redis: %v", tc.kept, filled)
			}
			if n := testutil.ToFloat64(w.svc.m.Reads.WithLabelValues("near")) - near; (n == 1) != tc.kept {
				t.Errorf("%v reads counted as served in process", n)
			}
			if !tc.kept {
				return
			}
			time.Sleep(450 * time.Millisecond) // the mapping's TTL: 400ms
			if got := peek(); got != `{"v":1}` {
				t.Errorf("a peek after the TTL read %s, want the store's {\"v\":1}", got)
			}
		})
	}
}

// A leased read of an immutable mapping's entry goes to Redis (the lease
// is the session's to hold), and keeps nothing.
func TestImmutableLeasedReadGoesToRedis(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, func(c *Config) { c.FixedBytes = 1 << 20 })
	id, vals, err := w.svc.BeginRead(ctx, []string{"fix:none:a"}, false)
	if err != nil || string(vals[0]) != `{"v":0}` {
		t.Fatalf("leased read: %s, %v", vals, err)
	}
	if _, err := w.svc.Commit(ctx, id, CommitRequest{}); err != nil {
		t.Fatal(err)
	}
	r, _ := w.svc.resolve("fix:none:a")
	if _, ok := w.svc.fixed.get(r); ok {
		t.Error("a leased read kept a copy")
	}
}

// A caller that changes the bytes a kept entry was served as does not
// change what the next caller is served.
func TestImmutableCopyIsTheCallers(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, func(c *Config) { c.FixedBytes = 1 << 20 })
	for i := 0; i < 3; i++ {
		_, vals, err := w.svc.ReadAll(ctx, "", Reads{Peek: []string{"fix:none:b"}})
		if err != nil || string(vals[0]) != `{"v":0}` {
			t.Fatalf("peek %d: %s, %v", i, vals, err)
		}
		copy(vals[0], "XXXXXXX")
	}
}
