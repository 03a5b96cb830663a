package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/writeback/writeback/pkg/client"
)

// DefaultAddr is the sidecar that flush and status talk to by default.
const DefaultAddr = "http://127.0.0.1:8480"

// flushGrace is how much longer than --timeout flush waits for the answer:
// the sidecar stops at the timeout and then still has to count and reply.
const flushGrace = 15 * time.Second

type flushOptions struct {
	lookupEnv LookupEnv
	addr      string
	token     string
	timeout   time.Duration
	out       io.Writer
}

// NewCmdFlush builds "writeback flush".
func NewCmdFlush(lookupEnv LookupEnv) *cobra.Command {
	opts := &flushOptions{lookupEnv: lookupEnv}
	cmd := &cobra.Command{
		Use:   "flush [--addr URL] [--timeout 60s]",
		Short: "Apply every pending write now; exit 0 when drained",
		Long: `Ask a running sidecar to apply every pending write to the stores now and
wait until nothing is pending or --timeout passes. Exits 0 when drained,
1 otherwise. Use it before maintenance of a store or of Redis.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.out = cmd.OutOrStdout()
			if err := opts.complete(cmd); err != nil {
				return usageError(err)
			}
			if err := opts.validate(); err != nil {
				return usageError(err)
			}
			return failed(runFlush(cmd.Context(), opts))
		},
	}
	addClientFlags(cmd, &opts.addr, &opts.token)
	addAdminFlag(cmd)
	cmd.Flags().DurationVar(&opts.timeout, "timeout", 60*time.Second, "how long to wait for the pending writes to drain (env WRITEBACK_TIMEOUT)")
	return cmd
}

// addClientFlags registers the flags of commands that talk to a sidecar.
func addClientFlags(cmd *cobra.Command, addr, token *string) {
	cmd.Flags().StringVar(addr, "addr", DefaultAddr, "base URL of the sidecar's API (env WRITEBACK_ADDR)")
	cmd.Flags().StringVar(token, "token", "", "bearer token of the API (env WRITEBACK_TOKEN, else WRITEBACK_AUTH_TOKEN)")
}

// addAdminFlag registers --admin-token on a command that calls an
// administrative endpoint (flush, dead letters), which needs the sidecar's
// auth.adminToken when one is set.
func addAdminFlag(cmd *cobra.Command) {
	cmd.Flags().String(flagAdminToken, "", "admin token of the API, needed when the sidecar sets auth.adminToken; sent instead of --token (env WRITEBACK_ADMIN_TOKEN, else WRITEBACK_AUTH_ADMIN_TOKEN)")
}

const flagAdminToken = "admin-token"

// completeClient fills the client flags from the environment. The token
// falls back to WRITEBACK_AUTH_TOKEN, the sidecar's own setting, so that
// flush and status work unchanged next to it. A command with --admin-token
// sends the admin token instead when one is given (or set in the
// sidecar's WRITEBACK_AUTH_ADMIN_TOKEN).
func completeClient(cmd *cobra.Command, lookupEnv LookupEnv, token *string) error {
	if err := applyEnv(cmd.Flags(), lookupEnv); err != nil {
		return err
	}
	if *token == "" {
		if v, ok := lookupEnv("WRITEBACK_AUTH_TOKEN"); ok {
			*token = v
		}
	}
	if f := cmd.Flags().Lookup(flagAdminToken); f != nil {
		admin := f.Value.String()
		if admin == "" {
			admin, _ = lookupEnv("WRITEBACK_AUTH_ADMIN_TOKEN")
		}
		if admin != "" {
			*token = admin
		}
	}
	return nil
}

func (o *flushOptions) complete(cmd *cobra.Command) error {
	return completeClient(cmd, o.lookupEnv, &o.token)
}

func (o *flushOptions) validate() error {
	if o.timeout <= 0 {
		return fmt.Errorf("--timeout %s is not positive; use a duration such as 60s", o.timeout)
	}
	return nil
}

func runFlush(ctx context.Context, opts *flushOptions) error {
	ctx, cancel := context.WithTimeout(ctx, opts.timeout+flushGrace)
	defer cancel()
	c := client.New(opts.addr, client.WithToken(opts.token))
	res, err := c.Flush(ctx, opts.timeout)
	if err != nil {
		return describe(opts.addr, "flush", err)
	}
	fmt.Fprintf(opts.out, "applied %d %s; %d pending, %d dead %s\n",
		res.Applied, plural(res.Applied, "change", "changes"), res.Pending,
		res.DeadLetters, plural(res.DeadLetters, "letter", "letters"))
	if s := res.Sessions; s != nil {
		fmt.Fprintf(opts.out, "applied %d %s; %d pending, %d stopped %s\n",
			s.Applied, plural(s.Applied, "session", "sessions"), s.Pending, s.Stopped, plural(s.Stopped, "queue", "queues"))
	}
	if res.DeadLetters > 0 {
		fmt.Fprintf(opts.out, "%d %s the stores rejected %s in the dead-letter list; see writeback status\n",
			res.DeadLetters, plural(res.DeadLetters, "change", "changes"), plural(res.DeadLetters, "is", "are"))
	}
	if s := res.Sessions; s != nil && s.Stopped > 0 {
		fmt.Fprintf(opts.out, "%d %s stopped by a session the store rejected; see writeback sessions deadletters list\n",
			s.Stopped, plural(s.Stopped, "queue is", "queues are"))
	}
	if !res.Drained {
		if s := res.Sessions; s != nil && res.Pending == 0 {
			return fmt.Errorf("%d %s still pending after %s; run writeback flush again with a longer --timeout, or writeback sessions status to see why",
				s.Pending, plural(s.Pending, "session is", "sessions are"), opts.timeout)
		}
		return fmt.Errorf("%d %s still pending after %s; run writeback flush again with a longer --timeout, or writeback status to see why",
			res.Pending, plural(res.Pending, "change is", "changes are"), opts.timeout)
	}
	fmt.Fprintln(opts.out, "drained")
	return nil
}

// describe turns a failed call to the sidecar into a sentence that says
// what to do.
func describe(addr, what string, err error) error {
	var ce *client.Error
	switch {
	case errors.As(err, &ce) && ce.StatusCode == 401:
		return fmt.Errorf("%s: the sidecar at %s refused the token (%s); pass --token or set WRITEBACK_TOKEN", what, addr, ce.Message)
	case errors.As(err, &ce) && ce.StatusCode == 403:
		return fmt.Errorf("%s: the sidecar at %s needs its admin token for this; pass --admin-token or set WRITEBACK_ADMIN_TOKEN", what, addr)
	case errors.As(err, &ce):
		return fmt.Errorf("%s: the sidecar at %s answered %d %s: %s", what, addr, ce.StatusCode, ce.Code, ce.Message)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: the sidecar at %s did not answer in time", what, addr)
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("%s: interrupted", what)
	default:
		return fmt.Errorf("%s: cannot reach the sidecar at %s (%v); start writeback serve or pass --addr", what, addr, err)
	}
}

func plural[N int | int64](n N, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
