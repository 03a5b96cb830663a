package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Command is the frame of a benchmark command: parse reads its flags, then
// exec runs it in a process that collects as a sidecar's does
// (HostSidecars), with ctx, cancelled on SIGINT and SIGTERM so that an
// interrupted run still prints what it measured. It returns exec's exit
// code, 0 for -h, or 2 for bad flags (after printing the error, prefixed by
// the command's name).
func Command[O any](ctx context.Context, name string, args []string, stdout, stderr io.Writer,
	parse func(args []string, stderr io.Writer) (O, error), exec func(ctx context.Context, o O, stdout, stderr io.Writer) int) int {
	o, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, name+":", err)
		return 2
	}
	unhost, err := HostSidecars()
	if err != nil {
		fmt.Fprintln(stderr, name+":", err)
		return 2
	}
	defer unhost()
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	return exec(ctx, o, stdout, stderr)
}

// Parse parses args with fs. A command takes flags only: any other
// argument is an error.
func Parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q; every option is a flag (see -h)", fs.Arg(0))
	}
	return nil
}

// Logf returns a printf to w that ends each message with a newline: a
// command's progress and log lines.
func Logf(w io.Writer) func(format string, args ...any) {
	return func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
}

// Given is the set of flags the command line set, by name.
func Given(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// QuickDefaults sets each flag named in values that the command line did
// not set to its value there, written as on the command line: --quick's
// smaller sizes, which flags given explicitly override.
func QuickDefaults(fs *flag.FlagSet, values map[string]string) error {
	given := Given(fs)
	for name, v := range values {
		if given[name] {
			continue
		}
		if err := fs.Set(name, v); err != nil {
			return fmt.Errorf("--quick: --%s %s: %w", name, v, err)
		}
	}
	return nil
}

// ParseList parses a flag's comma-separated list of names from known, in
// the order given, without repetitions; none at all is an error.
func ParseList(flagName, s string, known []string) ([]string, error) {
	var out []string
	for _, x := range strings.Split(s, ",") {
		x = strings.TrimSpace(x)
		if x == "" {
			continue
		}
		if !slices.Contains(known, x) {
			return nil, fmt.Errorf("%s: unknown %q; use some of %s", flagName, x, strings.Join(known, ","))
		}
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: none given; use some of %s", flagName, strings.Join(known, ","))
	}
	return out, nil
}

// ParseInts parses a flag's comma-separated list of whole numbers from 1
// to most, in the order given; "" is none.
func ParseInts(flagName, s string, most int) ([]int, error) {
	var out []int
	for _, x := range strings.Split(s, ",") {
		x = strings.TrimSpace(x)
		if x == "" {
			continue
		}
		n, err := strconv.Atoi(x)
		if err != nil || n < 1 || n > most {
			return nil, fmt.Errorf("%s: %q is not a number from 1 to %d", flagName, x, most)
		}
		out = append(out, n)
	}
	return out, nil
}

// NewEnvironment describes this machine and process for a run of command
// starting now.
func NewEnvironment(command string, quick bool) Environment {
	host, _ := os.Hostname()
	return Environment{Started: time.Now().UTC(), Host: host, CPUs: runtime.NumCPU(), Go: runtime.Version(),
		Command: command, Quick: quick}
}

// PingRedis checks that Redis answers at addr, so that a command stops
// before loading anything when the services are down, saying how to start
// them.
func PingRedis(ctx context.Context, addr string) error {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("cannot connect to Redis at %s (%v); start the services with `make services`", addr, err)
	}
	return nil
}

// StartCPUProfile writes a CPU profile of this process to path until stop
// is called.
func StartCPUProfile(path string) (stop func(), err error) {
	return record(path, pprof.StartCPUProfile, pprof.StopCPUProfile)
}

// WriteAllocProfile writes the allocations this process made so far (the
// "allocs" profile: sampled, with their call stacks) to path.
func WriteAllocProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// NamedPath is path with "-" and name before its extension: the file of one
// run of several that a --cpuprofile or --trace path names.
func NamedPath(path, name string) string {
	ext := filepath.Ext(path)
	return strings.TrimSuffix(path, ext) + "-" + name + ext
}

// StartTrace writes an execution trace of this process to path until stop
// is called.
func StartTrace(path string) (stop func(), err error) {
	return record(path, trace.Start, trace.Stop)
}

// record creates path and has start write to it until stop.
func record(path string, start func(io.Writer) error, stop func()) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := start(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { stop(); f.Close() }, nil
}
