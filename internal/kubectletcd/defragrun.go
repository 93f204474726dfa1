package kubectletcd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
)

// defragRunOptions are the settings of the EtcdDefrag `defrag -c` creates.
// Only what the resource has is here: the operator decides the order, the
// checks and the deadline itself.
type defragRunOptions struct {
	name            string
	wait            bool
	all             bool
	freeSpaceAbove  string
	quotaUsageAbove string
	minReclaim      string
	ttl             time.Duration
	ttlSet          bool // --ttl-after-finished was given: 0 means "delete at once"
}

// defragPollEvery is how often a followed EtcdDefrag is read: the operator
// writes its status a few times per member, and a member takes seconds.
const defragPollEvery = time.Second

// quotaShare is the pattern the API server holds rule.quotaUsageAbove to.
var quotaShare = regexp.MustCompile(`^([1-9][0-9]?|100)%$`)

// errDefragDeleted: the followed EtcdDefrag went away before it ended.
var errDefragDeleted = errors.New("deleted")

// defragByResource creates an EtcdDefrag for the -c cluster and, unless
// told not to wait, follows it to its end.
func (a *app) defragByResource(cmd *cobra.Command, o defragRunOptions, output *outputFlags) error {
	if a.opts.Cluster == "" {
		return errNoTarget
	}
	d, err := a.connect()
	if err != nil {
		return err
	}
	run, err := defragObject(d.namespace, a.opts.Cluster, o)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	if err := requireCluster(ctx, d.kube, d.namespace, a.opts.Cluster); err != nil {
		return err
	}
	if err := d.kube.Create(ctx, run); err != nil {
		return explainDefragCreate(err, run, a.opts.Cluster)
	}
	out := cmd.OutOrStdout()
	if !o.wait {
		if !output.human() {
			return printDefragObject(out, run, output)
		}
		fmt.Fprintf(out, "Created etcddefrag %s for etcdcluster %s.\nFollow it with: kubectl get etcddefrag %s -n %s -w\n", run.Name, a.opts.Cluster, run.Name, run.Namespace)
		return nil
	}
	p := a.progressTo(cmd.ErrOrStderr())
	final, err := followDefrag(ctx, d.kube, run, a.defragPoll(), p)
	p.clear()
	if err != nil {
		return err
	}
	return reportDefrag(out, final, output)
}

func (a *app) defragPoll() time.Duration {
	if a.pollEvery > 0 {
		return a.pollEvery
	}
	return defragPollEvery
}

// defragObject is the EtcdDefrag the flags ask for; a mistake in them is a
// usage error, found before anything is created.
func defragObject(namespace, cluster string, o defragRunOptions) (*v1alpha2.EtcdDefrag, error) {
	rule, err := defragRule(o)
	if err != nil {
		return nil, err
	}
	run := &v1alpha2.EtcdDefrag{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: o.name},
		Spec:       v1alpha2.EtcdDefragSpec{ClusterRef: corev1.LocalObjectReference{Name: cluster}, Rule: rule},
	}
	if o.name == "" {
		run.GenerateName = cluster + "-defrag-"
	}
	if o.ttlSet {
		secs := o.ttl.Round(time.Second) / time.Second
		if secs < 0 || secs > math.MaxInt32 {
			return nil, usageError(fmt.Sprintf("--ttl-after-finished %s: give a duration from 0s (delete as soon as it ends) to about 68 years", o.ttl))
		}
		run.Spec.TTLSecondsAfterFinished = ptr.To(int32(secs))
	}
	return run, nil
}

// defragRule is the spec's rule from the flags, nil when none was given
// (the operator's default gate). It refuses what the API server would, with
// the flags' names.
func defragRule(o defragRunOptions) (*v1alpha2.DefragRule, error) {
	if !o.all && o.freeSpaceAbove == "" && o.quotaUsageAbove == "" && o.minReclaim == "" {
		return nil, nil
	}
	r := &v1alpha2.DefragRule{All: o.all, QuotaUsageAbove: o.quotaUsageAbove}
	var err error
	if r.FreeSpaceAbove, err = positiveQuantity("free-space-above", o.freeSpaceAbove); err != nil {
		return nil, err
	}
	if r.MinReclaim, err = positiveQuantity("min-reclaim", o.minReclaim); err != nil {
		return nil, err
	}
	switch {
	case o.all && (r.FreeSpaceAbove != nil || r.QuotaUsageAbove != "" || r.MinReclaim != nil):
		return nil, usageError("--all defragments every member and cannot be combined with --free-space-above, --quota-usage-above or --min-reclaim")
	case r.QuotaUsageAbove != "" && !quotaShare.MatchString(r.QuotaUsageAbove):
		return nil, usageError(fmt.Sprintf("--quota-usage-above %q: give a share of the quota from 1%% to 100%%, such as 80%%", r.QuotaUsageAbove))
	case r.MinReclaim != nil && r.QuotaUsageAbove == "":
		return nil, usageError("--min-reclaim only applies together with --quota-usage-above: add it, or drop --min-reclaim")
	}
	return r, nil
}

func positiveQuantity(flag, v string) (*resource.Quantity, error) {
	if v == "" {
		return nil, nil
	}
	q, err := resource.ParseQuantity(v)
	if err != nil || q.Sign() <= 0 {
		return nil, usageError(fmt.Sprintf("--%s %q: give a size greater than zero, such as 100Mi", flag, v))
	}
	return &q, nil
}

// requireCluster checks that the EtcdCluster exists before asking the
// operator to defragment it: the run would only fail with ClusterNotFound.
func requireCluster(ctx context.Context, kube client.Client, namespace, name string) error {
	err := kube.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &v1alpha2.EtcdCluster{})
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("etcdcluster %q not found in namespace %q (kubectl get etcdclusters -n %s lists them)", name, namespace, namespace)
	case meta.IsNoMatchError(err):
		return fmt.Errorf("this API server has no EtcdCluster kind: is etcd-operator installed? For an etcd the operator does not run, defragment one member at a time with -p POD: %w", err)
	case err != nil:
		return fmt.Errorf("reading etcdcluster %s: %w", name, err)
	}
	return nil
}

// explainDefragCreate says what to do when the EtcdDefrag cannot be created.
func explainDefragCreate(err error, run *v1alpha2.EtcdDefrag, cluster string) error {
	switch {
	case meta.IsNoMatchError(err) || apierrors.IsNotFound(err):
		// NotFound: a stale discovery cache that still maps the kind.
		return fmt.Errorf("this API server has no EtcdDefrag kind (the operator's CRDs predate it, or were not applied): apply the operator's current CRDs, or defragment through the etcd API from here with kubectl etcd defrag -c %s --direct: %w", cluster, err)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("you may not create etcddefrags in namespace %s: ask for create and get on etcddefrags.%s, or defragment through the etcd API with --direct: %w", run.Namespace, v1alpha2.GroupVersion.Group, err)
	case apierrors.IsAlreadyExists(err):
		return fmt.Errorf("etcddefrag %s exists already, and a finished run never runs again: choose another --name, or leave --name out for a generated one: %w", run.Name, err)
	}
	return fmt.Errorf("creating the etcddefrag for etcdcluster %s: %w", cluster, err)
}

// followDefrag reads the run until it ends, showing on the terminal what it
// waits for, which member it is at and each member's outcome as it comes.
// It returns the run as it ended.
func followDefrag(ctx context.Context, kube client.Client, run *v1alpha2.EtcdDefrag, every time.Duration, p *progress) (*v1alpha2.EtcdDefrag, error) {
	key := client.ObjectKeyFromObject(run)
	w := defragWatch{name: run.Name, done: map[string]bool{}}
	var last *v1alpha2.EtcdDefrag
	err := wait.PollUntilContextCancel(ctx, every, true, func(ctx context.Context) (bool, error) {
		got := &v1alpha2.EtcdDefrag{}
		err := kube.Get(ctx, key, got)
		switch {
		case apierrors.IsNotFound(err):
			return false, errDefragDeleted
		case apierrors.IsForbidden(err):
			return false, fmt.Errorf("the etcddefrag was created, but you may not read it: ask for get on etcddefrags, or pass --wait=false: %w", err)
		case err != nil:
			// The API server may blink during a long run; the run goes on.
			p.show("Reading etcddefrag %s failed, retrying: %v", run.Name, err)
			return false, nil
		}
		last = got
		w.report(got, p)
		return defragEnded(got), nil
	})
	switch {
	case errors.Is(err, errDefragDeleted):
		return nil, fmt.Errorf("etcddefrag %s was deleted before it ended (by someone, or by a short --ttl-after-finished); its Events may say how far it got: kubectl get events -n %s --field-selector involvedObject.name=%s", run.Name, run.Namespace, run.Name)
	case err != nil && ctx.Err() != nil:
		return nil, fmt.Errorf("stopped following etcddefrag %s; the operator goes on with it: kubectl get etcddefrag %s -n %s -w", run.Name, run.Name, run.Namespace)
	case err != nil:
		return nil, err
	}
	return last, nil
}

func defragEnded(d *v1alpha2.EtcdDefrag) bool {
	return d.Status.Phase == v1alpha2.DefragComplete || d.Status.Phase == v1alpha2.DefragFailed
}

// defragWatch remembers what was shown of a followed run, so that each
// change is shown once.
type defragWatch struct {
	name     string
	activity string          // the progress line shown last
	done     map[string]bool // members whose outcome was shown
}

// report shows the members that finished since the last read, each on a
// line of its own, then what the run does now on the progress line.
func (w *defragWatch) report(d *v1alpha2.EtcdDefrag, p *progress) {
	for _, m := range d.Status.Members {
		if m.Outcome == "" || m.Outcome == v1alpha2.DefragOutcomePending || w.done[m.Name] {
			continue
		}
		w.done[m.Name] = true
		p.note("%s", memberOutcome(m))
		w.activity = "" // the note took the progress line's place
	}
	if now := defragActivity(d); now != w.activity {
		p.show("%s", now)
		w.activity = now
	}
}

// defragActivity is what the run does now, in the operator's words (its
// DefragChecked condition): queued, waiting and why, or which member.
func defragActivity(d *v1alpha2.EtcdDefrag) string {
	c := conditions.Get(d.Status.Conditions, conditions.DefragChecked)
	if d.Status.Phase == "" || c == nil {
		return fmt.Sprintf("Waiting for the operator to take up etcddefrag %s...", d.Name)
	}
	return fmt.Sprintf("etcddefrag %s: %s", d.Name, c.Message)
}

// memberOutcome is one finished member, as a line.
func memberOutcome(m v1alpha2.DefragMemberStatus) string {
	head := fmt.Sprintf("%s (%s): %s", m.Name, orDash(string(m.Role)), m.Outcome)
	switch {
	case m.Outcome == v1alpha2.DefragOutcomeDefragmented && m.DBSizeAfter > 0:
		return fmt.Sprintf("%s, %s -> %s, %s reclaimed", head, bytesIEC(m.DBSizeBefore), bytesIEC(m.DBSizeAfter), bytesIEC(m.ReclaimedBytes))
	case m.DBSizeBefore > 0:
		return fmt.Sprintf("%s, %s (%s)", head, bytesIEC(m.DBSizeBefore), orDash(m.Reason))
	}
	return fmt.Sprintf("%s (%s)", head, orDash(m.Reason))
}

// reportDefrag prints the ended run and turns a Failed one into the
// command's error.
func reportDefrag(out io.Writer, d *v1alpha2.EtcdDefrag, output *outputFlags) error {
	c := conditions.Get(d.Status.Conditions, conditions.DefragChecked)
	if !output.human() || len(d.Status.Members) > 0 {
		if err := printDefragObject(out, d, output); err != nil {
			return err
		}
	}
	if d.Status.Phase == v1alpha2.DefragFailed {
		reason, msg := "", "no reason recorded"
		if c != nil {
			reason, msg = c.Reason+": ", c.Message
		}
		return fmt.Errorf("etcddefrag %s failed: %s%s (kubectl describe etcddefrag %s -n %s shows its Events)", d.Name, reason, msg, d.Name, d.Namespace)
	}
	if output.human() && c != nil {
		fmt.Fprintf(out, "etcddefrag %s: %s.\n", d.Name, c.Message)
	}
	return nil
}

// printDefragObject prints the run as kubectl get would, or as the plugin's
// table of its members.
func printDefragObject(out io.Writer, d *v1alpha2.EtcdDefrag, output *outputFlags) error {
	d = d.DeepCopy()
	d.APIVersion, d.Kind = v1alpha2.GroupVersion.String(), "EtcdDefrag"
	return output.print(out, d, defragRunTable(d))
}

// defragRunTable has one row per member of the run, in the order they
// went; wide adds when each finished.
func defragRunTable(d *v1alpha2.EtcdDefrag) func(wide bool) table {
	return func(wide bool) table {
		t := table{header: []string{"MEMBER", "ROLE", "OUTCOME", "BEFORE", "AFTER", "RECLAIMED", "REASON"}}
		if wide {
			t.header = append(t.header, "FINISHED")
		}
		for _, m := range d.Status.Members {
			row := defragMemberCells(m)
			if wide {
				row = append(row, finishedAt(m.FinishedAt))
			}
			t.rows = append(t.rows, row)
		}
		return t
	}
}

func finishedAt(t *metav1.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func defragMemberCells(m v1alpha2.DefragMemberStatus) []string {
	before, after, reclaimed := "-", "-", "-"
	if m.DBSizeBefore > 0 {
		before = bytesIEC(m.DBSizeBefore)
	}
	// A defragmented member whose size after could not be read has
	// neither field (reason AfterSizeUnavailable).
	if m.Outcome == v1alpha2.DefragOutcomeDefragmented && m.DBSizeAfter > 0 {
		after, reclaimed = bytesIEC(m.DBSizeAfter), bytesIEC(m.ReclaimedBytes)
	}
	return []string{m.Name, orDash(string(m.Role)), string(m.Outcome), before, after, reclaimed, orDash(m.Reason)}
}
