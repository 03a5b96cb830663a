package tpcc

import (
	"fmt"
	"strings"
	"time"
)

// Family is the queue family of the sessions: queue "tpcc/<w_id>" holds the
// sessions of warehouse w_id, as in the paper (section 4.3).
const Family = "tpcc"

// Queue is the queue of warehouse w.
func Queue(w int) string { return Family + "/" + itoa(w) }

// Mapping is a cache entry the transactions read: a key pattern, the
// parameterised SELECT that computes it (also what the database policy
// runs), and whether its value changes with the sessions of the
// warehouse's queue. Entries without a queue hold only columns no
// transaction changes (names, prices, taxes, stock's district info).
type Mapping struct {
	Name   string // the key's first segment
	Params int    // placeholders after the name, the warehouse first when Queued
	Query  string
	// DBQuery, when set, is what the database policy runs instead of Query:
	// the row a locking read wants where the cached entry keeps a value
	// that is cheaper to keep current (MapOldestNewOrder).
	DBQuery string
	Many    bool
	Queued  bool
	// Immutable: no transaction changes the columns the query reads (the
	// item table; a warehouse's name, address and tax; a stock row's
	// district texts and data; customers' names): the sidecar keeps the
	// entries its reads outside sessions find in process (immutable: true).
	Immutable bool
	// Staleness, when set, lets the entry's reads lag the warehouse's
	// queue by up to that long (the sidecar's staleness setting):
	// transactions then change the entry without dropping it.
	Staleness time.Duration
	Columns   []string // documentation only: what the value holds
}

// The entries. Keys are "<name>:<param>:<param>…".
var (
	MapWarehouse = &Mapping{Name: "wh", Params: 1, Immutable: true,
		Query: "SELECT w_id, w_name, w_street_1, w_street_2, w_city, w_state, w_zip, w_tax FROM warehouse WHERE w_id = $1"}
	MapDistrict = &Mapping{Name: "dist", Params: 2, Queued: true,
		Query: "SELECT d_id, d_name, d_street_1, d_street_2, d_city, d_state, d_zip, d_tax, d_next_o_id FROM district WHERE d_w_id = $1 AND d_id = $2"}
	MapCustomer = &Mapping{Name: "cust", Params: 3, Queued: true,
		Query: "SELECT c_id, c_first, c_middle, c_last, c_street_1, c_street_2, c_city, c_state, c_zip, c_phone, c_since, c_credit, " +
			"c_credit_lim, c_discount, c_balance, c_ytd_payment, c_payment_cnt, c_delivery_cnt FROM customer WHERE c_w_id = $1 AND c_d_id = $2 AND c_id = $3"}
	MapCustomersByName = &Mapping{Name: "cname", Params: 3, Many: true, Immutable: true,
		Query: "SELECT c_id FROM customer WHERE c_w_id = $1 AND c_d_id = $2 AND c_last = $3 ORDER BY c_first"}
	MapItem = &Mapping{Name: "item", Params: 1, Immutable: true,
		Query: "SELECT i_id, i_name, i_price, i_data FROM item WHERE i_id = $1"}
	MapStock = &Mapping{Name: "stock", Params: 2, Immutable: true,
		Query: "SELECT s_i_id, s_dist_01, s_dist_02, s_dist_03, s_dist_04, s_dist_05, s_dist_06, s_dist_07, s_dist_08, s_dist_09, s_dist_10, s_data " +
			"FROM stock WHERE s_w_id = $1 AND s_i_id = $2"}
	// MapLastOrder is a customer's last order: the columns of it only
	// New-Order writes (it sets the entry of the order it creates), so that
	// Order-Status finds it cached. Its carrier, which Delivery writes, is
	// on the order's lines.
	MapLastOrder = &Mapping{Name: "lastord", Params: 3, Queued: true,
		Query: "SELECT o_id, o_entry_d FROM oorder WHERE o_w_id = $1 AND o_d_id = $2 AND o_c_id = $3 ORDER BY o_id DESC LIMIT 1"}
	// MapOrderLines carries the order's customer (o_c_id), which Delivery
	// needs, and carrier (o_carrier_id), which Order-Status shows, on every
	// line: Delivery reads the lines of the order MapOldestNewOrder names
	// and nothing else of the order. New-Order and Delivery both set the
	// entry (linesEntry).
	MapOrderLines = &Mapping{Name: "ol", Params: 3, Many: true, Queued: true,
		Query: "SELECT ol_number, ol_i_id, ol_supply_w_id, ol_quantity, ol_amount, ol_delivery_d, o_c_id, o_carrier_id FROM order_line " +
			"JOIN oorder ON o_w_id = ol_w_id AND o_d_id = ol_d_id AND o_id = ol_o_id " +
			"WHERE ol_w_id = $1 AND ol_d_id = $2 AND ol_o_id = $3 ORDER BY ol_number"}
	// MapOldestNewOrder is, cached, the district's next order to deliver:
	// the oldest undelivered order, or when every order is delivered the id
	// the next New-Order will take (d_next_o_id). Orders are numbered and
	// delivered in order, so a New-Order never changes it and a Delivery
	// moves it one on ($set): the entry stays cached, and no Delivery has
	// to apply the warehouse's queue to read it. Whether that order exists
	// yet is what its lines say (an order has at least 5; New-Order sets
	// the lines' entry of the order it creates). The database policy locks
	// the oldest new_order row instead (DBQuery).
	MapOldestNewOrder = &Mapping{Name: "nord", Params: 2, Queued: true,
		Query: "SELECT COALESCE(min(no_o_id), d_next_o_id) AS no_o_id FROM district " +
			"LEFT JOIN new_order ON no_w_id = d_w_id AND no_d_id = d_id WHERE d_w_id = $1 AND d_id = $2 GROUP BY d_next_o_id",
		DBQuery: "SELECT no_o_id FROM new_order WHERE no_w_id = $1 AND no_d_id = $2 ORDER BY no_o_id LIMIT 1"}
	// MapStockLevel: the items of a district's last 20 orders and their
	// home stock quantities; Stock-Level counts those below its threshold.
	// Every New-Order changes it, by statements the store computes (the
	// quantities are not cached): its reads may lag by StockLevelStaleness
	// instead, which TPC-C allows (clause 3.4.1: level 1 isolation for
	// Stock-Level, which sees only committed data, not necessarily the
	// latest), so that a Stock-Level does not wait for the warehouse's
	// queue to be applied.
	MapStockLevel = &Mapping{Name: "stocklvl", Params: 2, Many: true, Queued: true, Staleness: StockLevelStaleness,
		Query: "SELECT DISTINCT s_i_id, s_quantity FROM district JOIN order_line ON ol_w_id = d_w_id AND ol_d_id = d_id " +
			"AND ol_o_id >= d_next_o_id - 20 AND ol_o_id < d_next_o_id JOIN stock ON s_w_id = ol_w_id AND s_i_id = ol_i_id " +
			"WHERE d_w_id = $1 AND d_id = $2 ORDER BY s_i_id"}
)

// StockLevelStaleness is how far a Stock-Level may lag the committed
// New-Orders in the sidecar's policies (MapStockLevel).
const StockLevelStaleness = time.Second

// Mappings are every entry.
var Mappings = []*Mapping{MapWarehouse, MapDistrict, MapCustomer, MapCustomersByName, MapItem, MapStock, MapLastOrder, MapOrderLines, MapOldestNewOrder, MapStockLevel}

// names of the placeholders of a key pattern: the first is the warehouse.
var paramNames = []string{"w", "a", "b"}

// dbQuery is the query the database policy runs.
func (m *Mapping) dbQuery() string {
	if m.DBQuery != "" {
		return m.DBQuery
	}
	return m.Query
}

// Key is the cache key of the entry with these parameters.
func (m *Mapping) Key(params ...any) string {
	if len(params) != m.Params {
		panic(fmt.Sprintf("tpcc: key %s takes %d parameters, got %d", m.Name, m.Params, len(params)))
	}
	var b strings.Builder
	b.WriteString(m.Name)
	for _, p := range params {
		fmt.Fprintf(&b, ":%v", p)
	}
	return b.String()
}

// Config is the entry as a mapping of the sidecar's configuration (the
// built-in sql plugin) over store, with placeholders in dialect's style.
func (m *Mapping) Config(store string) map[string]any {
	key := m.Name
	for _, n := range paramNames[:m.Params] {
		key += ":{" + n + "}"
	}
	c := map[string]any{"plugin": "sql", "store": store, "key": key, "query": m.Query, "many": m.Many}
	if m.Queued {
		c["queue"] = Family + "/{w}"
	}
	if m.Immutable {
		c["immutable"] = true
	}
	if m.Staleness > 0 {
		c["staleness"] = m.Staleness.String()
	}
	return c
}
