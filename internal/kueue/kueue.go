// Package kueue runs Kueue (sigs.k8s.io/kueue, pinned in hack/kueue/go.mod)
// beside drasched on a control plane without nodes that could run its
// Deployment: the integration test's in-process kube-apiserver, or the
// demo's and the benchmark's kwok clusters.
//
// It installs what Kueue's own Helm chart renders with hack/kueue/values.yaml
// (CRDs, RBAC, the webhook configurations, the manager's Configuration) and
// runs Kueue's manager, built from the pinned module, as a process of this
// machine in place of the chart's Deployment. Certificates are Kueue's own
// business, as in a cluster: its internal certificate management creates
// the CA, the serving certificate for kueue-webhook-service.kueue-system.svc,
// and injects the CA into the webhook configurations and the CRDs'
// conversion webhooks. The one change to the chart's objects is how the API
// server reaches the webhook service: no kube-proxy routes a ClusterIP
// here, so the Service becomes an ExternalName of localhost and every
// reference to it names the port the manager listens on. The API server
// still verifies the certificate for the service's DNS name.
package kueue

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"
)

// Namespace is where Kueue's chart puts the manager's objects.
const Namespace = "kueue-system"

// Names of the chart's objects (release name "kueue").
const (
	webhookService = "kueue-webhook-service"
	managerConfig  = "kueue-manager-config"
	webhookSecret  = "kueue-webhook-server-cert"
	configKey      = "controller_manager_config.yaml"
	fieldManager   = "drasched-kueue"
	// readyTimeout bounds the manager's start: certificates generated,
	// injected and the webhook server serving them. About ten seconds on
	// a quiet machine; sized for two loaded cores.
	readyTimeout = 3 * time.Minute
)

// Options say where the repository is and where the manager's files go.
type Options struct {
	// Root is the repository's root: hack/kueue and hack/helm are found
	// there.
	Root string
	// Dir receives the manager's configuration, kubeconfig, certificates
	// and log (manager.log).
	Dir string
	// LogLevel is the manager's zap log level (--zap-log-level); 0 means
	// 2, the chart's default.
	LogLevel int
}

// Kueue is a running Kueue manager.
type Kueue struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	// Log is the manager's log file.
	Log string
	// WebhookPort is the port of the manager's webhook server.
	WebhookPort int
}

// ModuleDir returns the directory of the pinned Kueue module in the module
// cache (its chart is under charts/kueue), downloading it if needed.
func ModuleDir(ctx context.Context, root string) (string, error) {
	out, err := goCommand(ctx, root, "list", "-modfile=hack/kueue/go.mod", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/kueue")
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(out), nil
}

// Binary returns the path of Kueue's manager built from the pinned module
// (go tool caches it; the first build takes minutes: make kueue builds it
// ahead of the tests).
func Binary(ctx context.Context, root string) (string, error) {
	out, err := goCommand(ctx, root, "tool", "-modfile=hack/kueue/go.mod", "-n", "kueue")
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(out), nil
}

// Render returns the objects of Kueue's chart rendered with
// hack/kueue/values.yaml by the pinned Helm.
func Render(ctx context.Context, root string) ([]*unstructured.Unstructured, error) {
	moduleDir, err := ModuleDir(ctx, root)
	if err != nil {
		return nil, err
	}
	out, err := goCommand(ctx, root, "tool", "-modfile=hack/helm/go.mod", "helm", "template", "kueue",
		filepath.Join(moduleDir, "charts", "kueue"), "--namespace", Namespace,
		"--values", filepath.Join(root, "hack", "kueue", "values.yaml"))
	if err != nil {
		return nil, err
	}
	return Decode([]byte(out))
}

// Start installs Kueue on the cluster of restConfig (an admin config) and
// runs its manager until Stop. It returns once the webhooks answer.
func Start(ctx context.Context, restConfig *rest.Config, opts Options) (*Kueue, error) {
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, err
	}
	objects, err := Render(ctx, opts.Root)
	if err != nil {
		return nil, fmt.Errorf("render Kueue's chart: %w", err)
	}
	binary, err := Binary(ctx, opts.Root)
	if err != nil {
		return nil, fmt.Errorf("build Kueue's manager: %w", err)
	}
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	webhookPort, healthPort := ports[0], ports[1]

	config, objects, err := Adapt(objects, webhookPort, healthPort, opts.Dir)
	if err != nil {
		return nil, err
	}
	configPath := filepath.Join(opts.Dir, "config.yaml")
	if err := os.WriteFile(configPath, config, 0o600); err != nil {
		return nil, err
	}
	kubeconfigPath := filepath.Join(opts.Dir, "kubeconfig")
	if err := WriteKubeconfig(restConfig, kubeconfigPath); err != nil {
		return nil, err
	}
	if err := Apply(ctx, restConfig, objects); err != nil {
		return nil, fmt.Errorf("install Kueue's objects: %w", err)
	}

	logPath := filepath.Join(opts.Dir, "manager.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	logLevel := opts.LogLevel
	if logLevel == 0 {
		logLevel = 2
	}
	cmd := exec.Command(binary, "--config="+configPath,
		"--zap-log-level="+strconv.Itoa(logLevel))
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfigPath)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own process group, so that Stop reaches it and a test's ^C
	// does not leave it behind without a control plane.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("start %s: %w", binary, err)
	}
	k := &Kueue{cmd: cmd, done: make(chan struct{}), Log: logPath, WebhookPort: webhookPort}
	go projectSecret(restConfig, webhookSecret, filepath.Join(opts.Dir, "certs"), k.done)
	go func() {
		k.err = cmd.Wait()
		_ = logFile.Close()
		close(k.done)
	}()
	if err := k.waitReady(ctx, restConfig, healthPort); err != nil {
		_ = k.Stop()
		return nil, fmt.Errorf("%w (manager log: %s%s)", err, logPath, lastLines(logPath, 40))
	}
	return k, nil
}

// projectSecret does for the manager what the kubelet does for the chart's
// Deployment, which mounts the webhook's Secret at the certificate
// directory: Kueue's certificate rotator writes the certificates into the
// Secret and waits until they appear as files there. It copies the Secret's
// keys into dir whenever they change, until done is closed.
func projectSecret(restConfig *rest.Config, name, dir string, done <-chan struct{}) {
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-done
		cancel()
	}()
	written := map[string][]byte{}
	_ = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		secret, err := client.CoreV1().Secrets(Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for key, data := range secret.Data {
			if bytes.Equal(written[key], data) {
				continue
			}
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return false, nil
			}
			// Written aside and renamed: the manager never reads half a key.
			tmp := filepath.Join(dir, "."+key)
			if os.WriteFile(tmp, data, 0o600) != nil || os.Rename(tmp, filepath.Join(dir, key)) != nil {
				return false, nil
			}
			written[key] = data
		}
		return false, nil
	})
}

// Stop ends the manager: SIGTERM, then SIGKILL after 30 seconds.
func (k *Kueue) Stop() error {
	if k.cmd.Process == nil {
		return nil
	}
	_ = syscall.Kill(-k.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-k.done:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-k.cmd.Process.Pid, syscall.SIGKILL)
		<-k.done
	}
	var exit *exec.ExitError
	if errors.As(k.err, &exit) && exit.Sys().(syscall.WaitStatus).Signaled() {
		return nil
	}
	return k.err
}

// Exited is closed when the manager's process has ended.
func (k *Kueue) Exited() <-chan struct{} { return k.done }

// waitReady waits until the manager reports ready (its certificates are
// generated and the webhook server runs) and the API server reaches its
// webhooks: a server-side dry run of a ResourceFlavor goes through the
// validating webhook.
func (k *Kueue) waitReady(ctx context.Context, restConfig *rest.Config, healthPort int) error {
	client, err := dynamic.NewForConfig(restConfig)
	if err != nil {
		return err
	}
	flavor := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kueue.x-k8s.io/v1beta2",
		"kind":       "ResourceFlavor",
		"metadata":   map[string]any{"name": "drasched-readiness-probe"},
	}}
	flavors := client.Resource(schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "resourceflavors"})
	readyz := fmt.Sprintf("http://127.0.0.1:%d/readyz", healthPort)
	var last string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, readyTimeout, true, func(ctx context.Context) (bool, error) {
		select {
		case <-k.done:
			return false, fmt.Errorf("the Kueue manager exited: %w", k.err)
		default:
		}
		resp, err := http.Get(readyz)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			last = "readyz: " + resp.Status
			return false, nil
		}
		if _, err := flavors.Create(ctx, flavor, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			last = "dry-run ResourceFlavor: " + err.Error()
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("wait for Kueue's manager to be ready: %w (last: %s)", err, last)
	}
	return nil
}

// Adapt returns the manager's Configuration from the chart's ConfigMap and
// the objects to apply: the chart's, less what runs as a process here (the
// manager's Deployment) or cannot be served (the visibility APIServices:
// nothing routes to their service), with the webhook service an
// ExternalName of localhost on webhookPort. The Configuration's health probe
// listens on healthPort, its webhook server on webhookPort with its
// certificates in dir, its metrics and its visibility API are off and it
// elects no leader: one manager runs.
func Adapt(objects []*unstructured.Unstructured, webhookPort, healthPort int, dir string) (config []byte, out []*unstructured.Unstructured, err error) {
	for _, obj := range objects {
		switch {
		case obj.GetKind() == "Deployment", obj.GetKind() == "APIService":
			continue
		case obj.GetKind() == "ConfigMap" && obj.GetName() == managerConfig:
			data, _, _ := unstructured.NestedString(obj.Object, "data", configKey)
			if config, err = adaptConfig([]byte(data), webhookPort, healthPort, dir); err != nil {
				return nil, nil, err
			}
		case obj.GetKind() == "Service" && obj.GetName() == webhookService:
			obj = obj.DeepCopy()
			if err := unstructured.SetNestedMap(obj.Object, map[string]any{
				"type":         "ExternalName",
				"externalName": "localhost",
				"ports": []any{map[string]any{
					"name": "https", "port": int64(webhookPort), "protocol": "TCP",
					"targetPort": int64(webhookPort),
				}},
			}, "spec"); err != nil {
				return nil, nil, err
			}
		case obj.GetKind() == "MutatingWebhookConfiguration", obj.GetKind() == "ValidatingWebhookConfiguration":
			obj = obj.DeepCopy()
			webhooks, _, _ := unstructured.NestedSlice(obj.Object, "webhooks")
			for i := range webhooks {
				hook := webhooks[i].(map[string]any)
				if err := unstructured.SetNestedField(hook, int64(webhookPort), "clientConfig", "service", "port"); err != nil {
					return nil, nil, err
				}
			}
			if err := unstructured.SetNestedSlice(obj.Object, webhooks, "webhooks"); err != nil {
				return nil, nil, err
			}
		case obj.GetKind() == "CustomResourceDefinition":
			if _, found, _ := unstructured.NestedMap(obj.Object, "spec", "conversion", "webhook", "clientConfig", "service"); found {
				obj = obj.DeepCopy()
				if err := unstructured.SetNestedField(obj.Object, int64(webhookPort), "spec", "conversion", "webhook", "clientConfig", "service", "port"); err != nil {
					return nil, nil, err
				}
			}
		}
		out = append(out, obj)
	}
	if config == nil {
		return nil, nil, fmt.Errorf("the chart rendered no ConfigMap %s with %s", managerConfig, configKey)
	}
	return config, out, nil
}

func adaptConfig(data []byte, webhookPort, healthPort int, dir string) ([]byte, error) {
	var cfg map[string]any
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		return nil, fmt.Errorf("the Kueue Configuration: %w", err)
	}
	if cfg["kind"] != "Configuration" {
		return nil, fmt.Errorf("the Kueue Configuration: kind %v, want Configuration", cfg["kind"])
	}
	set := func(value any, fields ...string) error { return unstructured.SetNestedField(cfg, value, fields...) }
	for _, err := range []error{
		set(fmt.Sprintf("127.0.0.1:%d", healthPort), "health", "healthProbeBindAddress"),
		set("0", "metrics", "bindAddress"),
		set(int64(webhookPort), "webhook", "port"),
		set(filepath.Join(dir, "certs"), "webhook", "certDir"),
		set(false, "leaderElection", "leaderElect"),
		// The visibility API server authenticates its callers with the
		// in-cluster configuration of a pod, which a process here has not.
		set(false, "featureGates", "VisibilityOnDemand"),
	} {
		if err != nil {
			return nil, err
		}
	}
	return yaml.Marshal(cfg)
}

// Apply creates or updates objects with server-side apply: the
// CustomResourceDefinitions first, and the rest once they are established.
func Apply(ctx context.Context, restConfig *rest.Config, objects []*unstructured.Unstructured) error {
	client, err := dynamic.NewForConfig(restConfig)
	if err != nil {
		return err
	}
	disc, err := discovery.NewDiscoveryClientForConfig(restConfig)
	if err != nil {
		return err
	}
	cached := memory.NewMemCacheClient(disc)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(cached)

	var crds, rest []*unstructured.Unstructured
	for _, obj := range objects {
		if obj.GetKind() == "CustomResourceDefinition" {
			crds = append(crds, obj)
		} else {
			rest = append(rest, obj)
		}
	}
	if err := ensureNamespace(ctx, client, Namespace); err != nil {
		return err
	}
	for _, obj := range crds {
		if err := applyOne(ctx, client, mapper, obj); err != nil {
			return err
		}
	}
	crdResource := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	for _, obj := range crds {
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			crd, err := client.Resource(crdResource).Get(ctx, obj.GetName(), metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			conditions, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
			for _, c := range conditions {
				c := c.(map[string]any)
				if c["type"] == "Established" && c["status"] == "True" {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("CustomResourceDefinition %s not established: %w", obj.GetName(), err)
		}
	}
	cached.Invalidate()
	mapper.Reset()
	for _, obj := range rest {
		if err := applyOne(ctx, client, mapper, obj); err != nil {
			return err
		}
	}
	return nil
}

func ensureNamespace(ctx context.Context, client dynamic.Interface, name string) error {
	ns := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": name},
	}}
	_, err := client.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Create(ctx, ns, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

func applyOne(ctx context.Context, client dynamic.Interface, mapper meta.RESTMapper, obj *unstructured.Unstructured) error {
	gvk := obj.GroupVersionKind()
	mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return fmt.Errorf("%s %s: %w", gvk.Kind, obj.GetName(), err)
	}
	var resource dynamic.ResourceInterface = client.Resource(mapping.Resource)
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		ns := obj.GetNamespace()
		if ns == "" {
			ns = Namespace
		}
		resource = client.Resource(mapping.Resource).Namespace(ns)
	}
	if _, err := resource.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: fieldManager, Force: true}); err != nil {
		return fmt.Errorf("apply %s %s: %w", gvk.Kind, obj.GetName(), err)
	}
	return nil
}

// WriteKubeconfig writes a kubeconfig file for restConfig's server and
// credentials, for a process that takes only a kubeconfig.
func WriteKubeconfig(restConfig *rest.Config, path string) error {
	cluster := &clientcmdapi.Cluster{
		Server:                   restConfig.Host,
		CertificateAuthorityData: restConfig.CAData,
		CertificateAuthority:     restConfig.CAFile,
		InsecureSkipTLSVerify:    restConfig.Insecure,
		TLSServerName:            restConfig.ServerName,
	}
	user := &clientcmdapi.AuthInfo{
		Token:                 restConfig.BearerToken,
		TokenFile:             restConfig.BearerTokenFile,
		ClientCertificateData: restConfig.CertData,
		ClientCertificate:     restConfig.CertFile,
		ClientKeyData:         restConfig.KeyData,
		ClientKey:             restConfig.KeyFile,
		Username:              restConfig.Username,
		Password:              restConfig.Password,
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["cluster"] = cluster
	cfg.AuthInfos["user"] = user
	cfg.Contexts["context"] = &clientcmdapi.Context{Cluster: "cluster", AuthInfo: "user"}
	cfg.CurrentContext = "context"
	return clientcmd.WriteToFile(*cfg, path)
}

// Decode returns the objects of a multi-document YAML stream.
func Decode(data []byte) ([]*unstructured.Unstructured, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objects []*unstructured.Unstructured
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return objects, nil
		}
		if err != nil {
			return nil, err
		}
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &obj.Object); err != nil {
			return nil, fmt.Errorf("decode the chart's output: %w", err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		objects = append(objects, obj)
	}
}

func goCommand(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go %s (in %s): %w: %s", strings.Join(args, " "), dir, err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer func() { _ = l.Close() }()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func lastLines(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "; last lines:\n" + strings.Join(lines, "\n")
}
