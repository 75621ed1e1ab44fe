package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/component-base/featuregate"

	"github.com/drasched/drasched/internal/minor"
	"github.com/drasched/drasched/test/integration/controlplane"
	"github.com/drasched/drasched/test/integration/framework"
)

// msgCannotAllocate is what upstream's DynamicResources says, per node,
// when the devices do not fit. StructuredDRA says why instead; no message
// may fall back to it.
const msgCannotAllocate = "cannot allocate all claims"

// waitForUnschedulableMessage waits until the pod's Unschedulable
// PodScheduled condition says each of wants, and checks that it says more
// than upstream's "cannot allocate all claims".
func waitForUnschedulableMessage(t *testing.T, env *framework.Env, pod string, wants ...string) {
	t.Helper()
	message := env.WaitForPodUnschedulable(pod, wants...)
	if strings.Contains(message, msgCannotAllocate) {
		t.Errorf("PodScheduled condition message %q does not say why the devices do not fit", message)
	}
}

// driverSelector is a CEL expression on a string attribute of the test's
// driver.
func driverSelector(env *framework.Env, attribute, value string) string {
	return fmt.Sprintf("device.attributes[%q].%s == %q", env.Driver, attribute, value)
}

// pluginBinary is kubectl-drasched built from this tree, once per test
// binary.
var pluginBinary = sync.OnceValues(func() (string, error) {
	dir := framework.RepoFile("_output", "integration", minor.Minor)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("find the go command: %w", err)
	}
	path := filepath.Join(dir, "kubectl-drasched")
	// The minor of this test binary, whose API server the tool talks to.
	cmd := exec.Command(goCmd, slices.Concat([]string{"build"}, minor.GoFlags, []string{"-o", path, "./cmd/kubectl-drasched"})...)
	cmd.Dir = framework.RepoFile()
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/kubectl-drasched: %w\n%s", err, out)
	}
	return path, nil
})

// kubectlDrasched runs kubectl-drasched with args against the test's
// control plane and namespace, as the admin, and returns its output and
// exit status. A command still running after framework.Timeout fails the
// test.
func kubectlDrasched(t *testing.T, env *framework.Env, args ...string) (stdout, stderr string, status int) {
	t.Helper()
	binary, err := pluginBinary()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	tls := env.Config.TLSClientConfig
	if err := clientcmd.WriteToFile(clientcmdapi.Config{
		Clusters: map[string]*clientcmdapi.Cluster{"test": {
			Server: env.Config.Host, CertificateAuthorityData: tls.CAData, InsecureSkipTLSVerify: tls.Insecure, TLSServerName: tls.ServerName,
		}},
		AuthInfos: map[string]*clientcmdapi.AuthInfo{"admin": {
			Token: env.Config.BearerToken, ClientCertificateData: tls.CertData, ClientKeyData: tls.KeyData,
		}},
		Contexts:       map[string]*clientcmdapi.Context{"test": {Cluster: "test", AuthInfo: "admin", Namespace: env.Namespace}},
		CurrentContext: "test",
	}, kubeconfig); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(env.Ctx, framework.Timeout)
	defer cancel()
	// The cluster's gates that differ from their defaults, as an operator
	// would pass them: setting a GA gate to its locked value only earns a
	// warning on stderr, which the tests read.
	defaults := utilfeature.DefaultMutableFeatureGate.GetAll()
	var gates []string
	for name, on := range controlplane.Features {
		if spec, known := defaults[featuregate.Feature(name)]; !known || spec.Default != on {
			gates = append(gates, fmt.Sprintf("%s=%t", name, on))
		}
	}
	cmd := exec.CommandContext(ctx, binary, append(args, "--kubeconfig", kubeconfig, "--feature-gates", strings.Join(gates, ","))...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("kubectl drasched %s: still running after %s", strings.Join(args, " "), framework.Timeout)
	}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		status = exit.ExitCode()
	case err != nil:
		t.Fatalf("kubectl drasched %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errOut.String(), status
}
