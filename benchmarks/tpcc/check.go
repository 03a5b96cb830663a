package tpcc

import (
	"context"
	"fmt"
	"math"
	"strings"
)

// Work is what a run committed, to compare with the database: every
// committed New-Order is an order, every committed Payment a history row
// and an amount in its warehouse's and district's year-to-date.
type Work struct {
	NewOrders int64   `json:"new_orders"`
	Payments  int64   `json:"payments"`
	Paid      float64 `json:"paid"` // the sum of the committed payments
}

// Violation is a consistency condition that does not hold.
type Violation struct {
	Condition string `json:"condition"`
	Detail    string `json:"detail"`
}

// CheckResult is the outcome of Check.
type CheckResult struct {
	Checked    []string    `json:"checked"`
	Violations []Violation `json:"violations,omitempty"`
}

// OK reports whether every condition held.
func (c CheckResult) OK() bool { return len(c.Violations) == 0 }

// Err is nil when every condition held, and otherwise an error listing
// the first violations.
func (c CheckResult) Err() error {
	if c.OK() {
		return nil
	}
	var b strings.Builder
	for i, v := range c.Violations {
		if i == 10 {
			fmt.Fprintf(&b, "; … %d more", len(c.Violations)-10)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s: %s", v.Condition, v.Detail)
	}
	return fmt.Errorf("tpcc: %d consistency violations: %s", len(c.Violations), b.String())
}

// Check checks consistency conditions 1–4 (clause 3.3.2.1–3.3.2.4) on the
// database, and that it holds exactly the committed work (no session lost
// or applied twice): the orders, history rows and payments of work on top
// of the initial population at scale s. The queries are PostgreSQL's; on
// MySQL they run without their ::float8 casts, which MariaDB has no need
// of (its DECIMAL reads as a float64 here, as PostgreSQL's float8 does).
func Check(ctx context.Context, db *DB, s Scale, work Work) (CheckResult, error) {
	var res CheckResult
	add := func(cond, format string, args ...any) {
		res.Violations = append(res.Violations, Violation{Condition: cond, Detail: fmt.Sprintf(format, args...)})
	}
	type check struct {
		name, query string
		row         func(vals []any)
	}
	checks := []check{
		{"condition 1 (W_YTD = sum(D_YTD))",
			`SELECT w_id, w_ytd::float8, (SELECT sum(d_ytd)::float8 FROM district WHERE d_w_id = w_id) FROM warehouse ORDER BY w_id`,
			func(v []any) {
				if w, d := num(v[1]), num(v[2]); math.Abs(w-d) > 0.001 {
					add("condition 1", "warehouse %d: w_ytd %.2f, sum of its d_ytd %.2f", v[0], w, d)
				}
			}},
		{"condition 2 (D_NEXT_O_ID - 1 = max(O_ID) = max(NO_O_ID))",
			`SELECT d_w_id, d_id, d_next_o_id - 1,
				(SELECT coalesce(max(o_id), 0) FROM oorder WHERE o_w_id = d_w_id AND o_d_id = d_id),
				(SELECT max(no_o_id) FROM new_order WHERE no_w_id = d_w_id AND no_d_id = d_id)
			FROM district ORDER BY d_w_id, d_id`,
			func(v []any) {
				next, maxO := integer(v[2]), integer(v[3])
				if next != maxO {
					add("condition 2", "district %d/%d: d_next_o_id - 1 = %d, max(o_id) = %d", v[0], v[1], next, maxO)
				}
				if v[4] != nil && integer(v[4]) != next {
					add("condition 2", "district %d/%d: d_next_o_id - 1 = %d, max(no_o_id) = %d", v[0], v[1], next, integer(v[4]))
				}
			}},
		{"condition 3 (max(NO_O_ID) - min(NO_O_ID) + 1 = rows in NEW-ORDER)",
			`SELECT no_w_id, no_d_id, max(no_o_id) - min(no_o_id) + 1, count(*) FROM new_order GROUP BY no_w_id, no_d_id ORDER BY 1, 2`,
			func(v []any) {
				if span, n := integer(v[2]), integer(v[3]); span != n {
					add("condition 3", "district %d/%d: new orders span %d order numbers but are %d rows", v[0], v[1], span, n)
				}
			}},
		{"condition 4 (sum(O_OL_CNT) = rows in ORDER-LINE)",
			`SELECT d_w_id, d_id,
				(SELECT coalesce(sum(o_ol_cnt), 0) FROM oorder WHERE o_w_id = d_w_id AND o_d_id = d_id),
				(SELECT count(*) FROM order_line WHERE ol_w_id = d_w_id AND ol_d_id = d_id)
			FROM district ORDER BY d_w_id, d_id`,
			func(v []any) {
				if sum, n := integer(v[2]), integer(v[3]); sum != n {
					add("condition 4", "district %d/%d: sum(o_ol_cnt) = %d, order lines %d", v[0], v[1], sum, n)
				}
			}},
	}
	query := func(q string) ([][]any, error) {
		if db.Store == MySQL {
			q = strings.ReplaceAll(q, "::float8", "")
		}
		return db.rows(ctx, q)
	}
	for _, c := range checks {
		rows, err := query(c.query)
		if err != nil {
			return res, fmt.Errorf("tpcc: %s: %w", c.name, err)
		}
		for _, vals := range rows {
			c.row(vals)
		}
		res.Checked = append(res.Checked, c.name)
	}
	// The committed work, exactly once.
	rows, err := query(`SELECT (SELECT count(*) FROM oorder), (SELECT count(*) FROM history), (SELECT sum(w_ytd)::float8 FROM warehouse)`)
	if err != nil || len(rows) != 1 {
		return res, fmt.Errorf("tpcc: counting the committed work: %v", err)
	}
	orders, history, ytd := integer(rows[0][0]), integer(rows[0][1]), num(rows[0][2])
	initial := int64(s.Warehouses * Districts * s.Customers)
	if want := initial + work.NewOrders; orders != want {
		add("committed work", "%d orders, want %d (%d loaded + %d New-Orders committed)", orders, want, initial, work.NewOrders)
	}
	if want := initial + work.Payments; history != want {
		add("committed work", "%d history rows, want %d (%d loaded + %d Payments committed)", history, want, initial, work.Payments)
	}
	if want := 300000*float64(s.Warehouses) + work.Paid; math.Abs(ytd-want) > 0.005*float64(work.Payments+1) {
		add("committed work", "the warehouses' w_ytd sum to %.2f, want %.2f (the committed Payments')", ytd, want)
	}
	res.Checked = append(res.Checked, "committed work (orders, history rows and payments of the run, exactly once)")
	return res, nil
}

// num is a number of a check's row: an int64 or float64 (DB.rows), 0 for
// NULL.
func num(v any) float64 {
	switch x := v.(type) {
	case int64:
		return float64(x)
	case float64:
		return x
	}
	return 0
}

// integer is an integer of a check's row (MariaDB sums integers as DECIMAL,
// read as float64), 0 for NULL.
func integer(v any) int64 { return int64(math.Round(num(v))) }
