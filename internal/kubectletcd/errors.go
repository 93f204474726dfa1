package kubectletcd

import (
	"context"
	"errors"
	"fmt"

	"github.com/seed74754924/etcd-operator/internal/etcd"
)

// usageError is a mistake in the command line: exit code 2, not 1.
type usageError string

func (e usageError) Error() string { return string(e) }

// authError marks an error the user fixes with credentials; trying another
// member would not help.
type authError struct{ err error }

func (e *authError) Error() string { return e.err.Error() }
func (e *authError) Unwrap() error { return e.err }

func isAuthError(err error) bool {
	var a *authError
	return errors.As(err, &a)
}

// explain turns etcd's errors into what the user can do about them.
func (s *session) explain(err error) error {
	if err == nil {
		return nil
	}
	switch {
	case isAuthError(err):
		return err
	case errors.Is(err, etcd.ErrAuthRequired) && s.sec.Username == "":
		hint := ""
		if c := s.cluster; c != nil && c.Spec.Auth != nil && c.Spec.Auth.Enabled && !c.Status.AuthEnabled {
			hint = fmt.Sprintf(" (etcdcluster %s asks for auth, but its status.authEnabled is not set, so its Secret is not used on its own)", c.Name)
		}
		return &authError{fmt.Errorf("etcd requires authentication and no credentials were given or found%s: pass -s/--credentials-secret NAME, a basic-auth Secret with the user's password: %w", hint, err)}
	case errors.Is(err, etcd.ErrAuthRequired):
		return &authError{fmt.Errorf("etcd user %s (from %s) is not allowed to do this: %w", s.sec.Username, s.sec.CredsFrom, err)}
	case errors.Is(err, etcd.ErrAuthFailed):
		return &authError{fmt.Errorf("etcd rejected the credentials of user %s from %s: %w", s.sec.Username, s.sec.CredsFrom, err)}
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("etcd did not answer in time (a member without quorum, or a TLS mismatch; TLS from %s): %w", orNone(s.sec.TLSFrom), err)
	}
	return err
}

func orNone(s string) string {
	if s == "" {
		return "none, plaintext"
	}
	return s
}
