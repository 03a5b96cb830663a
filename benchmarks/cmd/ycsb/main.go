// Command ycsb runs the paper's YCSB evaluation (section 4.1, Figures 1, 5
// and 9, Table 3) on this machine: workloads A, B, C and S against
// PostgreSQL, MariaDB or MongoDB under every policy of package bench, and,
// with --sweep-workers, the paper's applier sweep (Figure 5). It is only
// the entry point: the flags, the runs and the report are package
// ycsbrun's, whose Main documents what a run does and writes.
//
//	go run ./benchmarks/cmd/ycsb [--quick] [--store postgres,mysql,mongodb] [--workloads A,B,C,S]
//	                             [--policies all] [--sweep-workers 1,2,4,8,16] [--compare=false] …
//
// Run `make services` first. See benchmarks/README.md.
package main

import (
	"os"

	"github.com/writeback/writeback/benchmarks/ycsbrun"
)

func main() { os.Exit(ycsbrun.Main(os.Args[1:], os.Stdout, os.Stderr)) }
