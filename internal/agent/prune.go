package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// stored is one snapshot of the schedule found in the store.
type stored struct {
	file    string
	uid     string
	created time.Time
}

// prune deletes the schedule's stored snapshots that fall out of its
// retention: beyond the newest KeepLast, and older than MaxAge. Only files
// whose manifest names this schedule are considered, and a file is deleted
// only when the store's own metadata (where it keeps any) names the same
// snapshot as its manifest. The file just written is always kept. It
// returns the files deleted.
func prune(ctx context.Context, st store, cfg SnapshotConfig, now time.Time, keep string) ([]string, error) {
	mine, err := scheduleSnapshots(ctx, st, cfg.ScheduleUID)
	if err != nil {
		return nil, err
	}
	// Newest first; the same instant breaks ties by name, so the order is
	// stable.
	slices.SortFunc(mine, func(a, b stored) int {
		if c := b.created.Compare(a.created); c != 0 {
			return c
		}
		return strings.Compare(b.file, a.file)
	})
	var deleted []string
	var errs []error
	for i, s := range mine {
		tooMany := cfg.KeepLast > 0 && i >= cfg.KeepLast
		tooOld := cfg.MaxAge > 0 && now.Sub(s.created) > cfg.MaxAge
		if s.file == keep || (!tooMany && !tooOld) {
			continue
		}
		if err := removeSnapshot(ctx, st, s); err != nil {
			errs = append(errs, err)
			continue
		}
		deleted = append(deleted, s.file)
	}
	return deleted, errors.Join(errs...)
}

// scheduleSnapshots finds the snapshots whose manifests name the schedule.
func scheduleSnapshots(ctx context.Context, st store, scheduleUID string) ([]stored, error) {
	names, err := st.List(ctx)
	if err != nil {
		return nil, err
	}
	present := map[string]bool{}
	for _, n := range names {
		present[n] = true
	}
	var out []stored
	for _, n := range names {
		file, ok := strings.CutSuffix(n, manifestSuffix)
		if !ok || (!strings.HasSuffix(file, snapshotSuffix) && !strings.HasSuffix(file, snapshotSuffix+zstdSuffix)) {
			continue
		}
		m, err := readManifest(ctx, st, file)
		if err != nil {
			return nil, err
		}
		if m == nil || m.Schedule == nil || m.Schedule.UID != scheduleUID || m.File != file || m.Snapshot.UID == "" {
			continue
		}
		out = append(out, stored{file: file, uid: m.Snapshot.UID, created: m.Created})
	}
	return out, nil
}

// removeSnapshot deletes a snapshot file and then its manifest, so that a
// crash in between leaves a manifest to find it by next time.
func removeSnapshot(ctx context.Context, st store, s stored) error {
	info, err := st.Stat(ctx, s.file)
	if err != nil {
		return err
	}
	if info != nil {
		if uid := info.Meta.SnapshotUID; uid != "" && uid != s.uid {
			return fmt.Errorf("%s was written by snapshot %s, not %s as its manifest says; left alone", st.URI(s.file), uid, s.uid)
		}
		if err := st.Remove(ctx, s.file); err != nil {
			return err
		}
	}
	return st.Remove(ctx, s.file+manifestSuffix)
}
