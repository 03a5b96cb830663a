package api

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/writeback/writeback/internal/document"
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
	if _, err := h.svc.Collection(coll); err != nil {
		return err
	}
	refs := make([]document.Ref, len(ids))
	for i, id := range ids {
		if id == "" {
			return apiError(http.StatusBadRequest, "invalid_argument", fmt.Sprintf("id %d of the multi-read is empty", i+1))
		}
		var err error
		if refs[i], err = h.svc.Ref(coll, id); err != nil {
			return err
		}
	}
	docs, err := h.svc.GetManyJSON(r.Context(), refs)
	if err != nil {
		return err
	}
	writeDocs(w, docs)
	return nil
}
