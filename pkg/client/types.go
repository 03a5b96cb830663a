package client

import (
	"encoding/json"
	"time"
)

// These are the bodies of the HTTP API. The server encodes these same types,
// so a field added here is a field added to the API (and to docs/api.md).

// Status is the answer of GET /v1/status: the state of the buffer as a whole
// and of this sidecar.
type Status struct {
	Sidecar                 string             `json:"sidecar"` // this sidecar's instance ID
	Version                 string             `json:"version"`
	Pending                 int64              `json:"pending"`          // buffered changes not yet applied
	PendingDocuments        int64              `json:"pendingDocuments"` // documents with pending changes
	PinnedBytes             int64              `json:"pinnedBytes"`
	OldestPendingAgeSeconds float64            `json:"oldestPendingAgeSeconds"`
	DeadLetters             int64              `json:"deadLetters"`
	DeadLetterList          []DeadLetter       `json:"deadLetterList,omitempty"`
	Partitions              int                `json:"partitions"`
	OwnedPartitions         []int              `json:"ownedPartitions"` // owned by this sidecar
	Sidecars                int                `json:"sidecars"`        // live sidecars sharing the partitions
	Collections             []CollectionStatus `json:"collections"`
	// Sessions sums up the session queues (Design 2); absent when no
	// queue family is configured.
	Sessions *SessionStatus `json:"sessions,omitempty"`
	Warnings []string       `json:"warnings,omitempty"`
}

// SessionStatus is the session queues' part of Status; GET /v1/queues
// has the details.
type SessionStatus struct {
	Pending                 int64   `json:"pending"` // committed sessions not yet applied
	Queues                  int64   `json:"queues"`  // queues holding them
	StoppedQueues           int64   `json:"stoppedQueues"`
	PinnedBytes             int64   `json:"pinnedBytes"`
	OldestPendingAgeSeconds float64 `json:"oldestPendingAgeSeconds"`
}

// CollectionStatus is one collection in Status.
type CollectionStatus struct {
	Name   string `json:"name"`
	Store  string `json:"store"`
	Table  string `json:"table"`
	Policy string `json:"policy"`
	// WriteThroughFallback is true while the collection's writes go to the
	// store synchronously because pinned memory is over its limit.
	WriteThroughFallback bool `json:"writeThroughFallback"`
}

// DeadLetter is a change the store rejected permanently.
type DeadLetter struct {
	Collection string          `json:"collection"`
	ID         string          `json:"id"`
	Seq        int64           `json:"seq"`
	Error      string          `json:"error"`
	At         time.Time       `json:"at"`
	Change     json.RawMessage `json:"change"`
}

// FlushResult is the answer of POST /v1/flush.
type FlushResult struct {
	Applied     int64 `json:"applied"`     // changes applied during the flush
	Pending     int64 `json:"pending"`     // changes still pending when it returned
	DeadLetters int64 `json:"deadLetters"` // changes in the dead-letter list
	Drained     bool  `json:"drained"`     // nothing is pending (sessions included)
	// Sessions is what the flush did to the session queues (Design 2);
	// absent when no queue family is configured.
	Sessions *QueueFlushResult `json:"sessions,omitempty"`
}

// WriteResult is the answer of a PUT, PATCH or DELETE of a document: the
// sequence number of the change in the document's buffered write.
type WriteResult struct {
	Seq int64 `json:"seq"`
}

// ScanResult is the answer of GET /v1/docs/{collection}.
type ScanResult struct {
	Docs []json.RawMessage `json:"docs"`
}

// ManyResult is the answer of GET /v1/docs/{collection}?ids=…: the
// documents in the order asked, null for a missing one.
type ManyResult struct {
	Docs []json.RawMessage `json:"docs"`
}

// CacheManyResult is the body of GET /v1/cache?key=…&key=…&peek=…: the
// values of the keys in the order asked, null for a key with no value,
// the values of the peeked keys likewise, and with session=new the session
// the read began.
type CacheManyResult struct {
	Session string            `json:"session,omitempty"`
	Values  []json.RawMessage `json:"values"`
	Peeked  []json.RawMessage `json:"peeked,omitempty"`
	// Keep names the values read outside a session (peeks, and keys with
	// no session) that the sidecar serves from the copy it keeps of an
	// immutable mapping's entry, with the milliseconds for which it still
	// will: a client may serve its own copy as long (WithImmutableCache).
	Keep map[string]int64 `json:"keep,omitempty"`
}

// Reads is one multi-read (ReadCache): Keys in the session, under its S
// leases (X with ForUpdate); Peek without a lease, as a read outside any
// session reads them (the latest committed value). A transaction reads in
// one request the entries it must hold still and the ones no transaction
// changes.
type Reads struct {
	Keys      []string
	Peek      []string
	ForUpdate bool
}

// ErrorBody is the body of every error response.
type ErrorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		// Retry is true when sending the request again is safe: nothing
		// was buffered or applied (409 aborted, 503 unavailable, which
		// also carry Retry-After). False on a 500 buffered (the change
		// will be applied) or uncertain (it may have been): do not
		// retry those blindly; and on a 4xx, which would fail again.
		Retry bool `json:"retry"`
	} `json:"error"`
}

// FlushRequest is the body of POST /v1/flush.
type FlushRequest struct {
	Timeout string `json:"timeout,omitempty"` // a Go duration, e.g. "30s"
}

// Error codes of ErrorBody.
const (
	CodeInvalidArgument = "invalid_argument" // 400
	CodeUnauthenticated = "unauthenticated"  // 401
	CodeForbidden       = "forbidden"        // 403: an administrative endpoint needs the admin token
	CodeNotFound        = "not_found"        // 404
	CodeAborted         = "aborted"          // 409: retry with backoff
	CodeTooLarge        = "too_large"        // 413
	// CodeUnsupportedMediaType: a request body not sent as
	// Content-Type: application/json (415).
	CodeUnsupportedMediaType = "unsupported_media_type"
	CodeUnavailable          = "unavailable" // 503: nothing was done; retry with backoff (Retry-After)
	CodeInternal             = "internal"    // 500
	// CodeBuffered: a synchronous write (or write-through session commit)
	// is buffered but not applied yet; it will be, so do not retry (500).
	CodeBuffered = "buffered"
	// CodeUncertain: the write may or may not have been applied (a
	// timeout, too few replicas, Redis failing midway); read before
	// writing again (500).
	CodeUncertain = "uncertain"
)
