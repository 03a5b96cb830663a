package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/writeback/writeback/internal/change"
)

// myStore is a MySQL or MariaDB database, through database/sql.
//
// Connections use the text protocol with client-side interpolation
// (interpolateParams), so every statement is one round trip and every
// value reads back as the server's text, like PostgreSQL's col::text.
type myStore struct {
	db      *sql.DB
	applyDB *sql.DB // Apply's: multiStatements on
	dbName  string  // the DSN's database: unqualified table names live there
	// returning: the server has INSERT … RETURNING (MariaDB 10.5+), which
	// Apply's record insert uses to read the seqs it locks.
	returning bool

	// tables caches what Scan and Apply need to know of a table beyond
	// its Table; Describe refreshes it.
	tables sync.Map // table name → myTableInfo

	// stepwise counts the session batches applied the stepwise way
	// (ApplySessions), for tests.
	stepwise atomic.Int64
}

// myTableInfo is what the store must know of a table besides its columns.
type myTableInfo struct {
	// bytewiseKey: the key column's collation already orders bytewise
	// (utf8mb4_bin …). Then Scan can compare and order the plain column and
	// use the primary key's index; MariaDB does not see through a COLLATE
	// clause, not even a redundant one.
	bytewiseKey bool
	// keyCollation is the key column's collation ("" for non-text keys).
	keyCollation string
	// otherUnique: a unique index besides the primary key exists.
	// ON DUPLICATE KEY UPDATE fires on a conflict in ANY unique index, so a
	// put whose value collides with another row's would overwrite that
	// other row instead of failing; such tables need the slower put.
	otherUnique bool
}

var _ Store = (*myStore)(nil)

// myAppliedDDL creates the applied records. VARBINARY compares bytewise
// and, unlike the PAD SPACE utf8mb4_bin, does not make "a" and "a " the
// same id; 128+512 bytes fit InnoDB's 3072-byte key limit with room.
const myAppliedDDL = `CREATE TABLE IF NOT EXISTS ` + AppliedTable + ` (
	collection VARBINARY(128) NOT NULL,
	id VARBINARY(512) NOT NULL,
	part INT NOT NULL,
	seq BIGINT NOT NULL,
	PRIMARY KEY (collection, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`

// myFloorsDDL creates the floors of the cuts (see pgFloorsDDL).
const myFloorsDDL = `CREATE TABLE IF NOT EXISTS ` + FloorsTable + ` (
	collection VARBINARY(128) NOT NULL,
	part INT NOT NULL,
	seq BIGINT NOT NULL,
	recmax BIGINT NOT NULL,
	PRIMARY KEY (collection, part)
) ENGINE=InnoDB`

// myRefreshFloorsSQL is pgRefreshFloorsSQL.
const myRefreshFloorsSQL = `INSERT INTO ` + FloorsTable + ` (collection, part, seq, recmax)
	SELECT collection, part, 0, MAX(seq) FROM ` + AppliedTable + ` GROUP BY collection, part
	ORDER BY collection, part
	ON DUPLICATE KEY UPDATE recmax = GREATEST(recmax, VALUES(recmax))`

// mySessionInit runs on every new connection. READ COMMITTED spares Apply
// the gap locks of REPEATABLE READ, which deadlock concurrent inserts of
// new records; its locking reads see the latest committed seq either way.
// Strict mode makes the server reject a value that does not fit instead of
// silently truncating it, which would leave the cache and the table
// disagreeing forever.
var mySessionInit = []string{
	"SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
	"SET SESSION sql_mode = CONCAT_WS(',', NULLIF(@@SESSION.sql_mode, ''), 'STRICT_ALL_TABLES')",
}

// sessionConnector runs mySessionInit on each connection it opens.
type sessionConnector struct {
	driver.Connector
}

func (c sessionConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	ex, ok := conn.(driver.ExecerContext)
	if !ok {
		conn.Close()
		return nil, errors.New("store: mysql connection cannot execute statements")
	}
	for _, q := range mySessionInit {
		if _, err := ex.ExecContext(ctx, q, nil); err != nil {
			conn.Close()
			return nil, err
		}
	}
	return conn, nil
}

func openMySQL(ctx context.Context, dsn string, o Options) (Store, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("store: mysql DSN: %w", err)
	}
	if cfg.DBName == "" {
		return nil, errors.New("store: the mysql DSN names no database (user@tcp(host:port)/dbname)")
	}
	cfg.InterpolateParams = true // one round trip per statement
	cfg.MultiStatements = false
	cfg.ParseTime = false      // dates read back as the server's text
	cfg.ClientFoundRows = true // UPDATE counts matched rows: a patch of an unchanged row is not Missing
	db, err := myPool(cfg, o)
	if err != nil {
		return nil, err
	}
	// Apply's own pool sends several statements of its own making per
	// round trip (see Apply); nothing else may: the sessions' statements
	// come from applications.
	multi := cfg.Clone()
	multi.MultiStatements = true
	applyDB, err := myPool(multi, o)
	if err != nil {
		db.Close()
		return nil, err
	}
	s := &myStore{db: db, applyDB: applyDB, dbName: cfg.DBName}
	if err := s.Ping(ctx); err != nil {
		s.Close()
		return nil, err
	}
	// CREATE TABLE IF NOT EXISTS is atomic under the server's metadata
	// lock: of two concurrent creators one creates, the other gets a note.
	for _, st := range []struct{ op, q string }{
		{"create " + AppliedTable, myAppliedDDL},
		{"create " + FloorsTable, myFloorsDDL},
		{"refresh " + FloorsTable, myRefreshFloorsSQL},
	} {
		if _, err := db.ExecContext(ctx, st.q); err != nil {
			s.Close()
			return nil, wrapErr("mysql: "+st.op, err, myPermanent)
		}
	}
	var version string
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		s.Close()
		return nil, wrapErr("mysql: version", err, myPermanent)
	}
	s.returning = insertReturning(version)
	return s, nil
}

// insertReturning reports whether a server of this VERSION() has INSERT …
// RETURNING: MariaDB from 10.5 on; no MySQL.
func insertReturning(version string) bool {
	if !strings.Contains(version, "MariaDB") {
		return false
	}
	var major, minor int
	if _, err := fmt.Sscanf(version, "%d.%d", &major, &minor); err != nil {
		return false
	}
	return major > 10 || major == 10 && minor >= 5
}

// myPool is a pool of connections of cfg.
func myPool(cfg *mysql.Config, o Options) (*sql.DB, error) {
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("store: mysql: %w", err)
	}
	db := sql.OpenDB(sessionConnector{connector})
	db.SetMaxOpenConns(o.MaxConns)
	db.SetMaxIdleConns(o.MaxConns)
	db.SetConnMaxLifetime(30 * time.Minute)
	db.SetConnMaxIdleTime(5 * time.Minute)
	return db, nil
}

// myDialect is MySQL's and MariaDB's SQL.
type myDialect struct{}

func (myDialect) ident(name string) string {
	return "`" + strings.ReplaceAll(name, "`", "``") + "`"
}

func (myDialect) placeholder(int) string { return "?" }

func (d myDialect) upsert(key string, cols []string) string {
	var sets []string
	for _, c := range cols {
		if c != key {
			sets = append(sets, d.ident(c)+" = VALUES("+d.ident(c)+")")
		}
	}
	if len(sets) == 0 {
		sets = append(sets, d.ident(key)+" = "+d.ident(key))
	}
	return "ON DUPLICATE KEY UPDATE " + strings.Join(sets, ", ")
}

func (d myDialect) selectColumn(alias string, c change.Column) string {
	return alias + "." + d.ident(c.Name)
}

// bytewiseKey converts first so that it works whatever the column's
// character set; utf8mb4_bin orders by code point, i.e. by UTF-8 bytes.
func (myDialect) bytewiseKey(expr string) string {
	return "(CONVERT(" + expr + " USING utf8mb4) COLLATE utf8mb4_bin)"
}

func (myDialect) keyParam(ph string, _ change.Type) string { return ph }

// pairAfter is spelled out: MariaDB's range optimizer turns it into two
// intervals of the index, which it does not for a row comparison.
func (myDialect) pairAfter(q *query, a, b string, va, vb any) string {
	return "(" + a + " > " + q.arg(va) + " OR (" + a + " = " + q.arg(va) + " AND " + b + " > " + q.arg(vb) + "))"
}

// myType maps an information_schema DATA_TYPE to a change.Type. BOOLEAN is
// TINYINT(1) in MySQL, hence an integer.
func myType(dataType string) change.Type {
	switch dataType {
	case "tinyint", "smallint", "mediumint", "int", "integer", "bigint":
		return change.TypeInt
	case "float", "double", "real":
		return change.TypeFloat
	case "decimal", "numeric":
		return change.TypeDecimal
	case "char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set":
		return change.TypeText
	case "json":
		return change.TypeJSON
	}
	return change.TypeOther
}

// myJSONCheck matches the CHECK that MariaDB attaches to a JSON column (a
// LONGTEXT): json_valid(`col`), possibly followed by more conditions.
var myJSONCheck = regexp.MustCompile("^json_valid\\(`((?:[^`]|``)+)`\\)")

// splitTable returns the schema (the DSN's database when unqualified) and
// the name of table.
func (s *myStore) splitTable(table string) (string, string) {
	if schema, name, ok := strings.Cut(table, "."); ok {
		return schema, name
	}
	return s.dbName, table
}

// Describe introspects table (optionally "db.table") and checks that key is
// its single-column primary key. MariaDB's JSON columns are found by their
// json_valid check constraint.
func (s *myStore) Describe(ctx context.Context, table, key string) (*Table, error) {
	schema, name := s.splitTable(table)
	rows, err := s.db.QueryContext(ctx, `SELECT COLUMN_NAME, DATA_TYPE, IS_NULLABLE
FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION`, schema, name)
	if err != nil {
		return nil, wrapErr("describe "+table, err, myPermanent)
	}
	var cols []change.Column
	hasText := false
	for rows.Next() {
		var col, typ, nullable string
		if err := rows.Scan(&col, &typ, &nullable); err != nil {
			rows.Close()
			return nil, wrapErr("describe "+table, err, myPermanent)
		}
		cols = append(cols, change.Column{Name: col, Type: myType(typ), Nullable: nullable == "YES"})
		hasText = hasText || typ == "longtext"
	}
	if err := rows.Err(); err != nil {
		return nil, wrapErr("describe "+table, err, myPermanent)
	}
	if hasText {
		jsonCols, err := s.jsonColumns(ctx, schema, name)
		if err != nil {
			return nil, wrapErr("describe "+table, err, myPermanent)
		}
		for i, c := range cols {
			if jsonCols[c.Name] {
				cols[i].Type = change.TypeJSON
			}
		}
	}
	pk, err := s.strings(ctx, `SELECT COLUMN_NAME FROM information_schema.STATISTICS
WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND INDEX_NAME = 'PRIMARY' ORDER BY SEQ_IN_INDEX`, schema, name)
	if err != nil {
		return nil, wrapErr("describe "+table, err, myPermanent)
	}
	t, err := newTable(table, key, cols, pk)
	if err != nil {
		return nil, err
	}
	info, err := s.lookupTableInfo(ctx, table, key)
	if err != nil {
		return nil, wrapErr("describe "+table, err, myPermanent)
	}
	// Under a case- or accent-insensitive collation "abc" and "ABC" are one
	// row but two documents to the cache, with two buffered writes applied
	// in no common order: refuse rather than serve stale or reordered data.
	// PAD SPACE collations (utf8mb4_bin among them) make "a" and "a " one
	// row too: only NO PAD binary collations compare ids as the cache does.
	if c := info.keyCollation; t.Schema.KeyType() == change.TypeText && !exactCollation(c) {
		return nil, &Error{Permanent: true, Err: fmt.Errorf("store: the key column %s of %s uses the collation %s, under which ids that differ in case or trailing spaces name one row; give it a NO PAD binary collation (ALTER TABLE %s MODIFY %s … COLLATE utf8mb4_nopad_bin)", key, table, c, table, key)}
	}
	s.tables.Store(table, info)
	return t, nil
}

// tableInfo returns what the store knows of t, looking it up for a table
// this store did not describe.
func (s *myStore) tableInfo(ctx context.Context, t *Table) (myTableInfo, error) {
	if v, ok := s.tables.Load(t.Name); ok {
		return v.(myTableInfo), nil
	}
	info, err := s.lookupTableInfo(ctx, t.Name, t.Schema.Key)
	if err != nil {
		return myTableInfo{}, err
	}
	s.tables.Store(t.Name, info)
	return info, nil
}

func (s *myStore) lookupTableInfo(ctx context.Context, table, key string) (myTableInfo, error) {
	schema, name := s.splitTable(table)
	var collation string
	var unique int
	err := s.db.QueryRowContext(ctx, `SELECT
	(SELECT COALESCE(MAX(COLLATION_NAME), '') FROM information_schema.COLUMNS
		WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND COLUMN_NAME = ?),
	(SELECT COUNT(*) FROM information_schema.STATISTICS
		WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND NON_UNIQUE = 0 AND INDEX_NAME <> 'PRIMARY')`,
		schema, name, key, schema, name).Scan(&collation, &unique)
	if err != nil {
		return myTableInfo{}, err
	}
	return myTableInfo{bytewiseKey: bytewiseCollation(collation), keyCollation: collation, otherUnique: unique > 0}, nil
}

// jsonColumns returns the columns of a MariaDB table that a json_valid
// check constrains. MySQL, whose JSON is a type of its own, has no
// TABLE_NAME in CHECK_CONSTRAINTS (or no such view before 8.0.16): no
// column is reported.
func (s *myStore) jsonColumns(ctx context.Context, schema, table string) (map[string]bool, error) {
	clauses, err := s.strings(ctx, `SELECT CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS
WHERE CONSTRAINT_SCHEMA = ? AND TABLE_NAME = ?`, schema, table)
	var me *mysql.MySQLError
	if errors.As(err, &me) && (me.Number == 1054 || me.Number == 1109) { // unknown column / table
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, c := range clauses {
		if m := myJSONCheck.FindStringSubmatch(c); m != nil {
			out[strings.ReplaceAll(m[1], "``", "`")] = true
		}
	}
	return out, nil
}

// exactCollation reports whether a key column of this collation (""
// for binary types) compares ids exactly as Go compares strings: binary,
// and NO PAD (MariaDB's *_nopad_bin, MySQL 8's *_0900_bin).
func exactCollation(c string) bool {
	return c == "" || c == "binary" || strings.HasSuffix(c, "_nopad_bin") || strings.HasSuffix(c, "_0900_bin")
}

// bytewiseCollation reports whether a column of this collation compares
// as Go compares strings: a binary collation of UTF-8.
func bytewiseCollation(collation string) bool {
	return strings.HasPrefix(collation, "utf8") && strings.HasSuffix(collation, "_bin")
}

func (s *myStore) strings(ctx context.Context, query string, args ...any) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// myScanRow reads one row of t (selected with selectList), after the extra
// leading destinations, into text cells.
func myScanRow(scan func(...any) error, t *Table, extra ...any) ([]textCell, error) {
	vals := make([]sql.Null[[]byte], len(t.Schema.Columns))
	dest := append(extra, make([]any, len(vals))...)
	for i := range vals {
		dest[len(extra)+i] = &vals[i]
	}
	if err := scan(dest...); err != nil {
		return nil, err
	}
	cells := make([]textCell, len(vals))
	for i, v := range vals {
		cells[i] = textCell{Bytes: v.V, Valid: v.Valid}
	}
	return cells, nil
}

// Read returns the row of id and what is applied of (collection, id) in
// partition part (its record or its floor) from
// one statement, hence one consistent read view.
func (s *myStore) Read(ctx context.Context, t *Table, collection, id string, part int) (change.Doc, int64, error) {
	q := readQuery(myDialect{}, t, collection, id, part)
	var seq sql.NullInt64
	cells, err := myScanRow(s.db.QueryRowContext(ctx, q.String(), q.args...).Scan, t, &seq)
	if err != nil {
		return nil, 0, wrapErr("read "+t.Name, err, myPermanent)
	}
	if !cells[keyIndex(t)].Valid {
		return nil, seq.Int64, nil
	}
	doc, err := buildDoc(t, cells)
	return doc, seq.Int64, err
}

// Scan returns up to limit rows with key >= from, in key order (bytewise
// for text keys).
func (s *myStore) Scan(ctx context.Context, t *Table, from string, limit int) ([]change.Doc, error) {
	if limit <= 0 {
		return nil, nil
	}
	info, err := s.tableInfo(ctx, t)
	if err != nil {
		return nil, wrapErr("scan "+t.Name, err, myPermanent)
	}
	q, err := scanQuery(myDialect{}, t, from, limit, info.bytewiseKey)
	if err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, q.String(), q.args...)
	if err != nil {
		return nil, wrapErr("scan "+t.Name, err, myPermanent)
	}
	defer rows.Close()
	var docs []change.Doc
	for rows.Next() {
		cells, err := myScanRow(rows.Scan, t)
		if err != nil {
			return nil, wrapErr("scan "+t.Name, err, myPermanent)
		}
		doc, err := buildDoc(t, cells)
		if err != nil {
			return nil, err
		}
		docs = append(docs, doc)
	}
	if err := rows.Err(); err != nil {
		return nil, wrapErr("scan "+t.Name, err, myPermanent)
	}
	return docs, nil
}

// AppliedMax returns, per partition, the highest seq recorded for the
// collections.
func (s *myStore) AppliedMax(ctx context.Context, collections []string) (map[int]int64, error) {
	out := map[int]int64{}
	if len(collections) == 0 {
		return out, nil
	}
	q := appliedMaxQuery(myDialect{}, collections)
	rows, err := s.db.QueryContext(ctx, q.String(), q.args...)
	if err != nil {
		return nil, wrapErr("applied max", err, myPermanent)
	}
	defer rows.Close()
	for rows.Next() {
		var part int
		var seq int64
		if err := rows.Scan(&part, &seq); err != nil {
			return nil, wrapErr("applied max", err, myPermanent)
		}
		out[part] = seq
	}
	return out, wrapErr("applied max", rows.Err(), myPermanent)
}

// myCompactChunk bounds the records one DELETE statement names.
const myCompactChunk = 200

// CompactApplied deletes the records whose seq is still the given one, one
// autocommitted DELETE per chunk. InnoDB visits the primary-key ranges of
// the OR in key order, the lock order of Apply.
func (s *myStore) CompactApplied(ctx context.Context, records []AppliedRecord) (int, error) {
	deleted := 0
	sorted := sortedRecords(records)
	for len(sorted) > 0 {
		chunk := sorted[:min(myCompactChunk, len(sorted))]
		sorted = sorted[len(chunk):]
		q := newQuery(myDialect{}).add("DELETE FROM ", AppliedTable, " WHERE ")
		for i, r := range chunk {
			if i > 0 {
				q.add(" OR ")
			}
			q.add("(collection = ", q.arg(r.Collection), " AND id = ", q.arg(r.ID), " AND seq = ", q.arg(r.Seq), ")")
		}
		res, err := s.db.ExecContext(ctx, q.String(), q.args...)
		if err != nil {
			return deleted, wrapErr("compact applied records", err, myPermanent)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return deleted, wrapErr("compact applied records", err, myPermanent)
		}
		deleted += int(n)
	}
	return deleted, nil
}

// ListApplied pages through the records after (afterCollection, afterID).
func (s *myStore) ListApplied(ctx context.Context, afterCollection, afterID string, limit int) ([]AppliedRecord, error) {
	if limit <= 0 {
		return nil, nil
	}
	q := listAppliedQuery(myDialect{}, afterCollection, afterID, limit)
	rows, err := s.db.QueryContext(ctx, q.String(), q.args...)
	if err != nil {
		return nil, wrapErr("list applied records", err, myPermanent)
	}
	defer rows.Close()
	var out []AppliedRecord
	for rows.Next() {
		var r AppliedRecord
		if err := rows.Scan(&r.Collection, &r.ID, &r.Partition, &r.Seq); err != nil {
			return nil, wrapErr("list applied records", err, myPermanent)
		}
		out = append(out, r)
	}
	return out, wrapErr("list applied records", rows.Err(), myPermanent)
}

// Ping checks that the database answers.
func (s *myStore) Ping(ctx context.Context) error {
	return wrapErr("mysql: ping", s.db.PingContext(ctx), myPermanent)
}

// Close releases the connection pool.
func (s *myStore) Close() error { return errors.Join(s.db.Close(), s.applyDB.Close()) }

// myPermanentErrors are the server errors the data causes, which retrying
// cannot cure (MySQL and MariaDB share these numbers).
var myPermanentErrors = map[uint16]bool{
	1048: true, // ER_BAD_NULL_ERROR: column cannot be null
	1054: true, // ER_BAD_FIELD_ERROR: unknown column
	1062: true, // ER_DUP_ENTRY: duplicate entry for a unique key
	1146: true, // ER_NO_SUCH_TABLE
	1216: true, // ER_NO_REFERENCED_ROW: foreign key (old servers)
	1217: true, // ER_ROW_IS_REFERENCED: foreign key (old servers)
	1263: true, // ER_WARN_NULL_TO_NOTNULL: NULL into a NOT NULL column of a multi-row insert
	1264: true, // ER_WARN_DATA_OUT_OF_RANGE
	1265: true, // WARN_DATA_TRUNCATED
	1292: true, // ER_TRUNCATED_WRONG_VALUE: incorrect date/number value
	1364: true, // ER_NO_DEFAULT_FOR_FIELD: a NOT NULL column without default left out
	1365: true, // ER_DIVISION_BY_ZERO
	1366: true, // ER_TRUNCATED_WRONG_VALUE_FOR_FIELD: incorrect integer/string value
	1406: true, // ER_DATA_TOO_LONG
	1411: true, // ER_WRONG_VALUE_FOR_TYPE: incorrect datetime value for a function
	1451: true, // ER_ROW_IS_REFERENCED_2: foreign key (delete of a parent)
	1452: true, // ER_NO_REFERENCED_ROW_2: foreign key (missing parent)
	1557: true, // ER_FOREIGN_DUPLICATE_KEY
	1586: true, // ER_DUP_ENTRY_WITH_KEY_NAME
	1690: true, // ER_DATA_OUT_OF_RANGE: BIGINT value is out of range (an $inc overflow)
	1859: true, // ER_DUP_UNKNOWN_IN_INDEX
	3140: true, // ER_INVALID_JSON_TEXT (MySQL)
	3819: true, // ER_CHECK_CONSTRAINT_VIOLATED (MySQL)
	4025: true, // ER_CONSTRAINT_FAILED (MariaDB: CHECK, including a JSON column's json_valid)
}

// myPermanent reports whether err is the server rejecting the data itself.
func myPermanent(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && myPermanentErrors[me.Number]
}

// myRetryable reports whether InnoDB rolled the transaction back to break
// a deadlock, so that it can simply be rerun.
func myRetryable(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1213
}
