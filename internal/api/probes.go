package api

import (
	"context"
	"net/http"
	"time"
)

// notReady is /readyz's reason for a dependency that failed its ping. The
// driver's error can name the user, host and database (a DSN's parts), and
// /readyz needs no token: the error goes to the log only.
const notReady = "unavailable; see the sidecar's log"

func (h *Handler) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	ready := true
	out := map[string]string{"redis": "ok"}
	if err := h.rdb.Ping(ctx).Err(); err != nil {
		h.log.Warn("readyz: Redis did not answer its ping", "err", err)
		out["redis"] = notReady
		h.m.RedisUp.Set(0)
		ready = false
	} else {
		h.m.RedisUp.Set(1)
	}
	for name, st := range h.opt.Stores {
		if err := st.Ping(ctx); err != nil {
			h.log.Warn("readyz: a store did not answer its ping", "store", name, "err", err)
			out["store "+name] = notReady
			h.m.StoreUp.WithLabelValues(name).Set(0)
			ready = false
			continue
		}
		out["store "+name] = "ok"
		h.m.StoreUp.WithLabelValues(name).Set(1)
	}
	code := http.StatusOK
	if !ready {
		code = http.StatusServiceUnavailable
	}
	writeJSON(w, code, out)
}
