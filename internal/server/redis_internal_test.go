package server

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/writeback/writeback/internal/config"
)

// Every mode's client gets the ACL user, the password and the TLS
// configuration of redis: one server, a Sentinel-managed primary and a
// cluster.
func TestNewRedisOptions(t *testing.T) {
	base := config.Redis{Addrs: []string{"127.0.0.1:1"}, MasterName: "m", Username: "u", Password: "p",
		SentinelUsername: "su", SentinelPassword: "sp", PoolSize: 1,
		TLS: config.RedisTLS{Enabled: true, ServerName: "redis.internal"}}
	for _, mode := range []string{config.ModeStandalone, config.ModeSentinel, config.ModeCluster} {
		t.Run(mode, func(t *testing.T) {
			c := base
			c.Mode = mode
			rdb, err := newRedis(c, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer rdb.Close()
			var user, pass, server string
			switch cl := rdb.(type) {
			case *redis.Client: // standalone and sentinel
				o := cl.Options()
				user, pass = o.Username, o.Password
				if o.TLSConfig != nil {
					server = o.TLSConfig.ServerName
				}
			case *redis.ClusterClient:
				o := cl.Options()
				user, pass = o.Username, o.Password
				if o.TLSConfig != nil {
					server = o.TLSConfig.ServerName
				}
			default:
				t.Fatalf("client %T", rdb)
			}
			if user != "u" || pass != "p" || server != "redis.internal" {
				t.Errorf("username %q, password %q, TLS server name %q; want u, p, redis.internal", user, pass, server)
			}
		})
	}
	t.Run("TLS off", func(t *testing.T) {
		c := base
		c.Mode, c.TLS = config.ModeStandalone, config.RedisTLS{}
		rdb, err := newRedis(c, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer rdb.Close()
		if tc := rdb.(*redis.Client).Options().TLSConfig; tc != nil {
			t.Errorf("TLS is off and the client has a TLS configuration")
		}
	})
}
