package bgt

import (
	"hash/crc32"
	"sort"
)

// Share is how many of parts partitions each of live sidecars should own:
// ceil(parts/live). With every sidecar at or under its share and all of
// them taking free partitions up to it, every partition finds an owner.
func Share(parts, live int) int {
	if live < 1 {
		live = 1
	}
	return (parts + live - 1) / live
}

// Excess returns the partitions to give up so that owned fits want: the
// highest-numbered ones, so that the choice is stable between ticks.
func Excess(owned []int, want int) []int {
	if len(owned) <= want {
		return nil
	}
	s := append([]int(nil), owned...)
	sort.Ints(s)
	return s[want:]
}

// Candidates is the order in which instance id tries to take free
// partitions: all of them, starting at a point derived from the id, so that
// sidecars starting together do not all race for partition 0 first.
func Candidates(parts int, id string) []int {
	start := int(crc32.ChecksumIEEE([]byte(id)) % uint32(parts))
	out := make([]int, parts)
	for i := range out {
		out[i] = (start + i) % parts
	}
	return out
}
