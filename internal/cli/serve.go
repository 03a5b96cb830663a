package cli

import (
	"context"
	"io"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/writeback/writeback/internal/config"
	"github.com/writeback/writeback/internal/gcfloor"
	"github.com/writeback/writeback/internal/server"
)

type serveOptions struct {
	lookupEnv LookupEnv
	flags     *pflag.FlagSet // bound by config.BindFlags
	errOut    io.Writer      // the log
}

// NewCmdServe builds "writeback serve".
func NewCmdServe(lookupEnv LookupEnv) *cobra.Command {
	opts := &serveOptions{lookupEnv: lookupEnv}
	cmd := &cobra.Command{
		Use:   "serve [--config writeback.yaml]",
		Short: "Run the sidecar: HTTP API, appliers and metrics",
		Long: `Run the sidecar until SIGINT or SIGTERM, then shut down gracefully: stop
accepting, finish in-flight requests, release the partitions to the other
sidecars.

The configuration comes from the YAML file named by --config (or
WRITEBACK_CONFIG), overridden by the environment and then by the flags below.
See writeback.example.yaml for every setting.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.flags = cmd.Flags()
			opts.errOut = cmd.ErrOrStderr()
			return failed(runServe(cmd.Context(), opts))
		},
	}
	config.BindFlags(cmd.Flags())
	return cmd
}

func runServe(ctx context.Context, opts *serveOptions) error {
	cfg, err := config.Load("", opts.lookupEnv, opts.flags)
	if err != nil {
		return usageError(err)
	}
	if err := cfg.Validate(); err != nil {
		return usageError(err)
	}
	log := newLogger(opts.errOut, cfg.Log)

	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)

	version, commit := BuildVersion()
	server.Version, server.Commit = version, commit
	log.Info("writeback starting", "version", version, "commit", commit, "instance", cfg.Writeback.InstanceID)
	floor := gcfloor.Start(uint64(cfg.GCHeapFloor))
	defer floor.Stop()
	srv, err := server.New(ctx, cfg, reg, log)
	if err != nil {
		return err
	}
	return srv.Run(ctx)
}

// newLogger returns the process's logger as the log section asks (both
// values were validated).
func newLogger(w io.Writer, c config.Log) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.Level)) // debug, info, warn, error
	o := &slog.HandlerOptions{Level: level}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, o))
	}
	return slog.New(slog.NewTextHandler(w, o))
}
