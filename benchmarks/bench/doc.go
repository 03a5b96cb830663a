// Package bench is what the benchmark commands share: the policies they
// compare and the database's own asynchronous commit, the frame of a
// command (flags, signals, exit codes), progress lines, samplers, tables,
// JSON and gonum plots. It holds no workload and starts no sidecar, and it
// changes nothing in the services except MySQLAsync's global setting,
// which it hands back a way to restore.
package bench
