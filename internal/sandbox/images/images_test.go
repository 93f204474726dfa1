package images

import (
	"reflect"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

func TestNormalize(t *testing.T) {
	tests := []struct{ ref, want string }{
		{"busybox", "index.docker.io/library/busybox:latest"},
		{"docker.io/library/busybox:latest", "index.docker.io/library/busybox:latest"},
		{"quay.io/coreos/etcd:v3.6.16", "quay.io/coreos/etcd:v3.6.16"},
		{"registry.k8s.io/etcd:3.6.16-0", "registry.k8s.io/etcd:3.6.16-0"},
		{"localhost:5000/x", "localhost:5000/x:latest"},
	}
	for _, tt := range tests {
		got, err := Normalize(tt.ref)
		if err != nil || got != tt.want {
			t.Errorf("Normalize(%q) = %q, %v; want %q", tt.ref, got, err, tt.want)
		}
	}
}

func TestRegistryLookup(t *testing.T) {
	r := NewRegistry("")
	if err := r.Add(Image{Ref: "example.com/op:v1", Root: "/r"}); err != nil {
		t.Fatal(err)
	}
	for ref, want := range map[string]bool{"example.com/op:v1": true, "example.com/op": false, "example.com/op:v2": false} {
		if _, ok := r.Lookup(ref); ok != want {
			t.Errorf("Lookup(%q) = %v, want %v", ref, ok, want)
		}
	}
}

func TestFromConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  v1.Config
		want Image
	}{
		{
			name: "keeps entrypoint, cmd, env, dir, user",
			cfg:  v1.Config{Entrypoint: []string{"/manager"}, Cmd: []string{"run"}, Env: []string{"PATH=/bin", "A=b"}, WorkingDir: "/w", User: "65532:65532"},
			want: Image{Ref: "r", Root: "/root", Entrypoint: []string{"/manager"}, Cmd: []string{"run"}, Env: []string{"PATH=/bin", "A=b"}, WorkingDir: "/w", User: "65532:65532", Source: "tarball"},
		},
		{
			name: "adds the default PATH when the image has none",
			cfg:  v1.Config{Env: []string{"A=b"}},
			want: Image{Ref: "r", Root: "/root", Env: []string{DefaultPath, "A=b"}, Source: "tarball"},
		},
	}
	for _, tt := range tests {
		if got := FromConfig("r", "/root", tt.cfg); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: got %+v, want %+v", tt.name, got, tt.want)
		}
	}
}
