package buffer

import (
	"context"
	"time"
)

// Acquire takes or renews ownership of partition part for instance id.
func (b *Buffer) Acquire(ctx context.Context, part int, id string, lifetime time.Duration) (bool, error) {
	n, err := acquireScript.Run(ctx, b.rdb, []string{b.ownerKey(part)}, id, lifetime.Milliseconds()).Int64()
	return n == 1, err
}

// Release gives up ownership of partition part if id holds it.
func (b *Buffer) Release(ctx context.Context, part int, id string) error {
	return releaseScript.Run(ctx, b.rdb, []string{b.ownerKey(part)}, id).Err()
}

// Heartbeat registers instance id as live for lifetime and returns how many
// sidecars are live.
func (b *Buffer) Heartbeat(ctx context.Context, id string, lifetime time.Duration) (int, error) {
	n, err := heartbeatScript.Run(ctx, b.rdb, []string{b.sidecarsKey()}, id, lifetime.Milliseconds()).Int64()
	return int(n), err
}

// Leave removes instance id from the live sidecars.
func (b *Buffer) Leave(ctx context.Context, id string) error {
	return b.rdb.ZRem(ctx, b.sidecarsKey(), id).Err()
}
