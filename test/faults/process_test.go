//go:build faults

package faults

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"github.com/drasched/drasched/internal/minor"
	"github.com/drasched/drasched/test/integration/controlplane"
	"github.com/drasched/drasched/test/integration/framework"
)

// repoRoot is the root of the repository, found from this source file.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// binary is the drasched scheduler built from this tree, once per test
// binary.
var binary struct {
	once sync.Once
	path string
	err  error
}

// draschedBinary builds ./cmd/scheduler into _output/faults and returns its
// path. It is built again by every test binary, so it is never older than
// the tree under test; Go's build cache makes that quick.
func draschedBinary(t *testing.T) string {
	t.Helper()
	binary.once.Do(func() {
		root := repoRoot()
		dir := filepath.Join(root, "_output", "faults", minor.Minor)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			binary.err = err
			return
		}
		goCmd, err := exec.LookPath("go")
		if err != nil {
			binary.err = fmt.Errorf("find the go command: %w", err)
			return
		}
		start := time.Now()
		path := filepath.Join(dir, "drasched")
		cmd := exec.Command(goCmd, slices.Concat([]string{"build"}, minor.GoFlags, []string{"-o", path, "./cmd/scheduler"})...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			binary.err = fmt.Errorf("go build ./cmd/scheduler: %w\n%s", err, out)
			return
		}
		binary.path = path
		t.Logf("built %s in %s", path, time.Since(start).Round(time.Millisecond))
	})
	if binary.err != nil {
		t.Fatal(binary.err)
	}
	return binary.path
}

// olderMinorBinary builds ./cmd/scheduler for the minor before this
// build's (hack/minor/MINOR, docs/compatibility.md) into
// _output/faults/MINOR and returns its path and minor; it skips the test
// where this build is the oldest.
func olderMinorBinary(t *testing.T) (string, string) {
	t.Helper()
	root := repoRoot()
	major, m, _ := strings.Cut(minor.Minor, ".")
	n, err := strconv.Atoi(m)
	if err != nil {
		t.Fatalf("minor %s: %v", minor.Minor, err)
	}
	older := fmt.Sprintf("%s.%d", major, n-1)
	modfile := filepath.Join("hack", "minor", older, "go.mod")
	if _, err := os.Stat(filepath.Join(root, modfile)); err != nil {
		t.Skipf("no build for Kubernetes %s, the minor before this build's (%s): %v", older, minor.Minor, err)
	}
	dir := filepath.Join(root, "_output", "faults", older)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "drasched")
	start := time.Now()
	cmd := exec.Command("go", "build", "-modfile="+modfile, "-tags=kube"+older, "-o", path, "./cmd/scheduler")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/scheduler for Kubernetes %s: %v\n%s", older, err, out)
	}
	t.Logf("built %s in %s", path, time.Since(start).Round(time.Millisecond))
	return path, older
}

// leaderElection configures the leader election of scheduler processes:
// a Lease of the test's namespace, with durations short enough for a test.
type leaderElection struct {
	namespace, name                           string
	leaseDuration, renewDeadline, retryPeriod time.Duration
}

// testLeaderElection is a Lease "drasched" in the test's namespace, which
// the scheduler's ServiceAccount may use; config/scheduler/rbac.yaml grants
// it only the one in drasched-system, which all tests would share.
func testLeaderElection(t *testing.T, env *framework.Env) *leaderElection {
	t.Helper()
	const name = "drasched"
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "drasched-leader-election", Namespace: env.Namespace},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{"coordination.k8s.io"},
			Resources: []string{"leases"},
			Verbs:     []string{"get", "create", "update"},
		}},
	}
	if _, err := env.Client.RbacV1().Roles(env.Namespace).Create(env.Ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Role: %v", err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name, Namespace: env.Namespace},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "drasched-scheduler", Namespace: "drasched-system"}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
	}
	if _, err := env.Client.RbacV1().RoleBindings(env.Namespace).Create(env.Ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create RoleBinding: %v", err)
	}
	return &leaderElection{
		namespace:     env.Namespace,
		name:          name,
		leaseDuration: 4 * time.Second,
		renewDeadline: 3 * time.Second,
		retryPeriod:   time.Second,
	}
}

// holder returns the current holder of the Lease, "" if none.
func (le *leaderElection) holder(ctx context.Context, env *framework.Env) string {
	lease, err := env.Client.CoordinationV1().Leases(le.namespace).Get(ctx, le.name, metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil {
		return ""
	}
	return *lease.Spec.HolderIdentity
}

// waitForHolder waits until someone other than previous holds the Lease
// and returns who.
func (le *leaderElection) waitForHolder(env *framework.Env, previous string) string {
	var holder string
	env.WaitFor(framework.Timeout, fmt.Sprintf("a leader other than %q", previous), func(ctx context.Context) (bool, string, error) {
		holder = le.holder(ctx, env)
		return holder != "" && holder != previous, holder, nil
	})
	return holder
}

// processOptions configure a scheduler process.
type processOptions struct {
	// binary is the scheduler to run; draschedBinary's if empty.
	binary string
	// gates are its --feature-gates; the control plane's if empty.
	gates string
	// leader turns on leader election; off if nil.
	leader *leaderElection
	// profiles replaces the shipped profiles, as they would be written in
	// YAML.
	profiles []map[string]any
}

// schedulerProcess is the drasched binary running as a child process of the
// test, talking to the apiserver through its own apiProxy.
type schedulerProcess struct {
	name    string
	cmd     *exec.Cmd
	proxy   *apiProxy
	logPath string

	// exited is closed when the process has ended; then exitedAt and
	// exitErr are set.
	exited   chan struct{}
	exitedAt time.Time
	exitErr  error
}

// startScheduler starts the drasched binary with the shipped configuration
// (config/scheduler-config.yaml), changed as opts say, as the scheduler's
// ServiceAccount. It is killed when the test ends if it still runs.
func startScheduler(t *testing.T, env *framework.Env, name string, opts processOptions) *schedulerProcess {
	t.Helper()
	upstream, err := framework.SchedulerClientConfig(env.Ctx, env.Config)
	if err != nil {
		t.Fatalf("scheduler client configuration: %v", err)
	}
	p := &schedulerProcess{name: name, proxy: newAPIProxy(t, name, upstream), exited: make(chan struct{})}

	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, name+".kubeconfig")
	if err := clientcmd.WriteToFile(clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"test": {Server: p.proxy.URL()}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"drasched": {}},
		Contexts:       map[string]*clientcmdapi.Context{"test": {Cluster: "test", AuthInfo: "drasched"}},
		CurrentContext: "test",
	}, kubeconfig); err != nil {
		t.Fatalf("write kubeconfig: %v", err)
	}
	configPath := filepath.Join(dir, name+"-config.yaml")
	if err := os.WriteFile(configPath, schedulerConfigFile(t, kubeconfig, opts), 0o600); err != nil {
		t.Fatalf("write scheduler configuration: %v", err)
	}
	p.logPath = filepath.Join(dir, name+".log")
	logFile, err := os.Create(p.logPath)
	if err != nil {
		t.Fatalf("create log file: %v", err)
	}

	binary, gates := opts.binary, opts.gates
	if binary == "" {
		binary = draschedBinary(t)
	}
	if gates == "" {
		gates = featureGates()
	}
	p.cmd = exec.Command(binary,
		"--config="+configPath,
		// Two processes on one host cannot share the port; no test looks
		// at the scheduler's endpoints.
		"--secure-port=0",
		"--feature-gates="+gates,
		"--v=2",
	)
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	if err := p.cmd.Start(); err != nil {
		_ = logFile.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		err := p.cmd.Wait()
		p.exitedAt, p.exitErr = time.Now(), err
		_ = logFile.Close()
		close(p.exited)
	}()
	t.Cleanup(func() {
		if p.running() {
			// SIGKILL ends a stopped process too.
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("log of %s (%s):\n%s", name, p.logPath, p.logTail(60))
		}
	})
	t.Logf("started %s, pid %d, log %s", name, p.cmd.Process.Pid, p.logPath)
	return p
}

// schedulerConfigFile is config/scheduler-config.yaml with the kubeconfig,
// client rate limits like those of the in-process scheduler, leader
// election as opts say, and opts' profiles if any.
func schedulerConfigFile(t *testing.T, kubeconfig string, opts processOptions) []byte {
	t.Helper()
	shipped, err := os.ReadFile(filepath.Join(repoRoot(), "config", "scheduler-config.yaml"))
	if err != nil {
		t.Fatalf("read the shipped scheduler configuration: %v", err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(shipped, &cfg); err != nil {
		t.Fatalf("parse the shipped scheduler configuration: %v", err)
	}
	cfg["clientConnection"] = map[string]any{"kubeconfig": kubeconfig, "qps": 1000, "burst": 10000}
	leader := map[string]any{"leaderElect": false}
	if le := opts.leader; le != nil {
		leader = map[string]any{
			"leaderElect":       true,
			"resourceLock":      "leases",
			"resourceNamespace": le.namespace,
			"resourceName":      le.name,
			"leaseDuration":     le.leaseDuration.String(),
			"renewDeadline":     le.renewDeadline.String(),
			"retryPeriod":       le.retryPeriod.String(),
		}
	}
	cfg["leaderElection"] = leader
	if opts.profiles != nil {
		cfg["profiles"] = opts.profiles
	}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatalf("write scheduler configuration: %v", err)
	}
	return data
}

// shippedProfile returns the first profile of config/scheduler-config.yaml.
func shippedProfile(t *testing.T) map[string]any {
	t.Helper()
	shipped, err := os.ReadFile(filepath.Join(repoRoot(), "config", "scheduler-config.yaml"))
	if err != nil {
		t.Fatalf("read the shipped scheduler configuration: %v", err)
	}
	var cfg struct {
		Profiles []map[string]any `json:"profiles"`
	}
	if err := yaml.Unmarshal(shipped, &cfg); err != nil || len(cfg.Profiles) == 0 {
		t.Fatalf("parse the profiles of the shipped scheduler configuration: %v", err)
	}
	return cfg.Profiles[0]
}

// featureGates are the control plane's feature gates as a flag value, so
// that the process agrees with the apiserver and the claim controller.
func featureGates() string {
	var gates []string
	for _, name := range slices.Sorted(maps.Keys(controlplane.Features)) {
		gates = append(gates, fmt.Sprintf("%s=%t", name, controlplane.Features[name]))
	}
	return strings.Join(gates, ",")
}

func (p *schedulerProcess) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// signal sends a signal to the process.
func (p *schedulerProcess) signal(t *testing.T, sig syscall.Signal) time.Time {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("send %s to %s: %v", sig, p.name, err)
	}
	return time.Now()
}

// waitExit waits up to timeout for the process to end and reports whether
// it did.
func (p *schedulerProcess) waitExit(timeout time.Duration) bool {
	select {
	case <-p.exited:
		return true
	case <-time.After(timeout):
		return false
	}
}

// exitCode is the process' exit status, -1 if a signal ended it.
func (p *schedulerProcess) exitCode() int {
	var exitErr *exec.ExitError
	if errors.As(p.exitErr, &exitErr) {
		return exitErr.ExitCode()
	}
	if p.exitErr != nil {
		return -1
	}
	return 0
}

// logTail returns the last n lines of the process' log, without what it
// prints at start (flags, configuration, informers synced).
func (p *schedulerProcess) logTail(n int) string {
	lines := p.logLines(func(line string) bool {
		return !strings.HasPrefix(line, " ") && !strings.HasPrefix(line, "\t") &&
			!strings.Contains(line, "flags.go:") && !strings.Contains(line, "Caches populated")
	})
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// logLines returns the lines of the process' log that match.
func (p *schedulerProcess) logLines(match func(string) bool) []string {
	f, err := os.Open(p.logPath)
	if err != nil {
		return []string{err.Error()}
	}
	defer f.Close()
	var lines []string
	scanner := bufio.NewScanner(f)
	scanner.Buffer(make([]byte, 1024*1024), 16*1024*1024)
	for scanner.Scan() {
		if match(scanner.Text()) {
			lines = append(lines, scanner.Text())
		}
	}
	return lines
}
