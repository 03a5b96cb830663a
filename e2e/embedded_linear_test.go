package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// regOp is an operation of a linearizability history on the documents of
// an env: a get, a $set of s or an $inc of n.
type regOp struct {
	Doc  int
	Kind byte // 'g', 's', 'i'
	S    string
	N    int64
}

// regState is a document's value (n, s), and a get's output.
type regState struct {
	N int64
	S string
}

var regModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[int][]porcupine.Operation{}
		for _, op := range h {
			d := op.Input.(regOp).Doc
			by[d] = append(by[d], op)
		}
		var out [][]porcupine.Operation
		for _, ops := range by {
			out = append(out, ops)
		}
		return out
	},
	Init: func() any { return regState{N: 0, S: "init"} },
	Step: func(state, input, output any) (bool, any) {
		st, in := state.(regState), input.(regOp)
		switch in.Kind {
		case 's':
			return true, regState{N: st.N, S: in.S}
		case 'i':
			return true, regState{N: st.N + in.N, S: st.S}
		}
		return output.(regState) == st, st
	},
	DescribeOperation: func(input, output any) string {
		in := input.(regOp)
		switch in.Kind {
		case 's':
			return fmt.Sprintf("doc%d set %s", in.Doc, in.S)
		case 'i':
			return fmt.Sprintf("doc%d inc %d", in.Doc, in.N)
		}
		return fmt.Sprintf("doc%d get -> %v", in.Doc, output)
	},
}

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

	begin := time.Now()
	var (
		mu      sync.Mutex
		history []porcupine.Operation
		wg      sync.WaitGroup
		stop    = make(chan struct{})
	)
	record := func(cl int, in regOp, call time.Duration, out regState, failed bool) {
		ret := int64(time.Since(begin))
		if failed {
			ret = math.MaxInt64 // it may or may not have taken effect
		}
		mu.Lock()
		history = append(history, porcupine.Operation{ClientId: cl, Input: in, Call: int64(call), Output: out, Return: ret})
		mu.Unlock()
	}
	get := func(s *sidecar, doc int) (regState, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		raw, _, err := s.c.Get(ctx, coll, strconv.Itoa(doc))
		if err != nil {
			return regState{}, err
		}
		var d struct {
			N int64  `json:"n"`
			S string `json:"s"`
		}
		err = json.Unmarshal(raw, &d)
		return regState{N: d.N, S: d.S}, err
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
					call := time.Since(begin)
					switch {
					case r < 2:
						v := fmt.Sprintf("c%d-%d", cl, seq)
						err := patch(s, doc, map[string]any{"$set": map[string]any{"s": v}})
						record(cl, regOp{Doc: doc, Kind: 's', S: v}, call, regState{}, err != nil)
						if err != nil {
							t.Errorf("client %d: write of document %d through %s: %v", cl, doc, s.addr, err)
						}
					case r < 4:
						in := regOp{Doc: doc, Kind: 'i', N: 1 + rng.Int64N(5)}
						err := patch(s, doc, map[string]any{"$inc": map[string]any{"n": in.N}})
						record(cl, in, call, regState{}, err != nil)
						if err != nil {
							t.Errorf("client %d: write of document %d through %s: %v", cl, doc, s.addr, err)
						}
					default:
						st, err := get(s, doc)
						if err != nil {
							t.Errorf("client %d: read of document %d through %s: %v", cl, doc, s.addr, err)
							continue
						}
						record(cl, regOp{Doc: doc, Kind: 'g'}, call, st, false)
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
	call := time.Since(begin)
	err := patch(members[0], 3, map[string]any{"$set": map[string]any{"s": "while-paused"}})
	record(100, regOp{Doc: 3, Kind: 's', S: "while-paused"}, call, regState{}, err != nil)
	if err != nil {
		t.Errorf("write of document 3 while the member was paused: %v", err)
	}
	acked := time.Now()
	waited := acked.Sub(paused)
	member.resume()
	resumed = true
	// The member's first read of document 3 after the pause (client 101).
	call = time.Since(begin)
	st, err := get(member, 3)
	if err != nil {
		t.Fatal(err)
	}
	record(101, regOp{Doc: 3, Kind: 'g'}, call, st, false)
	if st.S != "while-paused" {
		t.Errorf("the resumed member read s = %q of document 3, want while-paused (written while it was paused)", st.S)
	}
	// Past the hot window the write opened, the member leases document 3
	// again.
	time.Sleep(3 * time.Second)
	close(stop)
	wg.Wait()

	var reads, writes int
	for _, op := range history {
		if op.Input.(regOp).Kind == 'g' {
			reads++
		} else {
			writes++
		}
	}
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
	res, info := porcupine.CheckOperationsVerbose(regModel, history, time.Minute)
	if res != porcupine.Ok {
		path := filepath.Join(os.TempDir(), e.prefix+"-history.html")
		_ = porcupine.VisualizePath(regModel, info, path)
		t.Fatalf("the history is %s (visualization: %s)", res, path)
	}
}
