package e2e

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// proxy forwards TCP connections to a server and can cut them all, as a
// network partition or a database restart would. It keeps its port while
// cut (it accepts and closes at once, as a server going down does): a port
// let go could be handed to another connection meanwhile, and the restore
// would fail to listen on it again.
type proxy struct {
	addr, upstream string
	ln             net.Listener
	mu             sync.Mutex // guards down, conns
	down           bool
	conns          []net.Conn
}

func newProxy(t *testing.T, upstream string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{addr: ln.Addr().String(), upstream: upstream, ln: ln}
	t.Cleanup(func() {
		ln.Close()
		p.cut()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			down := p.down
			p.mu.Unlock()
			if down {
				c.Close()
				continue
			}
			u, err := net.Dial("tcp", p.upstream)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(u, c); u.Close() }()
			go func() { _, _ = io.Copy(c, u); c.Close() }()
		}
	}()
	return p
}

// proxyStore puts a proxy the test can cut between the sidecars it starts
// from now on and database db ("pg" or "maria").
func (e *env) proxyStore(db string) *proxy {
	e.t.Helper()
	upstream := map[string]string{"pg": "127.0.0.1:5432", "maria": "127.0.0.1:3306"}[db]
	px := newProxy(e.t, upstream)
	e.dsns[db] = strings.Replace(e.dsns[db], upstream, px.addr, 1)
	return px
}

// restore forwards new connections again.
func (p *proxy) restore(t *testing.T) {
	t.Helper()
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

// cut breaks every forwarded connection and refuses new ones (closes them
// once accepted) until restore.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// outage is how long TestStoreOutageLosesNothing keeps the store away
// (durability acceptance 4: 60 s); WRITEBACK_E2E_OUTAGE shortens it.
var outage = func() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("WRITEBACK_E2E_OUTAGE")); err == nil {
		return d
	}
	return 60 * time.Second
}()

// Durability acceptance 4: a store outage under write load. Writes keep
// being acknowledged (they only need Redis), appliers fail, back off and
// resume; nothing is dead-lettered, nothing lost, and the backlog is
// applied within 30 s of the store's return.
func TestStoreOutageLosesNothing(t *testing.T) {
	const docs = 10
	e := newEnv(t, docs)
	px := e.proxyStore("pg")
	addr := freeAddr(t)
	sc := start(t, e.config(addr, "write-back", ""), addr)
	ctx := context.Background()
	coll := e.coll("pg")
	for id := 1; id <= docs; id++ {
		getDoc(t, sc.c, coll, strconv.Itoa(id)) // cached: writes need no store read
	}
	want := make([]int64, docs+1)
	var mu sync.Mutex // guards want
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := (w+i)%docs + 1
				if _, err := sc.c.Patch(ctx, coll, strconv.Itoa(id), map[string]any{"$inc": map[string]any{"n": 1}}); err != nil {
					t.Errorf("a write during the outage failed: %v", err)
					return
				}
				mu.Lock()
				want[id]++
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	px.cut()
	down := time.Now()
	waitFor(t, 10*time.Second, "/readyz to report the store down", func() bool {
		return sc.c.Readyz(ctx) != nil
	})
	time.Sleep(outage) // far longer than maxRetries rounds of backoff
	if err := sc.c.Healthz(ctx); err != nil {
		t.Errorf("/healthz failed while only the store was down: %v", err)
	}
	st, err := sc.c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Pending == 0 {
		t.Errorf("nothing pending after %v of store outage under writes", time.Since(down).Round(time.Second))
	}
	px.restore(t)
	back := time.Now()
	close(stop)
	wg.Wait()
	waitFor(t, 30*time.Second, "the backlog to be applied within 30s of the store's return", func() bool {
		st, err := sc.c.Status(ctx)
		return err == nil && st.Pending == 0
	})
	t.Logf("outage %v; backlog of %d changes drained %v after the store came back", back.Sub(down).Round(100*time.Millisecond), st.Pending, time.Since(back).Round(100*time.Millisecond))
	st, _ = sc.c.Status(ctx)
	if st.DeadLetters != 0 {
		t.Errorf("%d dead letters after a store outage: transient errors must never dead-letter: %+v", st.DeadLetters, st.DeadLetterList)
	}
	rows := e.rows("pg")
	for id := 1; id <= docs; id++ {
		if rows[int64(id)].N != want[id] {
			t.Errorf("row %d: n = %d, want %d", id, rows[int64(id)].N, want[id])
		}
	}
}

// Durability acceptance 3: with a small pinned-memory limit and the store
// stopped, write-back collections switch to write-through: writes get 503
// (write-through cannot succeed) without buffering anything, so pinned
// memory stops growing; when the store returns everything drains, the
// collections switch back, and the database equals the model.
func TestPinnedMemoryFallback(t *testing.T) {
	const docs = 10
	e := newEnv(t, docs)
	px := e.proxyStore("pg")
	addr := freeAddr(t)
	path := e.config(addr, "write-back", "")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(b), "  pollInterval: 10ms\n", "  pollInterval: 10ms\n  pinnedMemoryLimit: 8KiB\n", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	sc := start(t, path, addr)
	ctx := context.Background()
	coll := e.coll("pg")
	for id := 1; id <= docs; id++ {
		getDoc(t, sc.c, coll, strconv.Itoa(id))
	}
	models := make([]docModel, docs+1)
	for id := range models {
		models[id].sets = []setOp{{val: "init", acked: true}}
	}
	inc := func(id int, amt int64) error {
		_, err := sc.c.Patch(ctx, coll, strconv.Itoa(id), map[string]any{"$inc": map[string]any{"n": amt}})
		if err == nil {
			models[id].acked += amt
		} else {
			models[id].uncertain = append(models[id].uncertain, amt)
		}
		return err
	}
	px.cut()
	// Buffer until the limit trips: the first 503.
	var i int
	for i = 0; i < 20000; i++ {
		if err := inc(i%docs+1, int64(1000+i)); err != nil {
			if !errIs(err, http.StatusServiceUnavailable) {
				t.Fatalf("write %d: %v; want 503 once over the limit", i, err)
			}
			break
		}
	}
	if i == 20000 {
		t.Fatal("20000 writes buffered with the store down and an 8 KiB limit: no fallback")
	}
	st, err := sc.c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Collections[0].WriteThroughFallback || metricValue(t, addr, `writeback_write_through_fallback{collection="`+coll+`"}`) != 1 {
		t.Fatalf("over the limit but status/metric do not show the fallback: %+v", st.Collections)
	}
	pinned := st.PinnedBytes
	for k := range 50 {
		if err := inc(k%docs+1, int64(500000+k)); !errIs(err, http.StatusServiceUnavailable) {
			t.Fatalf("a write in fallback with the store down: %v; want 503", err)
		}
	}
	if st, _ := sc.c.Status(ctx); st.PinnedBytes != pinned {
		t.Errorf("pinned bytes grew from %d to %d while writes were refused", pinned, st.PinnedBytes)
	}
	t.Logf("fallback after %d buffered writes, %d bytes pinned (limit 8 KiB)", i, pinned)
	px.restore(t)
	waitFor(t, 30*time.Second, "the buffer to drain and write-back to resume", func() bool {
		st, err := sc.c.Status(ctx)
		return err == nil && st.Pending == 0 && !st.Collections[0].WriteThroughFallback
	})
	if err := inc(1, 7); err != nil {
		t.Fatalf("a write after recovery: %v", err)
	}
	sc.flush(t)
	rows := e.rows("pg")
	for id := 1; id <= docs; id++ {
		if err := models[id].check(rows[int64(id)].N, "init"); err != nil {
			t.Errorf("row %d: %v", id, err)
		}
	}
}
