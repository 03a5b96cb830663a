package tpcc

import (
	"fmt"
	"regexp"
	"strconv"
	"sync"
)

// The transactions (txn.go) and the mappings (mappings.go) are written
// once, in PostgreSQL's dialect; on MySQL (MariaDB) they are translated
// mechanically here rather than written twice:
//
//   - placeholders $n become "?", and since a "?" is bound by position,
//     the arguments are reordered and repeated to match ($1 used four
//     times is four "?" and four copies of argument 1);
//   - CAST(x AS timestamp) becomes CAST(x AS datetime(6)) and CAST(x AS
//     varchar) CAST(x AS char): MariaDB's CAST knows neither type.
//
// Everything else the statements use (CASE, substring, concat, ORDER BY …
// LIMIT, JOIN … ON, FOR UPDATE) is the same in both dialects. The
// statements carry no string literals (the sidecar refuses them), so a "$"
// is always a placeholder.

var (
	pgPlaceholder = regexp.MustCompile(`\$([0-9]+)`)
	pgCast        = regexp.MustCompile(`(?i)\bAS (timestamp|varchar)\)`)
)

// myStmt is a statement translated to MySQL's dialect: its text and, for
// each "?", the index of the PostgreSQL argument it binds.
type myStmt struct {
	sql  string
	args []int
}

// myStmts caches translations by PostgreSQL text: the mix repeats a few
// dozen statements.
var myStmts sync.Map // string → myStmt or error

// myTranslate translates a statement or query of PostgreSQL's dialect.
func myTranslate(pg string) (myStmt, error) {
	if v, ok := myStmts.Load(pg); ok {
		if err, bad := v.(error); bad {
			return myStmt{}, err
		}
		return v.(myStmt), nil
	}
	var st myStmt
	var bad error
	q := pgPlaceholder.ReplaceAllStringFunc(pg, func(m string) string {
		n, err := strconv.Atoi(m[1:])
		if err != nil || n < 1 {
			bad = fmt.Errorf("tpcc: %q: placeholder %s", pg, m)
		}
		st.args = append(st.args, n-1)
		return "?"
	})
	st.sql = pgCast.ReplaceAllStringFunc(q, func(m string) string {
		if m[3] == 't' || m[3] == 'T' {
			return "AS datetime(6))"
		}
		return "AS char)"
	})
	if bad != nil {
		myStmts.Store(pg, bad)
		return myStmt{}, bad
	}
	myStmts.Store(pg, st)
	return st, nil
}

// bind returns the arguments of the translated statement, given the
// PostgreSQL statement's.
func (s myStmt) bind(args []any) ([]any, error) {
	out := make([]any, len(s.args))
	for i, a := range s.args {
		if a >= len(args) {
			return nil, fmt.Errorf("tpcc: %q binds argument %d of %d", s.sql, a+1, len(args))
		}
		out[i] = args[a]
	}
	return out, nil
}

// MyStatement translates a statement of PostgreSQL's dialect, with its
// arguments, into MySQL's (see above).
func MyStatement(pg string, args []any) (string, []any, error) {
	st, err := myTranslate(pg)
	if err != nil {
		return "", nil, err
	}
	out, err := st.bind(args)
	return st.sql, out, err
}

// MyMappingQuery translates a mapping's query. The sidecar binds a key's
// parameters to the query's "?" in order, so the query must use $1, $2, …
// once each and in that order; any other use is an error rather than a
// silent reordering.
func MyMappingQuery(pg string) (string, error) {
	st, err := myTranslate(pg)
	if err != nil {
		return "", err
	}
	for i, a := range st.args {
		if a != i {
			return "", fmt.Errorf("tpcc: the mapping query %q must use $1, $2, … once each and in order to run on MySQL", pg)
		}
	}
	return st.sql, nil
}
