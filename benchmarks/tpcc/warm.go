package tpcc

import (
	"context"
	"fmt"

	"golang.org/x/sync/errgroup"

	"github.com/writeback/writeback/pkg/client"
)

// warmBatch is the keys of one multi-read of Warm.
const warmBatch = 500

// Warm reads, outside any session, every entry the transactions read that
// no transaction drops — warehouses, districts, customers, the customers of
// each last name, items and stock — so that a run starts with the cache as
// warm as the database's buffer pool is after the load. It returns how
// many entries it read.
func Warm(ctx context.Context, c *client.Client, s Scale) (int, error) {
	var keys []string
	for w := 1; w <= s.Warehouses; w++ {
		keys = append(keys, MapWarehouse.Key(w))
		for d := 1; d <= Districts; d++ {
			keys = append(keys, MapDistrict.Key(w, d), MapOldestNewOrder.Key(w, d))
			for cu := 1; cu <= s.Customers; cu++ {
				keys = append(keys, MapCustomer.Key(w, d, cu))
			}
			for n := range lastNames(s) {
				keys = append(keys, MapCustomersByName.Key(w, d, LastName(n)))
			}
		}
		for i := 1; i <= s.Items; i++ {
			keys = append(keys, MapStock.Key(w, i))
		}
	}
	for i := 1; i <= s.Items; i++ {
		keys = append(keys, MapItem.Key(i))
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(4)
	for at := 0; at < len(keys); at += warmBatch {
		batch := keys[at:min(at+warmBatch, len(keys))]
		g.Go(func() error {
			if _, err := c.CacheMany(gctx, batch, "", false); err != nil {
				return fmt.Errorf("tpcc: warming the cache: %w", err)
			}
			return nil
		})
	}
	return len(keys), g.Wait()
}
