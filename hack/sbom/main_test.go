package main

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"
)

// TestDocumentOfThisBinary describes the test binary itself: the document
// is SPDX 2.3, names this module and the standard library with package
// URLs, every relationship points at a package that exists, identifiers
// are unique, and the same input gives the same bytes.
func TestDocumentOfThisBinary(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	created := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	render := func() []byte {
		doc, err := document("etcd-operator-image", "v1.2.3", created, []string{self})
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if err := write(&b, doc); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	out := render()
	if !bytes.Equal(out, render()) {
		t.Error("two renderings of the same binary differ")
	}
	var doc spdxDocument
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.SPDXVersion != "SPDX-2.3" || doc.CreationInfo.Created != "2026-12-05T10:00:00Z" || !strings.HasPrefix(doc.DocumentNamespace, "https://") {
		t.Errorf("document header %+v", doc)
	}
	ids, purls := identifiers(t, &doc)
	for _, want := range []string{"pkg:golang/github.com/seed74754924/etcd-operator@v1.2.3", "pkg:golang/stdlib@"} {
		found := false
		for p := range purls {
			found = found || strings.HasPrefix(p, want)
		}
		if !found {
			t.Errorf("no package URL %s… among %v", want, purls)
		}
	}
	for _, r := range doc.Relationships {
		if !ids[r.Element] || !ids[r.Related] {
			t.Errorf("relationship %+v points at a package that does not exist", r)
		}
	}
	if _, err := document("x", "v1", created, []string{"/no/such/binary"}); err == nil {
		t.Error("a missing binary was accepted")
	}
}

// identifiers checks the packages' SPDX identifiers are unique and returns
// them with the package URLs.
func identifiers(t *testing.T, doc *spdxDocument) (map[string]bool, map[string]bool) {
	t.Helper()
	ids := map[string]bool{doc.SPDXID: true}
	purls := map[string]bool{}
	for _, p := range doc.Packages {
		if ids[p.SPDXID] {
			t.Errorf("identifier %s used twice", p.SPDXID)
		}
		ids[p.SPDXID] = true
		for _, r := range p.ExternalRefs {
			purls[r.ReferenceLocator] = true
		}
	}
	return ids, purls
}
