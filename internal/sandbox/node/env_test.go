package node

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// fakeObjects is an objectSource over fixed Secrets and ConfigMaps.
type fakeObjects struct {
	secrets    map[string]map[string][]byte
	configMaps map[string]map[string]string
}

func (f fakeObjects) Secret(_, name string) (*corev1.Secret, error) {
	d, ok := f.secrets[name]
	if !ok {
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, name)
	}
	return &corev1.Secret{Data: d}, nil
}

func (f fakeObjects) ConfigMap(_, name string) (*corev1.ConfigMap, error) {
	d, ok := f.configMaps[name]
	if !ok {
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, name)
	}
	return &corev1.ConfigMap{Data: d}, nil
}

func TestResolveEnv(t *testing.T) {
	objects := fakeObjects{
		secrets:    map[string]map[string][]byte{"creds": {"password": []byte("s3cret")}},
		configMaps: map[string]map[string]string{"cfg": {"a": "1", "b": "2"}},
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1", Labels: map[string]string{"app": "x"}}}
	facts := podFacts{PodIP: "10.1.1.5", HostIP: "10.1.0.1", NodeName: "node-1", NodeCPU: resource.MustParse("2"), NodeMemory: resource.MustParse("1Gi")}
	yes := true
	tests := []struct {
		name     string
		imageEnv []string
		c        corev1.Container
		want     []string // entries that must be present
		wantErr  bool
	}{
		{
			name: "plain, field refs and expansion", imageEnv: []string{"PATH=/bin", "HOME=/root"},
			c: corev1.Container{Env: []corev1.EnvVar{
				{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
				{Name: "NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
				{Name: "NS", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
				{Name: "NODE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
				{Name: "APP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['app']"}}},
				{Name: "URL", Value: "http://$(POD_IP):2379 $$(POD_IP) $(HOME) $(MISSING)"},
				{Name: "HOME", Value: "/data"},
			}},
			want: []string{"PATH=/bin", "HOME=/data", "POD_IP=10.1.1.5", "NAME=p", "NS=ns", "NODE=node-1", "APP=x",
				"URL=http://10.1.1.5:2379 $(POD_IP) $(HOME) $(MISSING)"},
		},
		{
			name: "secret and configMap keys, envFrom with prefix",
			c: corev1.Container{
				EnvFrom: []corev1.EnvFromSource{{Prefix: "CFG_", ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}},
				Env: []corev1.EnvVar{
					{Name: "PW", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "password"}}},
					{Name: "A", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Key: "a"}}},
				},
			},
			want: []string{"CFG_a=1", "CFG_b=2", "PW=s3cret", "A=1"},
		},
		{
			name: "missing optional key is skipped",
			c: corev1.Container{Env: []corev1.EnvVar{
				{Name: "X", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "nope"}, Key: "k", Optional: &yes}}},
			}},
			want: []string{"KUBERNETES_SERVICE_HOST=10.1.0.1"},
		},
		{
			name: "missing required key fails",
			c: corev1.Container{Env: []corev1.EnvVar{
				{Name: "X", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "nope"}}},
			}},
			wantErr: true,
		},
		{
			name: "resource limits default to the node",
			c: corev1.Container{
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}},
				Env: []corev1.EnvVar{
					{Name: "MEM", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.memory", Divisor: resource.MustParse("1Mi")}}},
					{Name: "CPU", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.cpu"}}},
				},
			},
			want: []string{"MEM=64", "CPU=2"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := facts
			f.APIHost, f.APIPort = "10.1.0.1", 443
			got, err := resolveEnv(pod, &tt.c, tt.imageEnv, f, objects)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			for _, w := range tt.want {
				if !slices.Contains(got, w) {
					t.Errorf("missing %q in %q", w, got)
				}
			}
		})
	}
}

func TestContainerArgs(t *testing.T) {
	img := imageWith([]string{"/entry"}, []string{"default"})
	env := []string{"X=1"}
	tests := []struct {
		name string
		c    corev1.Container
		want []string
	}{
		{"image defaults", corev1.Container{}, []string{"/entry", "default"}},
		{"args replace cmd", corev1.Container{Args: []string{"a", "$(X)"}}, []string{"/entry", "a", "1"}},
		{"command replaces both", corev1.Container{Command: []string{"etcd"}}, []string{"etcd"}},
		{"command and args", corev1.Container{Command: []string{"etcd"}, Args: []string{"--x=$(X)"}}, []string{"etcd", "--x=1"}},
	}
	for _, tt := range tests {
		if got := containerArgs(&tt.c, img, env); !slices.Equal(got, tt.want) {
			t.Errorf("%s: got %q, want %q", tt.name, got, tt.want)
		}
	}
}
