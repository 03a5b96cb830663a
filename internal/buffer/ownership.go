package buffer

import (
	"context"
	"time"

	"github.com/writeback/writeback/internal/rscript"
)

// Acquire takes or renews ownership of partition part for instance id.
func (b *Buffer) Acquire(ctx context.Context, part int, id string, lifetime time.Duration) (bool, error) {
	return rscript.Acquire(ctx, b.rdb, b.ownerKey(part), id, lifetime)
}

// Release gives up ownership of partition part if id holds it.
func (b *Buffer) Release(ctx context.Context, part int, id string) error {
	return rscript.Release(ctx, b.rdb, b.ownerKey(part), id)
}

// Heartbeat registers instance id as live for lifetime and returns how many
// sidecars are live.
func (b *Buffer) Heartbeat(ctx context.Context, id string, lifetime time.Duration) (int, error) {
	return rscript.Heartbeat(ctx, b.rdb, b.sidecarsKey(), id, lifetime)
}

// Leave removes instance id from the live sidecars.
func (b *Buffer) Leave(ctx context.Context, id string) error {
	return b.rdb.ZRem(ctx, b.sidecarsKey(), id).Err()
}
