package ycsb

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// Load (re)creates the table and fills it with s.Records rows of random
// values drawn from seed, with the fastest bulk path of the driver:
// COPY (pgx CopyFrom) for PostgreSQL, multi-row INSERTs in transactions
// for MySQL. progress, if not nil, is called about once a second with the
// number of rows sent so far, and once at the end with done set.
func (d *DB) Load(ctx context.Context, s Spec, seed uint64, progress func(rows int64, done bool)) error {
	if err := s.check(); err != nil {
		return err
	}
	if err := d.Drop(ctx, s.Table); err != nil {
		return fmt.Errorf("ycsb: dropping %s: %w", s.Table, err)
	}
	if d.mg == nil {
		if err := d.Exec(ctx, d.createSQL(s)); err != nil {
			return fmt.Errorf("ycsb: creating %s: %w", s.Table, err)
		}
	}
	var done atomic.Int64
	stop := make(chan struct{})
	ticked := make(chan struct{})
	go func() {
		defer close(ticked)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if progress != nil {
					progress(done.Load(), false)
				}
			}
		}
	}()
	src := &rowSource{s: s, r: rand.New(rand.NewPCG(seed, 0x5ca1ab1e)), done: &done}
	var err error
	switch d.driver {
	case Postgres:
		err = d.copyPostgres(ctx, src)
	case MongoDB:
		err = d.insertMongo(ctx, src)
	default:
		err = d.insertMySQL(ctx, src)
	}
	close(stop)
	<-ticked
	if err != nil {
		return fmt.Errorf("ycsb: loading %s: %w", s.Table, err)
	}
	if progress != nil {
		progress(done.Load(), true)
	}
	return nil
}

// rowSource generates the rows of a table in key order; it is a
// pgx.CopyFromSource.
type rowSource struct {
	s    Spec
	r    *rand.Rand
	next int64
	vals []any
	done *atomic.Int64
}

func (rs *rowSource) Next() bool {
	if rs.next >= rs.s.Records {
		return false
	}
	if rs.vals == nil {
		rs.vals = make([]any, 1+rs.s.Fields)
	}
	rs.vals[0] = Key(rs.next)
	for i := range rs.s.Fields {
		rs.vals[1+i] = RandomValue(rs.r, rs.s.FieldSize)
	}
	rs.next++
	rs.done.Store(rs.next)
	return true
}

func (rs *rowSource) Values() ([]any, error) { return rs.vals, nil }
func (rs *rowSource) Err() error             { return nil }

func columns(s Spec) []string {
	cols := []string{KeyColumn}
	for i := range s.Fields {
		cols = append(cols, FieldName(i))
	}
	return cols
}

func (d *DB) copyPostgres(ctx context.Context, src *rowSource) error {
	if _, err := d.pg.CopyFrom(ctx, pgx.Identifier{src.s.Table}, columns(src.s), src); err != nil {
		return err
	}
	// Fresh statistics, so the planner knows the table's size at once.
	_, err := d.pg.Exec(ctx, "ANALYZE "+src.s.Table)
	return err
}

// insertMySQL inserts batches of rows per statement, many statements per
// transaction. A batch stays far below max_allowed_packet and the
// 65,535-placeholder limit.
func (d *DB) insertMySQL(ctx context.Context, src *rowSource) error {
	s := src.s
	perRow := 1 + s.Fields
	batch := max(1, min(1000, (512<<10)/(s.Fields*s.FieldSize+64), 60000/perRow))
	const batchesPerTx = 10
	stmtFor := func(rows int) string {
		row := "(" + strings.TrimSuffix(strings.Repeat("?,", perRow), ",") + ")"
		return fmt.Sprintf("INSERT INTO %s (%s) VALUES %s", s.Table, strings.Join(columns(s), ","),
			strings.TrimSuffix(strings.Repeat(row+",", rows), ","))
	}
	conn, err := d.my.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	full, err := conn.PrepareContext(ctx, stmtFor(batch))
	if err != nil {
		return err
	}
	defer full.Close()
	args := make([]any, 0, batch*perRow)
	for {
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		more := true
		for b := 0; b < batchesPerTx && more; b++ {
			args = args[:0]
			for len(args) < batch*perRow {
				if more = src.Next(); !more {
					break
				}
				args = append(args, src.vals...)
			}
			switch n := len(args) / perRow; {
			case n == batch:
				_, err = tx.StmtContext(ctx, full).ExecContext(ctx, args...)
			case n > 0:
				_, err = tx.ExecContext(ctx, stmtFor(n), args...)
			}
			if err != nil {
				_ = tx.Rollback()
				return err
			}
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		if !more {
			return nil
		}
	}
}
