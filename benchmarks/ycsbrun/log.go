package ycsbrun

import (
	"context"
	"io"
	"log/slog"
	"sync"
)

// sidecarLog is the logger of a store's sidecars: warnings and errors to w,
// each distinct message once (every run starts a sidecar, and each would
// repeat, say, that Redis has no persistence).
func sidecarLog(w io.Writer) *slog.Logger {
	h := slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn})
	return slog.New(&onceHandler{Handler: h, seen: &seen{msgs: map[string]bool{}}})
}

// seen are the messages logged so far, shared by a handler and those its
// WithAttrs and WithGroup derive.
type seen struct {
	mu   sync.Mutex // guards msgs
	msgs map[string]bool
}

// first reports whether msg is new, and remembers it.
func (s *seen) first(msg string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.msgs[msg] {
		return false
	}
	s.msgs[msg] = true
	return true
}

type onceHandler struct {
	slog.Handler
	seen *seen
}

func (h *onceHandler) Handle(ctx context.Context, r slog.Record) error {
	if !h.seen.first(r.Message) {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h *onceHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &onceHandler{Handler: h.Handler.WithAttrs(as), seen: h.seen}
}

func (h *onceHandler) WithGroup(name string) slog.Handler {
	return &onceHandler{Handler: h.Handler.WithGroup(name), seen: h.seen}
}
