package bgrun

import (
	"bytes"
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSmoke runs the command on a tiny graph, one mix, the database and
// write-back on both stores, and checks that the validation ran (many
// reads checked, none stale, the stores' final state right after the
// flush) and that the table, the JSON and the plots exist. A write-back
// that served stale values, or lost writes, would fail it (see
// bg.TestRunCatchesAnomalies for the mutations). It needs `make services`.
func TestSmoke(t *testing.T) {
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	mongo := "mongodb://127.0.0.1:27017"
	if v := os.Getenv("WRITEBACK_TEST_MONGO_URI"); v != "" {
		mongo = v
	}
	code := run([]string{"--store", "mongodb,postgres", "--mongo-uri", mongo, "--policies", "database,write-back,write-back-resp,write-back-embedded", "--mixes", "90",
		"--members", "200", "--mongo-members", "60", "--friends", "4", "--pending", "4", "--threads", "1,4", "--step", "700ms", "--out", dir, "--seed", "3"},
		&stdout, &stderr)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	out := stdout.String()
	require.Contains(t, out, "write-back SoAR / database")
	require.Contains(t, out, "write-back-embedded SoAR / database")
	require.Contains(t, out, "write-back-resp: not applicable: the Redis-protocol front door has no list operators")
	for _, store := range []string{"mongodb", "postgres"} {
		b, err := os.ReadFile(filepath.Join(dir, "bg-"+store+".json"))
		require.NoError(t, err)
		var sr struct {
			Results []struct {
				Policy     string `json:"policy"`
				Validation struct {
					Reads int `json:"reads"`
					Stale int `json:"stale"`
				} `json:"validation"`
				Changes    int `json:"changes"`
				FinalBad   int `json:"final_bad"`
				FinalLists int `json:"final_lists"`
				Mixes      []struct {
					SoAR  float64 `json:"soar_actions_per_s"`
					Steps []struct {
						Threads int `json:"threads"`
					} `json:"steps"`
				} `json:"mixes"`
			} `json:"results"`
			NotApplicable []struct {
				Policy string `json:"policy"`
			} `json:"not_applicable"`
		}
		require.NoError(t, json.Unmarshal(b, &sr))
		require.Len(t, sr.Results, 3, store)
		require.Len(t, sr.NotApplicable, 1, store)
		for _, r := range sr.Results {
			require.Greater(t, r.Validation.Reads, 50, "%s %s: too few reads checked", store, r.Policy)
			require.Zero(t, r.Validation.Stale, "%s %s", store, r.Policy)
			require.Positive(t, r.Changes, "%s %s", store, r.Policy)
			require.Equal(t, map[string]int{"mongodb": 120, "postgres": 400}[store], r.FinalLists, "%s %s", store, r.Policy)
			require.Zero(t, r.FinalBad, "%s %s", store, r.Policy)
			require.Len(t, r.Mixes, 1)
			require.NotEmpty(t, r.Mixes[0].Steps)
		}
		for _, p := range []string{"bg-" + store + "-soar.png", "bg-" + store + "-throughput-90.png"} {
			f, err := os.Open(filepath.Join(dir, p))
			require.NoError(t, err)
			_, err = png.Decode(f)
			f.Close()
			require.NoError(t, err, p)
		}
	}
}
