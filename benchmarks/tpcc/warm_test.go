package tpcc

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/writeback/writeback/benchmarks/bench"
	"github.com/writeback/writeback/internal/testenv"
)

// TestWarmReadsOrdersAndLines: Warm reads, besides the entries of every
// warehouse, district, customer, last name, item and stock row, each
// customer's last order and the lines of those orders and of every order
// not yet delivered (once each) — the count it returns is exactly that —
// and each of those lines' entries holds the order's lines.
func TestWarmReadsOrdersAndLines(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	u, err := url.Parse(testenv.PostgresDSN(t))
	if err != nil {
		t.Fatalf("WRITEBACK_TEST_PG_DSN must be a URL: %v", err)
	}
	u.Path = "/tpcc_warm"
	dsn := u.String()
	db, err := Open(ctx, Postgres, dsn, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := Load(ctx, db, smokeScale, 3); err != nil {
		t.Fatal(err)
	}
	sc, err := StartSidecar(ctx, SidecarOptions{Policy: bench.WriteBack, DSN: dsn, RedisAddr: testenv.RedisAddr(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	n, err := Warm(ctx, sc.Client, smokeScale)
	if err != nil {
		t.Fatal(err)
	}
	s := smokeScale
	base := s.Warehouses*(1+Districts*(2+2*s.Customers+lastNames(s))+s.Items) + s.Items
	var orders int
	if err := db.pg.QueryRow(ctx, `SELECT count(*) FROM (
		SELECT o_w_id, o_d_id, max(o_id) FROM oorder GROUP BY o_w_id, o_d_id, o_c_id
		UNION SELECT no_w_id, no_d_id, no_o_id FROM new_order) o`).Scan(&orders); err != nil {
		t.Fatal(err)
	}
	if orders == 0 || n != base+orders {
		t.Fatalf("Warm read %d entries, want %d: %d of the other mappings and %d orders' lines", n, base+orders, base, orders)
	}
	rows, err := db.pg.Query(ctx, `SELECT o_w_id, o_d_id, o_id, o_ol_cnt FROM oorder
		WHERE o_id IN (SELECT max(o_id) FROM oorder GROUP BY o_w_id, o_d_id, o_c_id) ORDER BY 1, 2, 3 LIMIT 20`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	checked := 0
	for rows.Next() {
		var w, d, o, cnt int
		if err := rows.Scan(&w, &d, &o, &cnt); err != nil {
			t.Fatal(err)
		}
		vals, err := sc.Client.CacheMany(ctx, []string{MapOrderLines.Key(w, d, o)}, "", false)
		if err != nil {
			t.Fatal(err)
		}
		var lines []Row
		if err := decodeJSON(vals[0], &lines); err != nil || len(lines) != cnt {
			t.Fatalf("order %d/%d/%d: %d lines cached (%v), want %d", w, d, o, len(lines), err, cnt)
		}
		checked++
	}
	if err := rows.Err(); err != nil || checked == 0 {
		t.Fatalf("checked %d orders' lines: %v", checked, err)
	}
}
