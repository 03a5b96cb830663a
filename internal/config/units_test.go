package config

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

func TestParseDuration(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Duration
		wantErr string
	}{
		{in: "500ms", want: 500 * time.Millisecond},
		{in: "1h", want: time.Hour},
		{in: " 1h30m ", want: 90 * time.Minute},
		{in: "0s", want: 0},
		{in: "-1s", want: -time.Second},
		{in: "5", wantErr: `"5" is not a duration; write it like 500ms, 2s or 1h`},
		{in: "5 seconds", wantErr: `"5 seconds" is not a duration; write it like 500ms, 2s or 1h`},
		{in: "", wantErr: `"" is not a duration; write it like 500ms, 2s or 1h`},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseDuration(tc.in)
			if tc.wantErr != "" {
				require.EqualError(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got.Duration)
		})
	}
}

func TestParseByteSize(t *testing.T) {
	tests := []struct {
		in      string
		want    ByteSize
		wantErr bool
	}{
		{in: "1GiB", want: 1 << 30},
		{in: "512MiB", want: 512 << 20},
		{in: "64KiB", want: 64 << 10},
		{in: "1TiB", want: 1 << 40},
		{in: "1MB", want: 1_000_000},
		{in: "2GB", want: 2_000_000_000},
		{in: "1kb", want: 1000},
		{in: "1gib", want: 1 << 30},
		{in: "1Gi", want: 1 << 30},
		{in: "1 GiB", want: 1 << 30},
		{in: "1.5KiB", want: 1536},
		{in: "4096", want: 4096},
		{in: "100B", want: 100},
		{in: "0", want: 0},
		{in: "", wantErr: true},
		{in: "GiB", wantErr: true},
		{in: "-1", wantErr: true},
		{in: "1 gigabyte", wantErr: true},
		{in: "1XB", wantErr: true},
		{in: "1.2.3MiB", wantErr: true},
		{in: "9223372036854775807", want: 1<<63 - 1},
		{in: "9223372036854775807KiB", wantErr: true},
		{in: "99999999999999999999", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseByteSize(tc.in)
			if tc.wantErr {
				require.Error(t, err)
				assert.Contains(t, err.Error(), "is not a size; write it like 1GiB, 512MiB, 64KiB, 1MB or a number of bytes")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestByteSizeString(t *testing.T) {
	tests := []struct {
		in   ByteSize
		want string
	}{
		{0, "0"},
		{1000, "1000"},
		{1024, "1KiB"},
		{1536 << 10, "1536KiB"},
		{1 << 30, "1GiB"},
		{3 << 40, "3TiB"},
	}
	for _, tc := range tests {
		t.Run(tc.want, func(t *testing.T) {
			assert.Equal(t, tc.want, tc.in.String())
			back, err := ParseByteSize(tc.in.String())
			require.NoError(t, err)
			assert.Equal(t, tc.in, back, "String must parse back to the same size")
		})
	}
}

func TestUnitsYAML(t *testing.T) {
	var v struct {
		D Duration `yaml:"d"`
		B ByteSize `yaml:"b"`
		N ByteSize `yaml:"n"`
	}
	require.NoError(t, yaml.Unmarshal([]byte("d: 250ms\nb: 2MiB\nn: 4096\n"), &v))
	assert.Equal(t, 250*time.Millisecond, v.D.Duration)
	assert.Equal(t, 2*MiB, v.B)
	assert.Equal(t, ByteSize(4096), v.N)

	out, err := yaml.Marshal(v)
	require.NoError(t, err)
	assert.Equal(t, "d: 250ms\nb: 2MiB\n\"n\": 4KiB\n", string(out))

	err = yaml.Unmarshal([]byte("d: 5\n"), &v)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `line 1: "5" is not a duration`)
}
