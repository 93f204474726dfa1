package etcd

import (
	"errors"
	"io"
	"strings"
	"testing"
)

func TestAuthErrorsOfDayTwoCalls(t *testing.T) {
	for msg, want := range map[string]error{
		"rpc error: code = InvalidArgument desc = etcdserver: user name not found": ErrAuthRequired,
		"rpc error: code = PermissionDenied desc = etcdserver: permission denied":  ErrAuthRequired,
		"etcdserver: authentication failed, invalid user ID or password":           ErrAuthFailed,
	} {
		if got := classify(errors.New(msg)); !errors.Is(got, want) {
			t.Errorf("%q classified as %v, want %v", msg, got, want)
		}
	}
}

type failingStream struct{ err error }

func (f failingStream) Read([]byte) (int, error) { return 0, f.err }
func (f failingStream) Close() error             { return nil }

func TestSnapshotStreamErrorsAreClassified(t *testing.T) {
	r := classifyingReader{failingStream{errors.New("rpc error: code = PermissionDenied desc = etcdserver: permission denied")}}
	if _, err := io.ReadAll(r); !errors.Is(err, ErrAuthRequired) {
		t.Errorf("stream error %v, want ErrAuthRequired", err)
	}
	r = classifyingReader{io.NopCloser(strings.NewReader("data"))}
	if b, err := io.ReadAll(r); err != nil || string(b) != "data" {
		t.Errorf("%q, %v", b, err)
	}
}
