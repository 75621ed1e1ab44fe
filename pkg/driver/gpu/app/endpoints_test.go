package app

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/drasched/drasched/pkg/driver/gpu"
)

// fakePlugin answers /healthz's questions.
type fakePlugin struct{ registration, publishing error }

func (f *fakePlugin) CheckRegistration() error { return f.registration }
func (f *fakePlugin) CheckPublishing() error   { return f.publishing }

// The callers of /metrics that fakeReviews knows: the token of a scraper
// that may read /metrics, and that of a user who may not.
const (
	scraperToken = "scraper-token"
	otherToken   = "other-token"
)

// fakeReviews is an API server that answers TokenReviews and
// SubjectAccessReviews: scraperToken is user "prometheus", who may get
// /metrics; otherToken is user "someone", who may get nothing; other
// tokens are not authenticated. The delegating authenticator and
// authorizer use the REST client itself, which a fake clientset does not
// have.
func fakeReviews(t *testing.T) kubernetes.Interface {
	t.Helper()
	mux := http.NewServeMux()
	reply := func(w http.ResponseWriter, obj any) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(obj)
	}
	mux.HandleFunc("POST /apis/authentication.k8s.io/v1/tokenreviews", func(w http.ResponseWriter, r *http.Request) {
		var review authenticationv1.TokenReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		switch review.Spec.Token {
		case scraperToken:
			review.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "prometheus"}}
		case otherToken:
			review.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "someone"}}
		}
		reply(w, review)
	})
	mux.HandleFunc("POST /apis/authorization.k8s.io/v1/subjectaccessreviews", func(w http.ResponseWriter, r *http.Request) {
		var review authorizationv1.SubjectAccessReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		attrs := review.Spec.NonResourceAttributes
		review.Status.Allowed = review.Spec.User == "prometheus" && attrs != nil && attrs.Path == "/metrics" && attrs.Verb == "get"
		reply(w, review)
	})
	server := httptest.NewServer(mux)
	t.Cleanup(server.Close)
	client, err := kubernetes.NewForConfig(&rest.Config{Host: server.URL})
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// startTestEndpoints starts the endpoints on loopback ports with the
// checks of plugin, delegated authentication against fakeReviews, and the
// given limits (zero: the defaults). They stop when the test ends.
func startTestEndpoints(t *testing.T, ctx context.Context, plugin func() pluginHealth, metrics, health serverLimits) *endpoints {
	t.Helper()
	gpu.RegisterMetrics()
	auth, err := newMetricsAuth(fakeReviews(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	e, err := startEndpoints(ctx, endpointConfig{
		metricsAddress: "127.0.0.1:0",
		healthAddress:  "127.0.0.1:0",
		auth:           auth,
		checks:         newHealthChecks(plugin),
		metricsLimits:  metrics,
		healthLimits:   health,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.stop(ctx) })
	return e
}

// answer is an HTTP response, read.
type answer struct {
	code  int
	proto string
	body  string
}

// scrape GETs path from the metrics endpoint over HTTPS (the certificate
// is self-signed) with the bearer token, if any.
func scrape(t *testing.T, e *endpoints, path, token string) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "https://"+e.metricsAddr.String()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	client := &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the endpoint's certificate is self-signed
			ForceAttemptHTTP2: true,
		},
	}
	// A connection left open would hold one of the endpoint's few
	// connection slots (TestEndpointsUnderLoad).
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{code: resp.StatusCode, proto: resp.Proto, body: string(body)}
}

// TestHealthz: /healthz answers 200 "ok" when all checks pass, while the
// plugin starts too, and 500 naming the failed checks when some fail; it
// never says why, and logs why once per change, however often it is
// asked.
func TestHealthz(t *testing.T) {
	const (
		registrationReason = "the kubelet refused the registration: no supported version"
		publishingReason   = "resourceslices.resource.k8s.io is forbidden: User system:serviceaccount:drasched-system:gpu-kubelet-plugin cannot create"
	)
	tests := map[string]struct {
		plugin   *fakePlugin // nil: still starting
		wantCode int
		wantBody string
		wantLog  []string
	}{
		"starting":    {wantCode: http.StatusOK, wantBody: "ok\n"},
		"all is well": {plugin: &fakePlugin{}, wantCode: http.StatusOK, wantBody: "ok\n"},
		"registration": {
			plugin:   &fakePlugin{registration: errors.New(registrationReason)},
			wantCode: http.StatusInternalServerError,
			wantBody: "unhealthy: kubelet-registration\n",
			wantLog:  []string{registrationReason},
		},
		"both": {
			plugin:   &fakePlugin{registration: errors.New(registrationReason), publishing: errors.New(publishingReason)},
			wantCode: http.StatusInternalServerError,
			wantBody: "unhealthy: kubelet-registration,resourceslice-publishing\n",
			wantLog:  []string{registrationReason, publishingReason},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
			ctx := klog.NewContext(context.Background(), logger)
			e := startTestEndpoints(t, ctx, func() pluginHealth {
				if tc.plugin == nil {
					return nil
				}
				return tc.plugin
			}, serverLimits{}, serverLimits{})
			for range 3 {
				code, body := get(t, "http://"+e.healthAddr.String()+"/healthz")
				if code != tc.wantCode || body != tc.wantBody {
					t.Errorf("/healthz: %d %q, want %d %q", code, body, tc.wantCode, tc.wantBody)
				}
			}
			logs := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
			for _, reason := range tc.wantLog {
				if n := strings.Count(logs, reason); n != 1 {
					t.Errorf("the log has the reason %q %d times, want once after three probes:\n%s", reason, n, logs)
				}
			}
			// The detail endpoints of k8s.io/apiserver's healthz, which
			// printed the reasons, are gone.
			if code, body := get(t, "http://"+e.healthAddr.String()+"/healthz/kubelet-registration"); code != http.StatusNotFound {
				t.Errorf("/healthz/kubelet-registration: %d %q, want 404", code, body)
			}
			// healthcheck, the liveness probe, agrees.
			var out bytes.Buffer
			err := healthcheck(ctx, &out, e.healthAddr.String(), 5*time.Second)
			if tc.wantCode == http.StatusOK {
				if err != nil || out.String() != "ok\n" {
					t.Errorf("healthcheck: %v, printed %q", err, out.String())
				}
			} else if err == nil || !strings.Contains(err.Error(), strings.TrimSpace(tc.wantBody)) {
				t.Errorf("healthcheck: %v, want an error with %q", err, strings.TrimSpace(tc.wantBody))
			}
		})
	}

	t.Run("recovery is logged", func(t *testing.T) {
		logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
		ctx := klog.NewContext(context.Background(), logger)
		plugin := &fakePlugin{publishing: errors.New(publishingReason)}
		checks := newHealthChecks(func() pluginHealth { return plugin })
		checks.run(ctx)
		plugin.publishing = nil
		if failed := checks.run(ctx); len(failed) > 0 {
			t.Errorf("failed checks %v, want none", failed)
		}
		logs := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
		if !strings.Contains(logs, "Health check passing again") {
			t.Errorf("no line for the recovery:\n%s", logs)
		}
	})
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url) //nolint:noctx // a test against a local server
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// TestMetricsAuth: /metrics is served over HTTPS, HTTP/1.1 only, to
// callers the API server authenticates (TokenReview) and allows to get
// /metrics (SubjectAccessReview); others get 401 or 403 without a reason.
func TestMetricsAuth(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	e := startTestEndpoints(t, ctx, func() pluginHealth { return nil }, serverLimits{}, serverLimits{})
	tests := map[string]struct {
		path, token string
		wantCode    int
		wantBody    string
	}{
		"no token":           {path: "/metrics", wantCode: http.StatusUnauthorized, wantBody: "Unauthorized\n"},
		"unknown token":      {path: "/metrics", token: "made-up", wantCode: http.StatusUnauthorized, wantBody: "Unauthorized\n"},
		"not allowed":        {path: "/metrics", token: otherToken, wantCode: http.StatusForbidden, wantBody: "Forbidden\n"},
		"allowed":            {path: "/metrics", token: scraperToken, wantCode: http.StatusOK, wantBody: "drasched_gpu_driver_"},
		"another path":       {path: "/debug/pprof/", token: scraperToken, wantCode: http.StatusForbidden, wantBody: "Forbidden\n"},
		"healthz not served": {path: "/healthz", token: otherToken, wantCode: http.StatusForbidden, wantBody: "Forbidden\n"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := scrape(t, e, tc.path, tc.token)
			if got.code != tc.wantCode || !strings.Contains(got.body, tc.wantBody) {
				t.Errorf("GET %s: %d, body %.200q; want %d with %q", tc.path, got.code, got.body, tc.wantCode, tc.wantBody)
			}
			if got.proto != "HTTP/1.1" {
				t.Errorf("protocol %s, want HTTP/1.1", got.proto)
			}
		})
	}
	t.Run("plain HTTP", func(t *testing.T) {
		code, _ := get(t, "http://"+e.metricsAddr.String()+"/metrics")
		if code != http.StatusBadRequest {
			t.Errorf("plain HTTP to the metrics endpoint: %d, want 400", code)
		}
	})
}

// TestEndpointsUnderLoad: any pod can open connections to the metrics
// endpoint. Thousands of idle ones cost the plugin at most the endpoint's
// connection limit in goroutines (one each; more wait in the kernel's
// accept queue), the liveness probe still gets its answer from the health
// endpoint, and once the clients go, /metrics serves again.
func TestEndpointsUnderLoad(t *testing.T) {
	const idle = 2000
	_, ctx := ktesting.NewTestContext(t)
	// Idle connections hold their slot for the whole test: the worst
	// case, a client that reconnects as soon as the server drops it.
	limits := metricsLimits
	limits.readHeaderTimeout = time.Minute
	e := startTestEndpoints(t, ctx, func() pluginHealth { return &fakePlugin{} }, limits, serverLimits{})
	// Counted before the scrape: the goroutines of its connection end
	// after it closed, at a moment the test does not know. Counted after,
	// their end would hide connections the server took.
	before := runtime.NumGoroutine()
	if got := scrape(t, e, "/metrics", scraperToken); got.code != http.StatusOK {
		t.Fatalf("/metrics before the load: %d", got.code)
	}

	var mem runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&mem)
	memBefore := mem.HeapInuse + mem.StackInuse
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	dialer := net.Dialer{Timeout: 5 * time.Second}
	for range idle {
		c, err := dialer.DialContext(ctx, "tcp", e.metricsAddr.String())
		if err != nil {
			// The accept queue is full: the kernel refuses more, which
			// costs the plugin nothing either.
			t.Logf("connection %d: %v", len(conns)+1, err)
			break
		}
		conns = append(conns, c)
	}
	if len(conns) < limits.maxConns*10 {
		t.Fatalf("opened %d connections, want well over the limit of %d", len(conns), limits.maxConns)
	}
	// Wait until the server has taken as many as its limit lets it: a
	// goroutine each. More than that it cannot accept, however long the
	// test waited, so what follows is the steady state.
	deadline := time.Now().Add(30 * time.Second)
	for runtime.NumGoroutine()-before < limits.maxConns {
		if time.Now().After(deadline) {
			t.Fatalf("the server took %d of %d connections within 30s", runtime.NumGoroutine()-before, limits.maxConns)
		}
		time.Sleep(10 * time.Millisecond)
	}
	grown := runtime.NumGoroutine() - before
	runtime.GC()
	runtime.ReadMemStats(&mem)
	// The clients' side of the connections is in this process too, about
	// half a KiB each; the server's side costs some 14 KiB each
	// (goroutine stack, buffers) when nothing limits it.
	memGrown := int64(mem.HeapInuse+mem.StackInuse) - int64(memBefore)
	t.Logf("%d idle connections: %d more goroutines, %d KiB more heap and stacks (limit %d connections)", len(conns), grown, memGrown>>10, limits.maxConns)
	if grown > limits.maxConns+10 {
		t.Errorf("%d more goroutines with %d idle connections, want at most about the limit of %d", grown, len(conns), limits.maxConns)
	}
	if memGrown > 8<<20 {
		t.Errorf("%d KiB more heap and stacks with %d idle connections, want less than 8 MiB", memGrown>>10, len(conns))
	}

	var out bytes.Buffer
	if err := healthcheck(ctx, &out, e.healthAddr.String(), time.Second); err != nil {
		t.Errorf("liveness probe under load: %v", err)
	}

	for _, c := range conns {
		_ = c.Close()
	}
	conns = nil
	deadline = time.Now().Add(30 * time.Second)
	for {
		got := scrape(t, e, "/metrics", scraperToken)
		if got.code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics after the load: %d", got.code)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestEndpointDefaults: by default /metrics is the pod's port 8443 that
// config/gpu-driver's DaemonSet names, and /healthz listens on loopback,
// where `healthcheck` asks by default, out of other pods' reach.
func TestEndpointDefaults(t *testing.T) {
	opts := newPluginOptions()
	if opts.metricsBindAddress != ":8443" {
		t.Errorf("--metrics-bind-address defaults to %q, want :8443", opts.metricsBindAddress)
	}
	host, _, err := net.SplitHostPort(opts.healthProbeBindAddress)
	if err != nil {
		t.Fatal(err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		t.Errorf("--health-probe-bind-address defaults to %q, want a loopback address", opts.healthProbeBindAddress)
	}
	if opts.healthProbeBindAddress != defaultHealthAddress {
		t.Errorf("run serves /healthz on %s, healthcheck asks %s", opts.healthProbeBindAddress, defaultHealthAddress)
	}
}
