package api_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/writeback/writeback/internal/config"
	"github.com/writeback/writeback/internal/testenv"
	"github.com/writeback/writeback/pkg/client"
)

// The HTTP side of a write that reaches too few replicas, against a real
// primary: with redis.replicas 1 and one replica that is connected and
// acknowledging on time (so in sync) but never past the offset it started
// from, WAIT confirms nothing. The write is buffered on the primary but
// not acknowledged: 500 uncertain, not safe to retry (no Retry-After), and
// writeback_redis_replication_failures_total counts it. Once that replica
// is gone, the next write is refused before anything is buffered: 503
// unavailable, safe to retry, a shortfall and not a replication failure.
func TestReplicationFailureOverHTTP(t *testing.T) {
	primary := testenv.PrivateRedis(t)
	replica := attachStuckReplica(t, primary)
	w := newWorld(t, opts{edit: func(c *config.Config) {
		c.Redis.Addrs, c.Redis.Replicas = []string{primary}, 1
	}})
	// Two writes in turn, each once the sidecar sees inSync replicas in
	// sync, and the counters after it. Both leave one change pending: the
	// first is buffered on the primary (that is why retrying it is not
	// safe), the second is refused before anything is buffered.
	for i, wr := range []struct {
		what                 string
		before               func()
		inSync               float64
		status               int
		code, msg            string
		retry                bool
		failures, shortfalls float64
	}{
		{"a write WAIT cannot confirm", func() {}, 1, http.StatusInternalServerError, client.CodeUncertain,
			"the write reached only 0 of the 1 required Redis replicas in time, so it is not acknowledged", false, 1, 0},
		{"a write short of in-sync replicas", replica.detach, 0, http.StatusServiceUnavailable, client.CodeUnavailable,
			"only 0 of the 1 required Redis replicas are in sync, so nothing was buffered", true, 1, 1},
	} {
		wr.before()
		waitFor(t, 15*time.Second, fmt.Sprintf("writeback_redis_replicas_in_sync to read %v", wr.inSync), func() bool {
			return w.metric(t, "writeback_redis_replicas_in_sync") == wr.inSync
		})
		r := w.do(t, "PUT", fmt.Sprintf("/v1/docs/%s/%d", w.coll, i+1), fmt.Sprintf(`{"n":%d}`, i+1))
		r.isError(t, wr.what, wr.status, wr.code, wr.msg)
		r.retries(t, wr.what, wr.retry)
		if got := w.metric(t, "writeback_redis_replication_failures_total"); got != wr.failures {
			t.Errorf("after %s: writeback_redis_replication_failures_total = %v; want %v", wr.what, got, wr.failures)
		}
		if got := w.metric(t, "writeback_replica_shortfalls_total"); got != wr.shortfalls {
			t.Errorf("after %s: writeback_replica_shortfalls_total = %v; want %v", wr.what, got, wr.shortfalls)
		}
		if st := w.status(t); st.Pending != 1 {
			t.Errorf("after %s: status: %d pending; want 1, the unconfirmed first write", wr.what, st.Pending)
		}
	}
}

// stuckReplica is a replica that speaks the replication protocol to a
// primary and acknowledges every 100 ms — so INFO replication has it
// online with lag 0, in sync — but always the offset it started from, so
// WAIT never counts it.
type stuckReplica struct {
	conn net.Conn
	stop chan struct{}
	wg   sync.WaitGroup
}

// attachStuckReplica connects a stuckReplica to primary, waits until the
// primary has it online, and detaches it when the test ends.
func attachStuckReplica(t *testing.T, primary string) *stuckReplica {
	t.Helper()
	conn, err := net.Dial("tcp", primary)
	if err != nil {
		t.Fatal(err)
	}
	r := &stuckReplica{conn: conn, stop: make(chan struct{})}
	t.Cleanup(r.detach)
	rd := bufio.NewReader(conn)
	send := func(args ...string) {
		var b strings.Builder
		fmt.Fprintf(&b, "*%d\r\n", len(args))
		for _, a := range args {
			fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
		}
		if _, err := conn.Write([]byte(b.String())); err != nil {
			t.Fatal(err)
		}
	}
	line := func() string { // the next non-empty line (the primary sends bare newlines as keepalives)
		for {
			l, err := rd.ReadString('\n')
			if err != nil {
				t.Fatalf("replication handshake: %v", err)
			}
			if l = strings.TrimRight(l, "\r\n"); l != "" {
				return l
			}
		}
	}
	send("REPLCONF", "listening-port", "1")
	if l := line(); l != "+OK" {
		t.Fatalf("REPLCONF listening-port: %s", l)
	}
	send("PSYNC", "?", "-1")
	f := strings.Fields(line()) // +FULLRESYNC <replid> <offset>
	if len(f) != 3 || f[0] != "+FULLRESYNC" {
		t.Fatalf("PSYNC answered %v, want +FULLRESYNC", f)
	}
	offset := f[2]
	r.wg.Add(2)
	go func() { // the snapshot and the stream: read and dropped
		defer r.wg.Done()
		buf := make([]byte, 32<<10)
		for {
			if _, err := rd.Read(buf); err != nil {
				return
			}
		}
	}()
	go func() {
		defer r.wg.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		ack := fmt.Sprintf("*3\r\n$8\r\nREPLCONF\r\n$3\r\nACK\r\n$%d\r\n%s\r\n", len(offset), offset)
		for {
			select {
			case <-r.stop:
				return
			case <-tick.C:
				if _, err := conn.Write([]byte(ack)); err != nil {
					return
				}
			}
		}
	}()
	rdb := redis.NewClient(&redis.Options{Addr: primary})
	defer rdb.Close()
	waitFor(t, 10*time.Second, "the primary to have the replica online", func() bool {
		info, err := rdb.Info(context.Background(), "replication").Result()
		return err == nil && strings.Contains(info, "state=online")
	})
	return r
}

// detach closes the replica's connection: the primary forgets it at once.
func (r *stuckReplica) detach() {
	select {
	case <-r.stop:
		return
	default:
	}
	close(r.stop)
	r.conn.Close()
	r.wg.Wait()
}
