package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/writeback/writeback/internal/linear"
)

// TestEmbeddedPausedLinearizable: two sidecars and an embedded member (a
// process, running the appliers) with clients on each writing and reading
// a few documents; the member is SIGSTOPped while it holds a lease on the
// read-only document 3, which a sidecar then writes (the write waits for
// the lease), and SIGCONTed once that write is acknowledged, its clients'
// requests in flight across the pause. The history, the paused requests
// and the member's reads after it included, must be linearizable.
func TestEmbeddedPausedLinearizable(t *testing.T) {
	nearOnly(t)
	const docs = 3
	e := newEnv(t, docs)
	coll := e.coll("pg")
	addrA, addrB, addrM := freeAddr(t), freeAddr(t), freeAddr(t)
	cfg := e.config(addrA, "write-back", "") // the member ignores listen
	members := []*sidecar{
		start(t, cfg, addrA, "WRITEBACK_NEAR_CACHE=on"),
		start(t, e.config(addrB, "write-back", ""), addrB, "WRITEBACK_NEAR_CACHE=on"),
		startEmbedded(t, cfg, addrM, e.prefix+"-embedded", true, false),
	}
	member := members[2]

	history := linear.NewHistory()
	var (
		wg   sync.WaitGroup
		stop = make(chan struct{})
	)
	get := func(s *sidecar, doc int) (linear.State, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		raw, _, err := s.c.Get(ctx, coll, strconv.Itoa(doc))
		if err != nil {
			return linear.State{}, err
		}
		var d struct {
			N int64  `json:"n"`
			S string `json:"s"`
		}
		err = json.Unmarshal(raw, &d)
		return linear.State{N: d.N, S: d.S}, err
	}
	patch := func(s *sidecar, doc int, ops map[string]any) error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err := s.c.Patch(ctx, coll, strconv.Itoa(doc), ops)
		return err
	}
	// Each client stops at maxOps, so that porcupine's search stays short.
	const perMember, maxOps = 2, 1500
	for m, s := range members {
		for k := range perMember {
			cl := m*perMember + k
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(cl), 17))
				for seq := 1; seq <= maxOps; seq++ {
					select {
					case <-stop:
						return
					default:
					}
					doc := 1 + rng.IntN(docs)
					r := rng.IntN(10)
					if doc == 3 {
						r = 9 // document 3 is read only, but for the test's own write
					}
					call := history.Now()
					switch {
					case r < 2:
						v := fmt.Sprintf("c%d-%d", cl, seq)
						err := patch(s, doc, map[string]any{"$set": map[string]any{"s": v}})
						history.Add(cl, linear.Op{Doc: doc, Kind: linear.Set, S: v}, call, linear.State{}, err != nil)
						if err != nil {
							t.Errorf("client %d: write of document %d through %s: %v", cl, doc, s.addr, err)
						}
					case r < 4:
						in := linear.Op{Doc: doc, Kind: linear.Inc, N: 1 + rng.Int64N(5)}
						err := patch(s, doc, map[string]any{"$inc": map[string]any{"n": in.N}})
						history.Add(cl, in, call, linear.State{}, err != nil)
						if err != nil {
							t.Errorf("client %d: write of document %d through %s: %v", cl, doc, s.addr, err)
						}
					default:
						st, err := get(s, doc)
						if err != nil {
							t.Errorf("client %d: read of document %d through %s: %v", cl, doc, s.addr, err)
							continue
						}
						history.Add(cl, linear.Op{Doc: doc, Kind: linear.Get}, call, st, false)
					}
				}
			}()
		}
	}

	// The member leases document 3 (its clients read it); pause it while
	// its lease is in Redis.
	leaseKey := func() (string, map[string]string) {
		keys, _ := e.redis.Keys(context.Background(), e.prefix+":*l:"+coll+":3").Result()
		if len(keys) != 1 {
			return "", nil
		}
		h, _ := e.redis.HGetAll(context.Background(), keys[0]).Result()
		return keys[0], h
	}
	memberID := e.prefix + "-embedded"
	var until time.Time // the member's lease's expiry, in Redis's time (this machine's)
	held := func() bool {
		_, h := leaseKey()
		exp, _, _ := strings.Cut(h[memberID], ":")
		ms, _ := strconv.ParseInt(exp, 10, 64)
		until = time.UnixMilli(ms)
		return time.Until(until) > nearLease/2
	}
	time.Sleep(500 * time.Millisecond)
	waitFor(t, 20*time.Second, "the member to hold a lease on document 3 for another half lease", held)
	t.Logf("the member's threads all stopped %v after SIGSTOP", member.pause())
	paused := time.Now()
	resumed := false
	defer func() {
		if !resumed {
			_ = member.cmd.Process.Signal(syscall.SIGCONT)
		}
	}()
	// The test's own write of document 3 (client 100), through sidecar A.
	call := history.Now()
	err := patch(members[0], 3, map[string]any{"$set": map[string]any{"s": "while-paused"}})
	history.Add(100, linear.Op{Doc: 3, Kind: linear.Set, S: "while-paused"}, call, linear.State{}, err != nil)
	if err != nil {
		t.Errorf("write of document 3 while the member was paused: %v", err)
	}
	acked := time.Now()
	waited := acked.Sub(paused)
	member.resume()
	resumed = true
	// The member's first read of document 3 after the pause (client 101).
	call = history.Now()
	st, err := get(member, 3)
	if err != nil {
		t.Fatal(err)
	}
	history.Add(101, linear.Op{Doc: 3, Kind: linear.Get}, call, st, false)
	if st.S != "while-paused" {
		t.Errorf("the resumed member read s = %q of document 3, want while-paused (written while it was paused)", st.S)
	}
	// Past the hot window the write opened, the member leases document 3
	// again.
	time.Sleep(3 * time.Second)
	close(stop)
	wg.Wait()

	reads, writes := history.Counts()
	t.Logf("the write of document 3 waited %v for the paused member; %d reads, %d writes, %.0f near-cache hits in the member",
		waited.Round(time.Millisecond), reads, writes, metricValue(t, member.addr, `writeback_nearcache_hits_total{collection="`+coll+`"}`))
	// (A renewal between the look at the lease and the pause only moves
	// its expiry later.)
	if early := until.Sub(acked); early > 50*time.Millisecond {
		_, h := leaseKey()
		t.Errorf("the write of document 3 was acknowledged %v before the paused member's lease expired (lease record now: %v)", early, h)
	}
	if reads < 100 || writes < 20 {
		t.Fatalf("too few operations to tell: %d reads, %d writes", reads, writes)
	}
	if err := history.Check(linear.State{N: 0, S: "init"}, filepath.Join(os.TempDir(), e.prefix+"-history.html")); err != nil {
		t.Fatal(err)
	}
}
