package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	_ "k8s.io/kubernetes/pkg/apis/resource/install" // defaults of resource.k8s.io objects
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/internal/kwokcluster"
	"github.com/drasched/drasched/internal/manifest"
	"github.com/drasched/drasched/internal/minor"
	"github.com/drasched/drasched/pkg/allocator"
	"github.com/drasched/drasched/pkg/explain"
)

// scenario is what demo/demo.sh sets up, read from the script itself so
// that the test follows it.
type scenario struct {
	nodes             []demoNode
	unschedulablePods []string
	// gangFits and gangUnschedulable name the PodGroups of the gang step,
	// each in config/examples/gang/<name>.yaml.
	gangFits, gangUnschedulable string
}

var (
	demoNodesRe       = regexp.MustCompile(`(?s)\ndemo_nodes=\((.*?)\)`)
	pluginNodeRe      = regexp.MustCompile(`\nplugin_node=(\S+)`)
	pluginInventoryRe = regexp.MustCompile(`\nplugin_inventory=(\S+)`)
	unschedulableRe   = regexp.MustCompile(`\nunschedulable_pod=(\S+)`)
	gangFitsRe        = regexp.MustCompile(`\ngang_fits=(\S+)`)
	gangUnschedRe     = regexp.MustCompile(`\ngang_unschedulable=(\S+)`)
)

func readScenario(t *testing.T) scenario {
	t.Helper()
	script := string(readFile(t, filepath.Join(repoRoot, "demo", "demo.sh")))
	match := func(re *regexp.Regexp) string {
		m := re.FindStringSubmatch(script)
		if m == nil {
			t.Fatalf("demo/demo.sh: %s not found", re)
		}
		return m[1]
	}
	var s scenario
	for _, field := range strings.Fields(match(demoNodesRe)) {
		n, err := parseNode(field, false)
		if err != nil {
			t.Fatal(err)
		}
		s.nodes = append(s.nodes, n)
	}
	s.nodes = append(s.nodes, demoNode{Name: match(pluginNodeRe), Inventory: match(pluginInventoryRe), ByPlugin: true})
	s.unschedulablePods = []string{match(unschedulableRe)}
	s.gangFits, s.gangUnschedulable = match(gangFitsRe), match(gangUnschedRe)
	for i := range s.nodes {
		s.nodes[i].Inventory = filepath.Join(repoRoot, s.nodes[i].Inventory)
	}
	return s
}

// decodeFile decodes every document of a manifest strictly and applies the
// API server's defaults, as kubectl apply and the API server would.
func decodeFile(t *testing.T, path string) []runtime.Object {
	t.Helper()
	objects, err := manifest.DecodeFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range objects {
		legacyscheme.Scheme.Default(obj)
	}
	return objects
}

// workload is one pod of the demo with the claims the resource claim
// controller makes for it.
type workload struct {
	pod    *corev1.Pod
	claims []*resourceapi.ResourceClaim
}

// preemptionFiles are the manifests of the demo's preemption step, in the
// order demo/demo.sh applies them.
var preemptionFiles = []string{
	filepath.Join(repoRoot, "config", "examples", "preemption", "training.yaml"),
	filepath.Join(repoRoot, "config", "examples", "preemption", "inference.yaml"),
}

// gangFile is the manifest of a PodGroup of the demo's gang step.
func gangFile(name string) string {
	return filepath.Join(repoRoot, "config", "examples", "gang", name+".yaml")
}

// demoWorkloads reads what demo/demo.sh applies: the DeviceClasses and the
// pods with their claims, in the order of the files; then, apart, the pods
// of the preemption step, and the PodGroups and pods of each gang (of
// gangFiles) of the gang step.
func demoWorkloads(t *testing.T, gangFiles ...string) ([]*resourceapi.DeviceClass, []workload, []workload, [][]*minor.PodGroup, [][]workload) {
	t.Helper()
	files := []string{filepath.Join(repoRoot, "config", "gpu-driver", "deviceclasses.yaml")}
	examples, err := manifest.KustomizationResources(filepath.Join(repoRoot, "config", "examples"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, examples...)
	files = append(files, filepath.Join(repoRoot, "demo", "workloads", "workloads.yaml"), filepath.Join(repoRoot, "demo", "workloads", "four-large-gpus-one-pcie-root.yaml"))
	var objects, preemption, all []runtime.Object
	for _, f := range files {
		objects = append(objects, decodeFile(t, f)...)
	}
	for _, f := range preemptionFiles {
		preemption = append(preemption, decodeFile(t, f)...)
	}
	gangs := make([][]runtime.Object, len(gangFiles))
	for i, f := range gangFiles {
		gangs[i] = decodeFile(t, f)
		all = append(all, gangs[i]...)
	}
	all = append(append(all, objects...), preemption...)

	templates := map[string]*resourceapi.ResourceClaimTemplate{}
	for _, tmpl := range manifest.OfType[*resourceapi.ResourceClaimTemplate](all) {
		templates[tmpl.Name] = tmpl
	}
	claims := map[string]*resourceapi.ResourceClaim{}
	for _, claim := range manifest.OfType[*resourceapi.ResourceClaim](objects) {
		claim.Namespace, claim.UID = "default", types.UID("uid-"+claim.Name)
		claims[claim.Name] = claim
	}
	workloadsOf := func(objects []runtime.Object) []workload {
		var workloads []workload
		for _, pod := range manifest.OfType[*corev1.Pod](objects) {
			w := workload{pod: pod}
			for _, pc := range pod.Spec.ResourceClaims {
				switch {
				case pc.ResourceClaimName != nil:
					claim, ok := claims[*pc.ResourceClaimName]
					if !ok {
						t.Fatalf("pod %s: no claim %s", pod.Name, *pc.ResourceClaimName)
					}
					w.claims = append(w.claims, claim)
				case pc.ResourceClaimTemplateName != nil:
					tmpl, ok := templates[*pc.ResourceClaimTemplateName]
					if !ok {
						t.Fatalf("pod %s: no template %s", pod.Name, *pc.ResourceClaimTemplateName)
					}
					name := pod.Name + "-" + pc.Name
					w.claims = append(w.claims, &resourceapi.ResourceClaim{
						ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
						Spec:       tmpl.Spec.Spec,
					})
				}
			}
			workloads = append(workloads, w)
		}
		return workloads
	}
	var groups [][]*minor.PodGroup
	var gangWorkloads [][]workload
	for _, g := range gangs {
		groups = append(groups, manifest.OfType[*minor.PodGroup](g))
		gangWorkloads = append(gangWorkloads, workloadsOf(g))
	}
	return manifest.OfType[*resourceapi.DeviceClass](objects), workloadsOf(objects), workloadsOf(preemption), groups, gangWorkloads
}

// TestScenario keeps the demo honest without a cluster: the nodes of
// demo/demo.sh, with the slices the driver builds from their inventories,
// take every pod the demo applies except the one it expects to be
// unschedulable, all at once (allocated one after the other, with
// drasched's allocator, on the first node that each pod's node selector
// allows and where it fits), and that one fits on no node even when all
// are idle. It also checks that every pod opts in to drasched. The
// preemption and gang steps are modelled as their comments below say.
func TestScenario(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	s := readScenario(t)
	classes, workloads, preemption, groups, gangs := demoWorkloads(t, gangFile(s.gangFits), gangFile(s.gangUnschedulable))

	var allSlices []*resourceapi.ResourceSlice
	var nodes []*corev1.Node
	for _, n := range s.nodes {
		gpus, err := n.discover(ctx)
		if err != nil {
			t.Fatal(err)
		}
		node := nodeObject(n)
		s, err := kwokcluster.NodeSlices(gpus, node)
		if err != nil {
			t.Fatalf("%s: %v", n.Name, err)
		}
		allSlices = append(allSlices, s...)
		nodes = append(nodes, node)
	}
	features := structured.Features{PrioritizedList: true, PartitionableDevices: true, DeviceTaints: true}
	cache := allocator.NewCache(0)
	allocate := func(allocated sets.Set[structured.DeviceID], node *corev1.Node, claims []*resourceapi.ResourceClaim) []resourceapi.AllocationResult {
		t.Helper()
		a, err := allocator.New(ctx, features, structured.AllocatedState{AllocatedDevices: allocated}, allocator.ClassList(classes), allSlices, allocator.Options{Cache: cache})
		if err != nil {
			t.Fatal(err)
		}
		results, err := a.Allocate(ctx, node, claims)
		if err != nil {
			t.Fatalf("allocate on %s: %v", node.Name, err)
		}
		return results
	}

	unschedulable := sets.New(s.unschedulablePods...)
	allocated := sets.New[structured.DeviceID]()
	done := sets.New[string]() // claims allocated already (shared claims)
	// place allocates the pod's claims on the first node that its node
	// selector allows and where they fit next to the pods before it; ""
	// if there is none.
	place := func(w workload) string {
		var pending []*resourceapi.ResourceClaim
		for _, c := range w.claims {
			if !done.Has(c.Name) {
				pending = append(pending, c)
			}
		}
		for _, node := range nodes {
			if !labels.SelectorFromSet(w.pod.Spec.NodeSelector).Matches(labels.Set(node.Labels)) {
				continue
			}
			results := allocate(allocated, node, pending)
			if results == nil {
				continue
			}
			for i, r := range results {
				done.Insert(pending[i].Name)
				for _, d := range r.Devices.Results {
					allocated.Insert(structured.MakeDeviceID(d.Driver, d.Pool, d.Device))
				}
			}
			return node.Name
		}
		return ""
	}
	var got []string
	for _, w := range workloads {
		if w.pod.Spec.SchedulerName != "drasched" {
			t.Errorf("pod %s: schedulerName %q, want drasched", w.pod.Name, w.pod.Spec.SchedulerName)
		}
		if unschedulable.Has(w.pod.Name) {
			for _, node := range nodes {
				if results := allocate(sets.New[structured.DeviceID](), node, w.claims); results != nil {
					t.Errorf("pod %s, expected to be unschedulable, fits on idle node %s", w.pod.Name, node.Name)
				}
			}
			continue
		}
		if place(w) == "" {
			t.Errorf("pod %s fits on no node next to the pods before it", w.pod.Name)
		}
		got = append(got, w.pod.Name)
	}
	if len(got) == 0 || len(unschedulable) == 0 {
		t.Fatalf("scenario without pods to schedule (%v) or without an unschedulable pod (%v)", got, sets.List(unschedulable))
	}

	// The preemption step, on its own (where the scheduler puts the
	// demo's pods is not modelled here): the training pods fit together;
	// the inference pod fits on its node idle, but not next to them, so
	// that it must evict some.
	if len(preemption) < 2 {
		t.Fatalf("preemption step: %d pods, want training pods and the inference pod", len(preemption))
	}
	training, inference := preemption[:len(preemption)-1], preemption[len(preemption)-1]
	allocated = sets.New[structured.DeviceID]()
	for _, w := range training {
		if place(w) == "" {
			t.Errorf("preemption step: training pod %s fits on no node next to the training pods before it", w.pod.Name)
		}
	}
	for _, node := range nodes {
		if !labels.SelectorFromSet(inference.pod.Spec.NodeSelector).Matches(labels.Set(node.Labels)) {
			continue
		}
		if allocate(allocated, node, inference.claims) != nil {
			t.Errorf("preemption step: pod %s fits on %s next to the training pods; the demo would show no preemption", inference.pod.Name, node.Name)
		}
		if allocate(sets.New[structured.DeviceID](), node, inference.claims) == nil {
			t.Errorf("preemption step: pod %s does not fit on %s even when idle", inference.pod.Name, node.Name)
		}
	}

	// The gang step, after the preemption step, which leaves its node full:
	// the other nodes, with the demo's pods placed on them as above (first
	// fit; the scheduler's choices differ, but not in how many pods of two
	// GPUs the rest takes). Then the fitting gang fits, and the other does
	// not, though at least one of its pods would: it is left pending
	// because it is a gang. Its pods being alike, first fit places as many
	// of them as any placement could.
	preemptionNodes := sets.New[string]()
	for _, node := range nodes {
		if labels.SelectorFromSet(inference.pod.Spec.NodeSelector).Matches(labels.Set(node.Labels)) {
			preemptionNodes.Insert(node.Name)
		}
	}
	nodes = slices.DeleteFunc(nodes, func(n *corev1.Node) bool { return preemptionNodes.Has(n.Name) })
	allocated, done = sets.New[structured.DeviceID](), sets.New[string]()
	for _, w := range workloads {
		if !unschedulable.Has(w.pod.Name) {
			place(w)
		}
	}
	for i, name := range []string{s.gangFits, s.gangUnschedulable} {
		if len(groups[i]) != 1 || groups[i][0].Name != name || groups[i][0].Spec.SchedulingPolicy.Gang == nil {
			t.Fatalf("%s: want exactly one PodGroup %s with a gang policy", gangFile(name), name)
		}
		if got, want := len(gangs[i]), int(groups[i][0].Spec.SchedulingPolicy.Gang.MinCount); got != want {
			t.Errorf("PodGroup %s: %d pods, minCount %d", name, got, want)
		}
		for _, w := range gangs[i] {
			if w.pod.Spec.SchedulerName != "drasched" {
				t.Errorf("pod %s: schedulerName %q, want drasched", w.pod.Name, w.pod.Spec.SchedulerName)
			}
			if ptr.Deref(minor.PodGroupName(w.pod), "") != name || w.pod.Labels["gang"] != name {
				t.Errorf("pod %s: want spec.schedulingGroup.podGroupName and label gang %s", w.pod.Name, name)
			}
		}
	}
	placeGang := func(gang []workload) int {
		placed := 0
		for _, w := range gang {
			if place(w) != "" {
				placed++
			}
		}
		return placed
	}
	if placed := placeGang(gangs[0]); placed < len(gangs[0]) {
		t.Errorf("gang step: PodGroup %s does not fit (%d of %d pods)", s.gangFits, placed, len(gangs[0]))
	}
	switch placed := placeGang(gangs[1]); {
	case placed == len(gangs[1]):
		t.Errorf("gang step: PodGroup %s fits next to %s", s.gangUnschedulable, s.gangFits)
	case placed == 0:
		t.Errorf("gang step: no pod of PodGroup %s would fit alone; the demo would show nothing about gangs", s.gangUnschedulable)
	}
}

// TestScenarioNodes: every node of the demo has GPUs, a unique name, and
// exactly one is served by the plugin.
func TestScenarioNodes(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	s := readScenario(t)
	names := sets.New[string]()
	plugin := 0
	for _, n := range s.nodes {
		if names.Has(n.Name) {
			t.Errorf("node %s twice", n.Name)
		}
		names.Insert(n.Name)
		if n.ByPlugin {
			plugin++
		}
		gpus, err := n.discover(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(gpus) == 0 {
			t.Errorf("node %s: no GPUs in %s", n.Name, n.Inventory)
		}
	}
	if plugin != 1 {
		t.Errorf("%d nodes served by the plugin, want 1", plugin)
	}
}

// TestScripts: the shell scripts that run kwok clusters parse (bash -n).
func TestScripts(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	for _, script := range []string{"demo/demo.sh", "demo/helm.sh", "hack/build-control-plane.sh", "hack/bench-kwok.sh", "hack/lib/init.sh", "hack/lib/processes.sh", "hack/lib/gpu-plugin.sh"} {
		out, err := exec.Command(bash, "-n", filepath.Join(repoRoot, script)).CombinedOutput()
		if err != nil {
			t.Errorf("bash -n %s: %v\n%s", script, err, out)
		}
	}
}

// unpinned matches a module query that names no fixed version: a moving
// tag or branch instead of a semantic version.
var unpinned = regexp.MustCompile(`@(latest|upgrade|patch|master|main|HEAD)\b`)

// TestPinnedVersions: the scripts pin what they build.
func TestPinnedVersions(t *testing.T) {
	for _, script := range []string{"demo/demo.sh", "demo/helm.sh", "hack/build-control-plane.sh", "hack/lib/etcd.sh", "hack/bench-kwok.sh"} {
		for i, line := range strings.Split(string(readFile(t, filepath.Join(repoRoot, script))), "\n") {
			if m := unpinned.FindString(line); m != "" {
				t.Errorf("%s:%d builds an unpinned version (%s): %s", script, i+1, m, line)
			}
		}
	}
}

// TestExplainUnschedulable runs what the demo prints for its unschedulable
// pod, kubectl drasched explain (pkg/explain), on the demo's nodes, all
// idle: the pod fits on no node, and each node says why.
func TestExplainUnschedulable(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	s := readScenario(t)
	classes, workloads, _, _, _ := demoWorkloads(t)
	objects := []runtime.Object{}
	for _, c := range classes {
		objects = append(objects, c)
	}
	for _, n := range s.nodes {
		gpus, err := n.discover(ctx)
		if err != nil {
			t.Fatal(err)
		}
		node := nodeObject(n)
		nodeSlices, err := kwokcluster.NodeSlices(gpus, node)
		if err != nil {
			t.Fatal(err)
		}
		objects = append(objects, node)
		for _, slice := range nodeSlices {
			objects = append(objects, slice)
		}
	}
	var target *workload
	for i := range workloads {
		if workloads[i].pod.Name == s.unschedulablePods[0] {
			target = &workloads[i]
		}
	}
	if target == nil {
		t.Fatalf("no workload %s", s.unschedulablePods[0])
	}
	// The pod as the claim controller leaves it: its claims generated.
	pod := target.pod.DeepCopy()
	pod.Namespace = "default" // where demo/demo.sh applies it
	for i, pc := range pod.Spec.ResourceClaims {
		pod.Status.ResourceClaimStatuses = append(pod.Status.ResourceClaimStatuses, corev1.PodResourceClaimStatus{Name: pc.Name, ResourceClaimName: ptr.To(target.claims[i].Name)})
		objects = append(objects, target.claims[i])
	}
	objects = append(objects, pod)

	report, err := explain.Explain(ctx, fake.NewClientset(objects...), pod.Namespace, pod.Name, explain.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(report.Problems) > 0 || len(report.Nodes) != len(s.nodes) {
		t.Fatalf("report %+v: want every node explained", report)
	}
	for _, n := range report.Nodes {
		if n.Fits || len(n.Reasons) == 0 {
			t.Errorf("node %s: fits %v, reasons %+v; want a reason why the pod does not fit", n.Node, n.Fits, n.Reasons)
		}
		t.Logf("%s: %s", n.Node, n.Reasons[0].Message)
	}
}

var (
	stepRe = regexp.MustCompile(`(?m)^\s*step "(.*)"$`)
	// A parameter expansion, one level of nesting: ${bin_dir#"${root}"/}.
	stepVarRe      = regexp.MustCompile(`\$\{(?:[^{}]|\{[^}]*\})*\}`)
	outputStepRe   = regexp.MustCompile(`(?m)^==> \[\d+\] (.*)$`)
	textBlockRe    = regexp.MustCompile("(?s)```text\n(.*?)```")
	markdownLinkRe = regexp.MustCompile(`\]\(([a-z-]+)/README\.md\)`)
	repoPathRe     = regexp.MustCompile("`((?:config|demo|hack|test|docs)/[^` ]+|[a-z0-9-]+\\.yaml)`")
)

// TestExampleFolders: demo/README.md links every example folder; each
// says what output to expect; the step lines of that output are steps
// demo.sh prints (its variables aside), and the files it names exist.
func TestExampleFolders(t *testing.T) {
	demoDir := filepath.Join(repoRoot, "demo")
	var steps []*regexp.Regexp
	for _, m := range stepRe.FindAllStringSubmatch(string(readFile(t, filepath.Join(demoDir, "demo.sh"))), -1) {
		literal := strings.Split(stepVarRe.ReplaceAllString(m[1], "\x00"), "\x00")
		for i := range literal {
			literal[i] = regexp.QuoteMeta(literal[i])
		}
		steps = append(steps, regexp.MustCompile("^"+strings.Join(literal, ".+")+"$"))
	}
	if len(steps) < 10 {
		t.Fatalf("demo/demo.sh: %d steps found, want its steps", len(steps))
	}
	linked := sets.New[string]()
	for _, m := range markdownLinkRe.FindAllStringSubmatch(string(readFile(t, filepath.Join(demoDir, "README.md"))), -1) {
		linked.Insert(m[1])
	}
	entries, err := os.ReadDir(demoDir)
	if err != nil {
		t.Fatal(err)
	}
	folders := 0
	for _, e := range entries {
		if !e.IsDir() || e.Name() == "helper" {
			continue
		}
		folders++
		name := e.Name()
		t.Run(name, func(t *testing.T) {
			if !linked.Has(name) {
				t.Errorf("demo/README.md does not link %s/README.md", name)
			}
			readme := string(readFile(t, filepath.Join(demoDir, name, "README.md")))
			if !strings.Contains(readme, "\n## Expected output\n") {
				t.Error("no section \"## Expected output\"")
			}
			blocks := textBlockRe.FindAllStringSubmatch(readme, -1)
			if len(blocks) == 0 {
				t.Error("no text block of the output to expect")
			}
			for _, b := range blocks {
				for _, m := range outputStepRe.FindAllStringSubmatch(b[1], -1) {
					if !slices.ContainsFunc(steps, func(re *regexp.Regexp) bool { return re.MatchString(m[1]) }) {
						t.Errorf("expected output shows a step demo/demo.sh does not print: %q", m[1])
					}
				}
			}
			for _, m := range repoPathRe.FindAllStringSubmatch(readme, -1) {
				paths := []string{filepath.Join(repoRoot, m[1])}
				if !strings.Contains(m[1], "/") {
					// A file of the folder, or of the config/examples
					// folder it uses.
					paths, _ = filepath.Glob(filepath.Join(repoRoot, "config", "examples", "*", m[1]))
					paths = append(paths, filepath.Join(repoRoot, "config", "examples", m[1]), filepath.Join(demoDir, name, m[1]))
				}
				if !slices.ContainsFunc(paths, func(path string) bool {
					_, err := os.Stat(path)
					return err == nil
				}) {
					t.Errorf("names %s, which does not exist", m[1])
				}
			}
		})
	}
	if folders < 5 {
		t.Errorf("%d example folders, want at least 5", folders)
	}
}
