package tpcc

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Scale is the size of the database. The specification's is Items 100 000
// and Customers 3 000 (per district); smaller values are a documented
// deviation for quick runs. Every district gets Customers initial orders,
// the last 30 % of them undelivered (900 of 3 000 in the specification).
type Scale struct {
	Warehouses int
	Items      int
	Customers  int // per district
}

// Districts per warehouse, as specified.
const Districts = 10

// Standard is the specification's scale for w warehouses.
func Standard(w int) Scale { return Scale{Warehouses: w, Items: 100000, Customers: 3000} }

// newOrders is the number of undelivered initial orders per district.
func (s Scale) newOrders() int { return s.Customers * 900 / 3000 }

// delivered reports whether initial order o was delivered (o_id < 2101 of
// 3000 in the specification).
func (s Scale) delivered(o int) bool { return o <= s.Customers-s.newOrders() }

// Tables are the TPC-C tables, in the order they are loaded. The order
// table is named oorder, as in OLTPBench and BenchBase: ORDER is a reserved
// word in SQL, and quoted identifiers are what session statements and
// mapping keys should not have to carry.
var Tables = []string{"warehouse", "district", "customer", "history", "new_order", "oorder", "order_line", "item", "stock"}

// ddl is the schema of clause 1.3 (PostgreSQL types), with the primary keys
// of clause 1.3 and the two secondary indexes the transactions need
// (customer by last name, a customer's orders).
var ddl = []string{
	`CREATE TABLE warehouse (w_id int NOT NULL, w_name varchar(10), w_street_1 varchar(20), w_street_2 varchar(20),
		w_city varchar(20), w_state char(2), w_zip char(9), w_tax decimal(4,4), w_ytd decimal(12,2), PRIMARY KEY (w_id))`,
	`CREATE TABLE district (d_w_id int NOT NULL, d_id int NOT NULL, d_name varchar(10), d_street_1 varchar(20), d_street_2 varchar(20),
		d_city varchar(20), d_state char(2), d_zip char(9), d_tax decimal(4,4), d_ytd decimal(12,2), d_next_o_id int,
		PRIMARY KEY (d_w_id, d_id))`,
	`CREATE TABLE customer (c_w_id int NOT NULL, c_d_id int NOT NULL, c_id int NOT NULL, c_first varchar(16), c_middle char(2),
		c_last varchar(16), c_street_1 varchar(20), c_street_2 varchar(20), c_city varchar(20), c_state char(2), c_zip char(9),
		c_phone char(16), c_since timestamp, c_credit char(2), c_credit_lim decimal(12,2), c_discount decimal(4,4),
		c_balance decimal(12,2), c_ytd_payment decimal(12,2), c_payment_cnt int, c_delivery_cnt int, c_data varchar(500),
		PRIMARY KEY (c_w_id, c_d_id, c_id))`,
	`CREATE INDEX customer_name ON customer (c_w_id, c_d_id, c_last, c_first)`,
	`CREATE TABLE history (h_c_id int, h_c_d_id int, h_c_w_id int, h_d_id int, h_w_id int, h_date timestamp,
		h_amount decimal(6,2), h_data varchar(24))`,
	`CREATE TABLE new_order (no_o_id int NOT NULL, no_d_id int NOT NULL, no_w_id int NOT NULL, PRIMARY KEY (no_w_id, no_d_id, no_o_id))`,
	`CREATE TABLE oorder (o_id int NOT NULL, o_d_id int NOT NULL, o_w_id int NOT NULL, o_c_id int, o_entry_d timestamp,
		o_carrier_id int, o_ol_cnt int, o_all_local int, PRIMARY KEY (o_w_id, o_d_id, o_id))`,
	`CREATE INDEX oorder_customer ON oorder (o_w_id, o_d_id, o_c_id, o_id)`,
	`CREATE TABLE order_line (ol_o_id int NOT NULL, ol_d_id int NOT NULL, ol_w_id int NOT NULL, ol_number int NOT NULL,
		ol_i_id int, ol_supply_w_id int, ol_delivery_d timestamp, ol_quantity int, ol_amount decimal(6,2), ol_dist_info char(24),
		PRIMARY KEY (ol_w_id, ol_d_id, ol_o_id, ol_number))`,
	`CREATE TABLE item (i_id int NOT NULL, i_im_id int, i_name varchar(24), i_price decimal(5,2), i_data varchar(50), PRIMARY KEY (i_id))`,
	`CREATE TABLE stock (s_w_id int NOT NULL, s_i_id int NOT NULL, s_quantity int, s_dist_01 char(24), s_dist_02 char(24),
		s_dist_03 char(24), s_dist_04 char(24), s_dist_05 char(24), s_dist_06 char(24), s_dist_07 char(24), s_dist_08 char(24),
		s_dist_09 char(24), s_dist_10 char(24), s_ytd int, s_order_cnt int, s_remote_cnt int, s_data varchar(50),
		PRIMARY KEY (s_w_id, s_i_id))`,
}

// EnsureDatabase creates the database named in dsn if it is missing, by
// connecting to the server's postgres database.
func EnsureDatabase(ctx context.Context, dsn string) error {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return fmt.Errorf("tpcc: the DSN %q is not valid: %v", dsn, err)
	}
	name := cfg.Database
	admin := cfg.Copy()
	admin.Database = "postgres"
	conn, err := pgx.ConnectConfig(ctx, admin)
	if err != nil {
		return fmt.Errorf("tpcc: cannot connect to PostgreSQL at %s:%d (%v); start the services with `make services`", cfg.Host, cfg.Port, err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return fmt.Errorf("tpcc: %w", err)
	}
	if exists {
		return nil
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil && !strings.Contains(err.Error(), "already exists") {
		return fmt.Errorf("tpcc: creating database %s: %w", name, err)
	}
	return nil
}

// Load drops and recreates the TPC-C tables and populates them as clause
// 4.3.3.1 says, at scale s: with COPY on PostgreSQL, with LOAD DATA LOCAL
// INFILE on MySQL. It also forgets the sessions a sidecar applied to the
// old tables (writeback_applied_sessions rows of the tpcc queues). It
// returns the load's NURand constants' run counterpart.
func Load(ctx context.Context, db *DB, s Scale, seed uint64) (constants, error) {
	r := rand.New(rand.NewPCG(seed, 0x7bcc))
	load, run := newConstants(r)
	for _, t := range Tables {
		if err := db.Exec(ctx, "DROP TABLE IF EXISTS "+t); err != nil {
			return run, fmt.Errorf("tpcc: drop %s: %w", t, err)
		}
	}
	for _, q := range ddl {
		if db.Store == MySQL {
			q = myDDL(q)
		}
		if err := db.Exec(ctx, q); err != nil {
			return run, fmt.Errorf("tpcc: %s: %w", strings.Fields(q)[2], err)
		}
	}
	if err := db.Exec(ctx, "DELETE FROM writeback_applied_sessions WHERE queue LIKE 'tpcc/%'"); err != nil && !missingTable(err) {
		return run, fmt.Errorf("tpcc: forgetting applied sessions: %w", err)
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	copyRows := func(table string, cols []string, n int, row func(i int) []any) error {
		if db.Store == MySQL {
			return myLoadRows(ctx, db.my, table, cols, n, row)
		}
		src := pgx.CopyFromFunc(func() func() ([]any, error) {
			i := 0
			return func() ([]any, error) {
				if i == n {
					return nil, nil
				}
				i++
				return row(i - 1), nil
			}
		}())
		if _, err := db.pg.CopyFrom(ctx, pgx.Identifier{table}, cols, src); err != nil {
			return fmt.Errorf("tpcc: loading %s: %w", table, err)
		}
		return nil
	}
	if err := copyRows("item", []string{"i_id", "i_im_id", "i_name", "i_price", "i_data"}, s.Items, func(i int) []any {
		return []any{i + 1, between(r, 1, 10000), astring(r, 14, 24), float64(between(r, 100, 10000)) / 100, data(r)}
	}); err != nil {
		return run, err
	}
	if err := copyRows("warehouse", []string{"w_id", "w_name", "w_street_1", "w_street_2", "w_city", "w_state", "w_zip", "w_tax", "w_ytd"}, s.Warehouses, func(i int) []any {
		return []any{i + 1, astring(r, 6, 10), astring(r, 10, 20), astring(r, 10, 20), astring(r, 10, 20), astring(r, 2, 2), zip(r), float64(between(r, 0, 2000)) / 10000, 300000.0}
	}); err != nil {
		return run, err
	}
	for w := 1; w <= s.Warehouses; w++ {
		if err := copyRows("stock", []string{"s_w_id", "s_i_id", "s_quantity", "s_dist_01", "s_dist_02", "s_dist_03", "s_dist_04", "s_dist_05",
			"s_dist_06", "s_dist_07", "s_dist_08", "s_dist_09", "s_dist_10", "s_ytd", "s_order_cnt", "s_remote_cnt", "s_data"}, s.Items, func(i int) []any {
			row := []any{w, i + 1, between(r, 10, 100)}
			for range Districts {
				row = append(row, astring(r, 24, 24))
			}
			return append(row, 0, 0, 0, data(r))
		}); err != nil {
			return run, err
		}
		if err := copyRows("district", []string{"d_w_id", "d_id", "d_name", "d_street_1", "d_street_2", "d_city", "d_state", "d_zip", "d_tax", "d_ytd", "d_next_o_id"}, Districts, func(i int) []any {
			return []any{w, i + 1, astring(r, 6, 10), astring(r, 10, 20), astring(r, 10, 20), astring(r, 10, 20), astring(r, 2, 2), zip(r),
				float64(between(r, 0, 2000)) / 10000, 30000.0, s.Customers + 1}
		}); err != nil {
			return run, err
		}
		for d := 1; d <= Districts; d++ {
			if err := loadDistrict(ctx, copyRows, r, s, load, w, d, now); err != nil {
				return run, err
			}
		}
	}
	analyze := "ANALYZE "
	if db.Store == MySQL {
		analyze = "ANALYZE TABLE "
	}
	for _, t := range Tables {
		if err := db.Exec(ctx, analyze+t); err != nil {
			return run, fmt.Errorf("tpcc: analyze %s: %w", t, err)
		}
	}
	return run, nil
}

// loadDistrict loads a district's customers, their history rows, and its
// initial orders, order lines and new orders.
func loadDistrict(ctx context.Context, copyRows func(string, []string, int, func(int) []any) error, r *rand.Rand, s Scale, c constants, w, d int, now time.Time) error {
	if err := copyRows("customer", []string{"c_w_id", "c_d_id", "c_id", "c_first", "c_middle", "c_last", "c_street_1", "c_street_2", "c_city",
		"c_state", "c_zip", "c_phone", "c_since", "c_credit", "c_credit_lim", "c_discount", "c_balance", "c_ytd_payment", "c_payment_cnt",
		"c_delivery_cnt", "c_data"}, s.Customers, func(i int) []any {
		id := i + 1
		last := LastName(nurand(r, 255, c.cLast, 0, lastNames(s)-1))
		if id <= 1000 {
			last = LastName(id - 1)
		}
		credit := "GC"
		if r.IntN(10) == 0 {
			credit = "BC"
		}
		return []any{w, d, id, astring(r, 8, 16), "OE", last, astring(r, 10, 20), astring(r, 10, 20), astring(r, 10, 20),
			astring(r, 2, 2), zip(r), nstring(r, 16), now, credit, 50000.0, float64(between(r, 0, 5000)) / 10000, -10.0, 10.0, 1, 0, astring(r, 300, 500)}
	}); err != nil {
		return err
	}
	if err := copyRows("history", []string{"h_c_id", "h_c_d_id", "h_c_w_id", "h_d_id", "h_w_id", "h_date", "h_amount", "h_data"}, s.Customers, func(i int) []any {
		return []any{i + 1, d, w, d, w, now, 10.0, astring(r, 12, 24)}
	}); err != nil {
		return err
	}
	perm := r.Perm(s.Customers)
	olCnt := make([]int, s.Customers)
	for i := range olCnt {
		olCnt[i] = between(r, 5, 15)
	}
	if err := copyRows("oorder", []string{"o_id", "o_d_id", "o_w_id", "o_c_id", "o_entry_d", "o_carrier_id", "o_ol_cnt", "o_all_local"}, s.Customers, func(i int) []any {
		o := i + 1
		var carrier any
		if s.delivered(o) {
			carrier = between(r, 1, 10)
		}
		return []any{o, d, w, perm[i] + 1, now, carrier, olCnt[i], 1}
	}); err != nil {
		return err
	}
	var lines [][]any
	for i := range s.Customers {
		o := i + 1
		for n := 1; n <= olCnt[i]; n++ {
			var delivery any = now
			amount := 0.0
			if !s.delivered(o) {
				delivery, amount = nil, float64(between(r, 1, 999999))/100
			}
			lines = append(lines, []any{o, d, w, n, between(r, 1, s.Items), w, delivery, 5, amount, astring(r, 24, 24)})
		}
	}
	if err := copyRows("order_line", []string{"ol_o_id", "ol_d_id", "ol_w_id", "ol_number", "ol_i_id", "ol_supply_w_id", "ol_delivery_d",
		"ol_quantity", "ol_amount", "ol_dist_info"}, len(lines), func(i int) []any { return lines[i] }); err != nil {
		return err
	}
	first := s.Customers - s.newOrders() + 1
	return copyRows("new_order", []string{"no_o_id", "no_d_id", "no_w_id"}, s.newOrders(), func(i int) []any {
		return []any{first + i, d, w}
	})
}

// lastNames is how many distinct last names customers have: 1 000, or
// fewer when a district has fewer customers (so that a last name drawn at
// run time always exists).
func lastNames(s Scale) int { return min(1000, s.Customers) }
