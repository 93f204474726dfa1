// Package agent holds the snapshot and restore agents: the operator binary
// run as a Job (snapshot-agent) or as the seed's init container
// (restore-agent). Neither talks to the Kubernetes API: they read their
// settings from the environment and leave their result in the container's
// termination message (package report).
package agent

import (
	"errors"
	"fmt"

	"github.com/seed74754924/etcd-operator/internal/agent/report"
)

// Error is a failure with the reason it is reported under. A permanent one
// is not retried: the same inputs would fail the same way.
type Error struct {
	Reason    string
	Permanent bool
	Err       error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// permanent and transient make an Error with a formatted message.
func permanent(reason, format string, args ...any) *Error {
	return &Error{Reason: reason, Permanent: true, Err: fmt.Errorf(format, args...)}
}

func transient(reason, format string, args ...any) *Error {
	return &Error{Reason: reason, Err: fmt.Errorf(format, args...)}
}

// failure turns any error into a result and the exit code for it.
func failure(err error, fallback string) (report.Result, int) {
	var e *Error
	if !errors.As(err, &e) {
		return report.Result{Reason: fallback, Message: err.Error()}, report.ExitTransient
	}
	code := report.ExitTransient
	if e.Permanent {
		code = report.ExitPermanent
	}
	return report.Result{Reason: e.Reason, Message: e.Error()}, code
}
