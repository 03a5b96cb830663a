// Package store owns the adapters to the databases behind the cache
// (PostgreSQL via pgx, MySQL/MariaDB via go-sql-driver/mysql, MongoDB via
// mongo-go-driver) behind one interface. It knows tables, rows, documents
// and what makes applying exactly-once (the writeback_applied_docs records
// of the SQL stores, the stamps of MongoDB documents); it knows nothing
// about Redis.
package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/writeback/writeback/internal/change"
)

// Table is a collection's table: its name and document schema.
type Table struct {
	Name   string
	Schema *change.Schema
}

// Write is the buffered changes of one document that an applier hands to
// the store, in sequence order. Some of them may already have been applied by
// an earlier attempt that died before the buffer was trimmed; Apply skips
// those.
type Write struct {
	Collection string // the collection's name (part of the applied record's key)
	Table      *Table
	ID         string // canonical id
	Partition  int    // the document's partition, kept in the applied record
	Changes    []change.Change
}

// Result is what Apply did with one Write.
type Result struct {
	Applied int   // changes applied now
	Skipped int   // changes skipped because an earlier attempt applied them
	LastSeq int64 // sequence of the last change of the Write (applied now or before)
	// Missing is true when a patch found no row to update (the row was
	// deleted behind the cache's back); the changes count as applied.
	Missing bool
}

// AnyPartition is AppliedMax's key for the highest seq of records that do
// not say which partition they came from.
const AnyPartition = -1

// Store is one database.
//
// Apply is the heart of exactly-once: in ONE transaction it (1) locks the
// applied record of every document of the batch, in (collection, id) order
// so two concurrent batches never deadlock, creating missing records with
// seq 0; (2) for each Write keeps only the changes whose Seq is greater than
// the record's seq, compacts them with change.Compact and executes the
// resulting Effect on the row; (3) sets each record's seq to the last Seq of
// its Write; (4) commits. A replay of the same Writes after a crash therefore
// applies nothing and reports them as Skipped.
//
// A batch planned as a cut (PlanCut) moves one floor per collection and
// partition instead of its documents' records, under the same locks: the
// floor rows, locked in (collection, partition) order before any row of
// the batch; every other Apply locks its records and then the floors of
// its collections and partitions, checks that no floor reached a change of
// its batch and raises their recmax, the highest record seq of the pair,
// which a cut checks. A change of document d is in the store iff its seq
// is at or below the higher of d's record and its collection and
// partition's floor.
//
// Read returns a row together with what is applied of it (the higher of
// its record and its floor) read in the same snapshot (one statement), so
// that a reader can tell which buffered changes the row already contains.
type Store interface {
	// Describe introspects table and checks that key is its primary key.
	Describe(ctx context.Context, table, key string) (*Table, error)
	// Read returns the document (nil when there is no row) and the applied
	// seq of (collection, id) in partition part (0 when nothing is
	// applied), in one snapshot.
	Read(ctx context.Context, t *Table, collection, id string, part int) (change.Doc, int64, error)
	// Scan returns up to limit rows with key >= from (all when from is ""),
	// in key order (numeric for integer keys, bytewise for text keys).
	Scan(ctx context.Context, t *Table, from string, limit int) ([]change.Doc, error)
	// Apply applies the writes in one transaction, exactly once (see above).
	// results[i] belongs to writes[i]. On error nothing was committed.
	Apply(ctx context.Context, writes []Write) ([]Result, error)
	// AppliedMax returns, per partition, the highest applied seq recorded
	// for the given collections (under AnyPartition where the store does
	// not record partitions). Records of other collections belong to other
	// deployments sharing the database, whose sequences live in another
	// Redis.
	AppliedMax(ctx context.Context, collections []string) (map[int]int64, error)
	// CompactApplied deletes the applied records of (collection, id) pairs
	// whose seq is still exactly the given one (a record that moved on since
	// is kept). It returns how many it deleted.
	CompactApplied(ctx context.Context, records []AppliedRecord) (int, error)
	// ListApplied pages through applied records in (collection, id) order,
	// starting after the given position.
	ListApplied(ctx context.Context, afterCollection, afterID string, limit int) ([]AppliedRecord, error)
	// Ping checks that the database answers.
	Ping(ctx context.Context) error
	// Close releases the connection pool.
	Close() error
}

// Converter is a store whose Apply is exactly-once only for changes that
// are harmless to replay: no transaction covers a document together with
// the record of what was applied to it (MongoDB, FerretDB). Before handing
// it a document's changes, an applier runs the paper's Algorithm 2: it
// reads the stored document, compacts the changes and converts the
// non-idempotent ones ($inc, $push, $pull) into their idempotent
// equivalents computed from it (change.Idempotent), persists the
// converted changes in the buffered write in place of the originals, and
// only then applies them; a crash anywhere leaves either the originals
// (nothing applied) or converted changes, which a replay applies again to
// the same result.
type Converter interface {
	Store
	// ReadMany returns the stored documents of ids, each with the seq of
	// the last change applied to it (its stamp); a missing document is
	// absent from the map.
	ReadMany(ctx context.Context, t *Table, ids []string) (map[string]Stored, error)
}

// Stored is a stored document and the seq of the last change applied to it.
type Stored struct {
	Doc change.Doc
	Seq int64
}

// AppliedRecord is one row of writeback_applied_docs.
type AppliedRecord struct {
	Collection string
	ID         string
	Partition  int
	Seq        int64
}

// AppliedTable is the table holding the applied records of Design 1.
const AppliedTable = "writeback_applied_docs"

// FloorsTable is the table holding the floors of Design 1's cuts, one row
// per collection and partition (see PlanCut).
const FloorsTable = "writeback_applied_floors"

// Error wraps a database error with whether retrying can help.
type Error struct {
	Permanent bool // the database rejected the data itself (constraint, type, range)
	Err       error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// IsPermanent reports whether err is a store error that retrying will not
// cure, so the change belongs in the dead-letter list.
func IsPermanent(err error) bool {
	var se *Error
	return errors.As(err, &se) && se.Permanent
}

// Options tune a store's connection pool.
type Options struct {
	MaxConns int    // connections at most (default 32)
	Database string // mongodb: the database holding the collections
}

// Open connects to a database with default options. driver is "postgres"
// or "mysql" (dsn a DSN), or "mongodb" (dsn a URI; use OpenWith to name
// the database).
func Open(ctx context.Context, driver, dsn string) (Store, error) {
	return OpenWith(ctx, driver, dsn, Options{})
}

// OpenWith connects to a database.
func OpenWith(ctx context.Context, driver, dsn string, o Options) (Store, error) {
	if o.MaxConns <= 0 {
		o.MaxConns = 32
	}
	switch driver {
	case "postgres":
		return openPostgres(ctx, dsn, o)
	case "mysql":
		return openMySQL(ctx, dsn, o)
	case "mongodb":
		return openMongo(ctx, dsn, o)
	}
	return nil, fmt.Errorf("store: unknown driver %q (use postgres, mysql or mongodb)", driver)
}
