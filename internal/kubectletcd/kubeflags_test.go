package kubectletcd

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// A kubeconfig with two clusters, two users and two contexts; "main" is
// current.
const testKubeconfig = `apiVersion: v1
kind: Config
current-context: main
clusters:
- name: main
  cluster: {server: "https://main.example:6443"}
- name: other
  cluster: {server: "https://other.example:6443"}
users:
- name: main-user
  user: {token: main-token}
- name: other-user
  user: {token: other-token}
contexts:
- name: main
  context: {cluster: main, user: main-user, namespace: ns}
- name: other
  context: {cluster: other, user: other-user, namespace: other-ns}
`

// kubeRun runs the plugin on env with the real kubeconfig flags, from a
// kubeconfig written for the test: the session gets the namespace they
// resolve to, and the REST config they give is returned.
func kubeRun(t *testing.T, env *fakeEnv, args ...string) (cfg *rest.Config, code int, stdout, stderr string) {
	t.Helper()
	a := env.app()
	a.connect = func() (deps, error) {
		c, ns, err := a.kubeConfig()
		if err != nil {
			return deps{}, err
		}
		cfg = c
		d := env.deps()
		d.namespace = ns
		return d, nil
	}
	code, stdout, stderr = runApp(a, args...)
	return cfg, code, stdout, stderr
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestKubeconfigFlagsReachTheRESTConfig(t *testing.T) {
	kubeconfig := writeFile(t, "config", testKubeconfig)
	ca, cert, key := writeFile(t, "ca.crt", "ca"), writeFile(t, "tls.crt", "cert"), writeFile(t, "tls.key", "key")
	cases := []struct {
		flags []string
		check func(*rest.Config) bool
	}{
		{nil, func(c *rest.Config) bool {
			return c.Host == "https://main.example:6443" && c.BearerToken == "main-token"
		}},
		{[]string{"-k", kubeconfig}, func(c *rest.Config) bool { return c.Host == "https://main.example:6443" }},
		{[]string{"--context", "other"}, func(c *rest.Config) bool {
			return c.Host == "https://other.example:6443" && c.BearerToken == "other-token"
		}},
		{[]string{"--kubeconfig-cluster", "other"}, func(c *rest.Config) bool {
			return c.Host == "https://other.example:6443" && c.BearerToken == "main-token"
		}},
		{[]string{"--user", "other-user"}, func(c *rest.Config) bool { return c.BearerToken == "other-token" }},
		{[]string{"--token", "flag-token"}, func(c *rest.Config) bool { return c.BearerToken == "flag-token" }},
		{[]string{"--server", "https://flag.example:443"}, func(c *rest.Config) bool { return c.Host == "https://flag.example:443" }},
		{[]string{"--request-timeout", "7s"}, func(c *rest.Config) bool { return c.Timeout == 7*time.Second }},
		{[]string{"--as", "alice", "--as-group", "ops", "--as-group", "dba", "--as-uid", "42"}, func(c *rest.Config) bool {
			i := c.Impersonate
			return i.UserName == "alice" && slices.Equal(i.Groups, []string{"ops", "dba"}) && i.UID == "42"
		}},
		{[]string{"--insecure-skip-tls-verify", "--tls-server-name", "api.internal", "--disable-compression"}, func(c *rest.Config) bool {
			return c.Insecure && c.ServerName == "api.internal" && c.DisableCompression
		}},
		{[]string{"--certificate-authority", ca, "--client-certificate", cert, "--client-key", key}, func(c *rest.Config) bool {
			return c.CAFile == ca && c.CertFile == cert && c.KeyFile == key
		}},
	}
	for _, c := range cases {
		env := threeMembers(t)
		args := append([]string{"members", "-c", "c"}, c.flags...)
		if !slices.Contains(c.flags, "-k") {
			args = append(args, "--kubeconfig", kubeconfig)
		}
		cfg, code, _, errOut := kubeRun(t, env, args...)
		if cfg == nil || !c.check(cfg) {
			t.Errorf("%v: exit %d, %s, REST config %+v", c.flags, code, errOut, cfg)
		}
	}
}

func TestTheNamespaceComesFromTheFlagThenTheContext(t *testing.T) {
	kubeconfig := writeFile(t, "config", testKubeconfig)
	env := threeMembers(t)
	// The cluster is in ns, the "main" context's namespace.
	if _, code, out, errOut := kubeRun(t, env, "members", "-c", "c", "--kubeconfig", kubeconfig); code != 0 || strings.Count(out, "\n") != 4 {
		t.Errorf("the context's namespace: exit %d, %q %q", code, out, errOut)
	}
	if _, code, _, errOut := kubeRun(t, env, "members", "-c", "c", "--kubeconfig", kubeconfig, "--context", "other"); code != 1 || !strings.Contains(errOut, `not found in namespace "other-ns"`) {
		t.Errorf("the other context's namespace: exit %d, %q", code, errOut)
	}
	if _, code, _, errOut := kubeRun(t, env, "members", "-c", "c", "--kubeconfig", kubeconfig, "--context", "other", "-n", "ns"); code != 0 {
		t.Errorf("-n over the context's namespace: exit %d, %q", code, errOut)
	}
	if _, code, _, errOut := kubeRun(t, env, "members", "-c", "c", "--kubeconfig", kubeconfig, "--namespace", "elsewhere"); code != 1 || !strings.Contains(errOut, `not found in namespace "elsewhere"`) {
		t.Errorf("--namespace: exit %d, %q", code, errOut)
	}
}

func TestAKubeconfigThatDoesNotLoadIsSaid(t *testing.T) {
	env := threeMembers(t)
	missing := filepath.Join(t.TempDir(), "missing")
	_, code, _, errOut := kubeRun(t, env, "members", "-c", "c", "--kubeconfig", missing)
	if code != 1 || !strings.Contains(errOut, "loading the kubeconfig") || !strings.Contains(errOut, missing) {
		t.Errorf("exit %d, %q", code, errOut)
	}
	_, code, _, errOut = kubeRun(t, env, "members", "-c", "c", "--kubeconfig", writeFile(t, "config", testKubeconfig), "--context", "nope")
	if code != 1 || !strings.Contains(errOut, `context "nope" does not exist`) {
		t.Errorf("an unknown context: exit %d, %q", code, errOut)
	}
}

func TestKubeconfigFlagsCompleteFromTheKubeconfig(t *testing.T) {
	kubeconfig := writeFile(t, "config", testKubeconfig)
	env := threeMembers(t)
	for flag, want := range map[string]string{
		"--context":            "main\nother\n",
		"--kubeconfig-cluster": "main\nother\n",
		"--user":               "main-user\nother-user\n",
	} {
		code, out, _ := env.run("__complete", "--kubeconfig", kubeconfig, "status", flag, "")
		if code != 0 || !strings.HasPrefix(out, want+":4\n") {
			t.Errorf("completing %s: exit %d, %q", flag, code, out)
		}
	}
	if code, out, _ := env.run("__complete", "--kubeconfig", kubeconfig, "status", "--context", "o"); code != 0 || !strings.HasPrefix(out, "other\n:4\n") {
		t.Errorf("completing --context o: exit %d, %q", code, out)
	}
}
