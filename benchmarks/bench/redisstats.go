package bench

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// scriptCommands are the commands that run Lua: their time in INFO
// commandstats includes the commands the scripts call, which commandstats
// also counts on their own.
var scriptCommands = []string{"evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro"}

// ScriptTime reads the time Redis has spent running scripts since its
// statistics were last reset (INFO commandstats: wall time inside Redis,
// the commands the scripts call included). Differences over a window are
// issue 18's "Redis time per buffered write" once divided by the writes.
func ScriptTime(ctx context.Context, rdb redis.Cmdable) (time.Duration, error) {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, err
	}
	return scriptTime(info), nil
}

// scriptTime sums the usec of the script commands in an INFO commandstats
// reply, whose lines read "cmdstat_<name>:calls=N,usec=N,…".
func scriptTime(info string) time.Duration {
	var usec int64
	for line := range strings.SplitSeq(info, "\n") {
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, isCmd := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isCmd || !slices.Contains(scriptCommands, name) {
			continue
		}
		for field := range strings.SplitSeq(stats, ",") {
			if v, ok := strings.CutPrefix(field, "usec="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err == nil {
					usec += n
				}
			}
		}
	}
	return time.Duration(usec) * time.Microsecond
}
