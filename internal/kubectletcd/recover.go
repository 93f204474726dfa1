package kubectletcd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// recoverOptions are the flags of `recover`.
type recoverOptions struct {
	dryRun   bool
	yes      bool
	token    string
	snapshot string
	wait     bool
	timeout  time.Duration
	output   *outputFlags
}

// errRecoveryRefused: the operator answered, and not with a plan to carry out.
var errRecoveryRefused = errors.New("recovery refused")

func (a *app) recoverCommand() *cobra.Command {
	var o recoverOptions
	c := &cobra.Command{
		Use:   "recover -c CLUSTER (--dry-run | --plan-token TOKEN | --yes)",
		Short: "Recover an EtcdCluster that lost quorum (asks the operator; dry run first)",
		Long: `recover asks the operator to bring back an EtcdCluster that lost its quorum,
through the annotation etcd-operator.cozystack.io/recover. Recovery discards
data: every member but the survivor (the voter with the highest applied index
whose etcd answers) is deleted with its volume, or, with --from-snapshot, every
member, and the cluster is rebuilt from that EtcdSnapshot.

  --dry-run             show the operator's plan and its token; nothing changes
  --plan-token TOKEN    carry out the plan of that token, if it is still the plan
  --yes                 dry run, then carry out the plan it showed, without asking

The operator makes the plan again from fresh facts before it acts: when it
changed, nothing happens and the new plan is shown. See docs/operations.md,
"Recovering from quorum loss".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return a.recover(cmd, o) },
	}
	f := c.Flags()
	f.BoolVar(&o.dryRun, "dry-run", false, "only show the plan")
	f.BoolVar(&o.yes, "yes", false, "carry out the plan the dry run shows, without asking")
	f.StringVar(&o.token, "plan-token", "", "carry out the plan of this token (from --dry-run)")
	f.StringVar(&o.snapshot, "from-snapshot", "", "rebuild from this EtcdSnapshot instead of a surviving member")
	f.BoolVar(&o.wait, "wait", true, "follow the recovery until the cluster has its members again")
	f.DurationVar(&o.timeout, "timeout", 0, "how long to wait for the operator (default 2m for a plan, 10m to follow a recovery)")
	o.output = addOutputFlags(c, withoutName)
	return c
}

func (a *app) recover(cmd *cobra.Command, o recoverOptions) error {
	switch {
	case a.opts.Cluster == "":
		return usageError("recover needs the EtcdCluster: -c CLUSTER")
	case o.dryRun && (o.yes || o.token != ""):
		return usageError("--dry-run only shows the plan: leave out --yes and --plan-token")
	case o.yes && o.token != "":
		return usageError("--yes carries out the plan the dry run shows; --plan-token carries out one you saw: give one of them")
	case !o.dryRun && !o.yes && o.token == "" && *a.kube.BearerToken != "":
		// The plan's token was --token before the plugin took kubectl's
		// flags, where --token is the API server's bearer token.
		return usageError("the plan's token goes to --plan-token TOKEN; --token is the bearer token for the API server, as in kubectl")
	case !o.dryRun && !o.yes && o.token == "":
		return usageError("recovery discards the data of every member but the survivor: run with --dry-run first to see the plan, then with --plan-token TOKEN (or --yes)")
	}
	if err := o.output.validate(); err != nil {
		return err
	}
	d, err := a.connect()
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	if err := requireCluster(ctx, d.kube, d.namespace, a.opts.Cluster); err != nil {
		return err
	}
	r := recoverer{kube: d.kube, key: client.ObjectKey{Namespace: d.namespace, Name: a.opts.Cluster}, every: a.recoverPoll(), snapshot: o.snapshot}
	out := cmd.OutOrStdout()
	token := o.token
	if o.dryRun || o.yes {
		plan, err := r.ask(ctx, manifest.RecoverDryRun, timeoutOr(o.timeout, 2*time.Minute))
		if err != nil {
			return err
		}
		if err := printPlan(out, plan, a.nextCommand(d.namespace), o.output, !o.yes); err != nil || o.dryRun {
			return err
		}
		token = plan.Token
	}
	return a.consent(ctx, cmd, r, token, o)
}

// consent sets the token and follows the recovery it starts.
func (a *app) consent(ctx context.Context, cmd *cobra.Command, r recoverer, token string, o recoverOptions) error {
	out := cmd.OutOrStdout()
	started, err := r.ask(ctx, token, timeoutOr(o.timeout, 2*time.Minute))
	if err != nil {
		return err
	}
	if started.Phase == v1alpha2.RecoveryPlanned {
		_ = printPlan(out, started, a.nextCommand(r.key.Namespace), o.output, true)
		return fmt.Errorf("%w: token %s is not the current plan's (the plan changed or expired, was never made, or the token was used); review the plan above and give its token before it expires", errRecoveryRefused, token)
	}
	if !o.wait {
		return printRecovery(out, started, o.output)
	}
	p := a.progressTo(cmd.ErrOrStderr())
	done, err := r.follow(ctx, timeoutOr(o.timeout, 10*time.Minute), p)
	p.clear()
	if err != nil {
		return err
	}
	return printRecovery(out, done, o.output)
}

func (a *app) recoverPoll() time.Duration {
	if a.pollEvery > 0 {
		return a.pollEvery
	}
	return time.Second
}

func timeoutOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// nextCommand renders the command that consents to a plan.
func (a *app) nextCommand(namespace string) func(token string) string {
	return func(token string) string {
		cmd := "kubectl etcd recover -c " + a.opts.Cluster
		if *a.kube.Namespace != "" {
			cmd += " -n " + namespace
		}
		return cmd + " --plan-token " + token
	}
}

// recoverer talks to the operator through the cluster's annotations and
// status.recovery.
type recoverer struct {
	kube     client.Client
	key      client.ObjectKey
	every    time.Duration
	snapshot string
}

// ask sets the request and waits for the operator's answer to it.
func (r recoverer) ask(ctx context.Context, request string, timeout time.Duration) (*v1alpha2.RecoveryStatus, error) {
	c := &v1alpha2.EtcdCluster{}
	if err := r.kube.Get(ctx, r.key, c); err != nil {
		return nil, fmt.Errorf("reading etcdcluster %s: %w", r.key.Name, err)
	}
	patch := client.MergeFrom(c.DeepCopy())
	metav1.SetMetaDataAnnotation(&c.ObjectMeta, manifest.AnnotationRecover, request)
	if r.snapshot != "" {
		metav1.SetMetaDataAnnotation(&c.ObjectMeta, manifest.AnnotationRecoverFromSnapshot, r.snapshot)
	}
	if err := r.kube.Patch(ctx, c, patch); err != nil {
		if apierrors.IsForbidden(err) {
			return nil, fmt.Errorf("you may not annotate etcdcluster %s: recovery needs patch on etcdclusters: %w", r.key.Name, err)
		}
		return nil, fmt.Errorf("annotating etcdcluster %s: %w", r.key.Name, err)
	}
	var answer *v1alpha2.RecoveryStatus
	err := r.poll(ctx, timeout, func(rec *v1alpha2.RecoveryStatus) bool {
		answer = rec
		return rec != nil && rec.Request == request
	})
	if err != nil {
		return nil, fmt.Errorf("the operator did not answer %s=%s within %s (is it running, and does it watch namespace %s?): %w",
			manifest.AnnotationRecover, request, timeout, r.key.Namespace, err)
	}
	switch answer.Phase {
	case v1alpha2.RecoveryRefused:
		return nil, fmt.Errorf("%w: %s", errRecoveryRefused, answer.Message)
	case v1alpha2.RecoveryNotNeeded:
		return nil, fmt.Errorf("%w: %s", errRecoveryRefused, answer.Message)
	}
	return answer, nil
}

// follow reads status.recovery until it completes, showing each phase.
func (r recoverer) follow(ctx context.Context, timeout time.Duration, p *progress) (*v1alpha2.RecoveryStatus, error) {
	var last *v1alpha2.RecoveryStatus
	phase := ""
	err := r.poll(ctx, timeout, func(rec *v1alpha2.RecoveryStatus) bool {
		last = rec
		if rec == nil {
			return false
		}
		if rec.Phase != phase {
			phase = rec.Phase
			p.note("%s: %s", rec.Phase, rec.Message)
		}
		return rec.Phase == v1alpha2.RecoveryCompleted
	})
	if err != nil {
		where := "no recovery on record"
		if last != nil {
			where = last.Phase + ": " + last.Message
		}
		return nil, fmt.Errorf("the recovery did not complete within %s (now %s; kubectl describe etcdcluster %s -n %s shows its Events): %w",
			timeout, where, r.key.Name, r.key.Namespace, err)
	}
	return last, nil
}

func (r recoverer) poll(ctx context.Context, timeout time.Duration, done func(*v1alpha2.RecoveryStatus) bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return wait.PollUntilContextCancel(ctx, r.every, true, func(ctx context.Context) (bool, error) {
		c := &v1alpha2.EtcdCluster{}
		if err := r.kube.Get(ctx, r.key, c); err != nil {
			return false, fmt.Errorf("reading etcdcluster %s: %w", r.key.Name, err)
		}
		return done(c.Status.Recovery), nil
	})
}

// printPlan shows the plan: what it rebuilds from, what it discards, its
// token and the command that carries it out.
func printPlan(out io.Writer, rec *v1alpha2.RecoveryStatus, next func(string) string, output *outputFlags, showNext bool) error {
	if !output.human() {
		return printRecovery(out, rec, output)
	}
	fmt.Fprintln(out, rec.Message)
	fmt.Fprintln(out)
	switch {
	case rec.Survivor != nil:
		fmt.Fprintf(out, "Survivor: %s (member %s, applied index %s)\n", rec.Survivor.Name, orDash(rec.Survivor.MemberID), index(rec.Survivor.AppliedIndex))
	case rec.Snapshot != "":
		fmt.Fprintf(out, "Rebuilt from: EtcdSnapshot %s\n", rec.Snapshot)
	}
	fmt.Fprintln(out, "Discarded:")
	t := table{header: []string{"NAME", "MEMBER ID", "LAST APPLIED INDEX", "LAST SEEN", "STATE"}}
	for _, d := range rec.Discarded {
		seen := "-"
		if d.LastSeen != nil {
			seen = d.LastSeen.UTC().Format(time.RFC3339)
		}
		t.rows = append(t.rows, []string{d.Name, orDash(d.MemberID), index(d.AppliedIndex), seen, orDash(d.State)})
	}
	if err := t.write(out); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nToken: %s\n", rec.Token)
	if showNext {
		fmt.Fprintf(out, "To carry this plan out: %s\n", next(rec.Token))
	}
	return nil
}

func index(v *int64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprint(*v)
}

// printRecovery prints where a recovery is: one line, or the record as an
// object (-o json, yaml, ...).
func printRecovery(out io.Writer, rec *v1alpha2.RecoveryStatus, output *outputFlags) error {
	if !output.human() {
		return output.print(out, newRecovery(rec), nil)
	}
	var discarded []string
	for _, d := range rec.Discarded {
		discarded = append(discarded, d.Name)
	}
	fmt.Fprintf(out, "Recovery %s: %s (discarded: %s)\n", rec.Phase, rec.Message, strings.Join(discarded, ", "))
	return nil
}
