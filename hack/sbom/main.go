// Command sbom writes an SPDX 2.3 software bill of materials, as JSON, for
// Go binaries: every module their build information lists (the main module,
// each dependency at the version built, with its replacement if any) and
// the Go standard library, each with its package URL.
//
//	go run ./hack/sbom --name etcd-operator-image --version v1.2.3 \
//		--created 2026-12-05T10:00:00Z bin/manager-linux-amd64 bin/manager-linux-arm64 > sbom.spdx.json
package main

import (
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"
)

func main() {
	name := flag.String("name", "etcd-operator", "what the document describes")
	version := flag.String("version", "dev", "its version")
	created := flag.String("created", "", "creation time, RFC 3339 (default: now); pass the commit's time for a reproducible document")
	flag.Parse()
	when := time.Now().UTC()
	if *created != "" {
		t, err := time.Parse(time.RFC3339, *created)
		if err != nil {
			fail(fmt.Errorf("--created: %w", err))
		}
		when = t.UTC()
	}
	if flag.NArg() == 0 {
		fail(fmt.Errorf("name at least one binary"))
	}
	doc, err := document(*name, *version, when, flag.Args())
	if err != nil {
		fail(err)
	}
	if err := write(os.Stdout, doc); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "sbom:", err)
	os.Exit(1)
}

type spdxDocument struct {
	SPDXVersion       string         `json:"spdxVersion"`
	DataLicense       string         `json:"dataLicense"`
	SPDXID            string         `json:"SPDXID"`
	Name              string         `json:"name"`
	DocumentNamespace string         `json:"documentNamespace"`
	CreationInfo      creationInfo   `json:"creationInfo"`
	Packages          []spdxPackage  `json:"packages"`
	Relationships     []relationship `json:"relationships"`
}

type creationInfo struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type spdxPackage struct {
	SPDXID           string        `json:"SPDXID"`
	Name             string        `json:"name"`
	VersionInfo      string        `json:"versionInfo"`
	DownloadLocation string        `json:"downloadLocation"`
	FilesAnalyzed    bool          `json:"filesAnalyzed"`
	LicenseConcluded string        `json:"licenseConcluded"`
	LicenseDeclared  string        `json:"licenseDeclared"`
	CopyrightText    string        `json:"copyrightText"`
	Checksums        []checksum    `json:"checksums,omitempty"`
	ExternalRefs     []externalRef `json:"externalRefs,omitempty"`
}

type checksum struct {
	Algorithm     string `json:"algorithm"`
	ChecksumValue string `json:"checksumValue"`
}

type externalRef struct {
	ReferenceCategory string `json:"referenceCategory"`
	ReferenceType     string `json:"referenceType"`
	ReferenceLocator  string `json:"referenceLocator"`
}

type relationship struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

// module is one Go module a binary was built from.
type module struct{ path, version string }

// document describes the binaries: a package for the whole (name at
// version), one per binary (with its SHA-256), and one per module any of
// them was built from; the whole contains the binaries, and each binary
// depends on its modules.
func document(name, version string, created time.Time, binaries []string) (*spdxDocument, error) {
	doc := &spdxDocument{
		SPDXVersion: "SPDX-2.3", DataLicense: "CC0-1.0", SPDXID: "SPDXRef-DOCUMENT", Name: name + "-" + version,
		CreationInfo: creationInfo{Created: created.Format(time.RFC3339), Creators: []string{"Tool: etcd-operator-hack-sbom"}},
	}
	root := spdxPackage{SPDXID: "SPDXRef-Package-" + spdxID(name), Name: name, VersionInfo: version}
	doc.Packages = append(doc.Packages, fill(root))
	doc.Relationships = append(doc.Relationships, relationship{doc.SPDXID, "DESCRIBES", root.SPDXID})
	modules := map[module]string{} // → SPDX ID
	digest := sha256.New()
	for i, bin := range binaries {
		info, err := buildinfo.ReadFile(bin)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", bin, err)
		}
		sum, err := fileSHA256(bin)
		if err != nil {
			return nil, err
		}
		fmt.Fprintln(digest, sum)
		binID := fmt.Sprintf("SPDXRef-Binary-%d-%s", i, spdxID(bin))
		doc.Packages = append(doc.Packages, fill(spdxPackage{SPDXID: binID, Name: bin, VersionInfo: version,
			Checksums: []checksum{{Algorithm: "SHA256", ChecksumValue: sum}}}))
		doc.Relationships = append(doc.Relationships, relationship{root.SPDXID, "CONTAINS", binID})
		mods := []module{{info.Main.Path, version}, {"stdlib", strings.TrimPrefix(info.GoVersion, "go")}}
		for _, d := range info.Deps {
			if d.Replace != nil {
				d = d.Replace
			}
			mods = append(mods, module{d.Path, d.Version})
		}
		for _, m := range mods {
			id, ok := modules[m]
			if !ok {
				id = "SPDXRef-Module-" + spdxID(m.path+"-"+m.version)
				modules[m] = id
				doc.Packages = append(doc.Packages, fill(spdxPackage{SPDXID: id, Name: m.path, VersionInfo: m.version,
					ExternalRefs: []externalRef{{"PACKAGE-MANAGER", "purl", purl(m)}}}))
			}
			doc.Relationships = append(doc.Relationships, relationship{binID, "DEPENDS_ON", id})
		}
	}
	sort.SliceStable(doc.Packages[1:], func(i, j int) bool { return doc.Packages[1+i].SPDXID < doc.Packages[1+j].SPDXID })
	doc.DocumentNamespace = "https://github.com/seed74754924/etcd-operator/spdx/" + name + "-" + version + "-" + hex.EncodeToString(digest.Sum(nil))[:16]
	return doc, nil
}

// fill sets the fields SPDX requires that a build cannot know.
func fill(p spdxPackage) spdxPackage {
	p.DownloadLocation, p.LicenseConcluded, p.LicenseDeclared, p.CopyrightText = "NOASSERTION", "NOASSERTION", "NOASSERTION", "NOASSERTION"
	return p
}

// purl is a module's package URL: pkg:golang/<path>@<version>.
func purl(m module) string {
	if m.path == "stdlib" {
		return "pkg:golang/stdlib@" + m.version
	}
	return "pkg:golang/" + m.path + "@" + m.version
}

var notIDChars = regexp.MustCompile(`[^A-Za-z0-9.-]+`)

// spdxID makes s usable in an SPDX identifier (letters, digits, . and -).
func spdxID(s string) string { return notIDChars.ReplaceAllString(s, "-") }

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func write(w io.Writer, doc *spdxDocument) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}
