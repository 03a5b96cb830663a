// Package ycsb is the YCSB workload shared by the demo and the benchmarks:
// the usertable schema and its bulk loader for PostgreSQL, MySQL/MariaDB
// and MongoDB, direct database clients, YCSB's scrambled zipfian, the
// read/scan/update mix, latency samples, and the model of acknowledged
// values that verification compares with the database. It touches only the
// tables it is told to load or drop, and knows nothing about the sidecar:
// anything that reads and updates records by key is a Client (a Scanner if
// it also scans, a RecordUpdater if it updates whole records).
package ycsb

import (
	"context"
	"fmt"
	"math/rand/v2"
)

// Spec is the shape of a YCSB table.
type Spec struct {
	Table     string // table name, e.g. usertable
	Records   int64  // rows, keyed Key(0) … Key(Records-1)
	Fields    int    // columns field0 … field<Fields-1>
	FieldSize int    // bytes of every field value
}

// Validate explains the first problem with s in one sentence.
func (s Spec) Validate() error {
	switch {
	case s.Table == "":
		return fmt.Errorf("ycsb: the table has no name")
	case s.Records < 1:
		return fmt.Errorf("ycsb: %d records; load at least one", s.Records)
	case s.Fields < 1 || s.Fields > 100:
		return fmt.Errorf("ycsb: %d fields; use 1 to 100", s.Fields)
	case s.FieldSize < 1 || s.FieldSize > 1<<20:
		return fmt.Errorf("ycsb: field size %d; use 1 byte to 1 MiB", s.FieldSize)
	}
	return nil
}

// KeyColumn is the table's primary key, as in YCSB's JDBC binding.
const KeyColumn = "ycsb_key"

// Key is the key of record i. YCSB hashes record numbers into keys; the
// scrambled zipfian chooser already scatters popularity, so plain
// zero-padded numbers (which sort like the record numbers) lose nothing.
func Key(i int64) string { return fmt.Sprintf("user%010d", i) }

// FieldName is the name of field i.
func FieldName(i int) string { return fmt.Sprintf("field%d", i) }

// Row is the field values of one record, by field number.
type Row []string

// Client reads and updates records of one table by key. Each client
// goroutine has its own Client.
type Client interface {
	// Read reads the record. With decode it returns the record's field
	// values; without, it may return nil once the record was received.
	Read(ctx context.Context, key string, decode bool) (Row, error)
	// Update sets one field of an existing record.
	Update(ctx context.Context, key string, field int, value string) error
	// Close releases the client's connections.
	Close() error
}

// printable are the bytes field values are made of: printable ASCII
// without the space, so that no database trims or pads a value, and with
// '"' and '\' so that JSON escaping is exercised.
const printable = "!\"#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyz{|}~"

// RandomValue returns n random printable bytes.
func RandomValue(r *rand.Rand, n int) string {
	b := make([]byte, n)
	for i := 0; i < n; {
		// Six 10-bit draws per 64-bit number: a bias of 1024 mod 94 is
		// irrelevant for benchmark data.
		x := r.Uint64()
		for j := 0; j < 6 && i < n; j++ {
			b[i] = printable[(x&1023)%uint64(len(printable))]
			x >>= 10
			i++
		}
	}
	return string(b)
}
