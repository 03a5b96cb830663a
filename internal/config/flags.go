package config

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
)

const flagConfig = "config"

// binding ties one command-line flag, and its environment twin, to one
// field of Config.
type binding struct {
	name  string // flag name without dashes
	usage string
	typ   string                          // shown in --help
	apply func(c *Config, s string) error // parses s into the field
	show  func(c *Config) string          // the field's value, shown as the default
}

// env is the flag's environment twin: WRITEBACK_ and the flag's name in
// upper case with dashes as underscores.
func (b binding) env() string { return EnvName(b.name) }

// EnvName returns the environment twin of a flag: WRITEBACK_<FLAG>, upper
// case, dashes as underscores ("redis-addrs" → "WRITEBACK_REDIS_ADDRS").
func EnvName(flag string) string {
	return "WRITEBACK_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

func stringBinding(name, usage string, field func(*Config) *string) binding {
	return binding{
		name: name, usage: usage, typ: "string",
		apply: func(c *Config, s string) error { *field(c) = s; return nil },
		show:  func(c *Config) string { return *field(c) },
	}
}

func boolBinding(name, usage string, field func(*Config) *bool) binding {
	return binding{
		name: name, usage: usage, typ: "bool",
		apply: func(c *Config, s string) error {
			b, err := strconv.ParseBool(strings.TrimSpace(s))
			if err != nil {
				return fmt.Errorf("%q is not true or false", s)
			}
			*field(c) = b
			return nil
		},
		show: func(c *Config) string { return strconv.FormatBool(*field(c)) },
	}
}

func listBinding(name, usage string, field func(*Config) *[]string) binding {
	return binding{
		name: name, usage: usage, typ: "list",
		apply: func(c *Config, s string) error {
			var list []string
			for _, e := range strings.Split(s, ",") {
				if e = strings.TrimSpace(e); e != "" {
					list = append(list, e)
				}
			}
			*field(c) = list
			return nil
		},
		show: func(c *Config) string { return strings.Join(*field(c), ",") },
	}
}

func intBinding(name, usage string, field func(*Config) *int) binding {
	return binding{
		name: name, usage: usage, typ: "int",
		apply: func(c *Config, s string) error {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil {
				return fmt.Errorf("%q is not a whole number", s)
			}
			*field(c) = n
			return nil
		},
		show: func(c *Config) string { return strconv.Itoa(*field(c)) },
	}
}

func durationBinding(name, usage string, field func(*Config) *Duration) binding {
	return binding{
		name: name, usage: usage, typ: "duration",
		apply: func(c *Config, s string) error {
			d, err := ParseDuration(s)
			if err != nil {
				return err
			}
			*field(c) = d
			return nil
		},
		show: func(c *Config) string { return field(c).String() },
	}
}

func byteSizeBinding(name, usage string, field func(*Config) *ByteSize) binding {
	return binding{
		name: name, usage: usage, typ: "size",
		apply: func(c *Config, s string) error {
			b, err := ParseByteSize(s)
			if err != nil {
				return err
			}
			*field(c) = b
			return nil
		},
		show: func(c *Config) string { return field(c).String() },
	}
}

// bindings are the configuration flags, in --help order.
var bindings = []binding{
	stringBinding("listen", "host:port of the HTTP API, /metrics and the probes",
		func(c *Config) *string { return &c.Listen }),
	stringBinding("listen-resp", "host:port, or unix:<path> of a Unix socket, of the Redis-protocol front door; empty disables it",
		func(c *Config) *string { return &c.ListenResp }),
	stringBinding("resp-socket-mode", "permissions in octal of listen-resp's Unix socket (e.g. 0660); empty keeps the umask's",
		func(c *Config) *string { return &c.Resp.SocketMode }),
	stringBinding("debug-listen", "loopback host:port of the profiling endpoints (/debug/pprof, behind the admin token when one is set); empty disables them",
		func(c *Config) *string { return &c.DebugListen }),
	byteSizeBinding("gc-heap-floor", "heap below which the Go collector does not run (GOGC rules above it); 0 turns the floor off",
		func(c *Config) *ByteSize { return &c.GCHeapFloor }),
	stringBinding("auth-token", "token every /v1 request (bearer) and Redis-protocol connection (AUTH) must present; empty disables auth",
		func(c *Config) *string { return &c.Auth.Token }),
	stringBinding("auth-admin-token", "token the administrative endpoints (flush, dead letters) require instead of auth-token; empty: auth-token suffices",
		func(c *Config) *string { return &c.Auth.AdminToken }),
	boolBinding("allow-unauthenticated", "allow a non-loopback listen or listen-resp address without auth-token",
		func(c *Config) *bool { return &c.Auth.AllowUnauthenticated }),
	listBinding("redis-addrs", "comma-separated host:port of the Redis servers, sentinels or cluster seeds",
		func(c *Config) *[]string { return &c.Redis.Addrs }),
	stringBinding("redis-mode", "standalone, sentinel or cluster",
		func(c *Config) *string { return &c.Redis.Mode }),
	stringBinding("redis-master-name", "name of the master the sentinels monitor (sentinel mode)",
		func(c *Config) *string { return &c.Redis.MasterName }),
	stringBinding("redis-username", "Redis ACL user",
		func(c *Config) *string { return &c.Redis.Username }),
	stringBinding("redis-password", "Redis password (prefer the environment variable)",
		func(c *Config) *string { return &c.Redis.Password }),
	stringBinding("redis-sentinel-password", "password of the sentinels themselves (sentinel mode; prefer the environment variable)",
		func(c *Config) *string { return &c.Redis.SentinelPassword }),
	boolBinding("redis-tls", "connect to Redis with TLS",
		func(c *Config) *bool { return &c.Redis.TLS.Enabled }),
	stringBinding("redis-tls-ca-file", "PEM CA bundle that verifies the Redis servers' certificates",
		func(c *Config) *string { return &c.Redis.TLS.CAFile }),
	intBinding("redis-replicas", "replicas every buffered write must reach before it is acknowledged",
		func(c *Config) *int { return &c.Redis.Replicas }),
	stringBinding("redis-key-prefix", "prefix of every Redis key the sidecar writes",
		func(c *Config) *string { return &c.Redis.KeyPrefix }),
	intBinding("partitions", "partitions of the pending index (1 to 16384; the same on every sidecar)",
		func(c *Config) *int { return &c.Writeback.Partitions }),
	intBinding("workers", "applier goroutines in this sidecar",
		func(c *Config) *int { return &c.Writeback.Workers }),
	intBinding("batch-size", "documents an applier writes to the store in one round trip",
		func(c *Config) *int { return &c.Writeback.BatchSize }),
	durationBinding("lease-lifetime", "lifetime of the cache leases",
		func(c *Config) *Duration { return &c.Writeback.LeaseLifetime }),
	durationBinding("lease-wait", "how long a session waits for a lease another session holds before it is aborted (409)",
		func(c *Config) *Duration { return &c.Writeback.LeaseWait }),
	durationBinding("owner-lease", "lifetime of a partition ownership lease; a dead sidecar's partitions move after it",
		func(c *Config) *Duration { return &c.Writeback.OwnerLease }),
	durationBinding("apply-delay", "how long a document stays pending before the appliers take it; writes to it meanwhile reach the store as one row write (0: at once)",
		func(c *Config) *Duration { return &c.Writeback.ApplyDelay }),
	byteSizeBinding("pinned-memory-limit", "pinned buffered writes above which writes fall back to write-through",
		func(c *Config) *ByteSize { return &c.Writeback.PinnedMemoryLimit }),
	stringBinding("instance-id", "this sidecar's name in status and ownership leases (default hostname-pid-random)",
		func(c *Config) *string { return &c.Writeback.InstanceID }),
	stringBinding("near-cache", "on or off: the collections' near caches (in-process copies under read leases; collections.<c>.nearCache)",
		func(c *Config) *string { return &c.Writeback.NearCache }),
	stringBinding("log-level", "debug, info, warn or error",
		func(c *Config) *string { return &c.Log.Level }),
	stringBinding("log-format", "text or json",
		func(c *Config) *string { return &c.Log.Format }),
}

// secret flags never show a default in --help.
var secret = map[string]bool{"auth-token": true, "auth-admin-token": true, "redis-password": true, "redis-sentinel-password": true}

// BindFlags registers --config and the configuration flags on fs. Load reads
// back only the flags set on the command line, so a flag never hides the
// environment or the file with its default.
func BindFlags(fs *pflag.FlagSet) {
	fs.String(flagConfig, "", fmt.Sprintf("path of the YAML configuration file (env %s)", EnvConfig))
	def := Default()
	for _, b := range bindings {
		v := &flagValue{b: b}
		if !secret[b.name] {
			v.def = b.show(def)
		}
		f := fs.VarPF(v, b.name, "", fmt.Sprintf("%s (env %s)", b.usage, b.env()))
		f.DefValue = v.def
		if b.typ == "bool" {
			f.NoOptDefVal = "true" // --allow-unauthenticated alone means true
		}
	}
}

// flagValue holds a flag's text as given; Set checks that it parses so a bad
// value is a usage error at once, and Load parses it again into the Config.
// Until set, it shows the default for --help (Load reads only set flags).
type flagValue struct {
	b   binding
	def string // the default, as --help shows it
	raw string // the value given, once set
	set bool
}

func (v *flagValue) String() string {
	if !v.set {
		return v.def
	}
	return v.raw
}

func (v *flagValue) Type() string { return v.b.typ }

func (v *flagValue) Set(s string) error {
	if err := v.b.apply(Default(), s); err != nil {
		return err
	}
	v.raw, v.set = s, true
	return nil
}

var _ pflag.Value = (*flagValue)(nil)
