package server

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/writeback/writeback/internal/bgt"
)

// guard checks every Redis server the sidecar connects to, before the first
// command on the connection, for data older than the stores applied
// (bgt.Applier.CheckNode): Redis restarted from an older snapshot, or a
// failover to a lagging replica. A restart or a failover drops every
// connection, and a new server has a new run_id, so the check runs once per
// server (run_id) and no write reaches it before the check is done. A
// connection whose check fails is refused: the request that dialled it gets
// an error, nothing buffered.
type guard struct {
	mu      sync.Mutex
	app     *bgt.Applier        // nil until the applier exists: nothing to check against yet
	checked map[string]struct{} // run_ids checked
	// onNew is called with every new server after the check (the memory
	// policy's check).
	onNew func(context.Context, redis.Cmdable)
}

func newGuard() *guard { return &guard{checked: map[string]struct{}{}} }

// start arms the guard: from now on every new server is checked. The caller
// checks the servers it is already connected to (Applier.Prepare).
func (g *guard) start(app *bgt.Applier, onNew func(context.Context, redis.Cmdable)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.app, g.onNew = app, onNew
}

// onConnect is the clients' OnConnect hook.
func (g *guard) onConnect(ctx context.Context, cn *redis.Conn) error {
	g.mu.Lock()
	armed := g.app != nil
	g.mu.Unlock()
	if !armed {
		return nil
	}
	// INFO's default sections hold server and replication on every Redis
	// version (several section arguments need Redis 7).
	info, err := cn.Info(ctx).Result()
	if err != nil {
		return fmt.Errorf("reading the Redis server's identity: %w", err)
	}
	id, mode, role := infoField(info, "run_id"), infoField(info, "redis_mode"), infoField(info, "role")
	if mode == "sentinel" || role != "master" {
		return nil // writes only ever go to primaries
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.checked[id]; ok {
		return nil
	}
	// One check at a time: the others wait for it rather than write first.
	// A store that is down must not keep Redis away: the floors last read
	// (at start at the latest) catch any rollback below them.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	f, err := g.app.Floors(sctx)
	cancel()
	if err != nil && f.Part == nil {
		return err
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := g.app.CheckNode(cctx, cn, f); err != nil {
		return err
	}
	g.onNew(cctx, cn)
	g.checked[id] = struct{}{}
	return nil
}

// infoField returns the value of field in an INFO reply.
func infoField(info, field string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
