package store

import (
	"context"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writeback/writeback/internal/testenv"
)

// TestOpenCreatesAppliedTableOnce opens many stores at once on a fresh
// database: they all race to create the applied table, and all must
// succeed.
func TestOpenCreatesAppliedTableOnce(t *testing.T) {
	eachStore(t, func(t *testing.T, h *harness) {
		db := testenv.UniqueName(t, "wbtest")
		h.exec(t, "CREATE DATABASE "+db)
		var dsn string
		switch h.driver {
		case "postgres":
			t.Cleanup(func() { h.exec(t, "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)") })
			u, err := url.Parse(h.dsn)
			require.NoError(t, err, "this test needs a URL DSN")
			u.Path = "/" + db
			dsn = u.String()
		case "mysql":
			t.Cleanup(func() { h.exec(t, "DROP DATABASE IF EXISTS "+db) })
			cfg, err := mysql.ParseDSN(h.dsn)
			require.NoError(t, err)
			cfg.DBName = db
			dsn = cfg.FormatDSN()
		}

		const n = 8
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		stores := make([]Store, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				stores[i], errs[i] = Open(ctx, h.driver, dsn)
			}()
		}
		wg.Wait()
		for i := range n {
			if assert.NoError(t, errs[i]) {
				defer stores[i].Close()
			}
		}
		maxes, err := stores[0].AppliedMax(ctx, []string{"any"})
		require.NoError(t, err)
		assert.Empty(t, maxes)
	})
}

func TestOpenErrors(t *testing.T) {
	ctx := t.Context()
	_, err := Open(ctx, "sqlite", "x")
	assert.EqualError(t, err, `store: unknown driver "sqlite" (use postgres, mysql or mongodb)`)
	_, err = Open(ctx, "mysql", "root@tcp(127.0.0.1:3306)/")
	assert.ErrorContains(t, err, "names no database")
	_, err = Open(ctx, "postgres", "postgres://%zz")
	assert.ErrorContains(t, err, "store: postgres DSN")
}
