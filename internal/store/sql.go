package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/writeback/writeback/internal/change"
	"github.com/writeback/writeback/internal/jsonscan"
)

// dialect is what differs between the SQL of PostgreSQL and MySQL when the
// statement is otherwise the same: quoting, placeholders, upserts, and how a
// column is read back as text.
type dialect interface {
	// ident quotes one identifier.
	ident(name string) string
	// placeholder is the n-th (1-based) parameter marker.
	placeholder(n int) string
	// upsert is the clause after INSERT … VALUES … that replaces the row
	// whose key already exists with the inserted columns.
	upsert(key string, cols []string) string
	// selectColumn is the select-list expression reading column c of alias
	// as its text form (see docValue).
	selectColumn(alias string, c change.Column) string
	// bytewiseKey is the expression ordering and comparing a text key
	// bytewise.
	bytewiseKey(expr string) string
	// pairAfter is the condition (a, b) > (va, vb), written so that the
	// database can seek an index on (a, b) to it.
	pairAfter(q *query, a, b string, va, vb any) string
	// keyParam is placeholder ph compared with a key of type t.
	keyParam(ph string, t change.Type) string
}

// quoteTable quotes a possibly schema-qualified table name ("schema.table").
func quoteTable(d dialect, name string) string {
	if schema, table, ok := strings.Cut(name, "."); ok {
		return d.ident(schema) + "." + d.ident(table)
	}
	return d.ident(name)
}

// query accumulates the text and the arguments of one statement.
type query struct {
	d    dialect
	sb   strings.Builder
	args []any
}

func newQuery(d dialect) *query { return &query{d: d} }

// grow makes room for n more arguments.
func (q *query) grow(n int) *query {
	q.args = slices.Grow(q.args, n)
	return q
}

// arg binds v and returns its placeholder.
func (q *query) arg(v any) string {
	q.args = append(q.args, v)
	return q.d.placeholder(len(q.args))
}

func (q *query) add(parts ...string) *query {
	for _, p := range parts {
		q.sb.WriteString(p)
	}
	return q
}

func (q *query) String() string { return q.sb.String() }

// list adds n items separated by ", ", item(i) adding the i-th.
func (q *query) list(n int, item func(i int)) *query {
	for i := range n {
		if i > 0 {
			q.add(", ")
		}
		item(i)
	}
	return q
}

// selectList is the select list reading every column of t under alias.
func selectList(d dialect, t *Table, alias string) string {
	cols := make([]string, len(t.Schema.Columns))
	for i, c := range t.Schema.Columns {
		cols[i] = d.selectColumn(alias, c)
	}
	return strings.Join(cols, ", ")
}

// readQuery selects the applied seq of (collection, id) and the row of id in
// ONE statement, so that both come from the same snapshot. The outer
// one-row relation makes the statement return exactly one row whether or
// not the record and the row exist; the key column, being the primary key,
// is NULL only when the row does not exist.
// lockRowQuery reads row id of t and locks it for the transaction: the
// current value that operators inside JSON columns ($push …) apply to.
func lockRowQuery(d dialect, t *Table, id string) *query {
	q := newQuery(d)
	q.add("SELECT ", selectList(d, t, "t"), " FROM ", quoteTable(d, t.Name), " AS t WHERE t.",
		d.ident(t.Schema.Key), " = ", d.keyParam(q.arg(id), t.Schema.KeyType()), " FOR UPDATE")
	return q
}

// lockedRow is the document a lockRowQuery read (cells, err): nil when it
// found no row (err is noRows).
func lockedRow(t *Table, cells []textCell, err, noRows error, permanent func(error) bool) (change.Doc, error) {
	if errors.Is(err, noRows) {
		return nil, nil
	}
	if err != nil {
		return nil, wrapErr("apply: read "+t.Name, err, permanent)
	}
	return buildDoc(t, cells)
}

func readQuery(d dialect, t *Table, collection, id string, part int) *query {
	q := newQuery(d)
	q.add("SELECT GREATEST(COALESCE(a.seq, 0), COALESCE(f.seq, 0)), ", selectList(d, t, "t"),
		" FROM (SELECT 1 AS one) AS o",
		" LEFT JOIN ", AppliedTable, " AS a ON a.collection = ", q.arg(collection), " AND a.id = ", q.arg(id),
		" LEFT JOIN ", FloorsTable, " AS f ON f.collection = ", q.arg(collection), " AND f.part = ", q.arg(int64(part)),
		" LEFT JOIN ", quoteTable(d, t.Name), " AS t ON t.", d.ident(t.Schema.Key), " = ", d.keyParam(q.arg(id), t.Schema.KeyType()))
	return q
}

// scanQuery selects up to limit rows with key >= from in key order. For a
// text key the comparison and the order are bytewise, through
// d.bytewiseKey unless the caller knows the column already orders so
// (plainOrder), in which case the index can serve the order.
func scanQuery(d dialect, t *Table, from string, limit int, plainOrder bool) (*query, error) {
	q := newQuery(d)
	key := "t." + d.ident(t.Schema.Key)
	if t.Schema.KeyType() == change.TypeText && !plainOrder {
		key = d.bytewiseKey(key)
	}
	q.add("SELECT ", selectList(d, t, "t"), " FROM ", quoteTable(d, t.Name), " AS t")
	if from != "" {
		if t.Schema.KeyType() == change.TypeInt {
			if _, err := strconv.ParseInt(from, 10, 64); err != nil {
				return nil, fmt.Errorf("store: scan of %s from %q: the key is an integer column", t.Name, from)
			}
		}
		q.add(" WHERE ", key, " >= ", d.keyParam(q.arg(from), t.Schema.KeyType()))
	}
	q.add(" ORDER BY ", key, " LIMIT ", strconv.Itoa(limit))
	return q, nil
}

// maxArgs bounds the parameters of one statement: PostgreSQL allows 65535,
// MySQL's limit is the packet size; big batches are split well below both.
const maxArgs = 10000

// maxStmtBytes bounds the bytes of the values of one statement: MySQL
// receives a statement with its values interpolated, in one packet of at
// most max_allowed_packet (16 MiB by default in MariaDB, 4 MiB in MySQL
// before 8.0), and escaping can double a value's size.
const maxStmtBytes = 1 << 20

// chunkLen returns how many of rows (each one statement argument per
// value) the next statement takes: as many as maxArgs and maxStmtBytes
// allow, and at least one.
func chunkLen(rows [][]any) int {
	n := min(len(rows), max(1, maxArgs/max(1, len(rows[0]))))
	size := 0
	for i, row := range rows[:n] {
		for _, v := range row {
			size += argBytes(v)
		}
		if i > 0 && size > maxStmtBytes {
			return i
		}
	}
	return n
}

// argBytes estimates the bytes of a statement argument.
func argBytes(v any) int {
	switch v := v.(type) {
	case string:
		return len(v)
	case []byte:
		return len(v)
	}
	return 8
}

// putQueries inserts rows (each a value per column of cols, in order) into
// t, in as few statements as maxArgs allows; with upsert, a row whose key
// exists is replaced (d.upsert).
func putQueries(d dialect, t *Table, cols []string, rows [][]any, upsert bool) []*query {
	quoted := make([]string, len(cols))
	for i, c := range cols {
		quoted[i] = d.ident(c)
	}
	head := "INSERT INTO " + quoteTable(d, t.Name) + " (" + strings.Join(quoted, ", ") + ") VALUES "
	tail := ""
	if upsert {
		tail = " " + d.upsert(t.Schema.Key, cols)
	}
	var out []*query
	for len(rows) > 0 {
		n := chunkLen(rows)
		q := newQuery(d).add(head)
		q.list(n, func(i int) {
			q.add("(").list(len(rows[i]), func(j int) { q.add(q.arg(rows[i][j])) }).add(")")
		})
		q.add(tail)
		out = append(out, q)
		rows = rows[n:]
	}
	return out
}

// deleteQueries deletes the rows of t whose key is one of ids.
func deleteQueries(d dialect, t *Table, ids []any) []*query {
	var out []*query
	for len(ids) > 0 {
		n := min(maxArgs, len(ids))
		q := newQuery(d).add("DELETE FROM ", quoteTable(d, t.Name), " WHERE ", d.ident(t.Schema.Key), " IN (")
		for i, id := range ids[:n] {
			if i > 0 {
				q.add(", ")
			}
			q.add(d.keyParam(q.arg(id), t.Schema.KeyType()))
		}
		out = append(out, q.add(")"))
		ids = ids[n:]
	}
	return out
}

// appliedMaxQuery returns, per partition, the highest seq recorded for
// the given collections (at least one), in their records and floors. Other collections' records are
// another deployment's (another keyPrefix, another Redis) sharing the
// database: their sequences say nothing of this deployment's Redis.
func appliedMaxQuery(d dialect, collections []string) *query {
	q := newQuery(d)
	q.add("SELECT part, MAX(seq) FROM (SELECT part, seq FROM ", AppliedTable, " WHERE collection IN (")
	q.list(len(collections), func(i int) { q.add(q.arg(collections[i])) })
	q.add(") UNION ALL SELECT part, seq FROM ", FloorsTable, " WHERE collection IN (")
	q.list(len(collections), func(i int) { q.add(q.arg(collections[i])) })
	return q.add(")) AS x GROUP BY part")
}

// listAppliedQuery pages through the records after (collection, id).
func listAppliedQuery(d dialect, afterCollection, afterID string, limit int) *query {
	q := newQuery(d)
	q.add("SELECT collection, id, part, seq FROM ", AppliedTable,
		" WHERE ", d.pairAfter(q, "collection", "id", afterCollection, afterID),
		" ORDER BY collection, id LIMIT ", strconv.Itoa(limit))
	return q
}

// columnArg converts the canonical JSON value v of column c into the
// statement argument that writes it: NULL, or the value's text, which both
// databases convert to the column's type themselves (PostgreSQL infers the
// parameter's type from the column it is assigned to).
func columnArg(c change.Column, v json.RawMessage) (any, error) {
	s := string(v)
	if s == "null" {
		return nil, nil
	}
	switch c.Type {
	case change.TypeText, change.TypeOther:
		str, err := unquoteJSON(s)
		if err != nil {
			return nil, permanentf("store: field %q must be a JSON string, not %.40s", c.Name, s)
		}
		return str, nil
	case change.TypeInt:
		if _, err := strconv.ParseInt(s, 10, 64); err != nil {
			return nil, permanentf("store: field %q must be an integer, not %.40s", c.Name, s)
		}
	case change.TypeFloat, change.TypeDecimal:
		if !isJSONNumber(v) {
			return nil, permanentf("store: field %q must be a number, not %.40s", c.Name, s)
		}
	case change.TypeBool:
		if s != "true" && s != "false" {
			return nil, permanentf("store: field %q must be true or false, not %.40s", c.Name, s)
		}
	case change.TypeJSON:
		if !json.Valid(v) {
			return nil, permanentf("store: field %q is not valid JSON", c.Name)
		}
	}
	return s, nil
}

// unquoteJSON decodes the JSON string v as json.Unmarshal does, without
// its reflection when v has no whitespace around it (jsonscan.Unquote).
func unquoteJSON(v string) (string, error) {
	if s, ok := jsonscan.Unquote(v); ok {
		return s, nil
	}
	var s string
	err := json.Unmarshal([]byte(v), &s)
	return s, err
}

// incArg converts one $inc amount into an argument of the column's numeric
// type: int64 for integer columns (so the database adds exactly), float64
// for float columns.
func incArg(c change.Column, amount json.Number) (any, error) {
	switch c.Type {
	case change.TypeInt:
		n, err := strconv.ParseInt(string(amount), 10, 64)
		if err != nil {
			return nil, permanentf("store: $inc of %q must be an integer, not %.40s", c.Name, amount)
		}
		return n, nil
	case change.TypeFloat:
		f, err := strconv.ParseFloat(string(amount), 64)
		if err != nil {
			return nil, permanentf("store: $inc of %q must be a number, not %.40s", c.Name, amount)
		}
		return f, nil
	}
	return nil, permanentf("store: $inc of %q: it is a %s column, not a numeric one", c.Name, c.Type)
}

func isJSONNumber(v []byte) bool {
	// json.Valid's answer, which allows whitespace after the number
	return jsonscan.IsNumber(bytes.TrimRight(v, " \t\r\n"))
}

func permanentf(format string, args ...any) error {
	return &Error{Permanent: true, Err: fmt.Errorf(format, args...)}
}

// newTable checks what Describe found — the columns of table in order and
// its primary key columns — and builds the Table keyed by key.
func newTable(table, key string, cols []change.Column, pk []string) (*Table, error) {
	if len(cols) == 0 {
		return nil, fmt.Errorf("store: table %s does not exist", table)
	}
	found := false
	for _, c := range cols {
		found = found || c.Name == key
	}
	switch {
	case !found:
		return nil, fmt.Errorf("store: table %s has no column %s", table, key)
	case len(pk) == 0:
		return nil, fmt.Errorf("store: column %s is not the primary key of %s: the table has no primary key", key, table)
	case len(pk) > 1 || pk[0] != key:
		return nil, fmt.Errorf("store: column %s is not the primary key of %s: its primary key is (%s)", key, table, strings.Join(pk, ", "))
	}
	s, err := change.NewSchema(key, cols)
	if err != nil {
		return nil, fmt.Errorf("store: table %s: %w", table, err)
	}
	return &Table{Name: table, Schema: s}, nil
}

// keyIndex is the position of the key among the columns of t.
func keyIndex(t *Table) int {
	for i, c := range t.Schema.Columns {
		if c.Name == t.Schema.Key {
			return i
		}
	}
	return -1
}

// sortedRecords returns records in (collection, id) order, the lock order.
func sortedRecords(records []AppliedRecord) []AppliedRecord {
	out := slices.Clone(records)
	slices.SortFunc(out, func(a, b AppliedRecord) int {
		if c := strings.Compare(a.Collection, b.Collection); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out
}
