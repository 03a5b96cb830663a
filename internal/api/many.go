package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/writeback/writeback/internal/document"
	"github.com/writeback/writeback/pkg/client"
)

// MaxManyIDs bounds the documents of one multi-read.
const MaxManyIDs = 1000

// getMany serves GET /v1/docs/{collection}?ids=a,b,c (or id=a&id=b …):
// the documents in the order asked, null for a missing one, their cache
// entries read in one Redis round trip and the misses through the store
// concurrently (document.Service.GetMany). One bad id refuses the whole
// request; any other failure fails it.
func (h *Handler) getMany(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	var ids []string
	for _, v := range q["ids"] {
		ids = append(ids, strings.Split(v, ",")...)
	}
	ids = append(ids, q["id"]...)
	if len(ids) > MaxManyIDs {
		return apiError(http.StatusBadRequest, "invalid_argument", fmt.Sprintf("a multi-read takes at most %d ids, not %d", MaxManyIDs, len(ids)))
	}
	coll := r.PathValue("collection")
	c, err := h.svc.Collection(coll)
	if err != nil {
		return err
	}
	refs := make([]document.Ref, len(ids))
	for i, id := range ids {
		if id == "" {
			return apiError(http.StatusBadRequest, "invalid_argument", fmt.Sprintf("id %d of the multi-read is empty", i+1))
		}
		if refs[i], err = h.svc.Ref(coll, id); err != nil {
			return err
		}
	}
	out := client.ManyResult{Docs: make([]json.RawMessage, len(ids))}
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	wg.Add(len(refs))
	h.svc.GetMany(r.Context(), refs, func(i int, doc document.Hash, err error) {
		defer wg.Done()
		switch {
		case errors.Is(err, document.ErrNotFound):
			out.Docs[i] = json.RawMessage("null")
		case err != nil:
			errs[i] = err
		default:
			d := make(map[string]json.RawMessage, len(doc))
			for f, v := range doc {
				d[f] = json.RawMessage(v)
			}
			out.Docs[i] = encodeDoc(c.Table.Schema, d)
		}
	})
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
