package ycsb

import (
	"context"
	"fmt"
	"sync"
)

// Warm reads every record once through the given clients, concurrently,
// client i reading the records ≡ i (mod len(clients)): the paper's runs
// start with a warm cache, and a database's buffer pool warms the same way.
// It returns the first error, naming the record.
func Warm(ctx context.Context, clients []Client, records int64) error {
	var wg sync.WaitGroup
	errs := make([]error, len(clients))
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for rec := int64(i); rec < records; rec += int64(len(clients)) {
				if _, err := c.Read(ctx, Key(rec), false); err != nil {
					errs[i] = fmt.Errorf("ycsb: warming: reading %s: %w", Key(rec), err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
