// Command bg runs the BG social networking benchmark (package bg) on
// MongoDB and PostgreSQL under every policy of package bench, and finds
// each one's SoAR while validating every read and the stores' final state.
// It is only the entry point: the flags, the runs and the report are
// package bgrun's.
//
//	go run ./benchmarks/cmd/bg [--quick] [--store mongodb,postgres] [--policies all] …
//
// Run `make services` first. See benchmarks/README.md.
package main

import (
	"os"

	"github.com/writeback/writeback/benchmarks/bgrun"
)

func main() { os.Exit(bgrun.Main(os.Args[1:], os.Stdout, os.Stderr)) }
