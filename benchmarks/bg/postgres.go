package bg

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PostgresTable is the table holding the graph in PostgreSQL.
const PostgresTable = "bg_members"

// appliedTable is the sidecar's record of applied changes
// (store.AppliedTable); Load deletes the table's rows from it.
const appliedTable = "writeback_applied_docs"

// Postgres is the graph in PostgreSQL: a row per member of bg_members, a
// text key id, a text column per profile field, and jsonb arrays friends
// and pending of member ids.
type Postgres struct {
	dsn   string
	table string
	pool  *pgxpool.Pool
}

// poolSize bounds each pool's connections: PostgreSQL's max_connections
// (100) is shared with the sidecar's pool and the other benchmarks.
const poolSize = 32

func connectPostgres(ctx context.Context, dsn string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("bg: PostgreSQL DSN %q: %v", dsn, err)
	}
	cfg.MaxConns = poolSize
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		if pool != nil {
			pool.Close()
		}
		return nil, fmt.Errorf("cannot connect to PostgreSQL at %s:%d/%s (%v); start the services with `make services`", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database, err)
	}
	return pool, nil
}

// OpenPostgres connects to the database of dsn, the graph in table
// (PostgresTable unless tests want one of their own).
func OpenPostgres(ctx context.Context, dsn, table string) (*Postgres, error) {
	pool, err := connectPostgres(ctx, dsn)
	if err != nil {
		return nil, err
	}
	return &Postgres{dsn: dsn, table: table, pool: pool}, nil
}

func (s *Postgres) Name() string       { return "postgres" }
func (s *Postgres) Collection() string { return s.table }
func (s *Postgres) Key() string        { return "id" }
func (s *Postgres) DSN() string        { return s.dsn }
func (s *Postgres) Database() string   { return "" }
func (s *Postgres) Close() error       { s.pool.Close(); return nil }

// Load recreates bg_members, copies the graph into it, and forgets the
// sidecar's applied records of the old rows.
func (s *Postgres) Load(ctx context.Context, g Graph, seed uint64) error {
	cols := make([]string, 0, len(ProfileFields)+3)
	cols = append(cols, "id")
	ddl := []string{`id text COLLATE "C" PRIMARY KEY`}
	for _, f := range ProfileFields {
		cols = append(cols, f)
		ddl = append(ddl, f+" text NOT NULL")
	}
	cols = append(cols, "friends", "pending")
	ddl = append(ddl, "friends jsonb NOT NULL", "pending jsonb NOT NULL")
	stmts := []string{
		"DROP TABLE IF EXISTS " + s.table,
		"CREATE TABLE " + s.table + " (" + strings.Join(ddl, ", ") + ")",
	}
	for _, q := range stmts {
		if _, err := s.pool.Exec(ctx, q); err != nil {
			return fmt.Errorf("bg: %s: %w", q, err)
		}
	}
	var exists bool
	if err := s.pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", appliedTable).Scan(&exists); err != nil {
		return err
	}
	if exists {
		if _, err := s.pool.Exec(ctx, "DELETE FROM "+appliedTable+" WHERE collection = $1", s.table); err != nil {
			return fmt.Errorf("bg: forgetting the applied records of %s: %w", s.table, err)
		}
	}
	m := int32(0)
	src := pgx.CopyFromFunc(func() ([]any, error) {
		if int(m) == g.Members {
			return nil, nil
		}
		row := make([]any, 0, len(cols))
		row = append(row, ID(m))
		for _, v := range Profile(m, seed) {
			row = append(row, v)
		}
		f, _ := json.Marshal(ids(g.Initial(m, Friends)))
		p, _ := json.Marshal(ids(g.Initial(m, Pending)))
		row = append(row, string(f), string(p))
		m++
		return row, nil
	})
	if _, err := s.pool.CopyFrom(ctx, pgx.Identifier{s.table}, cols, src); err != nil {
		return fmt.Errorf("bg: loading %s: %w", s.table, err)
	}
	_, err := s.pool.Exec(ctx, "ANALYZE "+s.table)
	return err
}

// Snapshot reads every member's lists.
func (s *Postgres) Snapshot(ctx context.Context) (map[int32]Stored, error) {
	rows, err := s.pool.Query(ctx, "SELECT id, friends, pending FROM "+s.table)
	if err != nil {
		return nil, fmt.Errorf("bg: reading %s: %w", s.table, err)
	}
	defer rows.Close()
	out := map[int32]Stored{}
	for rows.Next() {
		var id string
		var f, p []string
		if err := rows.Scan(&id, &f, &p); err != nil {
			return nil, err
		}
		m, st, err := parseStored(id, f, p)
		if err != nil {
			return nil, err
		}
		out[m] = st
	}
	return out, rows.Err()
}

// Open returns a Conn with a pool of its own; async sets
// synchronous_commit=off on its connections.
func (s *Postgres) Open(ctx context.Context, async bool) (Conn, error) {
	dsn, err := connDSN("postgres", s.dsn, async)
	if err != nil {
		return nil, err
	}
	pool, err := connectPostgres(ctx, dsn)
	if err != nil {
		return nil, err
	}
	cols := strings.Join(ProfileFields, ", ")
	return &pgConn{pool: pool, table: s.table,
		profile:  "SELECT " + cols + ", jsonb_array_length(friends), jsonb_array_length(pending) FROM " + s.table + " WHERE id = $1",
		profiles: "SELECT id, " + cols + " FROM " + s.table + " WHERE id = ANY($1)",
	}, nil
}

type pgConn struct {
	pool              *pgxpool.Pool
	table             string
	profile, profiles string // the queries of Profile and of List's profiles
}

func (c *pgConn) Profile(ctx context.Context, m int32) (int, int, error) {
	p := make([]string, len(ProfileFields))
	dest := make([]any, 0, len(p)+2)
	for i := range p {
		dest = append(dest, &p[i])
	}
	var f, pe int
	dest = append(dest, &f, &pe)
	if err := c.pool.QueryRow(ctx, c.profile, ID(m)).Scan(dest...); err != nil {
		return 0, 0, fmt.Errorf("bg: reading %s: %w", ID(m), err)
	}
	return f, pe, nil
}

func (c *pgConn) List(ctx context.Context, m int32, l List, n int) (int, []int32, error) {
	var list []string
	id := ID(m)
	if err := c.pool.QueryRow(ctx, "SELECT "+l.String()+" FROM "+c.table+" WHERE id = $1", id).Scan(&list); err != nil {
		return 0, nil, fmt.Errorf("bg: reading %s: %w", id, err)
	}
	shown, err := parseIDs(list[:min(n, len(list))])
	if err != nil || len(shown) == 0 {
		return len(list), shown, err
	}
	rows, err := c.pool.Query(ctx, c.profiles, list[:len(shown)])
	if err != nil {
		return 0, nil, fmt.Errorf("bg: reading the profiles of %s's %s: %w", id, l, err)
	}
	found := 0
	p := make([]string, len(ProfileFields)+1)
	dest := make([]any, len(p))
	for i := range p {
		dest[i] = &p[i]
	}
	_, err = pgx.ForEachRow(rows, dest, func() error { found++; return nil })
	if err != nil {
		return 0, nil, fmt.Errorf("bg: reading the profiles of %s's %s: %w", id, l, err)
	}
	if want := distinct(shown); found != want {
		return 0, nil, fmt.Errorf("bg: %d of the %d profiles %s lists among its %s exist", found, want, id, l)
	}
	return len(list), shown, nil
}

// pgUpdate is the UPDATE of u: || appends an id to a jsonb array, - removes
// it (the benchmark only adds members that are absent).
func pgUpdate(table string, u Update) (string, []any) {
	args := []any{ID(u.M)}
	sets := make([]string, 0, len(u.Ops))
	for _, op := range u.Ops {
		args = append(args, ID(op.X))
		l := op.List.String()
		if op.Add {
			sets = append(sets, fmt.Sprintf("%s = %s || jsonb_build_array($%d::text)", l, l, len(args)))
		} else {
			sets = append(sets, fmt.Sprintf("%s = %s - $%d::text", l, l, len(args)))
		}
	}
	return "UPDATE " + table + " SET " + strings.Join(sets, ", ") + " WHERE id = $1", args
}

type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

func pgExec(ctx context.Context, db execer, table string, u Update) error {
	q, args := pgUpdate(table, u)
	tag, err := db.Exec(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("bg: updating %s: %w", ID(u.M), err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("bg: updating %s: no such member", ID(u.M))
	}
	return nil
}

func (c *pgConn) Update(ctx context.Context, u Update) error { return pgExec(ctx, c.pool, c.table, u) }

// UpdateAll makes an action's updates one transaction, as an application
// of the database alone would; in member order, so that two actions never
// wait for each other's row locks in a cycle.
func (c *pgConn) UpdateAll(ctx context.Context, us []Update) error {
	if len(us) == 1 {
		return c.Update(ctx, us[0])
	}
	us = slices.Clone(us)
	slices.SortFunc(us, func(a, b Update) int { return int(a.M) - int(b.M) })
	return pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		for _, u := range us {
			if err := pgExec(ctx, tx, c.table, u); err != nil {
				return err
			}
		}
		return nil
	})
}

func (c *pgConn) Close() error { c.pool.Close(); return nil }

var (
	_ Store   = (*Postgres)(nil)
	_ Conn    = (*pgConn)(nil)
	_ Batcher = (*pgConn)(nil)
)
