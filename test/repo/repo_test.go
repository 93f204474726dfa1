// Package repo checks what the repository promises about itself beside the
// code: its CI workflows and the monitoring's links into the docs.
package repo

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/seed74754924/etcd-operator/test/infra/tools"
)

// Every action a workflow uses is pinned by a full commit, not a tag or a
// branch that its owner (or whoever takes over the owner's account) can
// move; a comment names the release for readers and for Dependabot.
func TestWorkflowActionsArePinnedByCommit(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(tools.RepoRoot(), ".github", "workflows", "*.y*ml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no workflows (%v)", err)
	}
	uses := regexp.MustCompile(`(?m)^\s*-?\s*uses:\s*(\S+)(.*)$`)
	pinned := regexp.MustCompile(`^[\w.-]+/[\w./-]+@[0-9a-f]{40}$`)
	n := 0
	for _, f := range files {
		data, err := os.ReadFile(f) //nolint:gosec // the repository's own files
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range uses.FindAllStringSubmatch(string(data), -1) {
			n++
			if !pinned.MatchString(m[1]) || !strings.Contains(m[2], "# v") {
				t.Errorf("%s: uses %s%s: pin it by its 40-character commit, with the release in a comment", filepath.Base(f), m[1], m[2])
			}
		}
	}
	if n == 0 {
		t.Error("no action found in the workflows: the pattern no longer matches them")
	}
}

// Every alert the chart ships links to a section of docs/runbooks.md that
// exists: a renamed heading would otherwise leave an on-call reader on a
// page without the answer.
func TestEveryAlertLinksToItsRunbook(t *testing.T) {
	root := tools.RepoRoot()
	data, err := os.ReadFile(filepath.Join(root, "charts", "etcd-operator", "files", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `json:"alert"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(data, &rules); err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "runbooks.md"))
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, line := range strings.Split(string(doc), "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			anchors[anchor(h)] = true
		}
	}
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			n++
			url := r.Annotations["runbook_url"]
			base, frag, ok := strings.Cut(url, "#")
			switch {
			case !ok || base != "RUNBOOK_BASE_URL":
				t.Errorf("alert %s: runbook_url %q is not RUNBOOK_BASE_URL#<section>", r.Alert, url)
			case !anchors[frag]:
				t.Errorf("alert %s: docs/runbooks.md has no section #%s", r.Alert, frag)
			}
		}
	}
	if n < 10 {
		t.Errorf("%d alerts found; the file's shape changed", n)
	}
}

// anchor is the fragment GitHub gives a heading: lower case, spaces to
// dashes, punctuation dropped.
func anchor(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9'):
			b.WriteRune(r)
		}
	}
	return b.String()
}
