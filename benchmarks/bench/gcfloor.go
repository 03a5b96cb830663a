package bench

import (
	"fmt"
	"os"

	"github.com/writeback/writeback/internal/config"
	"github.com/writeback/writeback/internal/gcfloor"
)

// GCFloorEnv overrides, for a comparison, the collector's heap floor that
// HostSidecars sets: a size such as 64MiB, or 0 for Go's own collector.
const GCFloorEnv = "WRITEBACK_BENCH_GC_HEAP_FLOOR"

// HostSidecars makes this process's collector run as `writeback serve`'s
// does, with config's default gcHeapFloor (or GCFloorEnv's): the
// benchmarks run their sidecars and appliers in their own process, beside
// the clients and the direct references they are compared with. It returns
// the function that restores Go's own collector.
func HostSidecars() (stop func(), err error) {
	floor := config.Default().GCHeapFloor
	if s, ok := os.LookupEnv(GCFloorEnv); ok {
		if floor, err = config.ParseByteSize(s); err != nil || floor < 0 || floor > gcfloor.MaxFloor {
			return nil, fmt.Errorf("%s=%q is not a heap floor; use a size such as 64MiB, or 0 for none", GCFloorEnv, s)
		}
	}
	return gcfloor.Start(uint64(floor)).Stop, nil
}
