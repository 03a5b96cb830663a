// Command tpcc runs TPC-C as sessions through a writeback sidecar (one queue
// per warehouse, as in the paper's section 4.3; over HTTP, or in-process
// through pkg/writeback with --policies write-back-embedded) beside the
// database alone, and checks TPC-C's consistency conditions 1–5, 7 and 10
// after each run. It is only the entry point: the flags, the runs and the
// report are package tpccrun's.
//
//	go run ./benchmarks/cmd/tpcc --quick
//	go run ./benchmarks/cmd/tpcc --warehouses 4 --terminals 10 --duration 60s
//	go run ./benchmarks/cmd/tpcc --quick --store mysql --store-latency 1ms
//
// Run `make services` first. See benchmarks/README.md.
package main

import (
	"os"

	"github.com/writeback/writeback/benchmarks/tpccrun"
)

func main() { os.Exit(tpccrun.Main(os.Args[1:], os.Stdout, os.Stderr)) }
