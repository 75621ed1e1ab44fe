package main

// runResult is what one run of one scheduler measured, as bench/kwok run
// writes it and bench/kwok report reads it.
type runResult struct {
	Scheduler string `json:"scheduler"`
	// Variant is how the scheduler differed from its defaults: variantPQH,
	// or empty.
	Variant string `json:"variant,omitempty"`
	Run     int    `json:"run"`
	Nodes   int    `json:"nodes"`
	// FillPods is that of the runConfig.
	FillPods int `json:"fill_pods,omitempty"`
	// NodeMix is the number of nodes by kind.
	NodeMix map[string]int `json:"node_mix"`
	// Fraction, ChurnBase, ChurnRate, ChurnLifetimeSeconds, PreemptShare
	// and PreemptWaitSeconds are those of the runConfig.
	Fraction             float64 `json:"fraction"`
	ChurnBase            float64 `json:"churn_base"`
	ChurnRate            float64 `json:"churn_rate"`
	ChurnLifetimeSeconds float64 `json:"churn_lifetime_seconds"`
	PreemptShare         float64 `json:"preempt_share,omitempty"`
	PreemptWaitSeconds   float64 `json:"preempt_wait_seconds,omitempty"`
	// GangFraction is that of the runConfig, if it ran the gang case.
	GangFraction float64 `json:"gang_fraction,omitempty"`
	// FragSeed ... FragLargeWaitSeconds are those of the runConfig, if
	// it ran a fragmentation case.
	FragSeed             uint64       `json:"frag_seed,omitempty"`
	FragUse              float64      `json:"frag_use,omitempty"`
	FragSteps            int          `json:"frag_steps,omitempty"`
	FragLifetimeSteps    int          `json:"frag_lifetime_steps,omitempty"`
	FragIntervalSeconds  float64      `json:"frag_interval_seconds,omitempty"`
	FragLargeWaitSeconds float64      `json:"frag_large_wait_seconds,omitempty"`
	Cases                []caseResult `json:"cases"`
}

// caseResult is what one case measured.
type caseResult struct {
	Name string `json:"name"`
	// Pods is how many pods were measured.
	Pods int `json:"pods"`
	// Latencies are creation → bound of the bound pods, in seconds.
	Latencies []float64 `json:"latencies"`
	// BoundAt are the bind times since the case started, in seconds.
	BoundAt []float64 `json:"bound_at"`
	// Seconds is from the first creation to the last bind.
	Seconds float64 `json:"seconds"`
	// Unbound pods were not bound in time.
	Unbound int `json:"unbound,omitempty"`
	// HighPriorityBound and Preempted are of the preempt and preempt_gang
	// cases: how many of the high-priority pods (Pods; preempt_gang: the
	// pods of its groups) were bound, and how many of the low-priority pods
	// that filled the GPUs were evicted (gone or being deleted at the end).
	HighPriorityBound int `json:"high_priority_bound,omitempty"`
	Preempted         int `json:"preempted_pods,omitempty"`
	// WastedGPUs are the GPUs of the evicted pods beyond those of the
	// high-priority pods bound: the GPUs were full, so every GPU a
	// high-priority pod got was an evicted pod's, and the rest were
	// evicted for nothing (or for pods not bound in time).
	WastedGPUs int `json:"wasted_gpus,omitempty"`
	// Of the fragmentation cases (Pods are the churn's, Unbound those
	// never seen bound, Seconds the churn's duration), at the end of the
	// churn: WholeFree counts the H100 nodes with all GPUs free
	// (fragmentation) or the GPUs in MIG mode with no device in use
	// (fragmentation_mig), IdealWholeFree what the same devices in use
	// would leave whole if perfectly packed; Free4GPUNUMA and
	// IdealFree4GPUNUMA the places for 4 GPUs on one NUMA node and
	// FreeGPUs the free H100 GPUs (fragmentation); MIGInUse the MIG
	// devices in use by profile (fragmentation_mig). LargePods were
	// then created, as many as IdealWholeFree, and LargePodsPlaced
	// bound. WholeFreeSeries is WholeFree after each step of the churn,
	// points (step, count).
	WholeFree         int            `json:"whole_free,omitempty"`
	IdealWholeFree    int            `json:"ideal_whole_free,omitempty"`
	Free4GPUNUMA      int            `json:"free_4gpu_numa,omitempty"`
	IdealFree4GPUNUMA int            `json:"ideal_free_4gpu_numa,omitempty"`
	FreeGPUs          int            `json:"free_gpus,omitempty"`
	MIGInUse          map[string]int `json:"mig_in_use,omitempty"`
	LargePods         int            `json:"large_pods,omitempty"`
	LargePodsPlaced   int            `json:"large_pods_placed,omitempty"`
	WholeFreeSeries   [][2]float64   `json:"whole_free_series,omitempty"`
	// ByUse says where the pods went at the end of the churn: H100 nodes
	// by GPUs in use (fragmentation), GPUs in MIG mode by memory slices
	// in use, or "whole" (fragmentation_mig).
	ByUse map[string]int `json:"by_use,omitempty"`
	// Of the gang and preempt_gang cases (Pods are the pods of all their
	// groups): Groups is how many PodGroups it created, GroupsBound how
	// many had all their pods bound at the end and PartialGroups how many
	// some but not all;
	// GroupLatencies are, for each group whose pods were all bound, from
	// the PodGroup's creation to the bind of its last pod, in seconds.
	Groups         int       `json:"groups,omitempty"`
	GroupsBound    int       `json:"groups_bound,omitempty"`
	PartialGroups  int       `json:"partial_groups,omitempty"`
	GroupLatencies []float64 `json:"group_latencies,omitempty"`
	// Of the queue case (Pods are the pods of all its Jobs, Latencies from
	// a pod's Job's Create call to its bind): Jobs is how many Jobs it
	// created, JobsByQueue how many per LocalQueue, JobsBound how many had
	// all their pods bound; JobLatencies are, for each of those, from its
	// Create call to the bind of its last pod, JobStartLatencies, for each
	// Job with a pod, from its Create call to the first watch event of one
	// of its pods (Kueue's admission and the Job controller's work), and
	// SchedulingLatencies, for each pod bound, from its first watch event to
	// its bind, in seconds. UsedPeak and BorrowedPeak are the most GPUs
	// of quota that Kueue's ClusterQueues reported in use, and borrowed,
	// sampled every second; WorkloadsEvicted counts the workloads Kueue
	// evicted.
	Jobs                int            `json:"jobs,omitempty"`
	JobsByQueue         map[string]int `json:"jobs_by_queue,omitempty"`
	JobsBound           int            `json:"jobs_bound,omitempty"`
	JobLatencies        []float64      `json:"job_latencies,omitempty"`
	JobStartLatencies   []float64      `json:"job_start_latencies,omitempty"`
	SchedulingLatencies []float64      `json:"scheduling_latencies,omitempty"`
	UsedPeak            int            `json:"used_peak,omitempty"`
	BorrowedPeak        int            `json:"borrowed_peak,omitempty"`
	WorkloadsEvicted    int            `json:"workloads_evicted,omitempty"`
	// Share is the fraction of the H100 GPUs that fill's pods took (below
	// the run's Fraction where FillPods bounded them).
	Share float64 `json:"share,omitempty"`
	// CPUSeconds is the CPU time the scheduler process used while the case
	// ran (from the start of its measured pods to the last bind), and
	// PeakRSSBytes its peak resident set size meanwhile; cost cases only.
	CPUSeconds   float64 `json:"cpu_seconds,omitempty"`
	PeakRSSBytes uint64  `json:"peak_rss_bytes,omitempty"`
	// AllocationErrors counts what invariants.Check found.
	AllocationErrors int `json:"allocation_errors"`
	// Errors are the first errors of the case, for the report.
	Errors []string `json:"errors,omitempty"`
}

// maxErrors is how many errors of a case a result keeps.
const maxErrors = 10

func (c *caseResult) addErrors(errs ...error) {
	for _, err := range errs {
		if len(c.Errors) < maxErrors {
			c.Errors = append(c.Errors, err.Error())
		}
	}
}

// failed says whether the case has errors.
func (c *caseResult) failed() bool { return len(c.Errors) > 0 }
