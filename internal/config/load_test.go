package config

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// env returns a lookup function over m, like os.LookupEnv.
func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// flags returns a flag set bound by BindFlags and parsed from args.
func flags(t *testing.T, args ...string) *pflag.FlagSet {
	t.Helper()
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	BindFlags(fs)
	require.NoError(t, fs.Parse(args))
	return fs
}

func TestLoadDefaults(t *testing.T) {
	for _, tc := range []struct{ name, path string }{
		{"no file", ""},
		{"empty file", "testdata/empty.yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Load(tc.path, nil, nil)
			require.NoError(t, err)

			host, _ := os.Hostname()
			assert.Regexp(t, "^"+regexp.QuoteMeta(host)+`-\d+-[0-9a-f]{8}$`, got.Writeback.InstanceID)
			want := Default()
			want.Writeback.InstanceID = got.Writeback.InstanceID
			assert.Equal(t, want, got)

			assert.Equal(t, "127.0.0.1:8480", got.Listen)
			assert.Equal(t, "127.0.0.1:6380", got.ListenResp)
			assert.Equal(t, "standalone", got.Redis.Mode)
			assert.Equal(t, "wb", got.Redis.KeyPrefix)
			assert.Equal(t, 2*time.Second, got.Redis.DialTimeout.Duration)
			assert.Equal(t, 64, got.Redis.PoolSize)
			assert.True(t, got.Redis.ShareRoundTrips)
			assert.Equal(t, Writeback{
				Partitions: 64, Workers: 4, BatchSize: 128,
				LeaseLifetime: Duration{500 * time.Millisecond}, LeaseWait: Duration{time.Second}, SessionTimeout: Duration{30 * time.Second}, SessionCompaction: Duration{2 * time.Minute}, OwnerLease: Duration{3 * time.Second},
				PollInterval: Duration{100 * time.Millisecond}, MaxRetries: 5,
				RetryBackoff: Duration{100 * time.Millisecond}, PinnedMemoryLimit: 1 << 30, MaxDeadLetters: 1000, CombineWrites: true, ApplyCuts: true, NearCache: NearCacheOn, ImmutableCache: 64 << 20,
				InstanceID: got.Writeback.InstanceID,
			}, got.Writeback)
			assert.Equal(t, ByteSize(1<<20), got.Limits.MaxBodyBytes)
			assert.Equal(t, Log{Level: "info", Format: "text"}, got.Log)
		})
	}
}

func TestLoadFull(t *testing.T) {
	got, err := Load("testdata/full.yaml", nil, nil)
	require.NoError(t, err)
	require.NoError(t, got.Validate())
	want := &Config{
		Listen:      "0.0.0.0:9000",
		ListenResp:  "127.0.0.1:6390",
		GCHeapFloor: 32 * MiB,
		Auth:        Auth{Token: "s3cret", AdminToken: "adm1n", AllowUnauthenticated: true},
		Redis: Redis{
			Addrs: []string{"10.0.0.1:26379", "10.0.0.2:26379"}, Mode: "sentinel", MasterName: "mymaster",
			Username: "app", Password: "pw", DB: 2, Replicas: 1, KeyPrefix: "wb:test",
			DialTimeout: Duration{5 * time.Second}, PoolSize: 16, ShareRoundTrips: false,
			SentinelUsername: "sent", SentinelPassword: "spw",
			TLS: RedisTLS{Enabled: true, CAFile: "/etc/redis/ca.pem", CertFile: "/etc/redis/c.pem", KeyFile: "/etc/redis/k.pem", ServerName: "redis.internal"},
		},
		Stores: map[string]Store{
			"pg":    {Driver: "postgres", DSN: "postgres://postgres@127.0.0.1:5432/writeback?sslmode=disable", MaxConns: 8},
			"maria": {Driver: "mysql", DSN: "root@tcp(127.0.0.1:3306)/writeback", MaxConns: 32},
			"mongo": {Driver: "mongodb", URI: "mongodb://127.0.0.1:27017", Database: "test", MaxConns: 32},
		},
		Collections: map[string]Collection{
			"usertable": {Store: "pg", Table: "users", Key: "ycsb_key", Policy: "write-through", CacheTTL: Duration{10 * time.Minute}, NearCache: DefaultNearCache(), ScanCache: true},
			"orders":    {Store: "maria", Table: "orders", Key: "id", Policy: "write-back", CacheTTL: Duration{time.Hour}, NearCache: DefaultNearCache(), ScanCache: true},
		},
		Queues: map[string]Queue{"bank": {Store: "pg", Tables: []string{"account"}, Policy: "write-through"}},
		Mappings: []map[string]any{{
			"plugin": "sql", "store": "pg", "key": "account:{id}",
			"query": "SELECT id, balance FROM account WHERE id = $1", "many": false,
		}},
		Writeback: Writeback{
			Partitions: 128, Workers: 8, BatchSize: 256,
			LeaseLifetime: Duration{250 * time.Millisecond}, LeaseWait: Duration{time.Second}, SessionTimeout: Duration{10 * time.Second}, SessionCompaction: Duration{5 * time.Minute}, OwnerLease: Duration{5 * time.Second},
			PollInterval: Duration{50 * time.Millisecond}, ApplyDelay: Duration{250 * time.Millisecond}, MaxRetries: 7, RetryBackoff: Duration{200 * time.Millisecond},
			PinnedMemoryLimit: 512 << 20, MaxDeadLetters: 1000, CombineWrites: true, ApplyCuts: true, NearCache: NearCacheOn, InstanceID: "sidecar-a", ImmutableCache: 8 << 20,
		},
		Limits: Limits{MaxBodyBytes: 64 << 10},
		HTTP: HTTP{ReadHeaderTimeout: Duration{5 * time.Second}, ReadTimeout: Duration{30 * time.Second},
			WriteTimeout: Duration{45 * time.Second}, IdleTimeout: Duration{time.Minute}},
		Resp: Resp{MaxConnections: 500, WriteTimeout: Duration{5 * time.Second}},
		Log:  Log{Level: "debug", Format: "json"},
	}
	assert.Equal(t, want, got)
}

func TestLoadAnchors(t *testing.T) {
	got, err := Load("testdata/anchors.yaml", nil, nil)
	require.NoError(t, err)
	require.NoError(t, got.Validate())
	assert.Equal(t, Collection{Store: "pg", Table: "a", Key: "id", Policy: "write-through", CacheTTL: Duration{time.Hour}, NearCache: DefaultNearCache(), ScanCache: true}, got.Collections["a"])
	assert.Equal(t, Collection{Store: "pg", Table: "b", Key: "id", Policy: "write-through", CacheTTL: Duration{5 * time.Minute}, NearCache: DefaultNearCache(), ScanCache: true}, got.Collections["b"])
}

func TestLoadExampleFile(t *testing.T) {
	got, err := Load("../../writeback.example.yaml", nil, nil)
	require.NoError(t, err)
	require.NoError(t, got.Validate())
	assert.Equal(t, []string{"127.0.0.1:6379"}, got.Redis.Addrs)
	assert.ElementsMatch(t, []string{"pg", "maria"}, sortedKeys(got.Stores))
	assert.Equal(t, Collection{Store: "pg", Table: "usertable", Key: "ycsb_key", Policy: "write-back", CacheTTL: Duration{time.Hour}, NearCache: DefaultNearCache(), ScanCache: true},
		got.Collections["usertable"])

	// The example shows the defaults: apart from what a deployment must
	// name (Redis, stores, collections), it is Default().
	want := Default()
	want.Redis.Addrs = got.Redis.Addrs
	want.Stores, want.Collections = got.Stores, got.Collections
	want.Writeback.InstanceID = got.Writeback.InstanceID
	assert.Equal(t, want, got)
}

func TestLoadPrecedence(t *testing.T) {
	const file = "testdata/precedence.yaml"
	tests := []struct {
		name  string
		path  string
		env   map[string]string
		args  []string
		check func(t *testing.T, c *Config)
	}{
		{
			name: "default when nothing sets it",
			path: file,
			check: func(t *testing.T, c *Config) {
				assert.Equal(t, 128, c.Writeback.BatchSize)
				assert.Equal(t, "standalone", c.Redis.Mode)
			},
		},
		{
			name: "file over default",
			path: file,
			check: func(t *testing.T, c *Config) {
				assert.Equal(t, "127.0.0.1:9001", c.Listen)
				assert.Equal(t, 32, c.Writeback.Partitions)
				assert.Equal(t, []string{"file:6379"}, c.Redis.Addrs)
				assert.Equal(t, "from-file", c.Redis.Password)
				assert.Equal(t, time.Second, c.Writeback.LeaseLifetime.Duration)
				assert.Equal(t, 256*MiB, c.Writeback.PinnedMemoryLimit)
				assert.Equal(t, "warn", c.Log.Level)
			},
		},
		{
			name: "env over file",
			path: file,
			env: map[string]string{
				"WRITEBACK_LISTEN": "127.0.0.1:9002", "WRITEBACK_PARTITIONS": "16",
				"WRITEBACK_REDIS_ADDRS": "a:1, b:2,", "WRITEBACK_REDIS_PASSWORD": "from-env",
				"WRITEBACK_LEASE_LIFETIME": "2s", "WRITEBACK_PINNED_MEMORY_LIMIT": "2GiB",
				"WRITEBACK_LOG_LEVEL": "error",
			},
			check: func(t *testing.T, c *Config) {
				assert.Equal(t, "127.0.0.1:9002", c.Listen)
				assert.Equal(t, 16, c.Writeback.Partitions)
				assert.Equal(t, []string{"a:1", "b:2"}, c.Redis.Addrs)
				assert.Equal(t, "from-env", c.Redis.Password)
				assert.Equal(t, 2*time.Second, c.Writeback.LeaseLifetime.Duration)
				assert.Equal(t, 2*GiB, c.Writeback.PinnedMemoryLimit)
				assert.Equal(t, "error", c.Log.Level)
				assert.Equal(t, 2, c.Writeback.Workers, "a setting the environment leaves alone keeps the file's value")
			},
		},
		{
			name: "env over default without a file",
			env:  map[string]string{"WRITEBACK_BATCH_SIZE": "64", "WRITEBACK_REDIS_MODE": "cluster"},
			check: func(t *testing.T, c *Config) {
				assert.Equal(t, 64, c.Writeback.BatchSize)
				assert.Equal(t, "cluster", c.Redis.Mode)
				assert.Empty(t, c.Redis.Addrs)
			},
		},
		{
			name: "an empty env value counts as unset",
			path: file,
			env:  map[string]string{"WRITEBACK_LISTEN": "", "WRITEBACK_PARTITIONS": ""},
			check: func(t *testing.T, c *Config) {
				assert.Equal(t, "127.0.0.1:9001", c.Listen)
				assert.Equal(t, 32, c.Writeback.Partitions)
			},
		},
		{
			name: "flag over env over file",
			path: file,
			env:  map[string]string{"WRITEBACK_PARTITIONS": "16", "WRITEBACK_WORKERS": "3"},
			args: []string{"--partitions=8", "--redis-addrs", "x:1,y:2", "--log-level", "debug"},
			check: func(t *testing.T, c *Config) {
				assert.Equal(t, 8, c.Writeback.Partitions)
				assert.Equal(t, 3, c.Writeback.Workers)
				assert.Equal(t, []string{"x:1", "y:2"}, c.Redis.Addrs)
				assert.Equal(t, "debug", c.Log.Level)
			},
		},
		{
			name: "a flag left unset does not hide env or file with its default",
			path: file,
			env:  map[string]string{"WRITEBACK_WORKERS": "3"},
			args: []string{"--batch-size=7"},
			check: func(t *testing.T, c *Config) {
				assert.Equal(t, 32, c.Writeback.Partitions)
				assert.Equal(t, 3, c.Writeback.Workers)
				assert.Equal(t, 7, c.Writeback.BatchSize)
			},
		},
		{
			name: "a flag set to empty clears the file's value",
			path: file,
			args: []string{"--redis-password="},
			check: func(t *testing.T, c *Config) {
				assert.Equal(t, "", c.Redis.Password)
			},
		},
		{
			name: "every flag",
			args: []string{
				"--listen=:1", "--listen-resp=:2", "--auth-token=t", "--redis-addrs=r:3",
				"--redis-mode=sentinel", "--redis-master-name=m", "--redis-password=p", "--redis-replicas=2",
				"--redis-key-prefix=k", "--partitions=3", "--workers=5", "--batch-size=6",
				"--lease-lifetime=7ms", "--owner-lease=8s", "--pinned-memory-limit=9MiB", "--apply-delay=2s",
				"--instance-id=i", "--log-level=warn", "--log-format=json", "--gc-heap-floor=0",
				"--auth-admin-token=a", "--allow-unauthenticated",
				"--redis-username=u", "--redis-sentinel-password=sp", "--redis-tls", "--redis-tls-ca-file=ca.pem",
			},
			check: func(t *testing.T, c *Config) {
				assert.Equal(t, ":1", c.Listen)
				assert.Equal(t, ":2", c.ListenResp)
				assert.Equal(t, ByteSize(0), c.GCHeapFloor)
				assert.Equal(t, Auth{Token: "t", AdminToken: "a", AllowUnauthenticated: true}, c.Auth)
				assert.Equal(t, Redis{
					Addrs: []string{"r:3"}, Mode: "sentinel", MasterName: "m", Username: "u", Password: "p", Replicas: 2,
					KeyPrefix: "k", DialTimeout: Duration{2 * time.Second}, PoolSize: 64, ShareRoundTrips: true,
					SentinelPassword: "sp", TLS: RedisTLS{Enabled: true, CAFile: "ca.pem"},
				}, c.Redis)
				assert.Equal(t, Writeback{
					Partitions: 3, Workers: 5, BatchSize: 6, LeaseLifetime: Duration{7 * time.Millisecond}, LeaseWait: Duration{time.Second}, SessionTimeout: Duration{30 * time.Second}, SessionCompaction: Duration{2 * time.Minute},
					OwnerLease: Duration{8 * time.Second}, PollInterval: Duration{100 * time.Millisecond}, ApplyDelay: Duration{2 * time.Second},
					MaxRetries: 5, RetryBackoff: Duration{100 * time.Millisecond}, PinnedMemoryLimit: 9 * MiB,
					MaxDeadLetters: 1000, CombineWrites: true, ApplyCuts: true, NearCache: NearCacheOn, InstanceID: "i", ImmutableCache: 64 * MiB,
				}, c.Writeback)
				assert.Equal(t, Log{Level: "warn", Format: "json"}, c.Log)
			},
		},
		{
			name: "every env twin",
			env: map[string]string{
				"WRITEBACK_LISTEN": ":1", "WRITEBACK_LISTEN_RESP": ":2", "WRITEBACK_AUTH_TOKEN": "t",
				"WRITEBACK_REDIS_ADDRS": "r:3", "WRITEBACK_REDIS_MODE": "sentinel", "WRITEBACK_REDIS_MASTER_NAME": "m",
				"WRITEBACK_REDIS_PASSWORD": "p", "WRITEBACK_REDIS_REPLICAS": "2", "WRITEBACK_REDIS_KEY_PREFIX": "k",
				"WRITEBACK_PARTITIONS": "3", "WRITEBACK_WORKERS": "5", "WRITEBACK_BATCH_SIZE": "6",
				"WRITEBACK_LEASE_LIFETIME": "7ms", "WRITEBACK_OWNER_LEASE": "8s", "WRITEBACK_PINNED_MEMORY_LIMIT": "9MiB",
				"WRITEBACK_INSTANCE_ID": "i", "WRITEBACK_LOG_LEVEL": "warn", "WRITEBACK_LOG_FORMAT": "json",
				"WRITEBACK_AUTH_ADMIN_TOKEN": "a", "WRITEBACK_ALLOW_UNAUTHENTICATED": "true",
				"WRITEBACK_REDIS_USERNAME": "u", "WRITEBACK_REDIS_SENTINEL_PASSWORD": "sp", "WRITEBACK_REDIS_TLS": "true", "WRITEBACK_REDIS_TLS_CA_FILE": "ca.pem",
			},
			check: func(t *testing.T, c *Config) {
				assert.Equal(t, ":1", c.Listen)
				assert.Equal(t, ":2", c.ListenResp)
				assert.Equal(t, Auth{Token: "t", AdminToken: "a", AllowUnauthenticated: true}, c.Auth)
				assert.Equal(t, Redis{
					Addrs: []string{"r:3"}, Mode: "sentinel", MasterName: "m", Username: "u", Password: "p", Replicas: 2,
					KeyPrefix: "k", DialTimeout: Duration{2 * time.Second}, PoolSize: 64, ShareRoundTrips: true,
					SentinelPassword: "sp", TLS: RedisTLS{Enabled: true, CAFile: "ca.pem"},
				}, c.Redis)
				assert.Equal(t, Writeback{
					Partitions: 3, Workers: 5, BatchSize: 6, LeaseLifetime: Duration{7 * time.Millisecond}, LeaseWait: Duration{time.Second}, SessionTimeout: Duration{30 * time.Second}, SessionCompaction: Duration{2 * time.Minute},
					OwnerLease: Duration{8 * time.Second}, PollInterval: Duration{100 * time.Millisecond},
					MaxRetries: 5, RetryBackoff: Duration{100 * time.Millisecond}, PinnedMemoryLimit: 9 * MiB,
					MaxDeadLetters: 1000, CombineWrites: true, ApplyCuts: true, NearCache: NearCacheOn, InstanceID: "i", ImmutableCache: 64 * MiB,
				}, c.Writeback)
				assert.Equal(t, Log{Level: "warn", Format: "json"}, c.Log)
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Load(tc.path, env(tc.env), flags(t, tc.args...))
			require.NoError(t, err)
			tc.check(t, got)
		})
	}
}

func TestLoadConfigPath(t *testing.T) {
	tests := []struct {
		name       string
		path       string
		env        map[string]string
		args       []string
		wantListen string
	}{
		{"path argument", "testdata/precedence.yaml", nil, nil, "127.0.0.1:9001"},
		{"WRITEBACK_CONFIG over the path argument", "testdata/precedence.yaml",
			map[string]string{"WRITEBACK_CONFIG": "testdata/other.yaml"}, nil, "127.0.0.1:9002"},
		{"--config over WRITEBACK_CONFIG", "",
			map[string]string{"WRITEBACK_CONFIG": "testdata/other.yaml"}, []string{"--config", "testdata/precedence.yaml"}, "127.0.0.1:9001"},
		{"no file at all", "", nil, nil, "127.0.0.1:8480"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Load(tc.path, env(tc.env), flags(t, tc.args...))
			require.NoError(t, err)
			assert.Equal(t, tc.wantListen, got.Listen)
		})
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name    string
		path    string
		env     map[string]string
		wantErr string
	}{
		{
			name:    "missing file",
			path:    "testdata/nope.yaml",
			wantErr: "config file testdata/nope.yaml does not exist; pass --config (or set WRITEBACK_CONFIG) with the path of your configuration file",
		},
		{
			name:    "unknown key",
			path:    "testdata/unknown_key.yaml",
			wantErr: "testdata/unknown_key.yaml:3: redis.mastername is not a known key; remove it or fix its spelling (redis takes: addrs, db, dialTimeout, keyPrefix, masterName, mode, password, poolSize, replicas, sentinelPassword, sentinelUsername, shareRoundTrips, tls, username)",
		},
		{
			name:    "unknown key in a collection",
			path:    "testdata/unknown_collection_key.yaml",
			wantErr: "testdata/unknown_collection_key.yaml:5: collections.usertable.ttl is not a known key; remove it or fix its spelling (collections.usertable takes: cacheTTL, key, nearCache, policy, scanCache, store, table)",
		},
		{
			name:    "not a number",
			path:    "testdata/bad_int.yaml",
			wantErr: `testdata/bad_int.yaml:3: writeback.partitions: "many" is not a whole number`,
		},
		{
			name:    "not a duration",
			path:    "testdata/bad_duration.yaml",
			wantErr: `testdata/bad_duration.yaml:3: writeback.leaseLifetime: "5 seconds" is not a duration; write it like 500ms, 2s or 1h`,
		},
		{
			name:    "not a size",
			path:    "testdata/bad_size.yaml",
			wantErr: `testdata/bad_size.yaml:3: writeback.pinnedMemoryLimit: "1 gigabyte" is not a size; write it like 1GiB, 512MiB, 64KiB, 1MB or a number of bytes`,
		},
		{
			name:    "not YAML",
			path:    "testdata/bad_yaml.yaml",
			wantErr: "config file testdata/bad_yaml.yaml is not valid YAML: line 1: did not find expected ',' or ']'",
		},
		{
			name:    "env not a number",
			env:     map[string]string{"WRITEBACK_PARTITIONS": "lots"},
			wantErr: `WRITEBACK_PARTITIONS: "lots" is not a whole number`,
		},
		{
			name:    "env not a duration",
			env:     map[string]string{"WRITEBACK_OWNER_LEASE": "3"},
			wantErr: `WRITEBACK_OWNER_LEASE: "3" is not a duration; write it like 500ms, 2s or 1h`,
		},
		{
			name:    "env not a size",
			env:     map[string]string{"WRITEBACK_PINNED_MEMORY_LIMIT": "big"},
			wantErr: `WRITEBACK_PINNED_MEMORY_LIMIT: "big" is not a size; write it like 1GiB, 512MiB, 64KiB, 1MB or a number of bytes`,
		},
		{
			name:    "env names a missing file",
			env:     map[string]string{"WRITEBACK_CONFIG": "testdata/gone.yaml"},
			wantErr: "config file testdata/gone.yaml does not exist; pass --config (or set WRITEBACK_CONFIG) with the path of your configuration file",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(tc.path, env(tc.env), nil)
			require.EqualError(t, err, tc.wantErr)
		})
	}
}

func TestLoadStructuralErrors(t *testing.T) {
	tests := []struct {
		name, yaml, wantErr string
	}{
		{"top-level typo", "listn: x\n", "f.yaml:1: listn is not a known key; remove it or fix its spelling (the top level takes: auth, collections, debugListen, gcHeapFloor, http, limits, listen, listenResp, log, mappings, queues, redis, resp, stores, writeback)"},
		{"list where a mapping belongs", "redis: [a]\n", "f.yaml:1: redis: want a mapping of keys (addrs, db, dialTimeout, keyPrefix, masterName, mode, password, poolSize, replicas, sentinelPassword, sentinelUsername, shareRoundTrips, tls, username)"},
		{"scalar where a list belongs", "redis: {addrs: 127.0.0.1:6379}\n", "f.yaml:1: redis.addrs: want a list such as [a, b]"},
		{"mapping where a value belongs", "listen: {a: b}\n", "f.yaml:1: listen: want a single value, not a list or a mapping"},
		{"bool", "redis: {replicas: yes}\n", `f.yaml:1: redis.replicas: "yes" is not a whole number`},
		{"list element", "queues: {bank: {store: pg, tables: [a, [b]]}}\n", "f.yaml:1: queues.bank.tables[1]: want a single value, not a list or a mapping"},
		{"unknown key in a store", "stores: {pg: {driver: postgres, dns: x}}\n", "f.yaml:1: stores.pg.dns is not a known key; remove it or fix its spelling (stores.pg takes: database, driver, dsn, dsnEnv, maxConns, uri)"},
		{"empty collection", "collections:\n  u:\n", "f.yaml:2: collections.u: the entry is empty; fill it in (cacheTTL, key, nearCache, policy, scanCache, store, table) or remove it"},
		{"empty store", "stores: {pg: }\n", "f.yaml:1: stores.pg: the entry is empty; fill it in (database, driver, dsn, dsnEnv, maxConns, uri) or remove it"},
		{"two documents", "listen: a:1\n---\nlisten: b:2\n", "config file f.yaml holds more than one YAML document; keep only one (remove the extra ---)"},
		{"unknown key through a merge", "collections:\n  a: &c {key: id}\n  b: {<<: *c, polcy: x}\n", "f.yaml:3: collections.b.polcy is not a known key; remove it or fix its spelling (collections.b takes: cacheTTL, key, nearCache, policy, scanCache, store, table)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("f.yaml", []byte(tc.yaml))
			require.EqualError(t, err, tc.wantErr)
		})
	}
}

func TestExplicitZeroIsKept(t *testing.T) {
	c, err := Load("testdata/explicit_zero.yaml", nil, nil)
	require.NoError(t, err)
	assert.Equal(t, 0, c.Stores["pg"].MaxConns)
	assert.Equal(t, time.Duration(0), c.Collections["usertable"].CacheTTL.Duration)
	// maxRetries: 0 is valid and means "retry forever", never the default 5.
	assert.Equal(t, 0, c.Writeback.MaxRetries)
	assert.EqualError(t, c.Validate(),
		"stores.pg.maxConns: 0 is too small; use at least 1 (the default is 32)\n"+
			"collections.usertable.cacheTTL: 0s is not positive; use a duration such as 1h")
}

func TestBindFlags(t *testing.T) {
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	BindFlags(fs)
	for _, name := range []string{
		"config", "listen", "listen-resp", "auth-token", "redis-addrs", "redis-mode", "redis-master-name",
		"redis-password", "redis-replicas", "redis-key-prefix", "partitions", "workers", "batch-size",
		"lease-lifetime", "owner-lease", "pinned-memory-limit", "apply-delay", "log-level", "gc-heap-floor",
	} {
		f := fs.Lookup(name)
		if assert.NotNil(t, f, "flag --%s", name) {
			assert.Contains(t, f.Usage, "(env "+EnvName(name)+")")
		}
	}
	assert.Equal(t, "127.0.0.1:8480", fs.Lookup("listen").DefValue)
	assert.Equal(t, "1GiB", fs.Lookup("pinned-memory-limit").DefValue)
	assert.Equal(t, "64MiB", fs.Lookup("gc-heap-floor").DefValue)
	assert.Equal(t, "500ms", fs.Lookup("lease-lifetime").DefValue)
	assert.Equal(t, "", fs.Lookup("redis-password").DefValue, "secrets show no default")

	tests := []struct{ arg, wantErr string }{
		{"--partitions=x", `invalid argument "x" for "--partitions" flag: "x" is not a whole number`},
		{"--lease-lifetime=5", `invalid argument "5" for "--lease-lifetime" flag: "5" is not a duration; write it like 500ms, 2s or 1h`},
		{"--pinned-memory-limit=lots", `invalid argument "lots" for "--pinned-memory-limit" flag: "lots" is not a size; write it like 1GiB, 512MiB, 64KiB, 1MB or a number of bytes`},
	}
	for _, tc := range tests {
		t.Run(tc.arg, func(t *testing.T) {
			fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
			fs.SetOutput(new(discard))
			BindFlags(fs)
			require.EqualError(t, fs.Parse([]string{tc.arg}), tc.wantErr)
		})
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func TestEnvName(t *testing.T) {
	assert.Equal(t, "WRITEBACK_REDIS_MASTER_NAME", EnvName("redis-master-name"))
	assert.Equal(t, "WRITEBACK_PARTITIONS", EnvName("partitions"))
}

func TestDSNFromEnv(t *testing.T) {
	path := t.TempDir() + "/c.yaml"
	yml := "redis: {addrs: [127.0.0.1:6379]}\nstores:\n  pg: {driver: postgres, dsnEnv: PG_DSN}\ncollections:\n  c: {store: pg, key: id}\n"
	require.NoError(t, os.WriteFile(path, []byte(yml), 0o600))
	env := map[string]string{"PG_DSN": "postgres://x@h/db"}
	cfg, err := Load(path, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, nil)
	require.NoError(t, err)
	assert.Equal(t, "postgres://x@h/db", cfg.Stores["pg"].DSN)
	require.NoError(t, cfg.Validate())
	_, err = Load(path, func(string) (string, bool) { return "", false }, nil)
	require.Error(t, err)
	assert.True(t, strings.Contains(err.Error(), "PG_DSN is not set"), err.Error())
}

func TestLoadNearCache(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"default", nil, nil, NearCacheOn},
		{"env", map[string]string{"WRITEBACK_NEAR_CACHE": "off"}, nil, NearCacheOff},
		{"flag over env", map[string]string{"WRITEBACK_NEAR_CACHE": "off"}, []string{"--near-cache=on"}, NearCacheOn},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Load("", env(tc.env), flags(t, tc.args...))
			require.NoError(t, err)
			assert.Equal(t, tc.want, got.Writeback.NearCache)
		})
	}
	got, err := Parse("f.yaml", []byte("collections:\n  u: {store: pg, key: id, nearCache: {leaseTTL: 1s}}\n"))
	require.NoError(t, err)
	want := DefaultNearCache()
	want.LeaseTTL = Duration{time.Second}
	assert.Equal(t, want, got.Collections["u"].NearCache, "unset nearCache keys keep their defaults")
}

func TestCollectionScanCache(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       bool
	}{
		{"on by default", "collections:\n  u: {store: pg, key: id}\n", true},
		{"switched off", "collections:\n  u: {store: pg, key: id, scanCache: false}\n", false},
		{"switched on", "collections:\n  u: {store: pg, key: id, scanCache: true}\n", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse("f.yaml", []byte(tc.yaml))
			require.NoError(t, err)
			assert.Equal(t, tc.want, got.Collections["u"].ScanCache)
		})
	}
}
