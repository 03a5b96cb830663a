package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/writeback/writeback/pkg/client"
)

type sessionsOptions struct {
	lookupEnv LookupEnv
	addr      string
	token     string
	limit     int
	timeout   time.Duration
	sel       client.QueueAction
	out       io.Writer
}

func (o *sessionsOptions) client(timeout time.Duration) *client.Client {
	return client.New(o.addr, client.WithToken(o.token), client.WithHTTPClient(&http.Client{Timeout: timeout}))
}

// NewCmdSessions builds "writeback sessions status|flush|deadletters".
func NewCmdSessions(lookupEnv LookupEnv) *cobra.Command {
	opts := &sessionsOptions{lookupEnv: lookupEnv}
	cmd := &cobra.Command{
		Use:   "sessions",
		Short: "Inspect the session queues, apply them now, manage sessions the store rejected",
		Long: `Sessions (Design 2) wait in their queues until an applier runs their SQL in
the store, in commit order. A session the store rejects for good (a
constraint …) stops its queue — order must not be violated — until it is
replayed (after the cause was fixed) or dropped. Other queues go on.`,
	}
	run := func(f func(context.Context, *sessionsOptions) error) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, _ []string) error {
			opts.out = cmd.OutOrStdout()
			if err := completeClient(cmd, opts.lookupEnv, &opts.token); err != nil {
				return usageError(err)
			}
			return failed(f(cmd.Context(), opts))
		}
	}
	status := &cobra.Command{
		Use:   "status",
		Short: "Print pending sessions, queues and stopped queues",
		Args:  cobra.NoArgs,
		RunE:  run(runSessionsStatus),
	}
	addClientFlags(status, &opts.addr, &opts.token)
	flush := &cobra.Command{
		Use:   "flush [--timeout 60s]",
		Short: "Apply every pending session now; exit 0 when only stopped queues hold sessions",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if opts.timeout <= 0 {
				return usageError(fmt.Errorf("--timeout %s is not positive; use a duration such as 60s", opts.timeout))
			}
			return run(runSessionsFlush)(cmd, args)
		},
	}
	addClientFlags(flush, &opts.addr, &opts.token)
	addAdminFlag(flush)
	flush.Flags().DurationVar(&opts.timeout, "timeout", 60*time.Second, "how long to wait for the queues to drain (env WRITEBACK_TIMEOUT)")

	dead := &cobra.Command{
		Use:   "deadletters",
		Short: "List, replay or drop the sessions that stopped their queues",
	}
	list := &cobra.Command{
		Use:   "list [--limit N]",
		Short: "List the sessions the store rejected, with their errors",
		Args:  cobra.NoArgs,
		RunE:  run(runSessionsDeadList),
	}
	list.Flags().IntVar(&opts.limit, "limit", 100, "list at most this many")
	addClientFlags(list, &opts.addr, &opts.token)
	addAdminFlag(list)
	dead.AddCommand(list)
	for _, action := range []string{"replay", "drop"} {
		short := map[string]string{
			"replay": "Restart stopped queues at their rejected session, after fixing its cause",
			"drop":   "Drop the rejected sessions for good and restart their queues",
		}[action]
		c := &cobra.Command{
			Use:   action + " (--queue Q | --all)",
			Short: short,
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, args []string) error {
				if opts.sel.All == (opts.sel.Queue != "") {
					return usageError(errors.New("name one stopped queue with --queue, or all of them with --all"))
				}
				return run(func(ctx context.Context, o *sessionsOptions) error { return runSessionsDeadAction(ctx, o, action) })(cmd, args)
			},
		}
		c.Flags().StringVar(&opts.sel.Queue, "queue", "", "the stopped queue, e.g. bank/3")
		c.Flags().BoolVar(&opts.sel.All, "all", false, "every stopped queue")
		addClientFlags(c, &opts.addr, &opts.token)
		addAdminFlag(c)
		dead.AddCommand(c)
	}
	cmd.AddCommand(status, flush, dead)
	return cmd
}

const sessionsTimeout = 60 * time.Second

func runSessionsStatus(ctx context.Context, opts *sessionsOptions) error {
	ctx, cancel := context.WithTimeout(ctx, sessionsTimeout)
	defer cancel()
	st, err := opts.client(sessionsTimeout).Queues(ctx)
	if err != nil {
		return describe(opts.addr, "sessions status", err)
	}
	tw := tabwriter.NewWriter(opts.out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "pending sessions\t%d\n", st.PendingSessions)
	fmt.Fprintf(tw, "queues with pending sessions\t%d\n", st.Queues)
	fmt.Fprintf(tw, "pinned bytes\t%d\n", st.PinnedBytes)
	fmt.Fprintf(tw, "oldest pending\t%.3fs\n", st.OldestPendingAgeSeconds)
	fmt.Fprintf(tw, "stopped queues\t%d\n", st.StoppedQueues)
	fmt.Fprintf(tw, "owned queue partitions\t%d of %d\n", len(st.OwnedPartitions), st.Partitions)
	for _, f := range st.Families {
		fmt.Fprintf(tw, "family %s\tstore %s, tables %s\n", f.Name, f.Store, strings.Join(f.Tables, ", "))
	}
	for _, d := range st.DeadLetters {
		fmt.Fprintf(tw, "STOPPED %s\tsession %s (seq %d): %s\n", d.Queue, d.Session, d.Seq, d.Error)
	}
	return tw.Flush()
}

func runSessionsFlush(ctx context.Context, opts *sessionsOptions) error {
	ctx, cancel := context.WithTimeout(ctx, opts.timeout+flushGrace)
	defer cancel()
	res, err := opts.client(opts.timeout+flushGrace).FlushQueues(ctx, opts.timeout)
	if err != nil {
		return describe(opts.addr, "flush sessions", err)
	}
	fmt.Fprintf(opts.out, "applied %d %s; %d pending, %d stopped %s\n", res.Applied, plural(res.Applied, "session", "sessions"),
		res.Pending, res.Stopped, plural(res.Stopped, "queue", "queues"))
	if !res.Drained {
		return errors.New("the queues did not drain in time")
	}
	if res.Stopped > 0 {
		return fmt.Errorf("%d %s stopped by sessions the store rejected; see writeback sessions deadletters list", res.Stopped, plural(res.Stopped, "queue is", "queues are"))
	}
	return nil
}

func runSessionsDeadList(ctx context.Context, opts *sessionsOptions) error {
	ctx, cancel := context.WithTimeout(ctx, sessionsTimeout)
	defer cancel()
	dls, err := opts.client(sessionsTimeout).QueueDeadLetters(ctx, opts.limit)
	if err != nil {
		return describe(opts.addr, "session dead letters", err)
	}
	rows := make([]string, len(dls))
	for i, d := range dls {
		rows[i] = fmt.Sprintf("%s\t%s\t%d\t%s\t%s\t%s", d.Queue, d.Session, d.Seq, d.At.Format(time.RFC3339), d.Error, d.Statements)
	}
	return printTable(opts.out, "no stopped queues", "QUEUE\tSESSION\tSEQ\tAT\tERROR\tSTATEMENTS", rows)
}

func runSessionsDeadAction(ctx context.Context, opts *sessionsOptions, action string) error {
	ctx, cancel := context.WithTimeout(ctx, sessionsTimeout)
	defer cancel()
	c := opts.client(sessionsTimeout)
	do := c.ReplayQueues
	if action == "drop" {
		do = c.DropQueueDeadLetters
	}
	n, err := do(ctx, opts.sel)
	if err != nil {
		return describe(opts.addr, action, err)
	}
	verb := map[string]string{"replay": "restarted", "drop": "dropped the rejected session of"}[action]
	fmt.Fprintf(opts.out, "%s %d %s\n", verb, n, plural(int64(n), "queue", "queues"))
	return nil
}
