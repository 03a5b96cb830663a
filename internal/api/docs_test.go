package api

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/writeback/writeback/pkg/client"
)

// writeDocs writes what writeJSON writes for a client.ScanResult of the
// same (compact) documents, byte for byte.
func TestWriteDocsAsWriteJSON(t *testing.T) {
	for _, docs := range [][]json.RawMessage{
		{},
		{json.RawMessage(`{"id":1,"s":"a"}`)},
		{json.RawMessage(`{"id":1,"s":"a"}`), json.RawMessage(`null`), json.RawMessage(`{"id":"x","j":{"k":[1,2.5,"é"]}}`)},
	} {
		want, got := httptest.NewRecorder(), httptest.NewRecorder()
		writeJSON(want, 200, client.ScanResult{Docs: docs})
		writeDocs(got, docs)
		if !bytes.Equal(got.Body.Bytes(), want.Body.Bytes()) || got.Header().Get("Content-Type") != want.Header().Get("Content-Type") || got.Code != want.Code {
			t.Errorf("writeDocs wrote %d %q %q; writeJSON %d %q %q", got.Code, got.Header().Get("Content-Type"), got.Body, want.Code, want.Header().Get("Content-Type"), want.Body)
		}
	}
}
