package server

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/writeback/writeback/internal/buffer"
	"github.com/writeback/writeback/internal/document"
)

// memoryState is what the sidecar knows of Redis's memory: whether a
// primary may evict pinned keys, and whether pinned memory is over its
// limit (with its low-water mark).
type memoryState struct {
	evicts   atomic.Bool // some primary's policy is allkeys-*
	over     bool        // pinned memory over writeback.pinnedMemoryLimit; watch's own
	lastWarn string      // the last maxmemory warning, not repeated; checkMemory's own
}

// checkMemory re-reads every primary's maxmemory and eviction policy (a
// failover or a CONFIG SET may have changed them since the start): an
// allkeys-* policy, which could evict buffered writes, forces write-through
// until it is fixed; a pinnedMemoryLimit that is not clearly below a
// primary's maxmemory is warned about. A node whose CONFIG cannot be read
// was warned about at start.
func (s *Core) checkMemory(ctx context.Context) {
	var mu sync.Mutex
	evicts, policy, least := false, "", int64(0)
	_ = s.buf.ForEachNode(ctx, func(ctx context.Context, node redis.Cmdable) error {
		mc, err := buffer.ReadMemoryConfig(ctx, node)
		if err != nil {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		if mc.Evicts() {
			evicts, policy = true, mc.Policy
		}
		if mc.MaxMemory > 0 && (least == 0 || mc.MaxMemory < least) {
			least = mc.MaxMemory
		}
		return nil
	})
	s.setEvicts(evicts, policy)
	limit := int64(s.cfg.Writeback.PinnedMemoryLimit)
	warn := ""
	if least > 0 && limit > least*8/10 {
		warn = fmt.Sprintf("writeback.pinnedMemoryLimit (%d bytes) is not clearly below Redis's maxmemory (%d bytes on the smallest primary): buffered writes could fill Redis before the sidecar falls back to write-through; set it to at most 80%% of maxmemory", limit, least)
	}
	if warn != s.mem.lastWarn {
		s.mem.lastWarn = warn
		if warn != "" {
			s.warn(warn)
		}
	}
}

// setEvicts records whether a primary may evict pinned keys; the watch
// loop's next fallback applies it.
func (s *Core) setEvicts(evicts bool, policy string) {
	if s.mem.evicts.Swap(evicts) == evicts {
		return
	}
	if evicts {
		s.log.Error("a Redis primary's maxmemory-policy is "+policy+", which can evict buffered writes: write-back collections and queues write through until it is noeviction or volatile-* (CONFIG SET maxmemory-policy noeviction)", "policy", policy)
		s.m.EvictionUnsafe.Set(1)
	} else {
		s.log.Info("every Redis primary's maxmemory-policy keeps buffered writes again")
		s.m.EvictionUnsafe.Set(0)
	}
}

// checkNewServer is the guard's check of a server the sidecar has just
// connected to (a failover): its eviction policy, at once.
func (s *Core) checkNewServer(ctx context.Context, cn redis.Cmdable) {
	if mc, err := buffer.ReadMemoryConfig(ctx, cn); err == nil && mc.Evicts() {
		s.setEvicts(true, mc.Policy)
	}
}

// fallback switches write-back collections and queue families to
// write-through while pinned memory is over writeback.pinnedMemoryLimit
// (back once it drains below 80 % of it) or a primary may evict pinned keys.
func (s *Core) fallback(pinned, limit int64) {
	switch {
	case !s.mem.over && pinned > limit:
		s.mem.over = true
		s.log.Warn("pinned memory is above writeback.pinnedMemoryLimit: write-back collections and queues write through until the buffer drains", "pinnedBytes", pinned, "limit", limit)
	case s.mem.over && pinned <= limit*8/10:
		s.mem.over = false
		s.log.Info("pinned memory is back below 80% of writeback.pinnedMemoryLimit: write-back again", "pinnedBytes", pinned, "limit", limit)
	}
	on := s.mem.over || s.mem.evicts.Load()
	if on == s.svc.Fallback() {
		return
	}
	s.svc.SetFallback(on)
	for name, c := range s.svc.Collections() {
		if c.Policy == document.WriteBack {
			s.m.WriteThroughFallback.WithLabelValues(name).Set(map[bool]float64{true: 1}[on])
		}
	}
}
