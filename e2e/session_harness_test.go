package e2e

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/writeback/writeback/internal/session"
	"github.com/writeback/writeback/internal/testenv"
	"github.com/writeback/writeback/pkg/client"
)

// bank is one session test's world in one database: accounts in branches
// (one queue per branch), a per-branch sequence the sessions may advance,
// a log the sessions may append to, and a Redis prefix.
//
//	<account>(branch, id, balance ≥ 0)    key "acct:<branch>:<id>" → {"branch":…,"id":…,"balance":…}
//	<qseq>(branch, n)                     key "seq:<branch>"       → {"n":…}
//	<log>(pos serial, branch, n, tag)     the order sessions were applied in
type bank struct {
	t        *testing.T
	db       string // "pg" or "maria"
	driver   string // store driver
	dsn      string
	conn     *sql.DB
	prefix   string
	family   string // the queue family, unique per test
	account  string
	qseq     string
	log      string
	branches int
	accounts int // per branch
	initial  int64
	lease    string // writeback.leaseLifetime
	redis    *redis.Client
}

func newBank(t *testing.T, db string, branches, accounts int, initial int64) *bank {
	t.Helper()
	b := &bank{t: t, db: db, prefix: testenv.UniqueName(t, "e2es"), family: testenv.UniqueName(t, "bank"),
		account: testenv.UniqueName(t, "acct"), qseq: testenv.UniqueName(t, "qseq"), log: testenv.UniqueName(t, "log"),
		branches: branches, accounts: accounts, initial: initial, lease: "2s"}
	b.redis = redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	t.Cleanup(func() {
		ctx := context.Background()
		iter := b.redis.Scan(ctx, 0, b.prefix+":*", 1000).Iterator()
		for iter.Next(ctx) {
			b.redis.Del(ctx, iter.Val())
		}
		b.redis.Close()
	})
	driver := "pgx"
	b.driver = "postgres"
	serial := "bigserial PRIMARY KEY"
	check := "CHECK (balance >= 0)"
	if db == "pg" {
		b.dsn = testenv.PostgresDSN(t)
	} else {
		b.driver, b.dsn, driver = "mysql", testenv.MySQLDSN(t), "mysql"
		serial = "bigint AUTO_INCREMENT PRIMARY KEY"
	}
	conn, err := sql.Open(driver, b.dsn)
	if err != nil {
		t.Fatal(err)
	}
	b.conn = conn
	b.exec(fmt.Sprintf("CREATE TABLE %s (branch int NOT NULL, id int NOT NULL, balance bigint NOT NULL %s, PRIMARY KEY (branch, id))", b.account, check))
	b.exec(fmt.Sprintf("CREATE TABLE %s (branch int PRIMARY KEY, n bigint NOT NULL)", b.qseq))
	b.exec(fmt.Sprintf("CREATE TABLE %s (pos %s, branch int NOT NULL, n bigint NOT NULL, tag varchar(64) NOT NULL)", b.log, serial))
	for br := range branches {
		var vals []string
		for id := range accounts {
			vals = append(vals, fmt.Sprintf("(%d, %d, %d)", br, id, initial))
		}
		b.exec(fmt.Sprintf("INSERT INTO %s (branch, id, balance) VALUES %s", b.account, strings.Join(vals, ", ")))
		b.exec(fmt.Sprintf("INSERT INTO %s (branch, n) VALUES (%d, 0)", b.qseq, br))
	}
	t.Cleanup(func() {
		for _, tbl := range []string{b.account, b.qseq, b.log} {
			_, _ = conn.Exec("DROP TABLE IF EXISTS " + tbl)
		}
		_, _ = conn.Exec("DELETE FROM writeback_applied_sessions WHERE queue LIKE '" + b.family + "/%'")
		conn.Close()
	})
	return b
}

func (b *bank) exec(q string, args ...any) {
	b.t.Helper()
	if _, err := b.conn.Exec(q, args...); err != nil {
		b.t.Fatalf("%s: %v", q, err)
	}
}

// ph is placeholder i (1-based) in the database's style.
func (b *bank) ph(i int) string {
	if b.db == "pg" {
		return fmt.Sprintf("$%d", i)
	}
	return "?"
}

// config writes a sidecar configuration serving the bank; wbExtra is
// added to the writeback section, extra at the top level.
func (b *bank) config(listen, wbExtra, extra string) string {
	return sessionConfig(b.t, listen, wbExtra, extra, b)
}

// sessionConfig writes a sidecar configuration serving banks (at most one
// per database), all under the first bank's Redis prefix.
func sessionConfig(t *testing.T, listen, wbExtra, extra string, banks ...*bank) string {
	t.Helper()
	var stores, queues, maps strings.Builder
	for _, b := range banks {
		b.prefix = banks[0].prefix
		fmt.Fprintf(&stores, "  %s: {driver: %s, dsn: %q}\n", b.db, b.driver, b.dsn)
		fmt.Fprintf(&queues, "  %s: {store: %s, tables: [%s, %s, %s]}\n", b.family, b.db, b.account, b.qseq, b.log)
		fmt.Fprintf(&maps, `  - plugin: sql
    store: %s
    key: "%s:acct:{branch}:{id}"
    query: "SELECT branch, id, balance FROM %s WHERE branch = %s AND id = %s"
    queue: "%s/{branch}"
  - plugin: sql
    store: %s
    key: "%s:seq:{branch}"
    query: "SELECT n FROM %s WHERE branch = %s"
    queue: "%s/{branch}"
`, b.db, b.family, b.account, b.ph(1), b.ph(2), b.family, b.db, b.family, b.qseq, b.ph(1), b.family)
	}
	cfg := fmt.Sprintf(`listen: %s
listenResp: ""
redis:
  addrs: [%s]
  keyPrefix: %s
stores:
%squeues:
%smappings:
%swriteback:
  partitions: 16
  workers: 4
  batchSize: 64
  ownerLease: 1500ms
  pollInterval: 10ms
  leaseLifetime: %s
%s
log: {level: warn}
%s`, listen, testenv.RedisAddr(t), banks[0].prefix, stores.String(), queues.String(), maps.String(), banks[0].lease, wbExtra, extra)
	p := filepath.Join(t.TempDir(), "writeback.yaml")
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func (b *bank) queue(branch int) string { return fmt.Sprintf("%s/%d", b.family, branch) }

func (b *bank) acctKey(branch, id int) string {
	return fmt.Sprintf("%s:acct:%d:%d", b.family, branch, id)
}

func (b *bank) seqKey(branch int) string { return fmt.Sprintf("%s:seq:%d", b.family, branch) }

// transferStatements moves amt from account from to account to of branch.
func (b *bank) transferStatements(branch, from, to int, amt int64) []client.Statement {
	upd := fmt.Sprintf("UPDATE %s SET balance = balance + %s WHERE branch = %s AND id = %s", b.account, b.ph(1), b.ph(2), b.ph(3))
	return []client.Statement{
		{SQL: upd, Args: []any{-amt, branch, from}},
		{SQL: upd, Args: []any{amt, branch, to}},
	}
}

// balances reads branch → id → balance from the database.
func (b *bank) balances() map[int]map[int]int64 {
	b.t.Helper()
	rows, err := b.conn.Query("SELECT branch, id, balance FROM " + b.account)
	if err != nil {
		b.t.Fatal(err)
	}
	defer rows.Close()
	out := map[int]map[int]int64{}
	for rows.Next() {
		var br, id int
		var bal int64
		if err := rows.Scan(&br, &id, &bal); err != nil {
			b.t.Fatal(err)
		}
		if out[br] == nil {
			out[br] = map[int]int64{}
		}
		out[br][id] = bal
	}
	return out
}

// appliedSessions counts this test's rows of writeback_applied_sessions.
func (b *bank) appliedSessions() int64 {
	b.t.Helper()
	var n int64
	if err := b.conn.QueryRow("SELECT count(*) FROM writeback_applied_sessions WHERE queue LIKE '" + b.family + "/%'").Scan(&n); err != nil {
		b.t.Fatal(err)
	}
	return n
}

// evict deletes a mapped cache entry behind the sidecar's back, as Redis
// eviction would.
func (b *bank) evict(key, queue string) error {
	return b.redis.Del(context.Background(), b.entryKey(key, queue)).Err()
}

// entryKey is the Redis key of a mapped cache entry depending on queue.
func (b *bank) entryKey(key, queue string) string {
	k := session.NewKeys(b.prefix, 16)
	return k.Entry(k.Partition(queue), key)
}

// account is a cached or loaded account value.
type account struct {
	Branch  int   `json:"branch"`
	ID      int   `json:"id"`
	Balance int64 `json:"balance"`
}

func decodeAccount(raw json.RawMessage) (account, error) {
	var a account
	err := json.Unmarshal(raw, &a)
	return a, err
}

// flushQueues applies every pending session.
func flushQueues(t *testing.T, sc *sidecar) client.QueueFlushResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := client.New("http://"+sc.addr, client.WithHTTPClient(&http.Client{Timeout: 2 * time.Minute}))
	res, err := c.FlushQueues(ctx, 90*time.Second)
	if err != nil {
		t.Fatalf("flush queues: %v\n%s", err, sc.out())
	}
	return res
}
