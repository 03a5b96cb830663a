// Package cli owns the writeback command line: one file per command (serve,
// flush, status, version), each with an options struct, NewCmdX and runX.
// Commands turn flags and environment into options, call the packages that
// do the work, and map failures to exit codes; they hold no logic of their
// own.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/writeback/writeback/internal/config"
)

// Exit codes.
const (
	ExitOK      = 0 // success
	ExitFailure = 1 // the command ran and failed
	ExitUsage   = 2 // bad flags, arguments or configuration
)

// LookupEnv reads one environment variable, like os.LookupEnv.
type LookupEnv func(key string) (string, bool)

// Main runs the command line of the process and returns its exit code. Its
// context is cancelled by the first SIGINT or SIGTERM; a second one kills
// the process the default way.
func Main() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop() // restore the default handlers so a second signal is not swallowed
	}()
	return Execute(ctx, os.Args[1:], os.Stdout, os.Stderr, os.LookupEnv)
}

// Execute runs the command line args with the given streams and environment
// and returns the exit code. Errors go to errOut as "writeback: <sentence>",
// one line per problem.
func Execute(ctx context.Context, args []string, out, errOut io.Writer, lookupEnv LookupEnv) int {
	root := NewCmdRoot(lookupEnv)
	root.SetArgs(args)
	root.SetOut(out)
	root.SetErr(errOut)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	// An error not tagged by a command comes from cobra itself: an unknown
	// command or flag, a bad flag value, extra arguments.
	code, hint := ExitUsage, true
	var ee *exitError
	if errors.As(err, &ee) {
		code, hint = ee.code, false
	}
	msg := strings.TrimSpace(err.Error())
	if hint {
		// cobra's own message, with its "Did you mean" suggestions below
		fmt.Fprintf(errOut, "writeback: %s\n", msg)
	} else {
		// one problem per line (config.Validate joins them)
		for _, line := range strings.Split(msg, "\n") {
			fmt.Fprintf(errOut, "writeback: %s\n", line)
		}
	}
	if hint && cmd != nil {
		fmt.Fprintf(errOut, "Run '%s --help' for usage.\n", cmd.CommandPath())
	}
	return code
}

// NewCmdRoot builds the writeback command and its subcommands.
func NewCmdRoot(lookupEnv LookupEnv) *cobra.Command {
	if lookupEnv == nil {
		lookupEnv = func(string) (string, bool) { return "", false }
	}
	root := &cobra.Command{
		Use:   "writeback",
		Short: "A write-back cache sidecar in front of PostgreSQL, MySQL and MongoDB",
		Long: `writeback buffers writes in Redis, acknowledges them once they are durable
there, and applies them to the database in the background, exactly once and
in order. Reads always see the latest acknowledged write.

Every flag has an environment twin WRITEBACK_<FLAG> (dashes as underscores);
precedence is flag > environment > configuration file > default.`,
		SilenceUsage:      true,
		SilenceErrors:     true,
		CompletionOptions: cobra.CompletionOptions{HiddenDefaultCmd: true},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return err })
	root.AddCommand(
		NewCmdServe(lookupEnv),
		NewCmdFlush(lookupEnv),
		NewCmdStatus(lookupEnv),
		NewCmdDeadLetters(lookupEnv),
		NewCmdSessions(lookupEnv),
		NewCmdVersion(),
	)
	return root
}

// exitError is a command's failure with the exit code it calls for.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usageError marks err as bad usage or configuration (exit 2).
func usageError(err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: ExitUsage, err: err}
}

// failed marks err, unless already marked, as a runtime failure (exit 1).
func failed(err error) error {
	var ee *exitError
	if err == nil || errors.As(err, &ee) {
		return err
	}
	return &exitError{code: ExitFailure, err: err}
}

// applyEnv sets every flag of fs not given on the command line from its
// environment twin WRITEBACK_<FLAG>, if set and not empty. serve does not
// use it: config.Load reads the twins of the configuration flags itself.
func applyEnv(fs *pflag.FlagSet, lookupEnv LookupEnv) error {
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed || f.Name == "help" {
			return
		}
		name := config.EnvName(f.Name)
		if v, ok := lookupEnv(name); ok && v != "" {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("%s: %v", name, e)
			}
		}
	})
	return err
}
