package bakery

import (
	"errors"
	"fmt"
)

// Kind says what went wrong, for a program to match on. It is the `kind`
// of the server's error body; the client uses the same kinds for its own
// failures (a refused connection is [KindUnavailable], a connection broken
// after the request was sent is [KindUnknownOutcome]).
type Kind string

// The kinds the server answers with (the `Kind` schema of its OpenAPI
// document).
const (
	// KindInvalidInput: a bad name, count, size, TTL, timeout or field (400).
	KindInvalidInput Kind = "invalid_input"
	// KindNotFound: no such session (it ended or expired), grant or record (404).
	KindNotFound Kind = "not_found"
	// KindUnavailable: the service or its store is unavailable; nothing was
	// done, so the call may be retried (503, or the connection was refused).
	KindUnavailable Kind = "unavailable"
	// KindUnknownOutcome: a write may or may not have taken effect (503, or
	// the connection broke after the request was sent). Never resent.
	KindUnknownOutcome Kind = "unknown_outcome"
	// KindExhausted: the sequence has no ids left (409).
	KindExhausted Kind = "exhausted"
	// KindCorrupt: the stored state is not what it should be (500).
	KindCorrupt Kind = "corrupt"
	// KindUnauthorized: no bearer token, or an unknown one (401).
	KindUnauthorized Kind = "unauthorized"
	// KindForbidden: the token may not do this to this name (403).
	KindForbidden Kind = "forbidden"
	// KindLost: the grant or claim was lost: a waiter may hold it now (409).
	KindLost Kind = "lost"
	// KindConflict: the request contradicts the stored state (409).
	KindConflict Kind = "conflict"
	// KindInternal: a bug or an unexpected failure (500).
	KindInternal Kind = "internal"
)

// Error is every error the server answers with, and every transport failure
// of a call, with the server's kind, the HTTP status (0 when the server
// never answered) and a message for a person.
//
// Match a kind with errors.Is and a sentinel:
//
//	if errors.Is(err, bakery.ErrLost) { ... }
//
// or get the details with errors.As:
//
//	var e *bakery.Error
//	if errors.As(err, &e) && e.Status == 503 { ... }
type Error struct {
	// Kind is what went wrong (the server's `kind`).
	Kind Kind
	// Status is the HTTP status, or 0 if the server did not answer.
	Status int
	// Message names the offending input or cause.
	Message string
	// Op is the call that failed, e.g. "POST /v1/locks/jobs/acquire".
	Op string
	// Err is the underlying transport error, if any.
	Err error
}

// Sentinel errors, one per kind, for errors.Is. An *Error matches the
// sentinel of its Kind.
var (
	ErrInvalidInput   = &Error{Kind: KindInvalidInput}
	ErrNotFound       = &Error{Kind: KindNotFound}
	ErrUnavailable    = &Error{Kind: KindUnavailable}
	ErrUnknownOutcome = &Error{Kind: KindUnknownOutcome}
	ErrExhausted      = &Error{Kind: KindExhausted}
	ErrCorrupt        = &Error{Kind: KindCorrupt}
	ErrUnauthorized   = &Error{Kind: KindUnauthorized}
	ErrForbidden      = &Error{Kind: KindForbidden}
	ErrLost           = &Error{Kind: KindLost}
	ErrConflict       = &Error{Kind: KindConflict}
	ErrInternal       = &Error{Kind: KindInternal}
)

// ErrClosed is returned by calls made after [Client.Close].
var ErrClosed = errors.New("bakery: client closed")

// Error implements the error interface.
func (e *Error) Error() string {
	s := "bakery: " + string(e.Kind)
	if e.Op != "" {
		s += " (" + e.Op + ")"
	}
	if e.Status != 0 {
		s += fmt.Sprintf(" [%d]", e.Status)
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Unwrap returns the underlying transport error, if any.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is an *Error of the same Kind that carries
// nothing else (a sentinel such as [ErrLost]).
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok || t.Status != 0 || t.Message != "" || t.Op != "" || t.Err != nil {
		return false
	}
	return t.Kind == e.Kind
}

// KindOf returns the Kind of err if it is (or wraps) an *Error, and "" if not.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return ""
}

// OnceFailedError is returned by [Client.Once] when the key's failure was
// recorded by an earlier run (the claim answered `failed`): the function is
// not run again.
type OnceFailedError struct {
	// Attempt is the attempt that failed.
	Attempt uint64
	// Message is the recorded failure.
	Message string
}

func (e *OnceFailedError) Error() string {
	return fmt.Sprintf("bakery: once: attempt %d failed before: %s", e.Attempt, e.Message)
}

// FuncError wraps the error a function run by [Client.Once] returned (the
// claim was failed with its message, so the next claim runs it again).
type FuncError struct {
	// Err is the function's error.
	Err error
	// FailErr is set when reporting the failure to the server failed too.
	FailErr error
}

func (e *FuncError) Error() string {
	if e.FailErr != nil {
		return fmt.Sprintf("bakery: once: function failed: %v (reporting it failed: %v)", e.Err, e.FailErr)
	}
	return fmt.Sprintf("bakery: once: function failed: %v", e.Err)
}

// Unwrap returns the function's error.
func (e *FuncError) Unwrap() error { return e.Err }
