package agent

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed74754924/etcd-operator/internal/agent/report"
)

// seed writes a fake snapshot and its manifest as the agent would.
func seed(t *testing.T, st store, file, uid, scheduleUID string, created time.Time) {
	t.Helper()
	if err := st.Write(context.Background(), file, strings.NewReader("db of "+file), 0, fileMeta{SnapshotUID: uid}); err != nil {
		t.Fatal(err)
	}
	m := &manifest{Kind: manifestKind, Snapshot: objectRef{Name: strings.TrimSuffix(file, ".db"), UID: uid}, File: file, Created: created}
	if scheduleUID != "" {
		m.Schedule = &objectRef{Name: "sched", UID: scheduleUID}
	}
	if err := writeManifest(context.Background(), st, m); err != nil {
		t.Fatal(err)
	}
}

func names(t *testing.T, st store) []string {
	t.Helper()
	out, err := st.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// Retention deletes the schedule's oldest snapshots beyond keepLast and
// those past maxAge, keeps the one just made, and never touches anything
// another schedule, a one-off snapshot or something else wrote.
func TestPruneDeletesOnlyTheSchedulesOwn(t *testing.T) {
	m := startMinIO(t)
	s3, err := newS3Store(m.s3(m.bucket(t), "").S3, "team")
	if err != nil {
		t.Fatal(err)
	}
	vol, err := newFileStore(t.TempDir(), "team")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for name, st := range map[string]store{"s3": s3, "volume": vol} {
		t.Run(name, func(t *testing.T) {
			seedPruneFixture(t, st, now)
			_, isS3 := st.(*s3Store)
			deleted, err := prune(context.Background(), st, SnapshotConfig{ScheduleUID: "mine", KeepLast: 2}, now, "s5.db")
			// A manifest naming the schedule over a file another snapshot
			// wrote: S3's metadata says so and it is left alone; a volume
			// keeps no metadata of its own, and the manifest rules.
			want := []string{"forged.db", "s1.db", "s2.db", "s3.db"}
			if isS3 {
				want = want[1:]
				if err == nil || !strings.Contains(err.Error(), "forged.db") {
					t.Errorf("the forged manifest was not refused: %v", err)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			slices.Sort(deleted)
			if !slices.Equal(deleted, want) {
				t.Errorf("deleted %v, want %v", deleted, want)
			}
			checkLeft(t, st)

			// By age: older than 90 minutes goes, the newest stays even if old.
			deleted, err = prune(context.Background(), st, SnapshotConfig{ScheduleUID: "mine", MaxAge: 90 * time.Minute}, now.Add(3*time.Hour), "s5.db")
			if (err != nil) != isS3 || !slices.Equal(deleted, []string{"s4.db"}) {
				t.Errorf("by age deleted %v (%v), want [s4.db]", deleted, err)
			}
		})
	}
}

// seedPruneFixture stores five snapshots of schedule "mine", one of another
// schedule, a one-off, a file by hand and a forged manifest.
func seedPruneFixture(t *testing.T, st store, now time.Time) {
	t.Helper()
	if err := st.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 5; i++ {
		seed(t, st, fmt.Sprintf("s%d.db", i), fmt.Sprintf("uid-%d", i), "mine", now.Add(time.Duration(i-6)*time.Hour))
	}
	seed(t, st, "theirs.db", "uid-t", "other", now.Add(-10*time.Hour))
	seed(t, st, "oneoff.db", "uid-o", "", now.Add(-10*time.Hour))
	if err := st.Write(context.Background(), "hand.db", strings.NewReader("x"), 0, fileMeta{}); err != nil {
		t.Fatal(err)
	}
	seed(t, st, "forged.db", "uid-real", "", now.Add(-10*time.Hour))
	forged := &manifest{Kind: manifestKind, Snapshot: objectRef{UID: "uid-forged"}, Schedule: &objectRef{UID: "mine"}, File: "forged.db", Created: now.Add(-10 * time.Hour)}
	if err := writeManifest(context.Background(), st, forged); err != nil {
		t.Fatal(err)
	}
}

func checkLeft(t *testing.T, st store) {
	t.Helper()
	left := names(t, st)
	for _, keep := range []string{"s4.db", "s5.db", "theirs.db", "theirs.db.json", "oneoff.db", "oneoff.db.json", "hand.db"} {
		if !slices.Contains(left, keep) {
			t.Errorf("%s is gone; left: %v", keep, left)
		}
	}
	for _, gone := range []string{"s1.db", "s1.db.json", "s3.db.json"} {
		if slices.Contains(left, gone) {
			t.Errorf("%s is still there", gone)
		}
	}
}

// The upload holds two parts in memory whatever the snapshot's size.
func TestS3UploadMemoryIsBounded(t *testing.T) {
	m := startMinIO(t)
	st, err := newS3Store(m.s3(m.bucket(t), "").S3, "")
	if err != nil {
		t.Fatal(err)
	}
	const size = 160 << 20
	var peak atomic.Uint64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	runtime.GC()
	err = st.Write(context.Background(), "big.db", &zeroes{left: size}, size, fileMeta{})
	close(stop)
	<-done
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Stat(context.Background(), "big.db")
	if err != nil || info == nil || info.Size != size {
		t.Fatalf("stored %+v (%v)", info, err)
	}
	// Two 8 MiB parts, the client's buffers and the test's own heap; a
	// buffered upload would hold the whole 160 MiB.
	if p := peak.Load(); p > 80<<20 {
		t.Errorf("heap in use peaked at %d MiB while uploading %d MiB", p>>20, size>>20)
	}
	t.Logf("heap in use peaked at %d MiB while uploading %d MiB", peak.Load()>>20, size>>20)
}

type zeroes struct{ left int64 }

func (z *zeroes) Read(p []byte) (int, error) {
	if z.left == 0 {
		return 0, io.EOF
	}
	n := min(int64(len(p)), z.left)
	clear(p[:n])
	z.left -= n
	return int(n), nil
}

func TestReportFitsATerminationMessage(t *testing.T) {
	res := report.Result{URI: "s3://b/k.db", Message: strings.Repeat("m", 5000)}
	for i := 0; i < 500; i++ {
		res.Pruned = append(res.Pruned, fmt.Sprintf("s3://bucket/some/long/prefix/snapshot-%06d.db", i))
	}
	res.PrunedCount = len(res.Pruned)
	b := res.Encode()
	if len(b) > 4096 {
		t.Fatalf("%d bytes", len(b))
	}
	back, ok := report.Parse(string(b))
	if !ok || back.URI != res.URI || back.PrunedCount != 500 || len(back.Pruned) == 0 {
		t.Errorf("parsed back %+v (%t)", back, ok)
	}
}

// Retention counts compressed snapshots (<name>.db.zst) of the schedule as
// its own, beside uncompressed ones, and deletes the oldest beyond
// keepLast whatever their compression.
func TestPruneCountsCompressedSnapshots(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "team"), 0o700); err != nil {
		t.Fatal(err)
	}
	st, err := newFileStore(dir, "team")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	seed(t, st, "a.db.zst", "ua", "mine", now.Add(-3*time.Hour))
	seed(t, st, "b.db", "ub", "mine", now.Add(-2*time.Hour))
	seed(t, st, "c.db.zst", "uc", "mine", now.Add(-time.Hour))
	seed(t, st, "other.db.zst", "uo", "theirs", now.Add(-4*time.Hour))
	deleted, err := prune(context.Background(), st, SnapshotConfig{ScheduleUID: "mine", KeepLast: 2}, now, "c.db.zst")
	if err != nil || !slices.Equal(deleted, []string{"a.db.zst"}) {
		t.Errorf("deleted %v (%v), want the oldest compressed one of the schedule only", deleted, err)
	}
	if left := names(t, st); !slices.Contains(left, "other.db.zst") || !slices.Contains(left, "b.db") || slices.Contains(left, "a.db.zst") {
		t.Errorf("left %v", left)
	}
}
