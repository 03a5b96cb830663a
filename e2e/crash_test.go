package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func decodeJSON(resp *http.Response, v any) error {
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// neverSent reports whether a request failed before reaching the server
// (connection refused), so it certainly had no effect.
func neverSent(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || strings.Contains(err.Error(), "connection refused")
}

// docModel is what the clients know about one document: the increments
// acknowledged and those whose outcome is unknown (the sidecar died while
// answering), and the $set values in issue order with their outcome.
type docModel struct {
	acked     int64
	uncertain []int64
	sets      []setOp
}

type setOp struct {
	val   string
	acked bool
}

// check compares a row with the model: n must be the acknowledged sum plus
// some subset of the uncertain increments (amounts are random in a large
// range, so a doubled or lost acknowledged increment does not hide as a
// subset sum), and s must be the last acknowledged value or an uncertain
// one issued after it.
func (m *docModel) check(n int64, s string) error {
	extra := n - m.acked
	if !subsetSum(m.uncertain, extra) {
		return fmt.Errorf("n = %d: acknowledged sum %d plus no subset of the %d uncertain increments %v", n, m.acked, len(m.uncertain), m.uncertain)
	}
	allowed := map[string]bool{}
	lastAcked := -1
	for i, op := range m.sets {
		if op.acked {
			lastAcked = i
		}
	}
	if lastAcked < 0 {
		allowed["init"] = true
	} else {
		allowed[m.sets[lastAcked].val] = true
	}
	for _, op := range m.sets[lastAcked+1:] {
		allowed[op.val] = true
	}
	if !allowed[s] {
		return fmt.Errorf("s = %q, allowed %v", s, allowed)
	}
	return nil
}

func subsetSum(xs []int64, target int64) bool {
	if len(xs) > 22 {
		var sum int64
		for _, x := range xs {
			sum += x
		}
		return target >= 0 && target <= sum // too many to enumerate: bounds only
	}
	sums := map[int64]bool{0: true}
	for _, x := range xs {
		next := make(map[int64]bool, 2*len(sums))
		for s := range sums {
			next[s] = true
			next[s+x] = true
		}
		sums = next
	}
	return sums[target]
}

// crashOps is how a crash test's client writes: over HTTP or over RESP.
type crashOps interface {
	inc(ctx context.Context, coll string, id int, amt int64) error
	set(ctx context.Context, coll string, id int, val string) error
}

// crashWorkload runs clients that $inc n (random large amounts) and $set s
// (client c alone on documents ≡ c mod clients, so each document's sets
// have a known order) on docs documents of both databases, while the
// sidecar is SIGKILLed kills times at random moments — some at armed fault
// points: between buffering and acknowledging, before the store commit,
// between the store commit and the trim — and restarted on the same ports.
// It returns the model of what the clients know was acknowledged, and a
// fresh instance, everything flushed (through cr.drain if set).
func crashWorkload(t *testing.T, e *env, cr *crashing, docs, clients, kills int, opsFor func(c int, current func() *sidecar) crashOps) (map[string][]*docModel, *sidecar) {
	t.Helper()
	faults := []string{"", "", "bgt.after-commit:1-6", "bgt.before-commit:1-6", "api.after-buffer:5-60"}
	current := cr.current

	models := map[string][]*docModel{}
	var modelMu sync.Mutex // guards models and the counters
	for _, db := range []string{"pg", "maria"} {
		for range docs {
			models[db] = append(models[db], &docModel{})
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var acked, uncertain, refused int64
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ops := opsFor(c, current)
			rng := rand.New(rand.NewPCG(uint64(c), 99))
			seq := 0
			for {
				select {
				case <-stop:
					return
				default:
				}
				db := []string{"pg", "maria"}[rng.IntN(2)]
				id := rng.IntN(docs)
				isSet := rng.IntN(10) < 3
				if isSet {
					id = (id/clients)*clients + c
					if id >= docs {
						id = c % docs
						if id%clients != c {
							isSet = false
						}
					}
				}
				m := models[db][id]
				var amt int64
				var val string
				var err error
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				if isSet {
					seq++
					val = fmt.Sprintf("c%d-%d", c, seq)
					err = ops.set(ctx, e.coll(db), id+1, val)
				} else {
					amt = rng.Int64N(1_000_000) + 1
					err = ops.inc(ctx, e.coll(db), id+1, amt)
				}
				cancel()
				modelMu.Lock()
				switch {
				case err == nil:
					acked++
					if isSet {
						m.sets = append(m.sets, setOp{val: val, acked: true})
					} else {
						m.acked += amt
					}
				case neverSent(err):
					refused++
				default:
					uncertain++
					if isSet {
						m.sets = append(m.sets, setOp{val: val})
					} else {
						m.uncertain = append(m.uncertain, amt)
					}
				}
				modelMu.Unlock()
				if err != nil {
					time.Sleep(5 * time.Millisecond)
				}
			}
		}()
	}
	// Each incarnation lives a random 50–350 ms and, beyond that, until it
	// has acknowledged perIncarnation writes or died at its armed fault: on
	// a loaded machine (CI runs packages side by side, under the race
	// detector) a start can take longer than the whole window, and a kill
	// schedule by the clock alone then kills sidecars that never served.
	const perIncarnation = 60
	ackedNow := func() int64 {
		modelMu.Lock()
		defer modelMu.Unlock()
		return acked
	}
	rng := rand.New(rand.NewPCG(1, 2))
	selfKilled := 0
	for k := range kills {
		from := ackedNow()
		time.Sleep(time.Duration(50+rng.IntN(300)) * time.Millisecond)
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if ackedNow()-from >= perIncarnation || cr.current().exited() {
				break
			}
		}
		if cr.restart(faults[k%len(faults)]) {
			selfKilled++
		}
	}
	close(stop)
	wg.Wait()
	final := cr.final()
	if cr.drain != nil {
		cr.drain.flush(t)
	} else {
		final.flush(t)
	}
	t.Logf("%d kills (%d at their armed fault point); writes: %d acknowledged, %d uncertain, %d refused while down", kills, selfKilled, acked, uncertain, refused)
	if acked < 500 {
		t.Errorf("only %d writes acknowledged; the workload barely ran", acked)
	}
	return models, final
}

// httpOps writes through the current sidecar's HTTP API.
type httpOps struct{ current func() *sidecar }

func (o httpOps) inc(ctx context.Context, coll string, id int, amt int64) error {
	_, err := o.current().c.Patch(ctx, coll, strconv.Itoa(id), map[string]any{"$inc": map[string]any{"n": amt}})
	return err
}

func (o httpOps) set(ctx context.Context, coll string, id int, val string) error {
	_, err := o.current().c.Patch(ctx, coll, strconv.Itoa(id), map[string]any{"$set": map[string]any{"s": val}})
	return err
}

// Acceptance 2: the sidecar is SIGKILLed at least 20 times at random
// moments under a running $inc/$set workload and restarted; after a final
// flush both databases equal the model of acknowledged writes.
func TestCrashRecovery(t *testing.T) {
	const docs = 12
	e := newEnv(t, docs)
	addr := freeAddr(t)
	models, final := crashWorkload(t, e, newCrashing(t, e.config(addr, "write-back", ""), addr), docs, 8, 22,
		func(_ int, current func() *sidecar) crashOps { return httpOps{current} })
	for _, db := range []string{"pg", "maria"} {
		got := e.rows(db)
		for id, m := range models[db] {
			r := got[int64(id+1)]
			if err := m.check(r.N, r.S.String); err != nil {
				t.Errorf("%s row %d: %v", db, id+1, err)
			}
			// The sidecar serves the same value after the flush.
			raw, _, err := final.c.Get(context.Background(), e.coll(db), strconv.Itoa(id+1))
			if err != nil {
				t.Fatal(err)
			}
			var doc struct {
				N int64  `json:"n"`
				S string `json:"s"`
			}
			_ = json.Unmarshal(raw, &doc)
			if doc.N != r.N || doc.S != r.S.String {
				t.Errorf("%s row %d: sidecar reads %+v, database has n=%d s=%q", db, id+1, doc, r.N, r.S.String)
			}
		}
	}
}

// Acceptance 2, deliberate case: the sidecar dies after the store committed
// a batch and before Redis was trimmed. The restarted sidecar replays the
// batch, finds the floors its cut moved (the records, with applyCuts off)
// and skips it.
func TestCrashBetweenCommitAndTrim(t *testing.T) {
	e := newEnv(t, 10)
	addr := freeAddr(t)
	cfg := e.config(addr, "write-back", "")
	// Pause the appliers' first commit until everything is buffered by
	// letting the fault kill the process right after that commit.
	sc := startArmed(t, cfg, addr, "WRITEBACK_FAULTS=bgt.after-commit:1")
	models := map[string]map[int64]*docModel{"pg": {}, "maria": {}}
	for db := range models {
		for id := int64(1); id <= 10; id++ {
			models[db][id] = &docModel{}
		}
	}
	for i := range 100 {
		db := []string{"pg", "maria"}[i%2]
		id := int64(i%10 + 1)
		amt := int64(1000*(i+1) + i)
		_, err := sc.c.Patch(context.Background(), e.coll(db), strconv.FormatInt(id, 10), map[string]any{"$inc": map[string]any{"n": amt}})
		if err != nil {
			if !neverSent(err) {
				models[db][id].uncertain = append(models[db][id].uncertain, amt)
			}
			break // it died at the fault point
		}
		models[db][id].acked += amt
	}
	waitFor(t, 10*time.Second, "the sidecar to die after its first commit", sc.exited)
	sc2 := start(t, cfg, addr)
	sc2.flush(t)
	for db, ms := range models {
		got := e.rows(db)
		for id, m := range ms {
			if err := m.check(got[id].N, "init"); err != nil {
				t.Errorf("%s row %d: %v (a replayed batch was applied twice or lost)", db, id, err)
			}
		}
	}
	skipped := metricValue(t, sc2.addr, "writeback_duplicates_skipped_total")
	if skipped < 1 {
		t.Errorf("writeback_duplicates_skipped_total = %v after replaying a committed batch; want > 0", skipped)
	}
}

// metricValue reads one unlabelled sample from /metrics.
func metricValue(t *testing.T, addr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("metric %s not exposed", name)
	return 0
}
