package tpcc

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Kind is one of the five transactions.
type Kind int

// The transactions, in the order of the specification.
const (
	NewOrder Kind = iota
	Payment
	OrderStatus
	Delivery
	StockLevel
	kinds
)

// Kinds are the transactions, for reports.
var Kinds = []Kind{NewOrder, Payment, OrderStatus, Delivery, StockLevel}

func (k Kind) String() string {
	return [...]string{"new-order", "payment", "order-status", "delivery", "stock-level"}[k]
}

// mix draws a transaction with the standard mix's minimum percentages
// (clause 5.2.3): 45 % New-Order, 43 % Payment, 4 % each of the others.
func mix(r *rand.Rand) Kind {
	switch n := r.IntN(100); {
	case n < 45:
		return NewOrder
	case n < 88:
		return Payment
	case n < 92:
		return OrderStatus
	case n < 96:
		return Delivery
	default:
		return StockLevel
	}
}

// terminal is one emulated terminal: a home warehouse and, for
// Stock-Level, a district of its own (clause 2.8.1.1).
type terminal struct {
	r     *rand.Rand
	s     Scale
	c     constants
	w, d  int
	stamp func() time.Time
	mysql bool // the store is MariaDB (storedTime)
}

// outcome is what a committed transaction did, for the check of the
// committed work against the database.
type outcome struct {
	newOrder bool    // a New-Order committed (not rolled back)
	payment  float64 // a Payment's amount
	rollback bool
}

// input is a transaction's input, drawn once and reused by its retries.
type input struct {
	kind Kind
	d    int
	// New-Order
	c        int
	items    []int
	supply   []int
	qty      []int
	rollback bool
	// Payment, Order-Status
	cw, cd int
	byName string
	amount float64
	// Delivery
	carrier int
	// Stock-Level
	threshold int
}

func (t *terminal) customer() int { return nurand(t.r, 1023, t.c.cID, 1, t.s.Customers) }

func (t *terminal) lastName() string {
	return LastName(nurand(t.r, 255, t.c.cLast, 0, lastNames(t.s)-1))
}

// draw draws the input of a transaction of kind k (clauses 2.4.1, 2.5.1,
// 2.6.1, 2.7.1, 2.8.1).
func (t *terminal) draw(k Kind) input {
	in := input{kind: k, d: between(t.r, 1, Districts)}
	switch k {
	case NewOrder:
		in.c = t.customer()
		n := between(t.r, 5, 15)
		in.rollback = t.r.IntN(100) == 0
		for i := range n {
			item := nurand(t.r, 8191, t.c.olIID, 1, t.s.Items)
			if in.rollback && i == n-1 {
				item = t.s.Items + 1 // unused: the transaction rolls back
			}
			supply := t.w
			if t.s.Warehouses > 1 && t.r.IntN(100) == 0 {
				for supply == t.w {
					supply = between(t.r, 1, t.s.Warehouses)
				}
			}
			in.items, in.supply, in.qty = append(in.items, item), append(in.supply, supply), append(in.qty, between(t.r, 1, 10))
		}
		// Order lines in item order (the unused item, the largest, stays
		// last): concurrent New-Orders then lock stock rows in one order
		// and do not deadlock in the database.
		idx := make([]int, n)
		for i := range idx {
			idx[i] = i
		}
		sort.Slice(idx, func(a, b int) bool { return in.items[idx[a]] < in.items[idx[b]] })
		items, supply, qty := make([]int, n), make([]int, n), make([]int, n)
		for i, j := range idx {
			items[i], supply[i], qty[i] = in.items[j], in.supply[j], in.qty[j]
		}
		in.items, in.supply, in.qty = items, supply, qty
	case Payment, OrderStatus:
		in.cw, in.cd = t.w, in.d
		if k == Payment && t.s.Warehouses > 1 && t.r.IntN(100) < 15 {
			for in.cw == t.w {
				in.cw = between(t.r, 1, t.s.Warehouses)
			}
			in.cd = between(t.r, 1, Districts)
		}
		if t.r.IntN(100) < 60 {
			in.byName = t.lastName()
		} else {
			in.c = t.customer()
		}
		in.amount = float64(between(t.r, 100, 500000)) / 100
	case Delivery:
		in.carrier = between(t.r, 1, 10)
	case StockLevel:
		in.d = t.d
		in.threshold = between(t.r, 10, 20)
	}
	return in
}

// run runs one attempt of the transaction in on tx.
func (t *terminal) run(ctx context.Context, tx Tx, in input) (outcome, error) {
	switch in.kind {
	case NewOrder:
		return t.newOrder(ctx, tx, in)
	case Payment:
		return t.payment(ctx, tx, in)
	case OrderStatus:
		return outcome{}, t.orderStatus(ctx, tx, in)
	case Delivery:
		return outcome{}, t.delivery(ctx, tx, in)
	default:
		return outcome{}, t.stockLevel(ctx, tx, in)
	}
}

// newOrder is clause 2.4.2. Item, warehouse, customer and stock columns it
// reads never change, so it reads them without leases, in the round trip
// (GetWith) that reads the district's d_next_o_id, the contended value,
// under its X lease (the database: FOR UPDATE, after the others), which
// is then held only until the commit, not over several reads.
func (t *terminal) newOrder(ctx context.Context, tx Tx, in input) (outcome, error) {
	w, d := t.w, in.d
	n := len(in.items)
	reads := make([]Read, 0, 2+2*n)
	reads = append(reads, Read{MapWarehouse, []any{w}}, Read{MapCustomer, []any{w, d, in.c}})
	for i, id := range in.items {
		reads = append(reads, Read{MapItem, []any{id}}, Read{MapStock, []any{in.supply[i], id}})
	}
	dists, rows, err := tx.GetWith(ctx, ForUpdate, []Read{{MapDistrict, []any{w, d}}}, reads)
	if err != nil {
		return outcome{}, err
	}
	wh, cust := rows[0], rows[1]
	if wh == nil {
		return outcome{}, missing(nil, "warehouse", w)
	}
	wTax, err := wh.Float("w_tax")
	if err != nil {
		return outcome{}, err
	}
	if cust == nil {
		return outcome{}, missing(nil, "customer", w, d, in.c)
	}
	disc, err := cust.Float("c_discount")
	if err != nil {
		return outcome{}, err
	}
	prices, infos := make([]float64, n), make([]string, n)
	for i, id := range in.items {
		item, stock := rows[2+2*i], rows[3+2*i]
		if item == nil {
			return outcome{rollback: true}, errRollback
		}
		if prices[i], err = item.Float("i_price"); err != nil {
			return outcome{}, err
		}
		if stock == nil {
			return outcome{}, missing(nil, "stock", in.supply[i], id)
		}
		infos[i] = stock.Str(fmt.Sprintf("s_dist_%02d", d))
	}
	dist := dists[0]
	if dist == nil {
		return outcome{}, missing(nil, "district", w, d)
	}
	dTax, err := dist.Float("d_tax")
	if err != nil {
		return outcome{}, err
	}
	o, err := dist.Int("d_next_o_id")
	if err != nil {
		return outcome{}, err
	}
	allLocal := 1
	for _, s := range in.supply {
		if s != w {
			allLocal = 0
		}
	}
	now := timestamp(t.stamp())
	if err := tx.Exec(ctx, "UPDATE district SET d_next_o_id = $1 WHERE d_w_id = $2 AND d_id = $3", o+1, w, d); err != nil {
		return outcome{}, err
	}
	if err := tx.Exec(ctx, "INSERT INTO oorder (o_id, o_d_id, o_w_id, o_c_id, o_entry_d, o_carrier_id, o_ol_cnt, o_all_local) "+
		"VALUES ($1, $2, $3, $4, CAST($5 AS timestamp), NULL, $6, $7)", o, d, w, in.c, now, len(in.items), allLocal); err != nil {
		return outcome{}, err
	}
	if err := tx.Exec(ctx, "INSERT INTO new_order (no_o_id, no_d_id, no_w_id) VALUES ($1, $2, $3)", o, d, w); err != nil {
		return outcome{}, err
	}
	// The stock rows first, then the order's lines: the same statements
	// as interleaved, and the lines' INSERTs, one text in a row, are one
	// multi-row INSERT for a write-back applier (joined inserts).
	for i, id := range in.items {
		sw, q := in.supply[i], in.qty[i]
		remote := 0
		if sw != w {
			remote = 1
		}
		// s_quantity - q, plus 91 when that leaves fewer than 10 (clause
		// 2.4.2.2), computed by the store: the quantity is not cached, so
		// that a remote warehouse's stock can change in this warehouse's
		// queue.
		if err := tx.Exec(ctx, "UPDATE stock SET s_quantity = CASE WHEN s_quantity >= $1 + 10 THEN s_quantity - $1 ELSE s_quantity - $1 + 91 END, "+
			"s_ytd = s_ytd + $1, s_order_cnt = s_order_cnt + 1, s_remote_cnt = s_remote_cnt + $2 WHERE s_w_id = $3 AND s_i_id = $4", q, remote, sw, id); err != nil {
			return outcome{}, err
		}
	}
	total := 0.0
	lines := make([]orderLine, n)
	for i, id := range in.items {
		sw, q := in.supply[i], in.qty[i]
		amount := cents(float64(q) * prices[i])
		total += amount
		if err := tx.Exec(ctx, "INSERT INTO order_line (ol_o_id, ol_d_id, ol_w_id, ol_number, ol_i_id, ol_supply_w_id, ol_delivery_d, ol_quantity, ol_amount, ol_dist_info) "+
			"VALUES ($1, $2, $3, $4, $5, $6, NULL, $7, $8, $9)", o, d, w, i+1, id, sw, q, amount, infos[i]); err != nil {
			return outcome{}, err
		}
		lines[i] = orderLine{number: i + 1, item: id, supplyW: sw, qty: q, amount: amount, customer: in.c}
	}
	_ = total * (1 - disc) * (1 + wTax + dTax) // the total shown to the terminal
	tx.Patch(MapDistrict.Key(w, d), map[string]any{"$set": map[string]any{"d_next_o_id": o + 1}})
	tx.Set(MapLastOrder.Key(w, d, in.c), fmt.Appendf(nil, `{"o_id":%d,"o_entry_d":%q}`, o, t.storedTime(now)))
	tx.Set(MapOrderLines.Key(w, d, o), linesEntry(lines)) // also the sign, for Delivery, that order o exists
	// MapStockLevel's entry of the district changes too; its reads may lag
	// (Staleness), so it expires instead of being dropped.
	if err := tx.Commit(ctx, Queue(w)); err != nil {
		return outcome{}, err
	}
	return outcome{newOrder: true}, nil
}

// orderLine is one line of an order's entry (MapOrderLines).
type orderLine struct {
	number, item, supplyW, qty int
	amount                     float64
	customer                   int
	delivered                  string // ol_delivery_d as the store prints it; "" while undelivered
	carrier                    int    // 0 while undelivered
}

// linesEntry is an order's lines' entry exactly as MapOrderLines computes
// it from the rows (its columns, in its order; decimal(6,2) and timestamps
// as the store prints them), so that a commit sets the entry instead of
// dropping it.
func linesEntry(lines []orderLine) json.RawMessage {
	b := []byte{'['}
	for i, l := range lines {
		if i > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, `{"ol_number":%d,"ol_i_id":%d,"ol_supply_w_id":%d,"ol_quantity":%d,"ol_amount":%s,"ol_delivery_d":`,
			l.number, l.item, l.supplyW, l.qty, strconv.FormatFloat(l.amount, 'f', 2, 64))
		if l.delivered == "" {
			b = append(b, "null"...)
		} else {
			b = strconv.AppendQuote(b, l.delivered)
		}
		b = fmt.Appendf(b, `,"o_c_id":%d,"o_carrier_id":`, l.customer)
		if l.carrier == 0 {
			b = append(b, "null"...)
		} else {
			b = strconv.AppendInt(b, int64(l.carrier), 10)
		}
		b = append(b, '}')
	}
	return append(b, ']')
}

// deliveredLines is the entry of customer c's order whose lines rows
// Delivery read, once delivered at (as the store prints it) by carrier.
func deliveredLines(rows []Row, c int, at string, carrier int) (json.RawMessage, error) {
	lines := make([]orderLine, len(rows))
	for i, r := range rows {
		l := orderLine{customer: c, delivered: at, carrier: carrier}
		var err error
		for _, f := range []struct {
			col string
			v   *int
		}{{"ol_number", &l.number}, {"ol_i_id", &l.item}, {"ol_supply_w_id", &l.supplyW}, {"ol_quantity", &l.qty}} {
			if *f.v, err = r.Int(f.col); err != nil {
				return nil, err
			}
		}
		if l.amount, err = r.Float("ol_amount"); err != nil {
			return nil, err
		}
		lines[i] = l
	}
	return linesEntry(lines), nil
}

// storedTime is a timestamp argument's text (timestamp) as the store
// prints the column back: MariaDB's datetime(6) with six digits,
// PostgreSQL's timestamp without the fraction's trailing zeros.
func (t *terminal) storedTime(ts string) string {
	if t.mysql {
		return ts
	}
	if strings.Contains(ts, ".") {
		ts = strings.TrimRight(strings.TrimRight(ts, "0"), ".")
	}
	return ts
}

func missing(err error, what string, ids ...any) error {
	if err != nil {
		return err
	}
	return fmt.Errorf("tpcc: %s %v does not exist", what, ids)
}

// findCustomer returns the customer of a Payment or Order-Status: by
// number, or by last name the one at position ⌈n/2⌉ of those with that
// name sorted by first name (clause 2.5.2.2). The customer's read, under
// l, also peeks at peek (GetWith): peeked[j] is peek[j]'s row.
func findCustomer(ctx context.Context, tx Tx, l Lease, in input, peek ...Read) (cust Row, c int, peeked []Row, err error) {
	if c, err = customerID(ctx, tx, in); err != nil {
		return nil, 0, nil, err
	}
	custs, peeked, err := tx.GetWith(ctx, l, []Read{{MapCustomer, []any{in.cw, in.cd, c}}}, peek)
	if err != nil || custs[0] == nil {
		return nil, 0, nil, missing(err, "customer", in.cw, in.cd, c)
	}
	return custs[0], c, peeked, nil
}

// customerID is the number of the customer of a Payment or Order-Status:
// the input's, or the one at position ⌈n/2⌉ of those with its last name
// sorted by first name (clause 2.5.2.2), read without a lease (names never
// change).
func customerID(ctx context.Context, tx Tx, in input) (int, error) {
	if in.byName == "" {
		return in.c, nil
	}
	ids, err := tx.List(ctx, MapCustomersByName, Unleased, in.cw, in.cd, in.byName)
	if err != nil {
		return 0, err
	}
	if len(ids) == 0 {
		return 0, fmt.Errorf("tpcc: no customer named %s in district %d/%d", in.byName, in.cw, in.cd)
	}
	return ids[(len(ids)+1)/2-1].Int("c_id")
}

// payment is clause 2.5.2. Warehouse and district year-to-date amounts are
// changed by the store (no transaction reads them), so the session belongs
// to the customer's warehouse's queue, which may be another warehouse's.
func (t *terminal) payment(ctx context.Context, tx Tx, in input) (outcome, error) {
	w, d := t.w, in.d
	cust, c, rows, err := findCustomer(ctx, tx, ForUpdate, in, Read{MapWarehouse, []any{w}}, Read{MapDistrict, []any{w, d}})
	if err != nil {
		return outcome{}, err
	}
	wh, dist := rows[0], rows[1]
	if wh == nil {
		return outcome{}, missing(nil, "warehouse", w)
	}
	if dist == nil {
		return outcome{}, missing(nil, "district", w, d)
	}
	bal, err := cust.Float("c_balance")
	if err != nil {
		return outcome{}, err
	}
	ytd, err := cust.Float("c_ytd_payment")
	if err != nil {
		return outcome{}, err
	}
	cnt, err := cust.Int("c_payment_cnt")
	if err != nil {
		return outcome{}, err
	}
	h := in.amount
	if err := tx.Exec(ctx, "UPDATE warehouse SET w_ytd = w_ytd + $1 WHERE w_id = $2", h, w); err != nil {
		return outcome{}, err
	}
	if err := tx.Exec(ctx, "UPDATE district SET d_ytd = d_ytd + $1 WHERE d_w_id = $2 AND d_id = $3", h, w, d); err != nil {
		return outcome{}, err
	}
	if cust.Str("c_credit") == "BC" {
		info := fmt.Sprintf("%d %d %d %d %d %.2f|", c, in.cd, in.cw, d, w, h)
		err = tx.Exec(ctx, "UPDATE customer SET c_balance = c_balance - $1, c_ytd_payment = c_ytd_payment + $1, c_payment_cnt = c_payment_cnt + 1, "+
			"c_data = substring(concat(CAST($2 AS varchar), c_data), 1, 500) WHERE c_w_id = $3 AND c_d_id = $4 AND c_id = $5", h, info, in.cw, in.cd, c)
	} else {
		err = tx.Exec(ctx, "UPDATE customer SET c_balance = c_balance - $1, c_ytd_payment = c_ytd_payment + $1, c_payment_cnt = c_payment_cnt + 1 "+
			"WHERE c_w_id = $2 AND c_d_id = $3 AND c_id = $4", h, in.cw, in.cd, c)
	}
	if err != nil {
		return outcome{}, err
	}
	hData := wh.Str("w_name") + "    " + dist.Str("d_name")
	if err := tx.Exec(ctx, "INSERT INTO history (h_c_id, h_c_d_id, h_c_w_id, h_d_id, h_w_id, h_date, h_amount, h_data) "+
		"VALUES ($1, $2, $3, $4, $5, CAST($6 AS timestamp), $7, $8)", c, in.cd, in.cw, d, w, timestamp(t.stamp()), h, hData); err != nil {
		return outcome{}, err
	}
	tx.Patch(MapCustomer.Key(in.cw, in.cd, c), map[string]any{"$set": map[string]any{
		"c_balance": cents(bal - h), "c_ytd_payment": cents(ytd + h), "c_payment_cnt": cnt + 1}})
	if err := tx.Commit(ctx, Queue(in.cw)); err != nil {
		return outcome{}, err
	}
	return outcome{payment: h}, nil
}

// orderStatus is clause 2.6.2: read-only, under S leases.
func (t *terminal) orderStatus(ctx context.Context, tx Tx, in input) error {
	c, err := customerID(ctx, tx, in)
	if err != nil {
		return err
	}
	// The customer and their last order in one round trip (both depend
	// only on the customer's number).
	rows, _, err := tx.GetWith(ctx, Shared, []Read{{MapCustomer, []any{in.cw, in.cd, c}}, {MapLastOrder, []any{in.cw, in.cd, c}}}, nil)
	if err != nil {
		return err
	}
	if rows[0] == nil {
		return missing(nil, "customer", in.cw, in.cd, c)
	}
	if ord := rows[1]; ord != nil {
		o, err := ord.Int("o_id")
		if err != nil {
			return err
		}
		lines, err := tx.List(ctx, MapOrderLines, Shared, in.cw, in.cd, o)
		if err != nil {
			return err
		}
		if len(lines) == 0 {
			return fmt.Errorf("tpcc: order %d/%d/%d has no order lines", in.cw, in.cd, o)
		}
	}
	return tx.Commit(ctx, "")
}

// delivery is clause 2.7.4, run at once rather than queued (deferred). It
// reads in two round trips: every district's oldest new order (the
// database: locked; the sidecar: the next order to deliver, X-leased), then
// those orders' lines, which hold the customer and the amounts — and, in
// the sidecar, whether the order exists yet (no lines: nothing to deliver).
func (t *terminal) delivery(ctx context.Context, tx Tx, in input) error {
	w := t.w
	now := timestamp(t.stamp())
	reads := make([]Read, Districts)
	for d := 1; d <= Districts; d++ {
		reads[d-1] = Read{MapOldestNewOrder, []any{w, d}}
	}
	nos, err := tx.GetMany(ctx, ForUpdate, reads)
	if err != nil {
		return err
	}
	var ds, os []int
	reads = reads[:0]
	for i, no := range nos {
		if no == nil {
			continue // none to deliver in this district (clause 2.7.4.2)
		}
		o, err := no.Int("no_o_id")
		if err != nil {
			return err
		}
		ds, os = append(ds, i+1), append(os, o)
		reads = append(reads, Read{MapOrderLines, []any{w, i + 1, o}})
	}
	var lists [][]Row
	if len(reads) > 0 {
		if lists, err = tx.ListMany(ctx, Shared, reads); err != nil {
			return err
		}
	}
	// Each statement's executions one after another, district by
	// district, rather than each district's four: the same changes, and
	// consecutive executions of one text, which a write-back applier sends
	// as one statement (joined keyed writes).
	var args [len(deliverySQL)][][]any
	delivered := 0
	for i, lines := range lists {
		d, o := ds[i], os[i]
		if len(lines) == 0 {
			continue // the next order to deliver does not exist yet
		}
		c, err := lines[0].Int("o_c_id")
		if err != nil {
			return err
		}
		sum := 0.0
		for _, l := range lines {
			a, err := l.Float("ol_amount")
			if err != nil {
				return err
			}
			sum += a
		}
		sum = cents(sum)
		args[0] = append(args[0], []any{w, d, o})
		args[1] = append(args[1], []any{in.carrier, w, d, o})
		args[2] = append(args[2], []any{now, w, d, o})
		args[3] = append(args[3], []any{sum, w, d, c})
		entry, err := deliveredLines(lines, c, t.storedTime(now), in.carrier)
		if err != nil {
			return err
		}
		tx.Patch(MapOldestNewOrder.Key(w, d), map[string]any{"$set": map[string]any{"no_o_id": o + 1}})
		tx.Set(MapOrderLines.Key(w, d, o), entry)
		tx.Patch(MapCustomer.Key(w, d, c), map[string]any{"$inc": map[string]any{"c_balance": sum, "c_delivery_cnt": 1}})
		delivered++
	}
	if delivered == 0 {
		return tx.Commit(ctx, "")
	}
	for k, sql := range deliverySQL {
		for _, a := range args[k] {
			if err := tx.Exec(ctx, sql, a...); err != nil {
				return err
			}
		}
	}
	return tx.Commit(ctx, Queue(w))
}

// deliverySQL are a Delivery's statements for each district it delivers
// an order of: the order's new_order row goes, the order gets its carrier,
// its lines their delivery date, and its customer the order's amount.
var deliverySQL = [...]string{
	"DELETE FROM new_order WHERE no_w_id = $1 AND no_d_id = $2 AND no_o_id = $3",
	"UPDATE oorder SET o_carrier_id = $1 WHERE o_w_id = $2 AND o_d_id = $3 AND o_id = $4",
	"UPDATE order_line SET ol_delivery_d = CAST($1 AS timestamp) WHERE ol_w_id = $2 AND ol_d_id = $3 AND ol_o_id = $4",
	"UPDATE customer SET c_balance = c_balance + $1, c_delivery_cnt = c_delivery_cnt + 1 WHERE c_w_id = $2 AND c_d_id = $3 AND c_id = $4",
}

// stockLevel is clause 2.8.2: the distinct items of the district's last 20
// orders whose home stock is below the threshold. It is one read, so it
// takes no lease: one read of committed values is a consistent state
// (Stock-Level needs only isolation level 1, clause 3.4.1), here at most
// StockLevelStaleness old in the sidecar's policies (MapStockLevel).
func (t *terminal) stockLevel(ctx context.Context, tx Tx, in input) error {
	rows, err := tx.List(ctx, MapStockLevel, Unleased, t.w, in.d)
	if err != nil {
		return err
	}
	low := 0
	for _, r := range rows {
		q, err := r.Int("s_quantity")
		if err != nil {
			return err
		}
		if q < in.threshold {
			low++
		}
	}
	_ = low // shown to the terminal
	return tx.Commit(ctx, "")
}
