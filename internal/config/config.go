// Package config owns the sidecar's configuration: the YAML file, its
// environment and command-line overrides, the defaults, and Validate, which
// explains every problem in one sentence naming the field and the fix.
// It does no I/O beyond reading the file and never connects to anything.
package config

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"time"

	"gopkg.in/yaml.v3"
)

// Config is the whole configuration of one sidecar.
type Config struct {
	Listen      string `yaml:"listen"`      // API, /metrics, /healthz, /readyz
	ListenResp  string `yaml:"listenResp"`  // Redis-protocol front door: host:port or unix:<path>; empty disables it
	DebugListen string `yaml:"debugListen"` // loopback host:port of /debug/pprof; empty (the default) disables it
	// GCHeapFloor is the heap below which Go's collector does not start a
	// cycle (package gcfloor): a sidecar whose live heap is a few MiB
	// would otherwise collect every few MiB it allocates. Above it GOGC
	// rules as usual; 0 turns the floor off.
	GCHeapFloor ByteSize              `yaml:"gcHeapFloor"`
	Auth        Auth                  `yaml:"auth"`
	Redis       Redis                 `yaml:"redis"`
	Stores      map[string]Store      `yaml:"stores"`
	Collections map[string]Collection `yaml:"collections"`
	Queues      map[string]Queue      `yaml:"queues"`
	Mappings    []map[string]any      `yaml:"mappings"` // kept raw for the mappings plugins
	Writeback   Writeback             `yaml:"writeback"`
	Limits      Limits                `yaml:"limits"`
	HTTP        HTTP                  `yaml:"http"`
	Resp        Resp                  `yaml:"resp"`
	Log         Log                   `yaml:"log"`
}

// Auth protects the /v1 API and the Redis-protocol front door.
type Auth struct {
	// Token, when set, must be sent by every /v1 request as
	// "Authorization: Bearer <token>", and by every Redis-protocol
	// connection with AUTH (or HELLO … AUTH default <token>).
	Token string `yaml:"token"`
	// AdminToken, when set, is the only token the administrative
	// endpoints accept (flush, dead letters, their replay and drop): the
	// normal Token no longer suffices for them.
	AdminToken string `yaml:"adminToken"`
	// AllowUnauthenticated lets listen or listenResp be a non-loopback
	// address without a token. Without it such a configuration is refused:
	// anyone who reaches the port could read and write every document.
	AllowUnauthenticated bool `yaml:"allowUnauthenticated"`
}

// Redis is how to reach the Redis deployment that holds the cache and the
// buffered writes.
type Redis struct {
	Addrs      []string `yaml:"addrs"`      // host:port of the servers, sentinels or cluster seeds
	Mode       string   `yaml:"mode"`       // standalone | sentinel | cluster
	MasterName string   `yaml:"masterName"` // the master the sentinels monitor (sentinel mode)
	Username   string   `yaml:"username"`   // ACL user
	Password   string   `yaml:"password"`   // prefer WRITEBACK_REDIS_PASSWORD
	// SentinelUsername and SentinelPassword authenticate to the sentinels
	// themselves (sentinel mode), which may differ from the data nodes'.
	SentinelUsername string   `yaml:"sentinelUsername"`
	SentinelPassword string   `yaml:"sentinelPassword"` // prefer WRITEBACK_REDIS_SENTINEL_PASSWORD
	TLS              RedisTLS `yaml:"tls"`
	DB               int      `yaml:"db"`          // database number (standalone and sentinel)
	Replicas         int      `yaml:"replicas"`    // WAIT for this many replicas before acknowledging
	KeyPrefix        string   `yaml:"keyPrefix"`   // prefix of every key the sidecar writes
	DialTimeout      Duration `yaml:"dialTimeout"` // connect timeout
	PoolSize         int      `yaml:"poolSize"`    // connections per Redis node
	// ShareRoundTrips sends the commands of concurrent requests that
	// arrive while two round trips are in Redis together, in one pipeline
	// (package pipeshare). Default true.
	ShareRoundTrips bool `yaml:"shareRoundTrips"`
}

// RedisTLS is TLS to every Redis node (and, in sentinel mode, to the
// sentinels). The files are PEM and are read when the sidecar starts.
type RedisTLS struct {
	Enabled            bool   `yaml:"enabled"`
	CAFile             string `yaml:"caFile"`             // CA bundle to verify the servers; default: the system's roots
	CertFile           string `yaml:"certFile"`           // client certificate, with keyFile, for tls-auth-clients
	KeyFile            string `yaml:"keyFile"`            // its private key
	ServerName         string `yaml:"serverName"`         // the name the servers' certificates must carry; default: the address's host
	InsecureSkipVerify bool   `yaml:"insecureSkipVerify"` // accept any certificate: tests only
}

// Redis modes.
const (
	ModeStandalone = "standalone"
	ModeSentinel   = "sentinel"
	ModeCluster    = "cluster"
)

// Store is one database behind the cache.
type Store struct {
	Driver   string `yaml:"driver"`   // postgres | mysql | mongodb
	DSN      string `yaml:"dsn"`      // postgres and mysql
	DSNEnv   string `yaml:"dsnEnv"`   // or: the environment variable holding the DSN (or URI), e.g. from a Kubernetes Secret
	URI      string `yaml:"uri"`      // mongodb
	Database string `yaml:"database"` // mongodb
	MaxConns int    `yaml:"maxConns"` // connection pool size
}

// Store drivers.
const (
	DriverPostgres = "postgres"
	DriverMySQL    = "mysql"
	DriverMongoDB  = "mongodb"
)

// Collection is a set of documents: rows of one table (SQL) or documents of
// one collection (MongoDB), cached and written under one policy.
type Collection struct {
	Store    string   `yaml:"store"`    // name of a configured store
	Table    string   `yaml:"table"`    // default: the collection's name
	Key      string   `yaml:"key"`      // the column (field) that identifies a document
	Policy   string   `yaml:"policy"`   // write-back | write-through | write-around
	CacheTTL Duration `yaml:"cacheTTL"` // lifetime of clean cache entries
	// NearCache is the collection's near cache (in-process L1 under read
	// leases), used while writeback.nearCache is on.
	NearCache NearCache `yaml:"nearCache"`
	// ScanCache keeps the ids of recent scans in each sidecar's memory, so
	// that a scan that repeats one while no document was inserted or
	// deleted skips the store (default true; only with the near cache on).
	ScanCache bool `yaml:"scanCache"`
}

// NearCache configures a collection's near cache.
type NearCache struct {
	MaxBytes  ByteSize `yaml:"maxBytes"`  // the entries' budget per sidecar; 0 turns this collection's near cache off
	LeaseTTL  Duration `yaml:"leaseTTL"`  // read lease lifetime: how long a copy is served without asking Redis
	HotWindow Duration `yaml:"hotWindow"` // a document whose write had to revoke another sidecar's lease is read from Redis, not leased, for this long; 0: always leased
}

// Values of writeback.nearCache.
const (
	NearCacheOn  = "on"
	NearCacheOff = "off"
)

// Write policies.
const (
	PolicyWriteBack    = "write-back"
	PolicyWriteThrough = "write-through"
	PolicyWriteAround  = "write-around"
)

// Queue is a family of session queues (Design 2): a commit names
// "<family>/<key>" and its DML may change only Tables, which must be in
// Store. Sessions of one queue are applied in commit order; sessions that
// change the same rows must therefore share a queue.
type Queue struct {
	Store  string   `yaml:"store"`
	Tables []string `yaml:"tables"`
	// Policy is PolicyWriteBack (the default: a commit is acknowledged once
	// durable in Redis) or PolicyWriteThrough (acknowledged once the store
	// has applied the session, and every session before it in its queue).
	Policy string `yaml:"policy"`
	// Role (PostgreSQL only) is the database role the family's session
	// statements run under (SET LOCAL ROLE in their transaction), so that
	// the database bounds them too; the sidecar's user must be a member.
	Role string `yaml:"role"`
	// Serial: the family's batches are applied one at a time, by every
	// applier of every sidecar (store.Session.Lock), for families whose
	// queues share rows (commutative updates of totals, say) and whose
	// batches would otherwise wait on each other's row locks or deadlock.
	// Off, batches of different queues run at once.
	Serial bool `yaml:"serial"`
}

// WriteThrough reports whether the family's commits wait for the store.
func (q Queue) WriteThrough() bool { return q.Policy == PolicyWriteThrough }

// Writeback tunes the appliers.
type Writeback struct {
	Partitions        int      `yaml:"partitions"`        // pending-index partitions (α)
	Workers           int      `yaml:"workers"`           // applier goroutines per sidecar
	BatchSize         int      `yaml:"batchSize"`         // documents per applied batch
	LeaseLifetime     Duration `yaml:"leaseLifetime"`     // lifetime of S/X and I/Q leases
	LeaseWait         Duration `yaml:"leaseWait"`         // how long a session waits for a lease another session holds before its 409
	SessionTimeout    Duration `yaml:"sessionTimeout"`    // a session neither committed nor aborted within it is forgotten
	SessionCompaction Duration `yaml:"sessionCompaction"` // period of the writeback_applied_sessions compaction (at least 1m)
	OwnerLease        Duration `yaml:"ownerLease"`        // lifetime of a partition ownership lease
	PollInterval      Duration `yaml:"pollInterval"`      // how often an idle applier looks for work
	ApplyDelay        Duration `yaml:"applyDelay"`        // how long a document stays pending before it is applied: writes to it meanwhile reach the store as one row write
	MaxRetries        int      `yaml:"maxRetries"`        // retries of a failing batch before it is split and what keeps failing dead-lettered; 0: forever
	RetryBackoff      Duration `yaml:"retryBackoff"`      // first backoff after a store error
	PinnedMemoryLimit ByteSize `yaml:"pinnedMemoryLimit"` // above it, writes fall back to write-through
	MaxDeadLetters    int      `yaml:"maxDeadLetters"`    // dead letters kept per partition; beyond it the oldest are dropped, counted; 0: no cap
	CombineWrites     bool     `yaml:"combineWrites"`     // concurrent requests' buffered writes share Redis round trips
	ApplyCuts         bool     `yaml:"applyCuts"`         // the appliers' batches move a floor per collection and partition instead of a record per document; off during a rolling upgrade from an earlier version
	InstanceID        string   `yaml:"instanceID"`        // this sidecar's name; default hostname-pid-random
	NearCache         string   `yaml:"nearCache"`         // on | off: the collections' near caches
	ImmutableCache    ByteSize `yaml:"immutableCache"`    // budget of the immutable mappings' entries kept in process; 0: none
}

// NearCacheOn reports whether the collections' near caches are on.
func (w Writeback) NearCacheOn() bool { return w.NearCache == NearCacheOn }

// Limits bounds what a client may send.
type Limits struct {
	MaxBodyBytes ByteSize `yaml:"maxBodyBytes"`
}

// HTTP bounds how long the API's server waits for a client, so that slow
// or idle clients cannot hold connections (and goroutines) for ever.
type HTTP struct {
	ReadHeaderTimeout Duration `yaml:"readHeaderTimeout"` // to read a request's headers
	ReadTimeout       Duration `yaml:"readTimeout"`       // to read a whole request, body included
	// WriteTimeout bounds a request from the end of its headers to the
	// end of its answer; a flush extends it to its own timeout.
	WriteTimeout Duration `yaml:"writeTimeout"`
	IdleTimeout  Duration `yaml:"idleTimeout"` // a kept-alive connection waiting for its next request
}

// Resp bounds the Redis-protocol front door's connections.
type Resp struct {
	// MaxConnections is the most client connections served at once; one
	// more is answered "-ERR max number of clients reached" and closed.
	MaxConnections int `yaml:"maxConnections"`
	// WriteTimeout is how long a reply may wait for the client to read
	// it; a client that reads none of its replies for that long is
	// disconnected.
	WriteTimeout Duration `yaml:"writeTimeout"`
	// SocketMode is the permission bits of listenResp's Unix socket, in
	// octal ("0660"); empty keeps those the process's umask gives.
	// Connecting takes write permission on the socket.
	SocketMode string `yaml:"socketMode"`
}

// SocketPerm returns the permission bits of SocketMode and whether it is
// set; Validate has checked it.
func (r Resp) SocketPerm() (fs.FileMode, bool) {
	if r.SocketMode == "" {
		return 0, false
	}
	n, err := strconv.ParseUint(r.SocketMode, 8, 32)
	if err != nil || n > 0o777 {
		return 0, false
	}
	return fs.FileMode(n), true
}

// Log configures the process's slog logger.
type Log struct {
	Level  string `yaml:"level"`  // debug | info | warn | error
	Format string `yaml:"format"` // text | json
}

// Default returns the configuration used for everything the file, the
// environment and the flags leave unset.
func Default() *Config {
	return &Config{
		Listen:     "127.0.0.1:8480",
		ListenResp: "127.0.0.1:6380",
		Redis: Redis{
			Mode:        ModeStandalone,
			KeyPrefix:   "wb",
			DialTimeout: Duration{2 * time.Second},
			PoolSize:    64,
			// Shared round trips cost a caller nothing while fewer than two
			// are in flight, and save a write and a read per request on both
			// sides of the socket under load.
			ShareRoundTrips: true,
		},
		Writeback: Writeback{
			Partitions:        64,
			Workers:           4,
			BatchSize:         128,
			LeaseLifetime:     Duration{500 * time.Millisecond},
			LeaseWait:         Duration{time.Second},
			SessionTimeout:    Duration{30 * time.Second},
			SessionCompaction: Duration{2 * time.Minute},
			OwnerLease:        Duration{3 * time.Second},
			PollInterval:      Duration{100 * time.Millisecond},
			MaxRetries:        5,
			RetryBackoff:      Duration{100 * time.Millisecond},
			PinnedMemoryLimit: 1 * GiB,
			MaxDeadLetters:    1000,
			CombineWrites:     true,
			ApplyCuts:         true,
			NearCache:         NearCacheOn,
			ImmutableCache:    64 * MiB,
		},
		GCHeapFloor: 64 * MiB,
		Limits:      Limits{MaxBodyBytes: 1 * MiB},
		HTTP: HTTP{
			ReadHeaderTimeout: Duration{10 * time.Second},
			ReadTimeout:       Duration{time.Minute},
			WriteTimeout:      Duration{time.Minute},
			IdleTimeout:       Duration{2 * time.Minute},
		},
		Resp: Resp{MaxConnections: 10000, WriteTimeout: Duration{30 * time.Second}},
		Log:  Log{Level: "info", Format: "text"},
	}
}

// defaultStore and defaultCollection are the defaults of one map entry; an
// entry's UnmarshalYAML starts from them so that a value written explicitly,
// even a zero, is kept and validated.
func defaultStore() Store { return Store{MaxConns: 32} }

// DefaultNearCache is a collection's near cache unless configured.
func DefaultNearCache() NearCache {
	return NearCache{MaxBytes: 64 * MiB, LeaseTTL: Duration{2 * time.Second}, HotWindow: Duration{2 * time.Second}}
}

func defaultCollection() Collection {
	return Collection{Policy: PolicyWriteBack, CacheTTL: Duration{time.Hour}, NearCache: DefaultNearCache(), ScanCache: true}
}

// UnmarshalYAML decodes a store on top of its defaults. Unknown keys were
// rejected before, by checkNode.
func (s *Store) UnmarshalYAML(n *yaml.Node) error {
	type plain Store
	v := plain(defaultStore())
	if err := n.Decode(&v); err != nil {
		return err
	}
	*s = Store(v)
	return nil
}

// UnmarshalYAML decodes a collection on top of its defaults. Unknown keys
// were rejected before, by checkNode.
func (c *Collection) UnmarshalYAML(n *yaml.Node) error {
	type plain Collection
	v := plain(defaultCollection())
	if err := n.Decode(&v); err != nil {
		return err
	}
	*c = Collection(v)
	return nil
}

// fillDerived sets the defaults that depend on other values: a collection's
// table is its name, a queue family's policy is write-back, and a sidecar without an instance ID gets a unique one.
func (c *Config) fillDerived() {
	for name, coll := range c.Collections {
		if coll.Table == "" {
			coll.Table = name
			c.Collections[name] = coll
		}
	}
	for name, q := range c.Queues {
		if q.Policy == "" {
			q.Policy = PolicyWriteBack
			c.Queues[name] = q
		}
	}
	if c.Writeback.InstanceID == "" {
		c.Writeback.InstanceID = newInstanceID()
	}
}

// newInstanceID returns hostname-pid-random: readable in logs and status,
// and unique even for two sidecars started in one container.
func newInstanceID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "sidecar"
	}
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}
