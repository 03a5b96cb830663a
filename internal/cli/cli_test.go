package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writeback/writeback/pkg/client"
)

// run executes the command line args with the environment env and returns
// the exit code and both outputs.
func run(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	code = Execute(context.Background(), args, &out, &errOut, lookup)
	return code, out.String(), errOut.String()
}

// request is what the fake sidecar saw.
type request struct {
	Method, Path, Auth, Body string
}

// sidecar is an httptest server standing in for the API: it answers every
// request with status and body and records what it saw. It checks the
// commands' use of the client, not the server.
func sidecar(t *testing.T, status int, body string) (*httptest.Server, func() []request) {
	t.Helper()
	var (
		mu   sync.Mutex // guards seen
		seen []request
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, request{r.Method, r.URL.Path, r.Header.Get("Authorization"), string(b)})
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv, func() []request {
		mu.Lock()
		defer mu.Unlock()
		return append([]request(nil), seen...)
	}
}

// deadAddr is an address nothing listens on.
func deadAddr(t *testing.T) string {
	srv := httptest.NewServer(http.NotFoundHandler())
	addr := srv.URL
	srv.Close()
	return addr
}

func TestVersion(t *testing.T) {
	code, out, errOut := run(t, nil, "version")
	assert.Equal(t, ExitOK, code)
	assert.Empty(t, errOut)
	assert.Equal(t, "writeback dev\ncommit:  unknown\ngo:      "+runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH+"\n", out)

	Version, Commit = "v1.2.3", "abc123"
	defer func() { Version, Commit = "dev", "unknown" }()
	_, out, _ = run(t, nil, "version")
	assert.True(t, strings.HasPrefix(out, "writeback v1.2.3\ncommit:  abc123\n"), out)
}

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		wantStderr string
	}{
		{"unknown command", []string{"srve"},
			"writeback: unknown command \"srve\" for \"writeback\"\n\nDid you mean this?\n\tserve\nRun 'writeback --help' for usage.\n"},
		{"unknown flag", []string{"flush", "--adr", "x"},
			"writeback: unknown flag: --adr\nRun 'writeback flush --help' for usage.\n"},
		{"bad flag value", []string{"serve", "--partitions", "x"},
			"writeback: invalid argument \"x\" for \"--partitions\" flag: \"x\" is not a whole number\nRun 'writeback serve --help' for usage.\n"},
		{"extra argument", []string{"status", "now"},
			"writeback: unknown command \"now\" for \"writeback status\"\nRun 'writeback status --help' for usage.\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := run(t, nil, tc.args...)
			assert.Equal(t, ExitUsage, code)
			assert.Empty(t, out)
			assert.Equal(t, tc.wantStderr, errOut)
		})
	}
}

func TestHelp(t *testing.T) {
	code, out, _ := run(t, nil)
	assert.Equal(t, ExitOK, code)
	for _, c := range []string{"serve", "flush", "status", "version"} {
		assert.Contains(t, out, "\n  "+c+" ")
	}
}

func TestServeConfigErrors(t *testing.T) {
	tests := []struct {
		name       string
		env        map[string]string
		args       []string
		wantStderr string
	}{
		{
			name:       "store that does not exist",
			args:       []string{"serve", "--config", "testdata/bad_store.yaml"},
			wantStderr: `writeback: collections.usertable.store: "pgx" is not a configured store; add it under stores or use one of: maria, pg` + "\n",
		},
		{
			name:       "config named by the environment",
			env:        map[string]string{"WRITEBACK_CONFIG": "testdata/bad_store.yaml"},
			args:       []string{"serve"},
			wantStderr: `writeback: collections.usertable.store: "pgx" is not a configured store; add it under stores or use one of: maria, pg` + "\n",
		},
		{
			name: "every problem on its own line",
			args: []string{"serve", "--config", "testdata/many_problems.yaml"},
			wantStderr: `writeback: listen: "nowhere" is not a host:port address; write it like 127.0.0.1:8480 or [::1]:8480` + "\n" +
				"writeback: redis.addrs: no Redis address is configured; list at least one host:port such as 127.0.0.1:6379 (or pass --redis-addrs)\n" +
				"writeback: writeback.workers: 0 is too small; use at least 1 (the default is 4)\n",
		},
		{
			name:       "unknown key",
			args:       []string{"serve", "--config", "testdata/typo.yaml"},
			wantStderr: "writeback: testdata/typo.yaml:3: writeback.batchsize is not a known key; remove it or fix its spelling (writeback takes: applyCuts, applyDelay, batchSize, combineWrites, immutableCache, instanceID, leaseLifetime, leaseWait, maxDeadLetters, maxRetries, nearCache, ownerLease, partitions, pinnedMemoryLimit, pollInterval, retryBackoff, sessionCompaction, sessionTimeout, workers)\n",
		},
		{
			name:       "missing file",
			args:       []string{"serve", "--config", "testdata/nope.yaml"},
			wantStderr: "writeback: config file testdata/nope.yaml does not exist; pass --config (or set WRITEBACK_CONFIG) with the path of your configuration file\n",
		},
		{
			name:       "no Redis at all",
			args:       []string{"serve"},
			wantStderr: "writeback: redis.addrs: no Redis address is configured; list at least one host:port such as 127.0.0.1:6379 (or pass --redis-addrs)\n",
		},
		{
			name:       "flag breaks a valid file",
			args:       []string{"serve", "--config", "testdata/unreachable.yaml", "--redis-mode", "sentinel"},
			wantStderr: "writeback: redis.masterName: sentinel mode needs the name of the master; set it to the name the sentinels monitor\n",
		},
		{
			name:       "environment value that does not parse",
			env:        map[string]string{"WRITEBACK_LEASE_LIFETIME": "half a second"},
			args:       []string{"serve", "--config", "testdata/unreachable.yaml"},
			wantStderr: `writeback: WRITEBACK_LEASE_LIFETIME: "half a second" is not a duration; write it like 500ms, 2s or 1h` + "\n",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := run(t, tc.env, tc.args...)
			assert.Equal(t, ExitUsage, code)
			assert.Empty(t, out)
			assert.Equal(t, tc.wantStderr, errOut)
		})
	}
}

// TestServeRuntimeFailure checks that a valid configuration whose Redis
// cannot be reached is a runtime failure (exit 1), reported as a sentence.
func TestServeRuntimeFailure(t *testing.T) {
	code, out, errOut := run(t, nil, "serve", "--config", "testdata/unreachable.yaml", "--log-level", "error")
	assert.Equal(t, ExitFailure, code)
	assert.Empty(t, out)
	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	assert.True(t, strings.HasPrefix(lines[len(lines)-1], "writeback: "), errOut)
}

func TestFlush(t *testing.T) {
	tests := []struct {
		name       string
		status     int
		body       string
		env        map[string]string
		args       []string
		wantCode   int
		wantStdout string
		wantStderr string
		wantReq    request
	}{
		{
			name: "drained", status: 200, body: `{"applied":120,"pending":0,"deadLetters":0,"drained":true}`,
			wantCode:   ExitOK,
			wantStdout: "applied 120 changes; 0 pending, 0 dead letters\ndrained\n",
			wantReq:    request{Method: "POST", Path: "/v1/flush", Body: `{"timeout":"1m0s"}`},
		},
		{
			name: "drained with dead letters", status: 200, body: `{"applied":1,"pending":0,"deadLetters":1,"drained":true}`,
			args:     []string{"--timeout", "5s", "--token", "s3cret"},
			wantCode: ExitOK,
			wantStdout: "applied 1 change; 0 pending, 1 dead letter\n" +
				"1 change the stores rejected is in the dead-letter list; see writeback status\ndrained\n",
			wantReq: request{Method: "POST", Path: "/v1/flush", Auth: "Bearer s3cret", Body: `{"timeout":"5s"}`},
		},
		{
			name: "not drained", status: 200, body: `{"applied":3,"pending":12,"deadLetters":0,"drained":false}`,
			args:       []string{"--timeout", "2s"},
			wantCode:   ExitFailure,
			wantStdout: "applied 3 changes; 12 pending, 0 dead letters\n",
			wantStderr: "writeback: 12 changes are still pending after 2s; run writeback flush again with a longer --timeout, or writeback status to see why\n",
			wantReq:    request{Method: "POST", Path: "/v1/flush", Body: `{"timeout":"2s"}`},
		},
		{
			name: "with sessions", status: 200,
			body:       `{"applied":2,"pending":0,"deadLetters":0,"drained":true,"sessions":{"applied":1,"pending":0,"stopped":0,"drained":true}}`,
			wantCode:   ExitOK,
			wantStdout: "applied 2 changes; 0 pending, 0 dead letters\napplied 1 session; 0 pending, 0 stopped queues\ndrained\n",
			wantReq:    request{Method: "POST", Path: "/v1/flush", Body: `{"timeout":"1m0s"}`},
		},
		{
			name: "sessions still pending", status: 200,
			body:       `{"applied":0,"pending":0,"deadLetters":0,"drained":false,"sessions":{"applied":40,"pending":7,"stopped":0,"drained":false}}`,
			args:       []string{"--timeout", "2s"},
			wantCode:   ExitFailure,
			wantStdout: "applied 0 changes; 0 pending, 0 dead letters\napplied 40 sessions; 7 pending, 0 stopped queues\n",
			wantStderr: "writeback: 7 sessions are still pending after 2s; run writeback flush again with a longer --timeout, or writeback sessions status to see why\n",
			wantReq:    request{Method: "POST", Path: "/v1/flush", Body: `{"timeout":"2s"}`},
		},
		{
			name: "a stopped queue", status: 200,
			body:     `{"applied":0,"pending":0,"deadLetters":0,"drained":false,"sessions":{"applied":0,"pending":3,"stopped":1,"drained":true}}`,
			wantCode: ExitFailure,
			wantStdout: "applied 0 changes; 0 pending, 0 dead letters\napplied 0 sessions; 3 pending, 1 stopped queue\n" +
				"1 queue is stopped by a session the store rejected; see writeback sessions deadletters list\n",
			wantStderr: "writeback: 3 sessions are still pending after 1m0s; run writeback flush again with a longer --timeout, or writeback sessions status to see why\n",
			wantReq:    request{Method: "POST", Path: "/v1/flush", Body: `{"timeout":"1m0s"}`},
		},
		{
			name: "environment twins", status: 200, body: `{"drained":true}`,
			env:        map[string]string{"WRITEBACK_TIMEOUT": "3s", "WRITEBACK_TOKEN": "from-env", "WRITEBACK_AUTH_TOKEN": "not-this"},
			wantCode:   ExitOK,
			wantStdout: "applied 0 changes; 0 pending, 0 dead letters\ndrained\n",
			wantReq:    request{Method: "POST", Path: "/v1/flush", Auth: "Bearer from-env", Body: `{"timeout":"3s"}`},
		},
		{
			name: "the sidecar's own token", status: 200, body: `{"drained":true}`,
			env:        map[string]string{"WRITEBACK_AUTH_TOKEN": "sidecar"},
			wantCode:   ExitOK,
			wantStdout: "applied 0 changes; 0 pending, 0 dead letters\ndrained\n",
			wantReq:    request{Method: "POST", Path: "/v1/flush", Auth: "Bearer sidecar", Body: `{"timeout":"1m0s"}`},
		},
		{
			name: "flag over environment", status: 200, body: `{"drained":true}`,
			env:        map[string]string{"WRITEBACK_TIMEOUT": "3s"},
			args:       []string{"--timeout=4s"},
			wantCode:   ExitOK,
			wantStdout: "applied 0 changes; 0 pending, 0 dead letters\ndrained\n",
			wantReq:    request{Method: "POST", Path: "/v1/flush", Body: `{"timeout":"4s"}`},
		},
		{
			name: "refused token", status: 401, body: `{"error":{"code":"unauthenticated","message":"missing bearer token"}}`,
			wantCode:   ExitFailure,
			wantStderr: "writeback: flush: the sidecar at ADDR refused the token (missing bearer token); pass --token or set WRITEBACK_TOKEN\n",
			wantReq:    request{Method: "POST", Path: "/v1/flush", Body: `{"timeout":"1m0s"}`},
		},
		{
			name: "the admin token", status: 200, body: `{"drained":true}`,
			args:       []string{"--token", "user", "--admin-token", "adm"},
			wantCode:   ExitOK,
			wantStdout: "applied 0 changes; 0 pending, 0 dead letters\ndrained\n",
			wantReq:    request{Method: "POST", Path: "/v1/flush", Auth: "Bearer adm", Body: `{"timeout":"1m0s"}`},
		},
		{
			name: "the admin token from the environment", status: 200, body: `{"drained":true}`,
			env:        map[string]string{"WRITEBACK_ADMIN_TOKEN": "adm", "WRITEBACK_TOKEN": "user"},
			wantCode:   ExitOK,
			wantStdout: "applied 0 changes; 0 pending, 0 dead letters\ndrained\n",
			wantReq:    request{Method: "POST", Path: "/v1/flush", Auth: "Bearer adm", Body: `{"timeout":"1m0s"}`},
		},
		{
			name: "the sidecar's own admin token", status: 200, body: `{"drained":true}`,
			env:        map[string]string{"WRITEBACK_AUTH_ADMIN_TOKEN": "adm", "WRITEBACK_AUTH_TOKEN": "user"},
			wantCode:   ExitOK,
			wantStdout: "applied 0 changes; 0 pending, 0 dead letters\ndrained\n",
			wantReq:    request{Method: "POST", Path: "/v1/flush", Auth: "Bearer adm", Body: `{"timeout":"1m0s"}`},
		},
		{
			name: "the normal token where the admin token is needed", status: 403, body: `{"error":{"code":"forbidden","message":"this endpoint needs the admin token"}}`,
			args:       []string{"--token", "user"},
			wantCode:   ExitFailure,
			wantStderr: "writeback: flush: the sidecar at ADDR needs its admin token for this; pass --admin-token or set WRITEBACK_ADMIN_TOKEN\n",
			wantReq:    request{Method: "POST", Path: "/v1/flush", Auth: "Bearer user", Body: `{"timeout":"1m0s"}`},
		},
		{
			name: "redis down", status: 503, body: `{"error":{"code":"unavailable","message":"redis is unreachable"}}`,
			wantCode:   ExitFailure,
			wantStderr: "writeback: flush: the sidecar at ADDR answered 503 unavailable: redis is unreachable\n",
			wantReq:    request{Method: "POST", Path: "/v1/flush", Body: `{"timeout":"1m0s"}`},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv, seen := sidecar(t, tc.status, tc.body)
			env := map[string]string{"WRITEBACK_ADDR": srv.URL}
			for k, v := range tc.env {
				env[k] = v
			}
			code, out, errOut := run(t, env, append([]string{"flush"}, tc.args...)...)
			assert.Equal(t, tc.wantCode, code)
			assert.Equal(t, tc.wantStdout, out)
			assert.Equal(t, strings.ReplaceAll(tc.wantStderr, "ADDR", srv.URL), errOut)
			assert.Equal(t, []request{tc.wantReq}, seen())
		})
	}
}

func TestFlushUsage(t *testing.T) {
	tests := []struct {
		name       string
		env        map[string]string
		args       []string
		wantStderr string
	}{
		{"zero timeout", nil, []string{"flush", "--timeout", "0s"},
			"writeback: --timeout 0s is not positive; use a duration such as 60s\n"},
		{"bad environment value", map[string]string{"WRITEBACK_TIMEOUT": "soon"}, []string{"flush"},
			"writeback: WRITEBACK_TIMEOUT: invalid argument \"soon\" for \"--timeout\" flag: time: invalid duration \"soon\"\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := run(t, tc.env, tc.args...)
			assert.Equal(t, ExitUsage, code)
			assert.Equal(t, tc.wantStderr, errOut)
		})
	}
}

func TestUnreachableSidecar(t *testing.T) {
	addr := deadAddr(t)
	for _, cmd := range []string{"flush", "status"} {
		t.Run(cmd, func(t *testing.T) {
			code, out, errOut := run(t, nil, cmd, "--addr", addr)
			assert.Equal(t, ExitFailure, code)
			assert.Empty(t, out)
			assert.True(t, strings.HasPrefix(errOut, "writeback: "+cmd+": cannot reach the sidecar at "+addr+" ("), errOut)
			assert.True(t, strings.HasSuffix(errOut, "); start writeback serve or pass --addr\n"), errOut)
		})
	}
}

func TestStatus(t *testing.T) {
	body, err := os.ReadFile("testdata/status.json")
	require.NoError(t, err)
	want, err := os.ReadFile("testdata/status.txt")
	require.NoError(t, err)

	srv, seen := sidecar(t, 200, string(body))
	code, out, errOut := run(t, nil, "status", "--addr", srv.URL, "--token", "t")
	assert.Equal(t, ExitOK, code)
	assert.Empty(t, errOut)
	assert.Equal(t, string(want), out)
	assert.Equal(t, []request{{Method: "GET", Path: "/v1/status", Auth: "Bearer t"}}, seen())
}

func TestStatusJSON(t *testing.T) {
	body, err := os.ReadFile("testdata/status.json")
	require.NoError(t, err)
	srv, _ := sidecar(t, 200, string(body))

	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
	}{
		{"flag", map[string]string{"WRITEBACK_ADDR": srv.URL}, []string{"status", "--json"}},
		{"environment", map[string]string{"WRITEBACK_ADDR": srv.URL, "WRITEBACK_JSON": "true"}, []string{"status"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := run(t, tc.env, tc.args...)
			assert.Equal(t, ExitOK, code)
			assert.Empty(t, errOut)
			assert.JSONEq(t, string(body), out)
			var st client.Status
			require.NoError(t, json.Unmarshal([]byte(out), &st), "the output decodes as client.Status")
			assert.True(t, strings.HasPrefix(out, "{\n  \"sidecar\": "), "indented JSON:\n%s", out)
		})
	}
}

func TestStatusEmpty(t *testing.T) {
	srv, _ := sidecar(t, 200, `{"sidecar":"s","version":"dev","partitions":64,"ownedPartitions":[],"sidecars":1,"collections":[]}`)
	code, out, _ := run(t, nil, "status", "--addr", srv.URL)
	assert.Equal(t, ExitOK, code)
	assert.Equal(t, "sidecar:         s (version dev)\n"+
		"pending:         0 changes in 0 documents\n"+
		"pinned:          0 B\n"+
		"oldest pending:  none\n"+
		"sidecars:        1; this one owns 0 of 64 partitions\n"+
		"dead letters:    0\n", out)

	srv, _ = sidecar(t, 200, `{"sidecar":"s","version":"dev","partitions":64,"ownedPartitions":[],"sidecars":1,"collections":[],`+
		`"sessions":{"pending":5,"queues":2,"stoppedQueues":1,"pinnedBytes":2048,"oldestPendingAgeSeconds":1.5}}`)
	code, out, _ = run(t, nil, "status", "--addr", srv.URL)
	assert.Equal(t, ExitOK, code)
	assert.Contains(t, out, "dead letters:    0\n"+
		"sessions:        5 pending in 2 queues, 2.0 KiB pinned, oldest 1.5s; 1 stopped queue (writeback sessions deadletters list)\n")
}

func TestHumanBytes(t *testing.T) {
	for in, want := range map[int64]string{
		0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 1 << 20: "1.0 MiB",
		5 << 30: "5.0 GiB", 1 << 40: "1.0 TiB", 1 << 50: "1.0 PiB", 1 << 60: "1024.0 PiB",
	} {
		assert.Equal(t, want, humanBytes(in), "%d", in)
	}
}

func TestPartitionRanges(t *testing.T) {
	tests := []struct {
		in   []int
		want string
	}{
		{nil, ""},
		{[]int{3}, " (3)"},
		{[]int{0, 1, 2, 3}, " (0-3)"},
		{[]int{7, 1, 0, 3, 2, 9, 9}, " (0-3, 7, 9)"},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, partitionRanges(tc.in))
	}
}

func TestHumanAge(t *testing.T) {
	for in, want := range map[float64]string{
		0.0004: "0s", 0.0123456: "12ms", 2.345: "2.3s", 75.6: "1m16s", 7200: "2h0m0s",
	} {
		assert.Equal(t, want, humanAge(in), "%v", in)
	}
}

// Every command that calls an administrative endpoint sends --admin-token
// (or WRITEBACK_ADMIN_TOKEN) instead of --token; the others do not take it.
func TestAdminTokenFlag(t *testing.T) {
	root := NewCmdRoot(func(string) (string, bool) { return "", false })
	for _, tc := range []struct {
		path  []string
		admin bool
	}{
		{[]string{"flush"}, true},
		{[]string{"deadletters", "list"}, true},
		{[]string{"deadletters", "replay"}, true},
		{[]string{"deadletters", "drop"}, true},
		{[]string{"sessions", "flush"}, true},
		{[]string{"sessions", "deadletters", "list"}, true},
		{[]string{"sessions", "deadletters", "replay"}, true},
		{[]string{"sessions", "deadletters", "drop"}, true},
		{[]string{"status"}, false},
		{[]string{"sessions", "status"}, false},
	} {
		cmd, _, err := root.Find(tc.path)
		if err != nil {
			t.Fatalf("%v: %v", tc.path, err)
		}
		if got := cmd.Flags().Lookup(flagAdminToken) != nil; got != tc.admin {
			t.Errorf("writeback %s: --admin-token present = %v; want %v", strings.Join(tc.path, " "), got, tc.admin)
		}
	}
}
