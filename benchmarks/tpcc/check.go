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

// Check checks consistency conditions 1–5, 7 and 10 (clause 3.3.2) on the
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
		// Conditions 5, 7 and 10 hold what Delivery did: an order delivered
		// twice, out of order or not at all breaks one of them.
		{"condition 5 (O_CARRIER_ID null exactly for the orders in NEW-ORDER)",
			`SELECT o_w_id, o_d_id, o_id FROM oorder WHERE (o_carrier_id IS NULL) <>
				(EXISTS (SELECT 1 FROM new_order WHERE no_w_id = o_w_id AND no_d_id = o_d_id AND no_o_id = o_id))
			ORDER BY 1, 2, 3 LIMIT 20`,
			func(v []any) {
				add("condition 5", "order %d/%d/%d: o_carrier_id and its new_order row disagree", v[0], v[1], v[2])
			}},
		{"condition 7 (O_CARRIER_ID null exactly when OL_DELIVERY_D is)",
			`SELECT o_w_id, o_d_id, o_id FROM oorder WHERE (o_carrier_id IS NULL) <>
				(NOT EXISTS (SELECT 1 FROM order_line WHERE ol_w_id = o_w_id AND ol_d_id = o_d_id AND ol_o_id = o_id AND ol_delivery_d IS NOT NULL))
			ORDER BY 1, 2, 3 LIMIT 20`,
			func(v []any) {
				add("condition 7", "order %d/%d/%d: o_carrier_id and its lines' ol_delivery_d disagree", v[0], v[1], v[2])
			}},
		{"condition 10 (C_BALANCE = delivered OL_AMOUNTs - H_AMOUNTs)",
			`SELECT c_w_id, c_d_id, c_id, c_balance::float8, d::float8, h::float8 FROM (
				SELECT c_w_id, c_d_id, c_id, c_balance,
					coalesce((SELECT sum(ol_amount) FROM oorder JOIN order_line ON ol_w_id = o_w_id AND ol_d_id = o_d_id AND ol_o_id = o_id
						WHERE o_w_id = c_w_id AND o_d_id = c_d_id AND o_c_id = c_id AND ol_delivery_d IS NOT NULL), 0) AS d,
					coalesce((SELECT sum(h_amount) FROM history WHERE h_c_w_id = c_w_id AND h_c_d_id = c_d_id AND h_c_id = c_id), 0) AS h
				FROM customer) AS t
			WHERE abs(c_balance - (d - h)) > 0.001 ORDER BY 1, 2, 3 LIMIT 20`,
			func(v []any) {
				add("condition 10", "customer %d/%d/%d: c_balance %.2f, delivered %.2f less paid %.2f", v[0], v[1], v[2], num(v[3]), num(v[4]), num(v[5]))
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
