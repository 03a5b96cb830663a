package testenv

import (
	"fmt"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestServicesAnswer(t *testing.T) {
	assert.NotEmpty(t, RedisAddr(t))
	assert.NotEmpty(t, MongoURI(t))
	stores := Stores(t)
	assert.Equal(t, Store{Driver: "postgres", DSN: PostgresDSN(t)}, stores["postgres"])
	assert.Equal(t, Store{Driver: "mysql", DSN: MySQLDSN(t)}, stores["mysql"])
	assert.Len(t, stores, 2)
}

// fatalRecorder records the message a helper fails the test with.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Fatalf(format string, args ...any) { f.msg = fmt.Sprintf(format, args...) }
func (f *fatalRecorder) Helper()                           {}

func TestUnreachableServiceFails(t *testing.T) {
	// Port 1 on loopback refuses connections at once.
	t.Setenv("WRITEBACK_TEST_REDIS", "127.0.0.1:1")
	t.Setenv("WRITEBACK_TEST_PG_DSN", "postgres://postgres@127.0.0.1:1/writeback?sslmode=disable")
	t.Setenv("WRITEBACK_TEST_MYSQL_DSN", "root@tcp(127.0.0.1:1)/writeback")
	t.Setenv("WRITEBACK_TEST_MONGO_URI", "mongodb://127.0.0.1:1")
	cases := []struct {
		name, service, addr string
		call                func(testing.TB) string
	}{
		{"redis", "Redis", "127.0.0.1:1", RedisAddr},
		{"postgres", "PostgreSQL", "127.0.0.1:1/writeback", PostgresDSN},
		{"mysql", "MariaDB/MySQL", "127.0.0.1:1/writeback", MySQLDSN},
		{"mongo", "the MongoDB-wire server", "mongodb://127.0.0.1:1", MongoURI},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := &fatalRecorder{TB: t}
			tc.call(rec)
			assert.Regexp(t, "^testenv: "+regexp.QuoteMeta(tc.service+" is unreachable at "+tc.addr+" (")+`.*\); start it with `+"`make services` "+regexp.QuoteMeta("(scripts/services.sh up).")+"$", rec.msg)
		})
	}
}

func TestUniqueName(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		n := UniqueName(t, "My-Table")
		assert.Regexp(t, `^my_table_[0-9a-f]{8}$`, n)
		assert.False(t, seen[n], "duplicate %s", n)
		seen[n] = true
	}
}
