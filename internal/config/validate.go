package config

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/writeback/writeback/internal/gcfloor"
)

// nameRE is what collection names, queue names and table names must match:
// a portable SQL identifier that also makes a bounded metric label.
var nameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// Limits of the numeric settings.
const (
	MinSessionCompaction = time.Minute // twice the longest apply of a batch of sessions (30 s)

	MaxPartitions = 16384 // Redis Cluster's slot count: more partitions than slots gain nothing
	MaxBatchSize  = 10000
	// MaxApplyDelay bounds writeback.applyDelay: the store may lag the
	// cache by that long, and everything written meanwhile stays pinned.
	MaxApplyDelay = time.Hour
)

var (
	redisModes = []string{ModeCluster, ModeSentinel, ModeStandalone}
	drivers    = []string{DriverMongoDB, DriverMySQL, DriverPostgres}
	policies   = []string{PolicyWriteAround, PolicyWriteBack, PolicyWriteThrough}
	// queuePolicies: write-around is a document policy; a commit always
	// carries its cache changes.
	queuePolicies = []string{PolicyWriteBack, PolicyWriteThrough}
	logLevels     = []string{"debug", "error", "info", "warn"}
	logFormats    = []string{"json", "text"}
	dsnExample    = map[string]string{DriverPostgres: "postgres://user@127.0.0.1:5432/db?sslmode=disable", DriverMySQL: "user@tcp(127.0.0.1:3306)/db"}
	sqlDriverSet  = map[string]bool{DriverPostgres: true, DriverMySQL: true}
)

// Validate reports every problem of the configuration, one sentence per
// problem naming the field and the fix, joined with errors.Join in a stable
// order (the file's section order, map entries by name). It returns nil
// when the configuration is usable.
func (c *Config) Validate() error {
	var v validator
	v.address("listen", c.Listen, false)
	if path, ok := UnixSocket(c.ListenResp); ok {
		v.socketPath("listenResp", path)
	} else {
		v.address("listenResp", c.ListenResp, true)
	}
	if m := c.Resp.SocketMode; m != "" {
		if _, ok := c.Resp.SocketPerm(); !ok {
			v.addf("resp.socketMode: %q is not a permission in octal; write it like \"0660\" (owner and group may connect)", m)
		} else if _, unix := UnixSocket(c.ListenResp); !unix {
			v.addf("resp.socketMode: listenResp %q is not a Unix socket; remove socketMode or set listenResp: unix:<path>", c.ListenResp)
		}
	}
	v.address("debugListen", c.DebugListen, true)
	if c.DebugListen != "" && !Loopback(c.DebugListen) {
		v.addf("debugListen: %q is reachable from other hosts; the profiling endpoints expose the process's memory and timing, so listen on 127.0.0.1 (for example 127.0.0.1:6060) and reach it through a tunnel", c.DebugListen)
	}
	if c.GCHeapFloor < 0 || c.GCHeapFloor > gcfloor.MaxFloor {
		v.addf("gcHeapFloor: %d is out of range; use a size from 0 (off) to 1TiB, such as 64MiB", c.GCHeapFloor)
	}
	c.validateAuth(&v)
	c.validateRedis(&v)
	c.validateStores(&v)
	c.validateCollections(&v)
	c.validateQueues(&v)
	c.validateMappings(&v)
	c.validateWriteback(&v)
	if c.Limits.MaxBodyBytes <= 0 {
		v.addf("limits.maxBodyBytes: %d is not positive; use a size such as 1MiB", c.Limits.MaxBodyBytes)
	}
	c.validateHTTP(&v)
	if c.Resp.MaxConnections < 1 {
		v.addf("resp.maxConnections: %d is too small; use at least 1 (the default is 10000)", c.Resp.MaxConnections)
	}
	v.positive("resp.writeTimeout", c.Resp.WriteTimeout, "30s")
	v.oneOf("log.level", c.Log.Level, "log level", logLevels)
	v.oneOf("log.format", c.Log.Format, "log format", logFormats)
	return errors.Join(v.errs...)
}

// validateAuth refuses to expose the front doors beyond this host without
// a token, unless the operator said so (auth.allowUnauthenticated).
func (c *Config) validateAuth(v *validator) {
	a := c.Auth
	if a.Token != "" || a.AllowUnauthenticated {
		return
	}
	for _, l := range []struct{ field, addr, flag string }{{"listen", c.Listen, "--listen"}, {"listenResp", c.ListenResp, "--listen-resp"}} {
		if _, unix := UnixSocket(l.addr); unix {
			continue // reachable on this host only, as loopback is
		}
		if _, _, err := net.SplitHostPort(l.addr); err != nil {
			continue // reported by address
		}
		if !Loopback(l.addr) {
			v.addf("%s: %q is reachable from other hosts and auth.token is empty, so anyone could read and write every document; set auth.token (WRITEBACK_AUTH_TOKEN), listen on 127.0.0.1 (%s), or set auth.allowUnauthenticated: true (--allow-unauthenticated) to accept the risk", l.field, l.addr, l.flag)
		}
	}
}

// Loopback reports whether the host:port address addr listens on the
// loopback interface only: localhost or a loopback IP. An empty host, a
// wildcard or any other name is reachable from other hosts.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (c *Config) validateRedis(v *validator) {
	r := c.Redis
	if len(r.Addrs) == 0 {
		v.addf("redis.addrs: no Redis address is configured; list at least one host:port such as 127.0.0.1:6379 (or pass --redis-addrs)")
	}
	for i, a := range r.Addrs {
		v.address(fmt.Sprintf("redis.addrs[%d]", i), a, false)
	}
	v.oneOf("redis.mode", r.Mode, "Redis mode", redisModes)
	if r.Mode == ModeSentinel && r.MasterName == "" {
		v.addf("redis.masterName: sentinel mode needs the name of the master; set it to the name the sentinels monitor")
	}
	if r.Mode == ModeCluster && r.DB != 0 {
		v.addf("redis.db: Redis Cluster has only database 0; remove db or set it to 0")
	}
	if r.DB < 0 {
		v.addf("redis.db: %d is negative; use 0 or another database number", r.DB)
	}
	if r.Replicas < 0 {
		v.addf("redis.replicas: %d is negative; use 0 to acknowledge without waiting for replicas, or the number of replicas to wait for", r.Replicas)
	}
	if strings.ContainsAny(r.KeyPrefix, "{} \t\r\n") {
		v.addf("redis.keyPrefix: %q contains braces or spaces, which break the keys' hash tags; use letters, digits, ':' or '_' only", r.KeyPrefix)
	}
	if r.Mode != ModeSentinel && (r.SentinelUsername != "" || r.SentinelPassword != "") {
		v.addf("redis.sentinelPassword: sentinelUsername and sentinelPassword authenticate to sentinels, and redis.mode is %q; remove them or set mode: sentinel", r.Mode)
	}
	validateRedisTLS(v, r.TLS)
	v.positive("redis.dialTimeout", r.DialTimeout, "2s")
	if r.PoolSize < 1 {
		v.addf("redis.poolSize: %d is too small; use at least 1 (the default is 64)", r.PoolSize)
	}
}

func validateRedisTLS(v *validator, t RedisTLS) {
	if !t.Enabled {
		if t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" || t.ServerName != "" || t.InsecureSkipVerify {
			v.addf("redis.tls.enabled: TLS settings are given but TLS is off; set redis.tls.enabled: true, or remove them")
		}
		return
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		v.addf("redis.tls.certFile: a client certificate needs both certFile and keyFile; set both, or neither")
	}
	if t.InsecureSkipVerify && (t.CAFile != "" || t.ServerName != "") {
		v.addf("redis.tls.insecureSkipVerify: it skips the verification that caFile and serverName configure; remove one or the other")
	}
}

func (c *Config) validateStores(v *validator) {
	for _, name := range sortedKeys(c.Stores) {
		s := c.Stores[name]
		p := "stores." + name
		if !v.oneOf(p+".driver", s.Driver, "supported driver", drivers) {
			continue
		}
		switch s.Driver {
		case DriverPostgres, DriverMySQL:
			if s.DSN == "" {
				v.addf("%s.dsn: a %s store needs a DSN; set dsn like %q, or dsnEnv to the environment variable that holds it", p, s.Driver, dsnExample[s.Driver])
			}
		case DriverMongoDB:
			if s.URI == "" {
				v.addf("%s.uri: a mongodb store needs a URI; set uri like \"mongodb://127.0.0.1:27017\"", p)
			}
			if s.Database == "" {
				v.addf("%s.database: a mongodb store needs the name of its database; set database", p)
			}
		}
		if s.MaxConns < 1 {
			v.addf("%s.maxConns: %d is too small; use at least 1 (the default is 32)", p, s.MaxConns)
		}
	}
}

func (c *Config) validateCollections(v *validator) {
	stores := sortedKeys(c.Stores)
	tables := map[string]string{} // store/table -> collection
	for _, name := range sortedKeys(c.Collections) {
		coll := c.Collections[name]
		p := "collections." + name
		if !nameRE.MatchString(name) {
			v.addf("collections.%q: the name must start with a letter or '_' and hold only letters, digits and '_' (at most 63 characters); rename it", name)
		}
		v.storeRef(p+".store", coll.Store, stores)
		if coll.Table != "" && !nameRE.MatchString(coll.Table) {
			v.addf("%s.table: %q is not a valid table name; use letters, digits and '_', starting with a letter or '_' (at most 63 characters)", p, coll.Table)
		}
		if strings.TrimSpace(coll.Key) == "" {
			v.addf("%s.key: the collection has no key; set key to the column (or field) that identifies a document", p)
		}
		v.oneOf(p+".policy", coll.Policy, "write policy", policies)
		v.positive(p+".cacheTTL", coll.CacheTTL, "1h")
		validateNearCache(v, p+".nearCache", coll.NearCache)
		// Two collections on one table would buffer and apply changes to
		// the same rows with no order between them.
		table := coll.Table
		if table == "" {
			table = name
		}
		if prev, dup := tables[coll.Store+"/"+table]; dup {
			v.addf("%s.table: table %s of store %s is already the table of collection %s; a table can back only one collection", p, table, coll.Store, prev)
		} else {
			tables[coll.Store+"/"+table] = name
		}
	}
}

func (c *Config) validateQueues(v *validator) {
	var sqlStores []string
	for _, name := range sortedKeys(c.Stores) {
		if sqlDriverSet[c.Stores[name].Driver] {
			sqlStores = append(sqlStores, name)
		}
	}
	for _, name := range sortedKeys(c.Queues) {
		q := c.Queues[name]
		p := "queues." + name
		if !nameRE.MatchString(name) {
			v.addf("queues.%q: the name must start with a letter or '_' and hold only letters, digits and '_' (at most 63 characters); rename it", name)
		}
		// A store with an unknown driver was reported under stores already.
		if v.storeRef(p+".store", q.Store, sortedKeys(c.Stores)) && c.Stores[q.Store].Driver == DriverMongoDB {
			v.addf("%s.store: %q is a %s store, and queues need a SQL store; use %s", p, q.Store, c.Stores[q.Store].Driver, choices(sqlStores, "a postgres or mysql store"))
		}
		if q.Policy != "" { // "" is write-back (fillDerived)
			v.oneOf(p+".policy", q.Policy, "queue policy", queuePolicies)
		}
		if len(q.Tables) == 0 {
			v.addf("%s.tables: the queue lists no table; list the tables its sessions may change", p)
		}
		for i, t := range q.Tables {
			if !nameRE.MatchString(t) {
				v.addf("%s.tables[%d]: %q is not a valid table name; use letters, digits and '_', starting with a letter or '_'", p, i, t)
			}
		}
		if q.Role != "" {
			if !nameRE.MatchString(q.Role) {
				v.addf("%s.role: %q is not a valid role name; use letters, digits and '_', starting with a letter or '_' (at most 63 characters)", p, q.Role)
			}
			if st, ok := c.Stores[q.Store]; ok && st.Driver == DriverMySQL {
				v.addf("%s.role: a MySQL or MariaDB role adds privileges to the user's rather than restricting them; remove role and give the queue a store of its own whose user may change only its tables and writeback_applied_sessions", p)
			}
		}
	}
}

// validateMappings checks what every mapping entry has: the name of its
// plugin. The plugin decodes and validates the rest when the sidecar
// starts (package mappings).
func (c *Config) validateMappings(v *validator) {
	for i, m := range c.Mappings {
		p, ok := m["plugin"]
		name, isString := p.(string)
		switch {
		case !ok:
			v.addf("mappings[%d].plugin: the entry names no plugin; set plugin, e.g. plugin: sql", i)
		case !isString || strings.TrimSpace(name) == "":
			v.addf("mappings[%d].plugin: %v is not a plugin name; use a name such as sql", i, p)
		}
	}
}

func (c *Config) validateWriteback(v *validator) {
	w := c.Writeback
	if w.Partitions < 1 || w.Partitions > MaxPartitions {
		v.addf("writeback.partitions: %d is out of range; use a number from 1 to %d (the default is 64)", w.Partitions, MaxPartitions)
	}
	if w.Workers < 1 {
		v.addf("writeback.workers: %d is too small; use at least 1 (the default is 4)", w.Workers)
	}
	if w.BatchSize < 1 || w.BatchSize > MaxBatchSize {
		v.addf("writeback.batchSize: %d is out of range; use a number from 1 to %d (the default is 128)", w.BatchSize, MaxBatchSize)
	}
	v.positive("writeback.leaseLifetime", w.LeaseLifetime, "500ms")
	v.positive("writeback.sessionTimeout", w.SessionTimeout, "30s")
	v.positive("writeback.leaseWait", w.LeaseWait, "1s")
	if w.SessionTimeout.Duration > 0 && w.LeaseWait.Duration >= w.SessionTimeout.Duration {
		v.addf("writeback.leaseWait: %s is not shorter than writeback.sessionTimeout (%s), so a waiting session would be forgotten; lower leaseWait", w.LeaseWait, w.SessionTimeout)
	}
	if w.SessionTimeout.Duration > 0 && w.SessionTimeout.Duration < w.LeaseLifetime.Duration {
		v.addf("writeback.sessionTimeout: %s is shorter than writeback.leaseLifetime (%s), so sessions would be forgotten while their leases live; raise sessionTimeout", w.SessionTimeout, w.LeaseLifetime)
	}
	if w.SessionCompaction.Duration < MinSessionCompaction {
		v.addf("writeback.sessionCompaction: %s is shorter than 1m; every apply must finish well within one period for the compaction to be safe, so use at least 1m (the default is 2m)", w.SessionCompaction)
	}
	v.positive("writeback.ownerLease", w.OwnerLease, "3s")
	v.positive("writeback.pollInterval", w.PollInterval, "20ms")
	v.positive("writeback.retryBackoff", w.RetryBackoff, "100ms")
	if w.ApplyDelay.Duration < 0 || w.ApplyDelay.Duration > MaxApplyDelay {
		v.addf("writeback.applyDelay: %s is out of range; use a duration from 0 (apply at once) to 1h", w.ApplyDelay)
	}
	if w.PollInterval.Duration > 0 && w.OwnerLease.Duration > 0 && w.OwnerLease.Duration < 3*w.PollInterval.Duration {
		v.addf("writeback.ownerLease: %s is shorter than 3 × writeback.pollInterval (%s), so a live sidecar could lose its partitions; raise ownerLease or lower pollInterval",
			w.OwnerLease, 3*w.PollInterval.Duration)
	}
	if w.MaxRetries < 0 {
		v.addf("writeback.maxRetries: %d is negative; use 0 to retry a failing batch forever, or the number of retries after which it is split and the change that keeps failing is dead-lettered", w.MaxRetries)
	}
	if w.MaxDeadLetters < 0 {
		v.addf("writeback.maxDeadLetters: %d is negative; use 0 to keep every dead letter, or how many each partition keeps", w.MaxDeadLetters)
	}
	if w.ImmutableCache < 0 {
		v.addf("writeback.immutableCache: %d is negative; use a size such as 64MiB, or 0 to keep no copies", w.ImmutableCache)
	}
	if w.PinnedMemoryLimit <= 0 {
		v.addf("writeback.pinnedMemoryLimit: %d is not positive; use a size such as 1GiB", w.PinnedMemoryLimit)
	}
	v.oneOf("writeback.nearCache", w.NearCache, "near-cache setting", []string{NearCacheOff, NearCacheOn})
	if strings.ContainsAny(w.InstanceID, ";=") {
		v.addf("writeback.instanceID: %q contains ';' or '='; use letters, digits, '-', '.' or '_'", w.InstanceID)
	}
	if strings.ContainsAny(w.InstanceID, "{} \t\r\n") {
		v.addf("writeback.instanceID: %q contains braces or spaces; use letters, digits, '-', '.' or '_'", w.InstanceID)
	}
}

// MinWriteTimeout is the shortest http.writeTimeout: every request but a
// flush may take 30 s (api.RequestTimeout), and its answer must still go out.
const MinWriteTimeout = 30 * time.Second

func (c *Config) validateHTTP(v *validator) {
	h := c.HTTP
	v.positive("http.readHeaderTimeout", h.ReadHeaderTimeout, "10s")
	v.positive("http.readTimeout", h.ReadTimeout, "1m")
	v.positive("http.idleTimeout", h.IdleTimeout, "2m")
	if h.WriteTimeout.Duration < MinWriteTimeout {
		v.addf("http.writeTimeout: %s is shorter than the 30s a request may take, so answers would be cut off; use at least 30s (the default is 1m)", h.WriteTimeout)
	}
}

// validator collects problems.
type validator struct{ errs []error }

func (v *validator) addf(format string, args ...any) {
	v.errs = append(v.errs, fmt.Errorf(format, args...))
}

// address checks that s is host:port with a numeric port; empty is allowed
// when optional (the listener is disabled).
func (v *validator) address(field, s string, optional bool) {
	if s == "" {
		if !optional {
			v.addf("%s: the address is empty; set it to a host:port such as 127.0.0.1:8480", field)
		}
		return
	}
	_, port, err := net.SplitHostPort(s)
	if err == nil {
		var n int
		n, err = strconv.Atoi(port)
		if err == nil && (n < 0 || n > 65535) {
			err = errors.New("port out of range")
		}
	}
	if err != nil {
		v.addf("%s: %q is not a host:port address; write it like 127.0.0.1:8480 or [::1]:8480", field, s)
	}
}

// UnixSocket returns the path of a listen address "unix:<path>", a Unix
// socket, and whether addr is one.
func UnixSocket(addr string) (path string, ok bool) {
	return strings.CutPrefix(addr, "unix:")
}

// maxSocketPath is the longest path of a Unix socket: sun_path holds 108
// bytes on Linux, the last one the terminating NUL.
const maxSocketPath = 107

// socketPath checks the path of a Unix socket to listen on.
func (v *validator) socketPath(field, path string) {
	switch {
	case path == "":
		v.addf("%s: \"unix:\" names no socket; write it like unix:/run/writeback/resp.sock", field)
	case !filepath.IsAbs(path):
		v.addf("%s: the socket path %q is relative; give an absolute path such as /run/writeback/resp.sock", field, path)
	case len(path) > maxSocketPath:
		v.addf("%s: the socket path is %d bytes, more than a Unix socket's %d; choose a shorter path", field, len(path), maxSocketPath)
	}
}

// oneOf checks that s is one of the sorted choices.
func (v *validator) oneOf(field, s, what string, choices []string) bool {
	for _, c := range choices {
		if s == c {
			return true
		}
	}
	if s == "" {
		v.addf("%s: no %s is set; use one of: %s", field, what, strings.Join(choices, ", "))
	} else {
		v.addf("%s: %q is not a %s; use one of: %s", field, s, what, strings.Join(choices, ", "))
	}
	return false
}

// positive checks that d is greater than zero.
func (v *validator) positive(field string, d Duration, example string) {
	if d.Duration <= 0 {
		v.addf("%s: %s is not positive; use a duration such as %s", field, d, example)
	}
}

// storeRef checks that name is one of the configured stores.
func (v *validator) storeRef(field, name string, stores []string) bool {
	for _, s := range stores {
		if name == s {
			return true
		}
	}
	switch {
	case name == "" && len(stores) == 0:
		v.addf("%s: no store is named and none is configured; add one under stores and name it here", field)
	case name == "":
		v.addf("%s: no store is named; set it to one of: %s", field, strings.Join(stores, ", "))
	case len(stores) == 0:
		v.addf("%s: %q is not a configured store; add it under stores", field, name)
	default:
		v.addf("%s: %q is not a configured store; add it under stores or use one of: %s", field, name, strings.Join(stores, ", "))
	}
	return false
}

// choices lists names for a message, or says what is missing.
func choices(names []string, none string) string {
	if len(names) == 0 {
		return none
	}
	return "one of: " + strings.Join(names, ", ")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// MinNearLease is the shortest near-cache lease: a copy is served for the
// lease less a 100 ms margin for clock drift (document.LeaseMargin).
const MinNearLease = 200 * time.Millisecond

func validateNearCache(v *validator, p string, n NearCache) {
	if n.MaxBytes < 0 {
		v.addf("%s.maxBytes: %d is negative; use a size such as 64MiB, or 0 to turn this collection's near cache off", p, n.MaxBytes)
	}
	if n.MaxBytes > 0 && n.LeaseTTL.Duration < MinNearLease {
		v.addf("%s.leaseTTL: %s is shorter than %s (a copy is served for the lease less a 100ms margin); use a lease such as 2s", p, n.LeaseTTL.Duration, MinNearLease)
	}
	if n.HotWindow.Duration < 0 {
		v.addf("%s.hotWindow: %s is negative; use 0 to lease every document, or a window such as 2s", p, n.HotWindow.Duration)
	}
}
