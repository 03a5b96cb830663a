package session

import (
	"encoding/json"
	"testing"
)

func BenchmarkDecodeObject(b *testing.B) {
	text, _ := json.Marshal(objectSamples()[2])
	b.Run("fast", func(b *testing.B) {
		for b.Loop() {
			var o Object
			if err := decodeObject(string(text), &o); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			var o Object
			if err := json.Unmarshal(text, &o); err != nil {
				b.Fatal(err)
			}
		}
	})
}
