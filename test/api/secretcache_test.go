package api

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/internal/secretcache"
)

// The operator's Secret reader against a real API server (issue 24: cached
// reads for what every pass reads). At rest it asks the API server nothing;
// a changed Secret is read again once the watch on the Secrets' metadata
// sees its new resourceVersion, and never older than that afterwards; a
// deleted one is forgotten; other kinds are read from the API server.
func TestSecretReaderAsksOnlyForChangedSecrets(t *testing.T) {
	ns := namespace(t)
	mgr, ctx, cancel := newManager(t, ns)
	api := &countingReader{Reader: mgr.GetAPIReader()}
	r := secretcache.New(mgr.GetCache(), api)
	if err := r.ForgetDeleted(ctx, mgr.GetCache()); err != nil {
		t.Fatal(err)
	}
	runManager(ctx, t, mgr, cancel)

	key := client.ObjectKey{Namespace: ns, Name: "peer-tls"}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name}, Data: map[string][]byte{"tls.crt": []byte("one")}}
	if err := k.Create(ctx, sec); err != nil {
		t.Fatal(err)
	}
	s := &secretReads{t: t, r: r, api: api, key: key}
	s.settled("one")

	// Changed: read again, and once read never the old data.
	sec.Data["tls.crt"] = []byte("two")
	if err := k.Update(ctx, sec); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the changed Secret read", func() error {
		got, err := s.read()
		if err == nil && got != "two" {
			err = fmt.Errorf("read %q", got)
		}
		return err
	})
	s.always("two", 20)
	s.settled("two")

	// Another kind is read from the API server, every time.
	before := api.count()
	if err := r.Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{}); err != nil {
		t.Fatal(err)
	}
	if api.count() != before+1 {
		t.Errorf("a Namespace read asked the API server %d times, want 1", api.count()-before)
	}

	// Deleted: forgotten when the watch sees it go, without a read; then
	// not found.
	if err := k.Delete(ctx, sec); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the deleted Secret forgotten", func() error {
		if n := r.Len(); n != 0 {
			return fmt.Errorf("%d Secrets kept", n)
		}
		return nil
	})
	if _, err := s.read(); !apierrors.IsNotFound(err) {
		t.Errorf("read of a deleted Secret: %v, want not found", err)
	}
}

// secretReads reads one Secret through the reader under test.
type secretReads struct {
	t   *testing.T
	r   *secretcache.Reader
	api *countingReader
	key client.ObjectKey
}

func (s *secretReads) read() (string, error) {
	got := &corev1.Secret{}
	if err := s.r.Get(context.Background(), s.key, got); err != nil {
		return "", err
	}
	return string(got.Data["tls.crt"]), nil
}

// always checks that n reads return want.
func (s *secretReads) always(want string, n int) {
	s.t.Helper()
	for range n {
		if got, err := s.read(); err != nil || got != want {
			s.t.Fatalf("read %q (%v), want %q", got, err, want)
		}
	}
}

// settled waits until a read returns want without asking the API server,
// then checks that many more do not ask either.
func (s *secretReads) settled(want string) {
	s.t.Helper()
	eventually(s.t, "the Secret read from what is kept", func() error {
		before := s.api.count()
		got, err := s.read()
		switch {
		case err != nil:
			return err
		case got != want:
			return fmt.Errorf("read %q, want %q", got, want)
		case s.api.count() != before:
			return errors.New("the read asked the API server")
		}
		return nil
	})
	before := s.api.count()
	s.always(want, 50)
	if n := s.api.count() - before; n != 0 {
		s.t.Errorf("50 reads of an unchanged Secret asked the API server %d times, want 0", n)
	}
}

// countingReader counts the reads that reach the API server.
type countingReader struct {
	client.Reader
	n atomic.Int64
}

func (c *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.n.Add(1)
	return c.Reader.Get(ctx, key, obj, opts...)
}

func (c *countingReader) count() int64 { return c.n.Load() }
