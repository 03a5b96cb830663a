package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/writeback/writeback/pkg/client"
)

// Acceptance 1: 16 concurrent clients issue 200 $inc each on 20 documents
// while appliers run; after flush every row equals the model exactly.
func TestConcurrentIncrementsExactlyOnce(t *testing.T) {
	e := newEnv(t, 20)
	addr := freeAddr(t)
	sc := start(t, e.config(addr, "write-back", ""), addr)
	const clients, perClient, docs = 16, 200, 20
	want := map[string]map[int64]int64{"pg": {}, "maria": {}}
	var mu sync.Mutex // guards want
	var wg sync.WaitGroup
	errc := make(chan error, clients)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 7))
			for range perClient {
				db := []string{"pg", "maria"}[rng.IntN(2)]
				id := int64(rng.IntN(docs) + 1)
				amt := int64(rng.IntN(9) + 1)
				if _, err := sc.c.Patch(context.Background(), e.coll(db), strconv.FormatInt(id, 10), map[string]any{"$inc": map[string]any{"n": amt}}); err != nil {
					errc <- err
					return
				}
				mu.Lock()
				want[db][id] += amt
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatalf("patch failed: %v", err)
	}
	sc.flush(t)
	for _, db := range []string{"pg", "maria"} {
		got := e.rows(db)
		for id := int64(1); id <= docs; id++ {
			if got[id].N != want[db][id] {
				t.Errorf("%s row %d: n = %d, want %d", db, id, got[id].N, want[db][id])
			}
		}
	}
	// Reads through the sidecar agree too, and nothing stays pinned.
	st, err := sc.c.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Pending != 0 || st.PinnedBytes != 0 || st.PendingDocuments != 0 {
		t.Errorf("after flush: pending %d, documents %d, pinned bytes %d; want all 0", st.Pending, st.PendingDocuments, st.PinnedBytes)
	}
}

// Acceptance 5: bad input gets a 4xx with a clear message, and leaves
// nothing in Redis.
func TestBadInputLeavesNothing(t *testing.T) {
	e := newEnv(t, 3)
	addr := freeAddr(t)
	sc := start(t, e.config(addr, "write-back", "limits: {maxBodyBytes: 4KiB}\n"), addr)
	before := e.redisKeys()
	coll := e.coll("pg")
	big := `{"$set":{"s":"` + strings.Repeat("x", 8<<10) + `"}}`
	tests := []struct {
		name, method, path, body string
		status                   int
		code, msg                string
	}{
		{"malformed JSON", "PATCH", "/v1/docs/" + coll + "/1", `{"$set":`, 400, "invalid_argument", "malformed JSON"},
		{"unknown operator", "PATCH", "/v1/docs/" + coll + "/1", `{"$mul":{"n":2}}`, 400, "invalid_argument", "unknown operator"},
		{"inc with a string", "PATCH", "/v1/docs/" + coll + "/1", `{"$inc":{"n":"5"}}`, 400, "invalid_argument", "must be a number"},
		{"inc on a text column", "PATCH", "/v1/docs/" + coll + "/1", `{"$inc":{"s":1}}`, 400, "invalid_argument", "numeric column"},
		{"array operator on a text column", "PATCH", "/v1/docs/" + coll + "/1", `{"$push":{"s":1}}`, 400, "invalid_argument", "JSON column"},
		{"unknown field", "PATCH", "/v1/docs/" + coll + "/1", `{"$set":{"nope":1}}`, 400, "invalid_argument", "unknown field"},
		{"unknown collection", "PATCH", "/v1/docs/nope/1", `{"$inc":{"n":1}}`, 404, "not_found", "unknown collection"},
		{"oversized body", "PATCH", "/v1/docs/" + coll + "/1", big, 413, "too_large", "larger than the limit"},
		{"invalid id", "PATCH", "/v1/docs/" + coll + "/abc", `{"$inc":{"n":1}}`, 400, "invalid_argument", "invalid id"},
		{"invalid id on put", "PUT", "/v1/docs/" + coll + "/1.5", `{"n":1}`, 400, "invalid_argument", "invalid id"},
		{"put with a wrong type", "PUT", "/v1/docs/" + coll + "/9", `{"n":"x"}`, 400, "invalid_argument", "must be an integer"},
		{"patch of a missing document", "PATCH", "/v1/docs/" + coll + "/77", `{"$inc":{"n":1}}`, 404, "not_found", "not found"},
		{"bad scan limit", "GET", "/v1/docs/" + coll + "?limit=0", ``, 400, "invalid_argument", "limit"},
		{"unknown endpoint", "GET", "/v1/nothing", ``, 404, "not_found", "no such endpoint"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, "http://"+addr+tc.path, strings.NewReader(tc.body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var body client.ErrorBody
			_ = decodeJSON(resp, &body)
			if resp.StatusCode != tc.status || body.Error.Code != tc.code || !strings.Contains(body.Error.Message, tc.msg) {
				t.Fatalf("got %d %q %q; want %d %q containing %q", resp.StatusCode, body.Error.Code, body.Error.Message, tc.status, tc.code, tc.msg)
			}
			if strings.Count(strings.TrimSuffix(body.Error.Message, "."), ". ") > 0 {
				t.Errorf("message is more than one sentence: %q", body.Error.Message)
			}
		})
	}
	// Reads of missing documents leave no lease behind for long either;
	// what matters: no buffered write, no pending entry, no counters moved.
	if after := e.redisKeys(); after != before {
		t.Errorf("Redis keys under the test prefix: %d before, %d after rejected requests", before, after)
	}
	st, err := sc.c.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Pending != 0 || st.PinnedBytes != 0 {
		t.Errorf("rejected requests buffered something: %+v", st)
	}
}

// Acceptance 4: two sidecars on one Redis split the partitions; when one
// dies with writes pending in its partitions, the other applies them.
func TestTwoSidecarsTakeOver(t *testing.T) {
	e := newEnv(t, 200)
	addrA, addrB := freeAddr(t), freeAddr(t)
	a := start(t, e.config(addrA, "write-back", ""), addrA)
	// B dies the first time it is about to commit a batch, so whatever it
	// owns stays pending until A takes its partitions over.
	b := start(t, e.config(addrB, "write-back", ""), addrB, "WRITEBACK_FAULTS=bgt.before-commit:1")
	waitFor(t, 10*time.Second, "the two sidecars to split the partitions", func() bool {
		sa, errA := a.c.Status(context.Background())
		sb, errB := b.c.Status(context.Background())
		return errA == nil && errB == nil && len(sa.OwnedPartitions) == 8 && len(sb.OwnedPartitions) == 8
	})
	want := map[int64]int64{}
	for id := int64(1); id <= 200; id++ {
		if _, err := a.c.Patch(context.Background(), e.coll("pg"), strconv.FormatInt(id, 10), map[string]any{"$inc": map[string]any{"n": id}}); err != nil {
			t.Fatal(err)
		}
		want[id] = id
	}
	waitFor(t, 10*time.Second, "sidecar B to die at its first commit", b.exited)
	died := time.Now()
	waitFor(t, 15*time.Second, "sidecar A to own every partition", func() bool {
		st, err := a.c.Status(context.Background())
		return err == nil && len(st.OwnedPartitions) == 16
	})
	t.Logf("A owned all partitions %v after B died (owner lease 1.5s)", time.Since(died).Round(10*time.Millisecond))
	// No flush: A's own appliers must drain B's partitions.
	waitFor(t, 20*time.Second, "A's appliers to drain everything", func() bool {
		st, err := a.c.Status(context.Background())
		return err == nil && st.Pending == 0
	})
	got := e.rows("pg")
	for id, n := range want {
		if got[id].N != n {
			t.Errorf("row %d: n = %d, want %d", id, got[id].N, n)
		}
	}
}

// A graceful stop releases the partitions at once.
func TestGracefulStopReleasesPartitions(t *testing.T) {
	e := newEnv(t, 1)
	addrA, addrB := freeAddr(t), freeAddr(t)
	a := start(t, e.config(addrA, "write-back", ""), addrA)
	b := start(t, e.config(addrB, "write-back", ""), addrB)
	waitFor(t, 10*time.Second, "the split", func() bool {
		sb, err := b.c.Status(context.Background())
		return err == nil && len(sb.OwnedPartitions) == 8
	})
	b.stop()
	stopped := time.Now()
	waitFor(t, 5*time.Second, "A to own every partition", func() bool {
		st, err := a.c.Status(context.Background())
		return err == nil && len(st.OwnedPartitions) == 16
	})
	dTerm := time.Since(stopped)
	if dTerm > time.Second {
		t.Errorf("partitions moved %v after SIGTERM; want within 1s", dTerm)
	}
}

func errIs(err error, status int) bool {
	var ce *client.Error
	return errors.As(err, &ce) && ce.StatusCode == status
}

var _ = fmt.Sprint
var _ atomic.Int64

// Durability acceptance 5: three sidecars share the partitions; SIGTERM one
// (its partitions move within 1 s), SIGKILL another (its partitions move
// within the ownership lease lifetime); the remaining one drains
// everything, and the database equals the model.
func TestThreeSidecars(t *testing.T) {
	e := newEnv(t, 60)
	addrs := []string{freeAddr(t), freeAddr(t), freeAddr(t)}
	var scs []*sidecar
	for _, a := range addrs {
		scs = append(scs, start(t, e.config(a, "write-back", ""), a))
	}
	owned := func(s *sidecar) int {
		st, err := s.c.Status(context.Background())
		if err != nil {
			return -1
		}
		return len(st.OwnedPartitions)
	}
	waitFor(t, 10*time.Second, "three sidecars to split 16 partitions", func() bool {
		return owned(scs[0])+owned(scs[1])+owned(scs[2]) == 16 && owned(scs[0]) <= 6 && owned(scs[1]) <= 6 && owned(scs[2]) <= 6
	})
	want := map[int64]int64{}
	write := func(round int) {
		for id := int64(1); id <= 60; id++ {
			if _, err := scs[0].c.Patch(context.Background(), e.coll("pg"), strconv.FormatInt(id, 10), map[string]any{"$inc": map[string]any{"n": id + int64(round)}}); err != nil {
				t.Fatal(err)
			}
			want[id] += id + int64(round)
		}
	}
	write(1)
	scs[1].stop()
	stopped := time.Now()
	waitFor(t, 5*time.Second, "the stopped sidecar's partitions to move", func() bool {
		return owned(scs[0])+owned(scs[2]) == 16
	})
	dTerm := time.Since(stopped)
	if dTerm > time.Second {
		t.Errorf("partitions moved %v after SIGTERM; want within 1s", dTerm)
	}
	write(2)
	scs[2].kill()
	killed := time.Now()
	waitFor(t, 10*time.Second, "the killed sidecar's partitions to move", func() bool { return owned(scs[0]) == 16 })
	dKill := time.Since(killed)
	if dKill > 1500*time.Millisecond+time.Second {
		t.Errorf("partitions moved %v after SIGKILL; want within the 1.5s lease (+ one ownership tick)", dKill)
	}
	t.Logf("SIGTERM: partitions moved in %v; SIGKILL: in %v (lease 1.5s)", dTerm.Round(10*time.Millisecond), dKill.Round(10*time.Millisecond))
	write(3)
	waitFor(t, 20*time.Second, "the survivor's appliers to drain everything", func() bool {
		st, err := scs[0].c.Status(context.Background())
		return err == nil && st.Pending == 0
	})
	got := e.rows("pg")
	for id, n := range want {
		if got[id].N != n {
			t.Errorf("row %d: n = %d, want %d", id, got[id].N, n)
		}
	}
}
