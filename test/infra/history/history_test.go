package history

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func put(client int, key, value string, call, ret int, err error) Op {
	return Op{Client: client, Kind: Put, Key: key, Value: value, Call: at(call), Return: at(ret), Err: err}
}

func get(client int, key, value string, found bool, call, ret int) Op {
	return Op{Client: client, Kind: Get, Key: key, Value: value, Found: found, Call: at(call), Return: at(ret)}
}

var errTimeout = errors.New("context deadline exceeded")

func TestCheck(t *testing.T) {
	for _, c := range []struct {
		name string
		ops  []Op
		ok   bool
	}{
		{"reads see the last acknowledged write", []Op{
			put(0, "k", "1", 0, 10, nil), get(1, "k", "1", true, 20, 30),
			put(0, "k", "2", 40, 50, nil), get(1, "k", "2", true, 60, 70),
		}, true},
		{"a read concurrent with a write may see either", []Op{
			put(0, "k", "1", 0, 10, nil), put(0, "k", "2", 20, 50, nil), get(1, "k", "1", true, 25, 30), get(2, "k", "2", true, 26, 31),
		}, true},
		{"a write that timed out may have taken effect", []Op{
			put(0, "k", "1", 0, 10, errTimeout), get(1, "k", "1", true, 100, 110),
		}, true},
		{"a write that timed out may not have taken effect", []Op{
			put(0, "k", "1", 0, 10, errTimeout), get(1, "k", "", false, 100, 110),
		}, true},
		{"a stale read: the key is missing after its write was acknowledged", []Op{
			put(0, "k", "1", 0, 10, nil), get(1, "k", "", false, 20, 30),
		}, false},
		{"a lost write: an older value read after a newer one was acknowledged", []Op{
			put(0, "k", "1", 0, 10, nil), put(0, "k", "2", 20, 30, nil), get(1, "k", "1", true, 40, 50),
		}, false},
		{"time travel: two readers see the writes in opposite orders", []Op{
			put(0, "k", "1", 0, 100, nil), put(1, "k", "2", 0, 100, nil),
			get(2, "k", "1", true, 110, 120), get(2, "k", "2", true, 130, 140), get(3, "k", "1", true, 150, 160),
		}, false},
		{"keys are independent", []Op{
			put(0, "a", "1", 0, 10, nil), put(0, "b", "1", 20, 30, nil), get(1, "a", "1", true, 40, 50), get(1, "b", "1", true, 40, 50),
		}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "history.html")
			v, err := Check(c.ops, 10*time.Second, file)
			if err != nil {
				t.Fatal(err)
			}
			if v.Linearizable != c.ok || v.Timeout {
				t.Fatalf("verdict %s, want linearizable=%t", v, c.ok)
			}
			_, statErr := os.Stat(file)
			if !c.ok && statErr != nil {
				t.Errorf("no visualisation written for a refused history: %v", statErr)
			}
			if c.ok && statErr == nil {
				t.Errorf("a visualisation was written for a linearizable history")
			}
		})
	}
}
