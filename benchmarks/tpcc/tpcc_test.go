package tpcc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/writeback/writeback/benchmarks/bench"
	"github.com/writeback/writeback/benchmarks/sidecar"
	"github.com/writeback/writeback/internal/store"
	"github.com/writeback/writeback/internal/testenv"
)

// smokeDSN is the test PostgreSQL server's tpcc_smoke database.
func smokeDSN(t *testing.T) string {
	t.Helper()
	u, err := url.Parse(testenv.PostgresDSN(t))
	if err != nil {
		t.Fatalf("WRITEBACK_TEST_PG_DSN must be a URL for the TPC-C smoke test: %v", err)
	}
	u.Path = "/tpcc_smoke"
	return u.String()
}

// TestSmokeWriteBack runs a tiny TPC-C as write-back sessions (two
// warehouses, so that remote stock and remote customers cross queues),
// flushes, and checks conditions 1–5, 7, 10 and the committed work; then it
// breaks the database the way a wrong applier or a lost session would and
// checks that Check says so.
func TestSmokeWriteBack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 35*time.Second)
	defer cancel()
	dsn := smokeDSN(t)
	out, log := smokeRun(ctx, t, bench.WriteBack, dsn, nil)
	no, pay := out.Kinds[NewOrder.String()], out.Kinds[Payment.String()]
	if out.Work.NewOrders < 10 || out.Work.Payments < 10 || no.Committed == 0 || no.Latency.Count == 0 || out.TpmC <= 0 || pay.Latency.P90 <= 0 {
		t.Fatalf("the workload barely ran: %+v\n%s", out.Result, log)
	}
	t.Logf("%.0f tpmC, %d New-Orders, %d Payments, %d sessions flushed", out.TpmC, out.Work.NewOrders, out.Work.Payments, out.Flushed)

	db, err := Open(ctx, Postgres, dsn, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, tc := range []struct {
		name, sql, want string
	}{
		{"a district's next order id moved", "UPDATE district SET d_next_o_id = d_next_o_id + 1 WHERE d_w_id = 1 AND d_id = 1", "condition 2"},
		{"a payment applied to the district only", "UPDATE district SET d_ytd = d_ytd + 1 WHERE d_w_id = 2 AND d_id = 3", "condition 1"},
		{"a new order lost", "DELETE FROM new_order WHERE (no_w_id, no_d_id, no_o_id) = (" + secondNewOrder + ")", "condition 3"},
		{"an order line lost", "DELETE FROM order_line WHERE ol_w_id = 2 AND ol_d_id = 1 AND ol_o_id = 1 AND ol_number = 1", "condition 4"},
		{"an order delivered, its new order not", damageCarrier, "condition 5"},
		{"an order's lines delivered, the order not", damageLines, "condition 7"},
		{"a delivery paid to its customer twice", damageBalance, "condition 10"},
		{"a whole New-Order session lost", "DELETE FROM order_line WHERE (ol_w_id, ol_d_id, ol_o_id) = (SELECT o_w_id, o_d_id, o_id FROM oorder ORDER BY o_id DESC LIMIT 1); " +
			"DELETE FROM new_order WHERE (no_w_id, no_d_id, no_o_id) = (SELECT o_w_id, o_d_id, o_id FROM oorder ORDER BY o_id DESC LIMIT 1); " +
			"UPDATE district SET d_next_o_id = d_next_o_id - 1 WHERE (d_w_id, d_id) = (SELECT o_w_id, o_d_id FROM oorder ORDER BY o_id DESC LIMIT 1); " +
			"DELETE FROM oorder WHERE (o_w_id, o_d_id, o_id) = (SELECT o_w_id, o_d_id, o_id FROM oorder ORDER BY o_id DESC LIMIT 1)", "committed work"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tx, err := db.pg.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(context.WithoutCancel(ctx))
			for _, q := range strings.Split(tc.sql, "; ") {
				if _, err := tx.Exec(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			// Check reads through the pool, so the damage is committed and
			// stays; each case breaks another condition.
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			res, err := Check(ctx, db, smokeScale, out.Work)
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, v := range res.Violations {
				found = found || v.Condition == tc.want
			}
			if !found {
				t.Errorf("Check found %v, want a violation of %s", res.Violations, tc.want)
			}
		})
	}
}

// TestSmokeWriteBackEmbedded runs the tiny TPC-C of TestSmokeWriteBack as
// write-back sessions of an embedded member (the sidecar running the
// appliers): conditions 1–5, 7, 10 and the committed work hold after the
// flush, as for write-back over HTTP, and the sessions did not go through
// the sidecar's HTTP API.
func TestSmokeWriteBackEmbedded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 35*time.Second)
	defer cancel()
	dsn := smokeDSN(t)
	var requests float64
	out, log := smokeRun(ctx, t, bench.WriteBackEmbedded, dsn, func(sc *sidecar.Sidecar) (err error) {
		if sc.Embedded == nil {
			return errors.New("the write-back-embedded sidecar has no embedded member")
		}
		requests, _, err = sc.Metric("writeback_requests_total")
		return err
	})
	no := out.Kinds[NewOrder.String()]
	if out.Work.NewOrders < 10 || out.Work.Payments < 10 || no.Committed == 0 || out.TpmC <= 0 {
		t.Fatalf("the workload barely ran: %+v\n%s", out.Result, log)
	}
	// Over HTTP every transaction is at least two requests; embedded, the
	// sidecar serves only the warm-up's reads, the memory samples and the
	// flush.
	if txs := float64(out.Work.NewOrders + out.Work.Payments); requests >= txs {
		t.Errorf("the sidecar served %.0f HTTP requests for %.0f New-Orders and Payments: the sessions went over HTTP", requests, txs)
	}
	t.Logf("%.0f tpmC, %d New-Orders, %d Payments, %d sessions flushed, %.0f HTTP requests", out.TpmC, out.Work.NewOrders, out.Work.Payments, out.Flushed, requests)
}

// smokeScale is the smoke tests' tiny TPC-C: two warehouses, so that
// remote stock and remote customers cross queues.
var smokeScale = Scale{Warehouses: 2, Items: 1000, Customers: 30}

// smokeRun runs the smoke tests' TPC-C under policy on PostgreSQL and
// fails the test unless, after the flush, conditions 1–5, 7, 10 and the
// committed work hold and some order of the run matches its lines' entry;
// after, when not nil, looks at the sidecar after the flush. It returns the
// run and its log.
func smokeRun(ctx context.Context, t *testing.T, policy, dsn string, after func(*sidecar.Sidecar) error) (Outcome, string) {
	t.Helper()
	var log strings.Builder
	var lines int
	out, err := Bench(ctx, Options{Policy: policy, DSN: dsn, RedisAddr: testenv.RedisAddr(t), Scale: smokeScale, Terminals: 3,
		Duration: 3 * time.Second, Seed: 7, Log: io.Writer(&log),
		AfterFlush: func(ctx context.Context, sc *sidecar.Sidecar) (err error) {
			if after != nil {
				if err := after(sc); err != nil {
					return err
				}
			}
			lines, err = sameOrderEntries(ctx, sc, testenv.RedisAddr(t), Postgres, dsn, smokeScale)
			return err
		}})
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if err := out.Check.Err(); err != nil {
		t.Fatalf("after a %s run and a flush: %v\n%s", policy, err, log.String())
	}
	if len(out.Check.Checked) != 8 || lines == 0 {
		t.Errorf("checked %v and %d orders' lines, want conditions 1-5, 7, 10, the committed work and some lines", out.Check.Checked, lines)
	}
	return out, log.String()
}

// Damage in SQL both stores take, on the district with the most
// undelivered orders (a run may deliver all of some district's): the
// second-oldest new order (condition 3; MySQL cannot delete with a
// subquery of the same table, so it reads secondNewOrder first), the
// oldest undelivered order marked delivered (5), the newest one's lines
// marked delivered (7), a customer's balance moved (10).
const (
	busiest        = "FROM new_order GROUP BY no_w_id, no_d_id HAVING count(*) >= 3 ORDER BY count(*) DESC, no_w_id, no_d_id LIMIT 1"
	secondNewOrder = "SELECT no_w_id, no_d_id, min(no_o_id) + 1 " + busiest
	damageCarrier  = "UPDATE oorder SET o_carrier_id = 1 WHERE (o_w_id, o_d_id, o_id) = (SELECT no_w_id, no_d_id, min(no_o_id) " + busiest + ")"
	damageLines    = "UPDATE order_line SET ol_delivery_d = now() WHERE (ol_w_id, ol_d_id, ol_o_id) = (SELECT no_w_id, no_d_id, max(no_o_id) " + busiest + ")"
	damageBalance  = "UPDATE customer SET c_balance = c_balance + 1 WHERE c_w_id = 1 AND c_d_id = 1 AND c_id = 1"
)

// sameOrderEntries compares, byte for byte, the entries the run's commits
// set with what their mappings compute from the rows, in each district:
// the last order's lines and its customer's last order (New-Order set
// them), and the lines of the last order the run delivered (Delivery set
// them). It reads the entries from Redis, not through the sidecar, so that
// an entry a commit dropped is an error rather than a fill. It returns how
// many entries it compared.
func sameOrderEntries(ctx context.Context, sc *sidecar.Sidecar, redisAddr, kind, dsn string, s Scale) (int, error) {
	driver := "postgres"
	queries := []string{
		"SELECT o_id, o_c_id FROM oorder WHERE o_w_id = $1 AND o_d_id = $2 ORDER BY o_id DESC LIMIT 1",
		"SELECT o_id, o_c_id FROM oorder WHERE o_w_id = $1 AND o_d_id = $2 AND o_carrier_id IS NOT NULL ORDER BY o_id DESC LIMIT 1",
		MapOrderLines.Query, MapLastOrder.Query,
	}
	if kind == MySQL {
		driver = "mysql"
		for i, q := range queries {
			var err error
			if queries[i], err = MyMappingQuery(q); err != nil {
				return 0, err
			}
		}
	}
	lastQ, deliveredQ, linesQ, lastOrderQ := queries[0], queries[1], queries[2], queries[3]
	st, err := store.Open(ctx, driver, dsn)
	if err != nil {
		return 0, err
	}
	defer st.Close()
	ss, _ := store.Sessions(st)
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	n := 0
	same := func(key, query string, many bool, args ...any) error {
		rows, err := ss.QueryJSON(ctx, query, args...)
		if err != nil {
			return err
		}
		parts := make([]string, len(rows))
		for i, r := range rows {
			parts[i] = string(r)
		}
		want := strings.Join(parts, ",")
		if many {
			want = "[" + want + "]"
		}
		found, err := rdb.Keys(ctx, sc.Prefix+"*:c:"+key).Result()
		if err != nil {
			return err
		}
		if len(found) != 1 {
			return fmt.Errorf("%s is not cached (%d keys): the commit dropped it instead of setting it", key, len(found))
		}
		got, err := rdb.Get(ctx, found[0]).Result()
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("%s is %s, the rows say %s", key, got, want)
		}
		n++
		return nil
	}
	for w := 1; w <= s.Warehouses; w++ {
		for d := 1; d <= Districts; d++ {
			var last, delivered struct{ O, C int }
			for _, o := range []struct {
				q  string
				to *struct{ O, C int }
			}{{lastQ, &last}, {deliveredQ, &delivered}} {
				rows, err := ss.QueryJSON(ctx, o.q, w, d)
				if err != nil {
					return n, err
				}
				if len(rows) == 1 {
					var v struct {
						O int `json:"o_id"`
						C int `json:"o_c_id"`
					}
					if err := json.Unmarshal(rows[0], &v); err != nil {
						return n, err
					}
					*o.to = struct{ O, C int }{v.O, v.C}
				}
			}
			if last.O > s.Customers { // an order of the run
				if err := same(MapOrderLines.Key(w, d, last.O), linesQ, true, w, d, last.O); err != nil {
					return n, err
				}
				if err := same(MapLastOrder.Key(w, d, last.C), lastOrderQ, false, w, d, last.C); err != nil {
					return n, err
				}
			}
			if delivered.O > 0 && (delivered.O > s.Customers || !s.delivered(delivered.O)) { // delivered by the run
				if err := same(MapOrderLines.Key(w, d, delivered.O), linesQ, true, w, d, delivered.O); err != nil {
					return n, err
				}
			}
		}
	}
	return n, nil
}
