package kubectletcd

import (
	"bytes"
	"crypto/sha256"
	"hash"
	"io"
	"strings"
	"testing"
)

func TestSizes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 20 << 10: "20 KiB", 8 << 20: "8.0 MiB", 3 << 30: "3.0 GiB"} {
		if got := bytesIEC(n); got != want {
			t.Errorf("bytesIEC(%d) = %q, want %q", n, got, want)
		}
	}
	for _, c := range []struct {
		part, whole int64
		want        string
	}{{0, 0, "-"}, {5, 0, "-"}, {1, 4, "25%"}, {4, 4, "100%"}} {
		if got := percent(c.part, c.whole); got != c.want {
			t.Errorf("percent(%d, %d) = %q, want %q", c.part, c.whole, got, c.want)
		}
	}
}

func TestStatusRowOfAFreshMemberHasNoNaN(t *testing.T) {
	var out bytes.Buffer
	if err := statusTable([]StatusRow{{ID: "1", Name: "m"}}).print(&out, formatTable); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "NaN") || !strings.Contains(out.String(), "0 B (-)") {
		t.Errorf("%s", out.String())
	}
}

func TestProgressOnlyOnATerminal(t *testing.T) {
	for _, tty := range []bool{false, true} {
		var w bytes.Buffer
		a := &app{terminal: func(io.Writer) bool { return tty }}
		p := a.progressTo(&w)
		p.show("step %d", 1)
		p.tick("bytes %d", 10)
		p.clear()
		switch {
		case !tty && w.Len() != 0:
			t.Errorf("off a terminal: %q", w.String())
		case tty && w.String() != "\r\x1b[Kstep 1\r\x1b[K":
			// The tick right after a show is dropped; clear erases the line.
			t.Errorf("on a terminal: %q", w.String())
		}
	}
}

func TestTrailingChecksum(t *testing.T) {
	env := threeMembers(t)
	rc, _ := (&fakeClient{e: env.etcd, pod: "c-a"}).Snapshot(t.Context())
	whole, _ := io.ReadAll(rc)
	for _, chunk := range []int{1, 7, 32, 33, len(whole)} {
		sum := &trailingChecksum{h: newSHA()}
		for i := 0; i < len(whole); i += chunk {
			_, _ = sum.Write(whole[i:min(i+chunk, len(whole))])
		}
		if !sum.ok() {
			t.Errorf("chunks of %d: checksum not recognised", chunk)
		}
	}
	sum := &trailingChecksum{h: newSHA()}
	_, _ = sum.Write(whole[:len(whole)-1])
	if sum.ok() {
		t.Error("a truncated stream passed")
	}
}

func newSHA() hash.Hash { return sha256.New() }
