package config

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// valid returns a configuration that passes Validate, for the tests to break
// one field at a time.
func valid() *Config {
	c := Default()
	c.Redis.Addrs = []string{"127.0.0.1:6379"}
	c.Stores = map[string]Store{
		"pg":    {Driver: DriverPostgres, DSN: "postgres://postgres@127.0.0.1:5432/writeback", MaxConns: 32},
		"maria": {Driver: DriverMySQL, DSN: "root@tcp(127.0.0.1:3306)/writeback", MaxConns: 32},
		"mongo": {Driver: DriverMongoDB, URI: "mongodb://127.0.0.1:27017", Database: "test", MaxConns: 32},
	}
	c.Collections = map[string]Collection{
		"usertable": {Store: "pg", Table: "usertable", Key: "ycsb_key", Policy: PolicyWriteBack, CacheTTL: Duration{time.Hour}},
	}
	c.Queues = map[string]Queue{"bank": {Store: "pg", Tables: []string{"account"}}}
	c.Writeback.InstanceID = "sidecar-1"
	return c
}

func TestValidateOK(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(c *Config)
	}{
		{"as built", func(c *Config) {}},
		{"no listenResp", func(c *Config) { c.ListenResp = "" }},
		{"IPv6 and port 0", func(c *Config) { c.Listen = "[::1]:0"; c.ListenResp = ":6380"; c.Auth.Token = "t" }},
		{"sentinel with a master", func(c *Config) { c.Redis.Mode = ModeSentinel; c.Redis.MasterName = "m" }},
		{"cluster", func(c *Config) { c.Redis.Mode = ModeCluster }},
		{"sentinel with its own password and TLS", func(c *Config) {
			c.Redis.Mode, c.Redis.MasterName, c.Redis.SentinelUsername, c.Redis.SentinelPassword = ModeSentinel, "m", "su", "sp"
			c.Redis.TLS = RedisTLS{Enabled: true, CAFile: "ca.pem", CertFile: "c.pem", KeyFile: "k.pem", ServerName: "redis"}
		}},
		{"TLS without verification", func(c *Config) { c.Redis.TLS = RedisTLS{Enabled: true, InsecureSkipVerify: true} }},
		{"bounds", func(c *Config) {
			c.Writeback.Partitions, c.Writeback.BatchSize, c.Writeback.MaxRetries = 16384, 10000, 0
			c.Writeback.ApplyDelay = Duration{time.Hour}
		}},
		{"ownerLease exactly 3 polls", func(c *Config) {
			c.Writeback.PollInterval, c.Writeback.OwnerLease = Duration{time.Second}, Duration{3 * time.Second}
		}},
		{"63-character names", func(c *Config) {
			n := "_" + strings.Repeat("a", 62)
			c.Collections[n] = Collection{Store: "maria", Table: n, Key: "id", Policy: PolicyWriteAround, CacheTTL: Duration{time.Second}}
		}},
		{"no collections at all", func(c *Config) { c.Collections, c.Queues, c.Stores = nil, nil, nil }},
		{"near cache on with defaults", func(c *Config) {
			c.Writeback.NearCache = NearCacheOn
			c.Collections["usertable"] = nearColl(c, DefaultNearCache())
		}},
		{"near cache off for a collection", func(c *Config) { c.Collections["usertable"] = nearColl(c, NearCache{}) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := valid()
			tc.mutate(c)
			assert.NoError(t, c.Validate())
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(c *Config)
		wantErr string
	}{
		{"listen empty", func(c *Config) { c.Listen = "" },
			"listen: the address is empty; set it to a host:port such as 127.0.0.1:8480"},
		{"listen without port", func(c *Config) { c.Listen = "localhost" },
			`listen: "localhost" is not a host:port address; write it like 127.0.0.1:8480 or [::1]:8480`},
		{"listen named port", func(c *Config) { c.Listen = "localhost:http" },
			`listen: "localhost:http" is not a host:port address; write it like 127.0.0.1:8480 or [::1]:8480`},
		{"listen port too big", func(c *Config) { c.Listen = "localhost:65536" },
			`listen: "localhost:65536" is not a host:port address; write it like 127.0.0.1:8480 or [::1]:8480`},
		{"http write timeout too short", func(c *Config) { c.HTTP.WriteTimeout = Duration{10 * time.Second} },
			"http.writeTimeout: 10s is shorter than the 30s a request may take, so answers would be cut off; use at least 30s (the default is 1m)"},
		{"http read header timeout", func(c *Config) { c.HTTP.ReadHeaderTimeout = Duration{} },
			"http.readHeaderTimeout: 0s is not positive; use a duration such as 10s"},
		{"http idle timeout", func(c *Config) { c.HTTP.IdleTimeout = Duration{-time.Second} },
			"http.idleTimeout: -1s is not positive; use a duration such as 2m"},
		{"resp max connections", func(c *Config) { c.Resp.MaxConnections = 0 },
			"resp.maxConnections: 0 is too small; use at least 1 (the default is 10000)"},
		{"resp write timeout", func(c *Config) { c.Resp.WriteTimeout = Duration{} },
			"resp.writeTimeout: 0s is not positive; use a duration such as 30s"},
		{"sentinel password outside sentinel mode", func(c *Config) { c.Redis.SentinelPassword = "x" },
			`redis.sentinelPassword: sentinelUsername and sentinelPassword authenticate to sentinels, and redis.mode is "standalone"; remove them or set mode: sentinel`},
		{"TLS settings with TLS off", func(c *Config) { c.Redis.TLS.CAFile = "ca.pem" },
			"redis.tls.enabled: TLS settings are given but TLS is off; set redis.tls.enabled: true, or remove them"},
		{"a client certificate without its key", func(c *Config) { c.Redis.TLS = RedisTLS{Enabled: true, CertFile: "c.pem"} },
			"redis.tls.certFile: a client certificate needs both certFile and keyFile; set both, or neither"},
		{"insecure and verified", func(c *Config) { c.Redis.TLS = RedisTLS{Enabled: true, InsecureSkipVerify: true, CAFile: "ca.pem"} },
			"redis.tls.insecureSkipVerify: it skips the verification that caFile and serverName configure; remove one or the other"},
		{"listenResp", func(c *Config) { c.ListenResp = "6380" },
			`listenResp: "6380" is not a host:port address; write it like 127.0.0.1:8480 or [::1]:8480`},
		{"listenResp socket without a path", func(c *Config) { c.ListenResp = "unix:" },
			`listenResp: "unix:" names no socket; write it like unix:/run/writeback/resp.sock`},
		{"listenResp socket relative", func(c *Config) { c.ListenResp = "unix:resp.sock" },
			`listenResp: the socket path "resp.sock" is relative; give an absolute path such as /run/writeback/resp.sock`},
		{"socketMode not octal", func(c *Config) { c.ListenResp, c.Resp.SocketMode = "unix:/run/wb.sock", "0668" },
			`resp.socketMode: "0668" is not a permission in octal; write it like "0660" (owner and group may connect)`},
		{"socketMode beyond 0777", func(c *Config) { c.ListenResp, c.Resp.SocketMode = "unix:/run/wb.sock", "1777" },
			`resp.socketMode: "1777" is not a permission in octal; write it like "0660" (owner and group may connect)`},
		{"socketMode on TCP", func(c *Config) { c.Resp.SocketMode = "0660" },
			`resp.socketMode: listenResp "127.0.0.1:6380" is not a Unix socket; remove socketMode or set listenResp: unix:<path>`},
		{"listenResp socket too long", func(c *Config) { c.ListenResp = "unix:/" + strings.Repeat("s", 107) },
			"listenResp: the socket path is 108 bytes, more than a Unix socket's 107; choose a shorter path"},
		{"debugListen off loopback", func(c *Config) { c.DebugListen = "0.0.0.0:6060" },
			`debugListen: "0.0.0.0:6060" is reachable from other hosts; the profiling endpoints expose the process's memory and timing, so listen on 127.0.0.1 (for example 127.0.0.1:6060) and reach it through a tunnel`},
		{"gcHeapFloor negative", func(c *Config) { c.GCHeapFloor = -1 },
			"gcHeapFloor: -1 is out of range; use a size from 0 (off) to 1TiB, such as 64MiB"},
		{"gcHeapFloor too large", func(c *Config) { c.GCHeapFloor = 2 * TiB },
			"gcHeapFloor: 2199023255552 is out of range; use a size from 0 (off) to 1TiB, such as 64MiB"},
		{"redis addrs empty", func(c *Config) { c.Redis.Addrs = nil },
			"redis.addrs: no Redis address is configured; list at least one host:port such as 127.0.0.1:6379 (or pass --redis-addrs)"},
		{"redis addr", func(c *Config) { c.Redis.Addrs = []string{"127.0.0.1:6379", "redis"} },
			`redis.addrs[1]: "redis" is not a host:port address; write it like 127.0.0.1:8480 or [::1]:8480`},
		{"redis mode", func(c *Config) { c.Redis.Mode = "replicated" },
			`redis.mode: "replicated" is not a Redis mode; use one of: cluster, sentinel, standalone`},
		{"redis mode empty", func(c *Config) { c.Redis.Mode = "" },
			`redis.mode: no Redis mode is set; use one of: cluster, sentinel, standalone`},
		{"sentinel without master", func(c *Config) { c.Redis.Mode = ModeSentinel },
			"redis.masterName: sentinel mode needs the name of the master; set it to the name the sentinels monitor"},
		{"cluster with a db", func(c *Config) { c.Redis.Mode = ModeCluster; c.Redis.DB = 1 },
			"redis.db: Redis Cluster has only database 0; remove db or set it to 0"},
		{"negative db", func(c *Config) { c.Redis.DB = -1 },
			"redis.db: -1 is negative; use 0 or another database number"},
		{"negative replicas", func(c *Config) { c.Redis.Replicas = -1 },
			"redis.replicas: -1 is negative; use 0 to acknowledge without waiting for replicas, or the number of replicas to wait for"},
		{"key prefix with a hash tag", func(c *Config) { c.Redis.KeyPrefix = "{wb}" },
			`redis.keyPrefix: "{wb}" contains braces or spaces, which break the keys' hash tags; use letters, digits, ':' or '_' only`},
		{"dial timeout", func(c *Config) { c.Redis.DialTimeout = Duration{} },
			"redis.dialTimeout: 0s is not positive; use a duration such as 2s"},
		{"pool size", func(c *Config) { c.Redis.PoolSize = 0 },
			"redis.poolSize: 0 is too small; use at least 1 (the default is 64)"},
		{"store driver", func(c *Config) { c.Stores["pg"] = Store{Driver: "pgx", DSN: "x", MaxConns: 1} },
			`stores.pg.driver: "pgx" is not a supported driver; use one of: mongodb, mysql, postgres`},
		{"store driver empty", func(c *Config) { c.Stores["pg"] = Store{DSN: "x", MaxConns: 1} },
			`stores.pg.driver: no supported driver is set; use one of: mongodb, mysql, postgres`},
		{"postgres dsn", func(c *Config) { c.Stores["pg"] = Store{Driver: DriverPostgres, MaxConns: 1} },
			`stores.pg.dsn: a postgres store needs a DSN; set dsn like "postgres://user@127.0.0.1:5432/db?sslmode=disable", or dsnEnv to the environment variable that holds it`},
		{"mysql dsn", func(c *Config) { c.Stores["maria"] = Store{Driver: DriverMySQL, MaxConns: 1} },
			`stores.maria.dsn: a mysql store needs a DSN; set dsn like "user@tcp(127.0.0.1:3306)/db", or dsnEnv to the environment variable that holds it`},
		{"mongodb uri", func(c *Config) { c.Stores["mongo"] = Store{Driver: DriverMongoDB, Database: "d", MaxConns: 1} },
			`stores.mongo.uri: a mongodb store needs a URI; set uri like "mongodb://127.0.0.1:27017"`},
		{"mongodb database", func(c *Config) { c.Stores["mongo"] = Store{Driver: DriverMongoDB, URI: "mongodb://x", MaxConns: 1} },
			"stores.mongo.database: a mongodb store needs the name of its database; set database"},
		{"max conns", func(c *Config) { s := c.Stores["pg"]; s.MaxConns = 0; c.Stores["pg"] = s },
			"stores.pg.maxConns: 0 is too small; use at least 1 (the default is 32)"},
		{"collection name", func(c *Config) {
			c.Collections["user-table"] = Collection{Store: "pg", Table: "t", Key: "k", Policy: PolicyWriteBack, CacheTTL: Duration{time.Hour}}
		}, `collections."user-table": the name must start with a letter or '_' and hold only letters, digits and '_' (at most 63 characters); rename it`},
		{"collection name too long", func(c *Config) {
			c.Collections["a"+strings.Repeat("b", 63)] = Collection{Store: "pg", Table: "t", Key: "k", Policy: PolicyWriteBack, CacheTTL: Duration{time.Hour}}
		}, `collections."a` + strings.Repeat("b", 63) + `": the name must start with a letter or '_' and hold only letters, digits and '_' (at most 63 characters); rename it`},
		{"collection store unknown", func(c *Config) { u := c.Collections["usertable"]; u.Store = "pgx"; c.Collections["usertable"] = u },
			`collections.usertable.store: "pgx" is not a configured store; add it under stores or use one of: maria, mongo, pg`},
		{"collection store empty", func(c *Config) { u := c.Collections["usertable"]; u.Store = ""; c.Collections["usertable"] = u },
			`collections.usertable.store: no store is named; set it to one of: maria, mongo, pg`},
		{"collection store with no stores", func(c *Config) { c.Stores, c.Queues = nil, nil },
			`collections.usertable.store: "pg" is not a configured store; add it under stores`},
		{"collection table", func(c *Config) {
			u := c.Collections["usertable"]
			u.Table = "public.users"
			c.Collections["usertable"] = u
		},
			`collections.usertable.table: "public.users" is not a valid table name; use letters, digits and '_', starting with a letter or '_' (at most 63 characters)`},
		{"collection key", func(c *Config) { u := c.Collections["usertable"]; u.Key = ""; c.Collections["usertable"] = u },
			"collections.usertable.key: the collection has no key; set key to the column (or field) that identifies a document"},
		{"collection policy", func(c *Config) {
			u := c.Collections["usertable"]
			u.Policy = "writeback"
			c.Collections["usertable"] = u
		},
			`collections.usertable.policy: "writeback" is not a write policy; use one of: write-around, write-back, write-through`},
		{"two collections on one table", func(c *Config) {
			c.Collections["users2"] = Collection{Store: "pg", Table: "usertable", Key: "ycsb_key", Policy: PolicyWriteBack, CacheTTL: Duration{time.Hour}}
		}, "collections.usertable.table: table usertable of store pg is already the table of collection users2; a table can back only one collection"},
		{"collection cacheTTL", func(c *Config) {
			u := c.Collections["usertable"]
			u.CacheTTL = Duration{-time.Second}
			c.Collections["usertable"] = u
		},
			"collections.usertable.cacheTTL: -1s is not positive; use a duration such as 1h"},
		{"queue store unknown", func(c *Config) { c.Queues["bank"] = Queue{Store: "oracle", Tables: []string{"account"}} },
			`queues.bank.store: "oracle" is not a configured store; add it under stores or use one of: maria, mongo, pg`},
		{"queue store not SQL", func(c *Config) { c.Queues["bank"] = Queue{Store: "mongo", Tables: []string{"account"}} },
			`queues.bank.store: "mongo" is a mongodb store, and queues need a SQL store; use one of: maria, pg`},
		{"queue policy", func(c *Config) {
			c.Queues["bank"] = Queue{Store: "pg", Tables: []string{"account"}, Policy: "write-around"}
		},
			`queues.bank.policy: "write-around" is not a queue policy; use one of: write-back, write-through`},
		{"queue tables empty", func(c *Config) { c.Queues["bank"] = Queue{Store: "pg"} },
			"queues.bank.tables: the queue lists no table; list the tables its sessions may change"},
		{"queue table name", func(c *Config) { c.Queues["bank"] = Queue{Store: "pg", Tables: []string{"account", "drop table"}} },
			`queues.bank.tables[1]: "drop table" is not a valid table name; use letters, digits and '_', starting with a letter or '_'`},
		{"queue role name", func(c *Config) { c.Queues["bank"] = Queue{Store: "pg", Tables: []string{"a"}, Role: `x"; RESET ROLE`} },
			`queues.bank.role: "x\"; RESET ROLE" is not a valid role name; use letters, digits and '_', starting with a letter or '_' (at most 63 characters)`},
		{"queue role on mysql", func(c *Config) {
			c.Queues["bank"] = Queue{Store: "maria", Tables: []string{"a"}, Role: "bank_sessions"}
		},
			"queues.bank.role: a MySQL or MariaDB role adds privileges to the user's rather than restricting them; remove role and give the queue a store of its own whose user may change only its tables and writeback_applied_sessions"},
		{"queue name", func(c *Config) { c.Queues["9bank"] = Queue{Store: "pg", Tables: []string{"a"}} },
			`queues."9bank": the name must start with a letter or '_' and hold only letters, digits and '_' (at most 63 characters); rename it`},
		{"partitions zero", func(c *Config) { c.Writeback.Partitions = 0 },
			"writeback.partitions: 0 is out of range; use a number from 1 to 16384 (the default is 64)"},
		{"partitions too many", func(c *Config) { c.Writeback.Partitions = 16385 },
			"writeback.partitions: 16385 is out of range; use a number from 1 to 16384 (the default is 64)"},
		{"workers", func(c *Config) { c.Writeback.Workers = 0 },
			"writeback.workers: 0 is too small; use at least 1 (the default is 4)"},
		{"batch size zero", func(c *Config) { c.Writeback.BatchSize = 0 },
			"writeback.batchSize: 0 is out of range; use a number from 1 to 10000 (the default is 128)"},
		{"batch size too big", func(c *Config) { c.Writeback.BatchSize = 10001 },
			"writeback.batchSize: 10001 is out of range; use a number from 1 to 10000 (the default is 128)"},
		{"lease lifetime", func(c *Config) { c.Writeback.LeaseLifetime = Duration{} },
			"writeback.leaseLifetime: 0s is not positive; use a duration such as 500ms"},
		{"lease wait", func(c *Config) { c.Writeback.LeaseWait = Duration{} },
			"writeback.leaseWait: 0s is not positive; use a duration such as 1s"},
		{"lease wait not under session timeout", func(c *Config) { c.Writeback.LeaseWait = Duration{30 * time.Second} },
			"writeback.leaseWait: 30s is not shorter than writeback.sessionTimeout (30s), so a waiting session would be forgotten; lower leaseWait"},
		{"session timeout", func(c *Config) { c.Writeback.SessionTimeout = Duration{} },
			"writeback.sessionTimeout: 0s is not positive; use a duration such as 30s"},
		{"session timeout under lease lifetime", func(c *Config) {
			c.Writeback.SessionTimeout, c.Writeback.LeaseLifetime = Duration{time.Second}, Duration{2 * time.Second}
			c.Writeback.LeaseWait = Duration{100 * time.Millisecond}
		}, "writeback.sessionTimeout: 1s is shorter than writeback.leaseLifetime (2s), so sessions would be forgotten while their leases live; raise sessionTimeout"},
		{"session compaction", func(c *Config) { c.Writeback.SessionCompaction = Duration{30 * time.Second} },
			"writeback.sessionCompaction: 30s is shorter than 1m; every apply must finish well within one period for the compaction to be safe, so use at least 1m (the default is 2m)"},
		{"mapping without plugin", func(c *Config) { c.Mappings = []map[string]any{{"store": "pg"}} },
			"mappings[0].plugin: the entry names no plugin; set plugin, e.g. plugin: sql"},
		{"mapping plugin not a name", func(c *Config) { c.Mappings = []map[string]any{{"plugin": 3}} },
			"mappings[0].plugin: 3 is not a plugin name; use a name such as sql"},
		{"owner lease", func(c *Config) { c.Writeback.OwnerLease = Duration{-time.Second} },
			"writeback.ownerLease: -1s is not positive; use a duration such as 3s"},
		{"poll interval", func(c *Config) { c.Writeback.PollInterval = Duration{} },
			"writeback.pollInterval: 0s is not positive; use a duration such as 20ms"},
		{"negative apply delay", func(c *Config) { c.Writeback.ApplyDelay = Duration{-time.Second} },
			"writeback.applyDelay: -1s is out of range; use a duration from 0 (apply at once) to 1h"},
		{"apply delay over an hour", func(c *Config) { c.Writeback.ApplyDelay = Duration{61 * time.Minute} },
			"writeback.applyDelay: 1h1m0s is out of range; use a duration from 0 (apply at once) to 1h"},
		{"retry backoff", func(c *Config) { c.Writeback.RetryBackoff = Duration{} },
			"writeback.retryBackoff: 0s is not positive; use a duration such as 100ms"},
		{"owner lease under 3 polls", func(c *Config) {
			c.Writeback.PollInterval, c.Writeback.OwnerLease = Duration{time.Second}, Duration{2 * time.Second}
		}, "writeback.ownerLease: 2s is shorter than 3 × writeback.pollInterval (3s), so a live sidecar could lose its partitions; raise ownerLease or lower pollInterval"},
		{"max retries", func(c *Config) { c.Writeback.MaxRetries = -1 },
			"writeback.maxRetries: -1 is negative; use 0 to retry a failing batch forever, or the number of retries after which it is split and the change that keeps failing is dead-lettered"},
		{"max dead letters", func(c *Config) { c.Writeback.MaxDeadLetters = -1 },
			"writeback.maxDeadLetters: -1 is negative; use 0 to keep every dead letter, or how many each partition keeps"},
		{"pinned memory limit", func(c *Config) { c.Writeback.PinnedMemoryLimit = 0 },
			"writeback.pinnedMemoryLimit: 0 is not positive; use a size such as 1GiB"},
		{"negative immutable cache", func(c *Config) { c.Writeback.ImmutableCache = -1 },
			"writeback.immutableCache: -1 is negative; use a size such as 64MiB, or 0 to keep no copies"},
		{"instance id", func(c *Config) { c.Writeback.InstanceID = "a b" },
			`writeback.instanceID: "a b" contains braces or spaces; use letters, digits, '-', '.' or '_'`},
		{"instance id with a separator of the lease record", func(c *Config) { c.Writeback.InstanceID = "a;b" },
			`writeback.instanceID: "a;b" contains ';' or '='; use letters, digits, '-', '.' or '_'`},
		{"near cache setting", func(c *Config) { c.Writeback.NearCache = "yes" },
			`writeback.nearCache: "yes" is not a near-cache setting; use one of: off, on`},
		{"negative near cache", func(c *Config) { c.Collections["usertable"] = nearColl(c, NearCache{MaxBytes: -1}) },
			"collections.usertable.nearCache.maxBytes: -1 is negative; use a size such as 64MiB, or 0 to turn this collection's near cache off"},
		{"near lease shorter than the margin", func(c *Config) {
			c.Collections["usertable"] = nearColl(c, NearCache{MaxBytes: MiB, LeaseTTL: Duration{100 * time.Millisecond}})
		}, "collections.usertable.nearCache.leaseTTL: 100ms is shorter than 200ms (a copy is served for the lease less a 100ms margin); use a lease such as 2s"},
		{"negative hot window", func(c *Config) {
			c.Collections["usertable"] = nearColl(c, NearCache{MaxBytes: MiB, LeaseTTL: Duration{time.Second}, HotWindow: Duration{-time.Second}})
		}, "collections.usertable.nearCache.hotWindow: -1s is negative; use 0 to lease every document, or a window such as 2s"},
		{"max body bytes", func(c *Config) { c.Limits.MaxBodyBytes = 0 },
			"limits.maxBodyBytes: 0 is not positive; use a size such as 1MiB"},
		{"log level", func(c *Config) { c.Log.Level = "verbose" },
			`log.level: "verbose" is not a log level; use one of: debug, error, info, warn`},
		{"log format", func(c *Config) { c.Log.Format = "logfmt" },
			`log.format: "logfmt" is not a log format; use one of: json, text`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := valid()
			tc.mutate(c)
			require.EqualError(t, c.Validate(), tc.wantErr)
		})
	}
}

// TestValidateReportsAll checks that every problem is reported, one
// sentence per line, in a stable order.
func TestValidateReportsAll(t *testing.T) {
	c := valid()
	c.Listen = "nowhere"
	c.Redis.Addrs = nil
	c.Writeback.Workers = 0
	u := c.Collections["usertable"]
	u.Store, u.Key = "pgx", ""
	c.Collections["usertable"] = u

	want := []string{
		`listen: "nowhere" is not a host:port address; write it like 127.0.0.1:8480 or [::1]:8480`,
		"redis.addrs: no Redis address is configured; list at least one host:port such as 127.0.0.1:6379 (or pass --redis-addrs)",
		`collections.usertable.store: "pgx" is not a configured store; add it under stores or use one of: maria, mongo, pg`,
		"collections.usertable.key: the collection has no key; set key to the column (or field) that identifies a document",
		"writeback.workers: 0 is too small; use at least 1 (the default is 4)",
	}
	for i := 0; i < 3; i++ { // map order must not matter
		err := c.Validate()
		require.Error(t, err)
		assert.Equal(t, want, strings.Split(err.Error(), "\n"))
	}
}

func TestValidateFromFile(t *testing.T) {
	c, err := Load("testdata/bad_store_ref.yaml", nil, nil)
	require.NoError(t, err)
	assert.EqualError(t, c.Validate(),
		`collections.usertable.store: "pgx" is not a configured store; add it under stores or use one of: maria, pg`)
}

// A front door reachable from other hosts needs a token, or the
// operator's explicit consent (auth.allowUnauthenticated).
func TestValidateExposure(t *testing.T) {
	tests := []struct {
		name       string
		listen     string
		listenResp string
		token      string
		allow      bool
		wantErr    string // "" means valid
	}{
		{"loopback IPv4", "127.0.0.1:8480", "127.0.0.2:6380", "", false, ""},
		{"loopback IPv6 and localhost", "[::1]:8480", "localhost:6380", "", false, ""},
		{"RESP disabled", "127.0.0.1:8480", "", "", false, ""},
		{"RESP on a Unix socket", "127.0.0.1:8480", "unix:/run/writeback/resp.sock", "", false, ""},
		{"wildcard with a token", ":8480", "0.0.0.0:6380", "t", false, ""},
		{"wildcard allowed explicitly", ":8480", "[::]:6380", "", true, ""},
		{"empty host", ":8480", "", "", false,
			`listen: ":8480" is reachable from other hosts and auth.token is empty, so anyone could read and write every document; set auth.token (WRITEBACK_AUTH_TOKEN), listen on 127.0.0.1 (--listen), or set auth.allowUnauthenticated: true (--allow-unauthenticated) to accept the risk`},
		{"pod IP on the Redis port", "127.0.0.1:8480", "10.1.2.3:6380", "", false,
			`listenResp: "10.1.2.3:6380" is reachable from other hosts and auth.token is empty, so anyone could read and write every document; set auth.token (WRITEBACK_AUTH_TOKEN), listen on 127.0.0.1 (--listen-resp), or set auth.allowUnauthenticated: true (--allow-unauthenticated) to accept the risk`},
		{"a host name", "sidecar.local:8480", "", "", false, `listen: "sidecar.local:8480" is reachable from other hosts`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := valid()
			c.Listen, c.ListenResp, c.Auth.Token, c.Auth.AllowUnauthenticated = tc.listen, tc.listenResp, tc.token, tc.allow
			err := c.Validate()
			if tc.wantErr == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.wantErr)
			assert.NotContains(t, err.Error(), "\n", "one sentence")
		})
	}
}

// nearColl is the usertable collection of c with near cache n.
func nearColl(c *Config, n NearCache) Collection {
	coll := c.Collections["usertable"]
	coll.NearCache = n
	return coll
}
