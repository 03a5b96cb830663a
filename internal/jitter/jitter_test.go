package jitter

import (
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	base, limit := 10*time.Millisecond, 300*time.Millisecond
	for n := 1; n <= 12; n++ {
		want := min(base<<(n-1), limit)
		for range 200 {
			if d := Backoff(base, limit, n); d < want/2 || d > want {
				t.Fatalf("Backoff(%d) = %v, outside [%v, %v]", n, d, want/2, want)
			}
		}
	}
}

func TestTTL(t *testing.T) {
	for range 1000 {
		if d := TTL(time.Hour); d < 54*time.Minute || d > 66*time.Minute {
			t.Fatalf("TTL(1h) = %v, outside ±10 %%", d)
		}
	}
}
