// Command demo is the project's headline benchmark: the same YCSB
// read/update mix against PostgreSQL or MariaDB alone and through an
// in-process sidecar under each write policy, each run verified against
// the acknowledged writes. It is only the entry point: the flags, the runs
// and the report are package demorun's.
//
//	go run ./benchmarks/cmd/demo [--store postgres|mysql] [--quick] [--json out.json] …
//
// Run `make services` first. See benchmarks/README.md.
package main

import (
	"os"

	"github.com/writeback/writeback/benchmarks/demorun"
)

func main() { os.Exit(demorun.Main(os.Args[1:], os.Stdout, os.Stderr)) }
