package tpcc

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzDecodeRows holds decodeJSON's scan to encoding/json's answers (with
// UseNumber), for a row and for a list of rows: the same values, and an
// error for the same inputs.
func FuzzDecodeRows(f *testing.F) {
	for _, s := range []string{
		`{"s_i_id":12,"s_dist_01":"abc","s_data":"x y"}`, `{"a":null,"b":-0.5e+3,"c":true,"d":false}`, `{}`, `[]`,
		`[{"ol_number":1,"ol_amount":12.30,"ol_delivery_d":null},{"ol_number":2}]`, `{"a":"\u00e9\n"}`, `{"a":{"b":1}}`,
		`{"a":01}`, `{"a":1.}`, `{"a": 1}`, `{"a":"\xff"}`, `{"a":1,"a":2}`, `[{"a":1},]`, `null`, `{"a":-}`, `{"a":1e}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		reference := func(v any) error {
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.UseNumber()
			if err := dec.Decode(v); err != nil {
				return err
			}
			if dec.More() {
				return errTrailing
			}
			return nil
		}
		var got, want Row
		gotErr, wantErr := decodeJSON(raw, &got), reference(&want)
		if wantErr == errTrailing {
			return // a Decoder stops after the first value; the entries are one value each
		}
		if (gotErr == nil) != (wantErr == nil) || !reflect.DeepEqual(got, want) {
			t.Fatalf("row %q: %v, %v; encoding/json: %v, %v", raw, got, gotErr, want, wantErr)
		}
		var gotRows, wantRows []Row
		gotErr, wantErr = decodeJSON(raw, &gotRows), reference(&wantRows)
		if wantErr == errTrailing {
			return
		}
		if (gotErr == nil) != (wantErr == nil) || !reflect.DeepEqual(gotRows, wantRows) {
			t.Fatalf("rows %q: %v, %v; encoding/json: %v, %v", raw, gotRows, gotErr, wantRows, wantErr)
		}
	})
}

var errTrailing = json.Unmarshal([]byte("1 2"), new(any))

// BenchmarkDecodeRow: a stock row, as New-Order reads ten of them.
func BenchmarkDecodeRow(b *testing.B) {
	raw := []byte(`{"s_i_id":1234,"s_dist_01":"abcdefghijklmnopqrstuvwx","s_dist_02":"abcdefghijklmnopqrstuvwx","s_dist_03":"abcdefghijklmnopqrstuvwx","s_dist_04":"abcdefghijklmnopqrstuvwx","s_dist_05":"abcdefghijklmnopqrstuvwx","s_dist_06":"abcdefghijklmnopqrstuvwx","s_dist_07":"abcdefghijklmnopqrstuvwx","s_dist_08":"abcdefghijklmnopqrstuvwx","s_dist_09":"abcdefghijklmnopqrstuvwx","s_dist_10":"abcdefghijklmnopqrstuvwx","s_data":"abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwx"}`)
	for b.Loop() {
		var r Row
		if err := decodeJSON(raw, &r); err != nil {
			b.Fatal(err)
		}
	}
}
