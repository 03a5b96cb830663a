package writeback_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/writeback/writeback/internal/session"
	"github.com/writeback/writeback/internal/testenv"
	"github.com/writeback/writeback/pkg/client"
	"github.com/writeback/writeback/pkg/writeback"
)

// bank is a session test's world: accounts (branch, id, balance) with
// balance 100 each, queue family fam over them (one queue per branch) and
// the mapping fam:acct:{branch}:{id} → {"branch":…,"id":…,"balance":…}, on
// the fixture's Redis prefix.
type bank struct {
	*fixture
	fam, acct string
}

// leaseWait is the banks' writeback.leaseWait: how long a session waits
// for a lease an older session holds before its 409.
const leaseWait = 300 * time.Millisecond

func newBank(t *testing.T) *bank {
	t.Helper()
	b := &bank{fixture: newFixture(t), fam: testenv.UniqueName(t, "fam"), acct: testenv.UniqueName(t, "acct")}
	if _, err := b.pg.Exec(fmt.Sprintf("CREATE TABLE %s (branch int NOT NULL, id int NOT NULL, balance bigint NOT NULL CHECK (balance >= 0), PRIMARY KEY (branch, id));"+
		"INSERT INTO %s VALUES (0, 0, 100), (0, 1, 100), (0, 2, 100), (1, 0, 100)", b.acct, b.acct)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = b.pg.Exec("DROP TABLE IF EXISTS " + b.acct)
		_, _ = b.pg.Exec("DELETE FROM writeback_applied_sessions WHERE queue LIKE '" + b.fam + "/%'")
	})
	return b
}

// yaml is the configuration every member of a bank test shares.
func (b *bank) yaml(t *testing.T) []byte {
	return fmt.Appendf(nil, `listen: 127.0.0.1:0
redis: {addrs: [%q], keyPrefix: %q}
stores: {pg: {driver: postgres, dsn: %q, maxConns: 4}}
queues:
  %s: {store: pg, tables: [%s]}
mappings:
  - {plugin: sql, store: pg, key: "%s:acct:{branch}:{id}", query: "SELECT branch, id, balance FROM %s WHERE branch = $1 AND id = $2", queue: "%s/{branch}"}
writeback: {partitions: 4, workers: 1, pollInterval: 20ms, ownerLease: 3s, leaseLifetime: 2s, leaseWait: %s}
`, testenv.RedisAddr(t), b.prefix, b.dsn, b.fam, b.acct, b.fam, b.acct, b.fam, leaseWait)
}

// member opens an embedded member of the bank that the test closes at its
// end.
func (b *bank) member(t *testing.T, appliers bool) *writeback.DB {
	t.Helper()
	db, err := writeback.Open(context.Background(), writeback.Options{Config: b.yaml(t), Appliers: appliers, Registry: prometheus.NewRegistry(), Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// sidecar runs a sidecar of the bank (appliers running) and returns a
// client of its HTTP API.
func (b *bank) sidecar(t *testing.T) *client.Client {
	t.Helper()
	return runSidecar(t, b.yaml(t))
}

func (b *bank) key(branch, id int) string { return fmt.Sprintf("%s:acct:%d:%d", b.fam, branch, id) }

func (b *bank) queue(branch int) string { return fmt.Sprintf("%s/%d", b.fam, branch) }

// transfer is the commit moving amt from account from to account to of
// branch 0: two statements with arguments, two cache patches.
func (b *bank) transfer(from, to int, amt int64) client.Commit {
	upd := "UPDATE " + b.acct + " SET balance = balance + $1 WHERE branch = $2 AND id = $3"
	return client.Commit{
		Queue: b.queue(0),
		Statements: []client.Statement{
			{SQL: upd, Args: []any{-amt, 0, from}},
			{SQL: upd, Args: []any{amt, 0, to}},
		},
		Cache: []client.CacheChange{
			{Key: b.key(0, from), Patch: map[string]any{"$inc": map[string]any{"balance": -amt}}},
			{Key: b.key(0, to), Patch: map[string]any{"$inc": map[string]any{"balance": amt}}},
		},
	}
}

// balance reads an account's cached balance through s.
func balance(t *testing.T, s writeback.Sessions, key string) int64 {
	t.Helper()
	raw, err := s.Cache(context.Background(), key, "", false)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	return balanceOf(t, raw)
}

func balanceOf(t *testing.T, raw json.RawMessage) int64 {
	t.Helper()
	var v struct{ Balance int64 }
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	return v.Balance
}

// pgBalance reads an account's balance from the store.
func (b *bank) pgBalance(t *testing.T, branch, id int) int64 {
	t.Helper()
	var n int64
	if err := b.pg.QueryRow(fmt.Sprintf("SELECT balance FROM %s WHERE branch = $1 AND id = $2", b.acct), branch, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// An embedded session reads under leases and commits statements and cache
// changes: another embedded member and a sidecar read the new values at
// once, and the sidecar's appliers apply the statements to the store.
func TestEmbeddedSessionCommit(t *testing.T) {
	b := newBank(t)
	ctx := context.Background()
	db, other := b.member(t, false), b.member(t, false)
	hc := b.sidecar(t)

	sid, vals, err := db.BeginCacheMany(ctx, []string{b.key(0, 0), b.key(0, 1), b.key(0, 9)}, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(vals) != 3 || balanceOf(t, vals[0]) != 100 || balanceOf(t, vals[1]) != 100 || vals[2] != nil {
		t.Fatalf("BeginCacheMany: %s", vals)
	}
	if v, err := db.Cache(ctx, b.key(0, 2), sid, false); err != nil || balanceOf(t, v) != 100 {
		t.Fatalf("Cache in the session: %s, %v", v, err)
	}
	if vs, err := db.CacheMany(ctx, []string{b.key(1, 0)}, sid, false); err != nil || len(vs) != 1 || balanceOf(t, vs[0]) != 100 {
		t.Fatalf("CacheMany in the session: %s, %v", vs, err)
	}
	res, err := db.CommitSession(ctx, sid, b.transfer(0, 1, 30))
	if err != nil {
		t.Fatal(err)
	}
	if res.Session != sid || res.Queue != b.queue(0) || res.Seq <= 0 {
		t.Fatalf("commit result %+v", res)
	}
	for _, m := range []struct {
		name string
		s    writeback.Sessions
	}{{"the committing member", db}, {"another embedded member", other}, {"the sidecar", hc}} {
		if a, c := balance(t, m.s, b.key(0, 0)), balance(t, m.s, b.key(0, 1)); a != 70 || c != 130 {
			t.Errorf("%s reads balances %d and %d, want 70 and 130", m.name, a, c)
		}
	}
	eventually(t, "the sidecar applies the embedded session", func() bool { return b.pgBalance(t, 0, 0) == 70 && b.pgBalance(t, 0, 1) == 130 })

	// The other way round: a sidecar session, then an embedded read-only
	// session committed with no queue.
	hsid, _, err := hc.BeginCacheMany(ctx, []string{b.key(0, 1), b.key(0, 2)}, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hc.CommitSession(ctx, hsid, b.transfer(1, 2, 5)); err != nil {
		t.Fatal(err)
	}
	rsid, err := other.BeginSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := other.Cache(ctx, b.key(0, 2), rsid, false); err != nil || balanceOf(t, v) != 105 {
		t.Fatalf("embedded read of the sidecar's commit: %s, %v", v, err)
	}
	if err := other.ValidateSession(ctx, rsid); err != nil {
		t.Fatal(err)
	}
	if _, err := other.CommitSession(ctx, rsid, client.Commit{}); err != nil {
		t.Fatalf("read-only commit: %v", err)
	}
	eventually(t, "the sidecar applies its own session", func() bool { return b.pgBalance(t, 0, 2) == 105 })
}

// A multi-read with peeks answers the same over HTTP and embedded: the
// keys under the session's leases (which a conflicting session then
// meets), the peeked entries without any, each in the order asked.
func TestEmbeddedSessionReadCache(t *testing.T) {
	b := newBank(t)
	ctx := context.Background()
	db := b.member(t, false)
	hc := b.sidecar(t)
	for _, m := range []struct {
		name string
		s    writeback.Sessions
	}{{"embedded", db}, {"HTTP", hc}} {
		t.Run(m.name, func(t *testing.T) {
			res, err := m.s.ReadCache(ctx, "new", client.Reads{Keys: []string{b.key(0, 0)}, Peek: []string{b.key(0, 1), b.key(0, 9), b.key(1, 0)}, ForUpdate: true})
			if err != nil {
				t.Fatal(err)
			}
			if res.Session == "" || len(res.Values) != 1 || balanceOf(t, res.Values[0]) != 100 {
				t.Fatalf("result %+v", res)
			}
			if len(res.Peeked) != 3 || balanceOf(t, res.Peeked[0]) != 100 || res.Peeked[1] != nil || balanceOf(t, res.Peeked[2]) != 100 {
				t.Fatalf("peeked %s", res.Peeked)
			}
			// The leased key is held for update; the peeked ones are free.
			other, err := m.s.BeginSession(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := m.s.CacheMany(ctx, []string{b.key(0, 1), b.key(1, 0)}, other, true); err != nil {
				t.Errorf("an X lease on a peeked key: %v", err)
			}
			if _, err := m.s.CommitSession(ctx, other, client.Commit{}); err != nil {
				t.Fatal(err)
			}
			// A session that exists reads more keys and peeks.
			more, err := m.s.ReadCache(ctx, res.Session, client.Reads{Keys: []string{b.key(0, 2)}, Peek: []string{b.key(0, 0)}})
			if err != nil || more.Session != "" || len(more.Values) != 1 || len(more.Peeked) != 1 || balanceOf(t, more.Peeked[0]) != 100 {
				t.Fatalf("a read in the session: %+v, %v", more, err)
			}
			if _, err := m.s.CommitSession(ctx, res.Session, b.transfer(0, 2, 1)); err != nil {
				t.Fatal(err)
			}
			if _, err := m.s.CommitSession(ctx, func() string { id, _ := m.s.BeginSession(ctx); return id }(), b.transfer(2, 0, 1)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Appliers on: an embedded member alone applies its sessions.
func TestEmbeddedSessionAppliers(t *testing.T) {
	b := newBank(t)
	ctx := context.Background()
	db := b.member(t, true)
	sid, err := db.BeginSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.CommitSession(ctx, sid, b.transfer(2, 0, 40)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the embedded appliers apply the session", func() bool { return b.pgBalance(t, 0, 0) == 140 })
}

// wantAborted fails unless err is the HTTP API's 409 aborted answer to a
// session conflict, with its Retry-After, and says (via Cause) why.
func wantAborted(t *testing.T, what string, err error, says string) {
	t.Helper()
	var ce *client.Error
	if !errors.As(err, &ce) || !client.IsAborted(err) || ce.StatusCode != 409 || !ce.Retry || ce.RetryAfter <= 0 {
		t.Fatalf("%s: %#v, want a retry-safe 409 aborted with Retry-After", what, err)
	}
	var ae *session.AbortedError
	if !errors.As(err, &ae) {
		t.Errorf("%s: the cause %v is not a session.AbortedError", what, ce.Cause)
	}
	if !strings.Contains(ce.Message, says) {
		t.Errorf("%s: %q does not say %q", what, ce.Message, says)
	}
}

// Conflicts between embedded and sidecar sessions abort as over HTTP.
func TestEmbeddedSessionConflicts(t *testing.T) {
	b := newBank(t)
	ctx := context.Background()
	db := b.member(t, false)
	hc := b.sidecar(t)
	k := b.key(0, 0)

	t.Run("a sidecar's X voids an embedded S", func(t *testing.T) {
		e, err := db.BeginSession(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Cache(ctx, k, e, false); err != nil {
			t.Fatal(err)
		}
		h, _, err := hc.BeginCacheMany(ctx, []string{k}, true)
		if err != nil {
			t.Fatalf("the sidecar's X on the embedded S: %v", err)
		}
		wantAborted(t, "the embedded commit after the sidecar wounded it", func() error { _, err := db.CommitSession(ctx, e, client.Commit{}); return err }(), "voided")
		if _, err := hc.CommitSession(ctx, h, client.Commit{}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("an embedded X waits for an older sidecar X, then aborts", func(t *testing.T) {
		h, _, err := hc.BeginCacheMany(ctx, []string{k}, true)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, _, err = db.BeginCacheMany(ctx, []string{k}, true)
		wantAborted(t, "the younger embedded X", err, "did not release it within")
		if d := time.Since(start); d < leaseWait {
			t.Errorf("the embedded read gave up after %s, before leaseWait (%s)", d, leaseWait)
		}
		if _, err := hc.CommitSession(ctx, h, client.Commit{}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("an embedded X on a golden sidecar S", func(t *testing.T) {
		h, _, err := hc.BeginCacheMany(ctx, []string{k}, false)
		if err != nil {
			t.Fatal(err)
		}
		if err := hc.ValidateSession(ctx, h); err != nil {
			t.Fatal(err)
		}
		e, err := db.BeginSession(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = db.Cache(ctx, k, e, true)
		wantAborted(t, "the embedded X on a golden S", err, "x_on_golden_s")
		if _, err := hc.CommitSession(ctx, h, client.Commit{}); err != nil {
			t.Fatal(err)
		}
	})
}

// Bad requests get the HTTP API's answers, status, code and message alike.
func TestEmbeddedSessionErrors(t *testing.T) {
	b := newBank(t)
	ctx := context.Background()
	db := b.member(t, false)
	hc := b.sidecar(t)
	begin := func(s writeback.Sessions) string {
		id, err := s.BeginSession(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	commit := func(c client.Commit) func(writeback.Sessions) error {
		return func(s writeback.Sessions) error { _, err := s.CommitSession(ctx, begin(s), c); return err }
	}
	bad := b.transfer(0, 1, 1)
	bad.Statements = append(bad.Statements, client.Statement{SQL: "DELETE FROM writeback_applied_sessions"})
	foreign := b.transfer(0, 1, 1)
	foreign.Cache = append(foreign.Cache, client.CacheChange{Key: b.key(1, 0), Delete: true})
	for _, c := range []struct {
		name   string
		call   func(writeback.Sessions) error
		status int
	}{
		{"a statement on a table outside the family", commit(bad), 400},
		{"a cache change of another queue's key", commit(foreign), 400},
		{"a commit with no queue that changes something", commit(client.Commit{Statements: bad.Statements[:1]}), 400},
		{"a commit of an unknown session", func(s writeback.Sessions) error {
			_, err := s.CommitSession(ctx, "nope", client.Commit{})
			return err
		}, 404},
		{"an abort of an unknown session", func(s writeback.Sessions) error { return s.AbortSession(ctx, "nope") }, 404},
		{"a read of an unmapped key", func(s writeback.Sessions) error { _, err := s.Cache(ctx, "unmapped:1", "", false); return err }, 404},
		{"a read of a key with no value", func(s writeback.Sessions) error { _, err := s.Cache(ctx, b.key(5, 5), "", false); return err }, 404},
		{"a multi-read peeking an unmapped key", func(s writeback.Sessions) error {
			_, err := s.ReadCache(ctx, "new", client.Reads{Keys: []string{b.key(0, 0)}, Peek: []string{"unmapped:1"}})
			return err
		}, 404},
		{"a multi-read peeking an invalid key", func(s writeback.Sessions) error {
			_, err := s.ReadCache(ctx, "", client.Reads{Peek: []string{""}})
			return err
		}, 400},
	} {
		t.Run(c.name, func(t *testing.T) {
			var he, ee *client.Error
			herr, eerr := c.call(hc), c.call(db)
			if !errors.As(herr, &he) || he.StatusCode != c.status {
				t.Fatalf("over HTTP: %v, want %d", herr, c.status)
			}
			if !errors.As(eerr, &ee) {
				t.Fatalf("embedded: %v is not a *client.Error", eerr)
			}
			if ee.StatusCode != he.StatusCode || ee.Code != he.Code || ee.Message != he.Message || ee.Retry != he.Retry || ee.Cause == nil {
				t.Fatalf("embedded %d %s %q retry %v (cause %v), HTTP %d %s %q retry %v", ee.StatusCode, ee.Code, ee.Message, ee.Retry, ee.Cause, he.StatusCode, he.Code, he.Message, he.Retry)
			}
		})
	}
	// The embedded mode's own refusals: what the HTTP client could not
	// send.
	unencodable := b.transfer(0, 1, 1)
	unencodable.Statements[0].Args[0] = make(chan int)
	if _, err := db.CommitSession(ctx, begin(db), unencodable); !client.IsInvalid(err) || !strings.Contains(err.Error(), "argument 1 of statement 1") {
		t.Errorf("a commit with an argument JSON cannot encode: %v, want invalid_argument naming it", err)
	}
	if _, err := db.CacheMany(ctx, nil, "", false); !client.IsInvalid(err) {
		t.Errorf("a multi-read of no key: %v, want invalid_argument", err)
	}
	if _, err := db.ReadCache(ctx, "new", client.Reads{ForUpdate: true}); !client.IsInvalid(err) {
		t.Errorf("a multi-read of no key: %v, want invalid_argument", err)
	}
}

// After Close every session call fails with ErrClosed.
func TestEmbeddedSessionClose(t *testing.T) {
	b := newBank(t)
	ctx := context.Background()
	db := b.member(t, false)
	sid, err := db.BeginSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func() error{
		"BeginSession": func() error { _, err := db.BeginSession(ctx); return err },
		"Cache":        func() error { _, err := db.Cache(ctx, b.key(0, 0), "", false); return err },
		"CacheMany":    func() error { _, err := db.CacheMany(ctx, []string{b.key(0, 0)}, sid, false); return err },
		"BeginCacheMany": func() error {
			_, _, err := db.BeginCacheMany(ctx, []string{b.key(0, 0)}, false)
			return err
		},
		"ValidateSession": func() error { return db.ValidateSession(ctx, sid) },
		"CommitSession":   func() error { _, err := db.CommitSession(ctx, sid, client.Commit{}); return err },
		"AbortSession":    func() error { return db.AbortSession(ctx, sid) },
	} {
		if err := call(); !errors.Is(err, writeback.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
}
