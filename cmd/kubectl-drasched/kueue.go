package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/drasched/drasched/pkg/capacity/fit"
	"github.com/drasched/drasched/pkg/capacity/kueue"
)

// newClients returns the client of the kubeconfig and a reader of Kueue's
// objects with the same configuration.
func newClients(flags *genericclioptions.ConfigFlags) (kubernetes.Interface, *kueue.Reader, error) {
	config, err := flags.ToRESTConfig()
	if err != nil {
		return nil, nil, err
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return nil, nil, err
	}
	dyn, err := dynamic.NewForConfig(config)
	if err != nil {
		return nil, nil, err
	}
	return client, &kueue.Reader{Dynamic: dyn, Discovery: client.Discovery()}, nil
}

// kueueFlags are fit's flags for a Kueue ClusterQueue.
type kueueFlags struct {
	clusterQueue string
	mapping      []string
}

func (f *kueueFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.clusterQueue, "cluster-queue", "", "a Kueue ClusterQueue: also say how many more pods fit in its quota")
	cmd.Flags().StringArrayVar(&f.mapping, "kueue-mapping", kueue.DefaultMapping,
		"Kueue's resources.deviceClassMappings (its Configuration is not in the API), RESOURCE=CLASS[,CLASS...]; repeat for each quota resource")
}

// parse checks the flags, before any read of the cluster.
func (f *kueueFlags) parse(cmd *cobra.Command) (kueue.Mapping, error) {
	mapping, err := kueue.ParseMapping(f.mapping)
	if err != nil {
		return nil, fmt.Errorf("--kueue-mapping %w", err)
	}
	if f.clusterQueue == "" && cmd.Flags().Changed("kueue-mapping") {
		return nil, errors.New("--kueue-mapping counts devices against the quota of --cluster-queue: give the queue")
	}
	return mapping, nil
}

// admissionText says what Kueue did with the pod's workload, in one line.
func admissionText(a *kueue.Admission) string {
	var s string
	switch {
	case a.Admitted:
		s = fmt.Sprintf("Workload %s: admitted by Kueue into ClusterQueue %s", a.Workload, a.ClusterQueue)
		if q := admittedQuota(a); q != "" {
			s += " (" + q + ")"
		}
		return s + "."
	case a.ClusterQueue != "":
		s = fmt.Sprintf("Workload %s: quota reserved by Kueue in ClusterQueue %s", a.Workload, a.ClusterQueue)
		if q := admittedQuota(a); q != "" {
			s += " (" + q + ")"
		}
		s += ", not admitted yet"
	default:
		s = fmt.Sprintf("Workload %s: not admitted by Kueue", a.Workload)
		if a.LocalQueue != "" {
			s += " (LocalQueue " + a.LocalQueue + ")"
		}
	}
	if a.Message != "" {
		s += ": " + strings.TrimSuffix(a.Message, ".")
	}
	return s + "."
}

// admittedQuota is the quota a workload holds: "drasched.dev/gpu: 6 of
// flavor gpus", each pod set after its name where there are several.
func admittedQuota(a *kueue.Admission) string {
	var sets []string
	for _, ps := range a.PodSets {
		var resources []string
		for _, r := range ps.Resources {
			s := fmt.Sprintf("%s: %s", r.Name, r.Quantity.String())
			if r.Flavor != "" {
				s += " of flavor " + r.Flavor
			}
			resources = append(resources, s)
		}
		s := strings.Join(resources, ", ")
		if len(a.PodSets) > 1 {
			s = ps.Name + ": " + s
		}
		sets = append(sets, s)
	}
	return strings.Join(sets, "; ")
}

// quotaText says how many more units fit in the ClusterQueue's quota,
// beside how many fit on the nodes, and the fewer of the two.
func quotaText(r *fit.Result, unit, units string) string {
	q := r.Quota
	more := func(n int) string {
		if n == 1 {
			return "1 more " + unit + " fits"
		}
		return fmt.Sprintf("%d more %s fit", n, units)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "ClusterQueue %s: ", q.ClusterQueue)
	switch {
	case q.NotAdmitted != "":
		fmt.Fprintf(&b, "Kueue admits no workload of these pods (%s)", q.NotAdmitted)
	case q.Fits == nil:
		b.WriteString("the pods take none of its quota resources (Kueue counts the devices of claims from ResourceClaimTemplates, by --kueue-mapping)")
	default:
		var resources []string
		for _, res := range q.Resources {
			s := fmt.Sprintf("%d %s nominal in flavor %s, %d in use", res.Nominal, res.Name, res.Flavor, res.InUse)
			if res.Borrowed > 0 {
				s += fmt.Sprintf(" (%d borrowed)", res.Borrowed)
			}
			resources = append(resources, s+fmt.Sprintf(", %d per %s", res.PerUnit, unit))
		}
		fmt.Fprintf(&b, "%s: %s in its nominal quota", strings.Join(resources, "; "), more(*q.Fits))
	}
	fmt.Fprintf(&b, "; nodes: %s. In both: %s now.\n", more(r.Fits), more(*r.Answer))
	switch {
	case q.NotAdmitted != "" || q.Fits == nil:
	case q.FitsBorrowing != nil:
		fmt.Fprintf(&b, "  Borrowing from cohort %s up to its borrowingLimit: %s in the quota, if the cohort's other queues leave that much unused.\n", q.Cohort, more(*q.FitsBorrowing))
	case q.BorrowingUnlimited:
		fmt.Fprintf(&b, "  It may borrow from cohort %s whatever the cohort's other queues leave unused (no borrowingLimit); fit does not read those queues.\n", q.Cohort)
	}
	if q.Fits != nil && r.Requested > 0 && *q.Fits < r.Requested {
		fmt.Fprintf(&b, "  Kueue admits a workload's pods together: a workload of %d such %s is not admitted within the nominal quota.\n", r.Requested, units)
	}
	for _, n := range q.Notes {
		fmt.Fprintf(&b, "  Note: %s.\n", n)
	}
	return b.String()
}
