package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"strings"
	"time"

	"golang.org/x/net/netutil"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/client-go/kubernetes"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"
)

// The plugin serves two HTTP endpoints, like a Kubernetes component:
//
//   - metrics (--metrics-bind-address, default :8443): /metrics over HTTPS,
//     for callers that authenticate with a bearer token (TokenReview) and
//     may get the non-resource URL /metrics (SubjectAccessReview), as
//     kube-scheduler's secure port does. Any pod can reach the port, so it
//     holds at most maxConns connections, each for a bounded time.
//   - health (--health-probe-bind-address, default 127.0.0.1:8081):
//     /healthz in plain HTTP on loopback, for the liveness probe, which runs
//     `gpu-kubelet-plugin healthcheck` in the container. No other pod can
//     reach it, so none can fill it and have the kubelet restart the plugin.
//     It says which checks fail, never why: the reasons go to the log.
//
// Neither endpoint can be made to hold more than a fixed number of
// connections, goroutines and buffers: before, thousands of idle
// keep-alive connections to one plain-HTTP port could OOM-kill the plugin.

// serverLimits bound what clients can hold of one endpoint.
type serverLimits struct {
	// maxConns is the number of connections served at once; more wait in
	// the kernel's accept queue, costing the process nothing.
	maxConns int
	// readHeaderTimeout bounds the TLS handshake and the request headers:
	// how long an idle connection holds a slot.
	readHeaderTimeout time.Duration
	readTimeout       time.Duration
	// writeTimeout runs from the end of the headers: authentication,
	// authorization and the response must fit in it.
	writeTimeout   time.Duration
	maxHeaderBytes int
}

var (
	// metricsLimits: a scraper or two, every few seconds, with a bearer
	// token of a few KiB.
	metricsLimits = serverLimits{
		maxConns:          16,
		readHeaderTimeout: 5 * time.Second,
		readTimeout:       10 * time.Second,
		writeTimeout:      30 * time.Second,
		maxHeaderBytes:    16 << 10,
	}
	// healthLimits: the kubelet's probe, every 30s.
	healthLimits = serverLimits{
		maxConns:          4,
		readHeaderTimeout: 2 * time.Second,
		readTimeout:       5 * time.Second,
		writeTimeout:      5 * time.Second,
		maxHeaderBytes:    4 << 10,
	}
)

// Delegated authentication and authorization of /metrics: how long the
// answers of TokenReviews and SubjectAccessReviews are cached, how long
// one may take, and the client's own rate limit, so that callers with
// made-up tokens cannot spend the budget the plugin needs to publish its
// ResourceSlices.
const (
	reviewCacheTTL     = 2 * time.Minute
	reviewDenyCacheTTL = 10 * time.Second
	reviewTimeout      = 5 * time.Second
	reviewQPS          = 5
	reviewBurst        = 10
)

// reviewBackoff retries a review that failed (not one that denied): a few
// tries, well inside metricsLimits.writeTimeout.
var reviewBackoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 3}

// endpointConfig configures startEndpoints.
type endpointConfig struct {
	// metricsAddress and healthAddress are host:port; empty disables the
	// endpoint.
	metricsAddress, healthAddress string
	// tlsCertFile and tlsKeyFile are the metrics endpoint's certificate;
	// empty: a self-signed one, made at the start.
	tlsCertFile, tlsKeyFile string
	// auth decides who may read /metrics.
	auth metricsAuth
	// checks are the checks of /healthz.
	checks *healthChecks
	// limits of each endpoint; the zero value takes metricsLimits and
	// healthLimits.
	metricsLimits, healthLimits serverLimits
}

// metricsAuth is delegated authentication and authorization: the API
// server's answer to who sent a request and whether they may.
type metricsAuth struct {
	authn authenticator.Request
	authz authorizer.Authorizer
}

// newMetricsAuth asks the API server through client, which should have a
// rate limiter of its own (reviewQPS).
func newMetricsAuth(client kubernetes.Interface) (metricsAuth, error) {
	authn, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:                &apiserver.AnonymousAuthConfig{Enabled: false},
		TokenAccessReviewClient:  client.AuthenticationV1(),
		TokenAccessReviewTimeout: reviewTimeout,
		WebhookRetryBackoff:      &reviewBackoff,
		CacheTTL:                 reviewCacheTTL,
	}.New()
	if err != nil {
		return metricsAuth{}, fmt.Errorf("delegated authentication: %w", err)
	}
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: client.AuthorizationV1(),
		AllowCacheTTL:             reviewCacheTTL,
		DenyCacheTTL:              reviewDenyCacheTTL,
		WebhookRetryBackoff:       &reviewBackoff,
	}.New()
	if err != nil {
		return metricsAuth{}, fmt.Errorf("delegated authorization: %w", err)
	}
	return metricsAuth{authn: authn, authz: authz}, nil
}

// handler serves next to the callers who authenticate and may get the
// request's path; others get 401 or 403, and the reason goes to the log
// at -v=4, not to them.
func (a metricsAuth) handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		logger := klog.FromContext(r.Context())
		resp, ok, err := a.authn.AuthenticateRequest(r)
		if err != nil || !ok {
			logger.V(4).Info("Metrics request not authenticated", "remote", r.RemoteAddr, "err", err)
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		attrs := authorizer.AttributesRecord{
			User:            resp.User,
			Verb:            verb(r.Method),
			Path:            r.URL.Path,
			ResourceRequest: false,
		}
		decision, reason, err := a.authz.Authorize(r.Context(), attrs)
		if err != nil || decision != authorizer.DecisionAllow {
			logger.V(4).Info("Metrics request not authorized", "remote", r.RemoteAddr, "user", resp.User.GetName(), "path", r.URL.Path, "reason", reason, "err", err)
			http.Error(w, "Forbidden", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// verb is the authorization verb of a non-resource request, as the API
// server's RequestInfo names it.
func verb(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead:
		return "get"
	case http.MethodPost:
		return "post"
	case http.MethodPut:
		return "put"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		return "delete"
	default:
		return "unknown"
	}
}

// metricsMux serves /metrics, GET and HEAD only.
func metricsMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", legacyregistry.Handler())
	return mux
}

// endpoints are the running endpoints.
type endpoints struct {
	// metricsAddr and healthAddr are where they listen (nil: disabled).
	metricsAddr, healthAddr net.Addr
	servers                 []*http.Server
}

// startEndpoints starts the endpoints of cfg; they serve until ctx is done
// or stop is called.
func startEndpoints(ctx context.Context, cfg endpointConfig) (_ *endpoints, err error) {
	logger := klog.FromContext(ctx)
	if cfg.metricsLimits == (serverLimits{}) {
		cfg.metricsLimits = metricsLimits
	}
	if cfg.healthLimits == (serverLimits{}) {
		cfg.healthLimits = healthLimits
	}
	if cfg.healthAddress != "" && cfg.checks == nil {
		return nil, errors.New("health endpoint without checks")
	}
	if cfg.metricsAddress != "" && (cfg.auth.authn == nil || cfg.auth.authz == nil) {
		return nil, errors.New("metrics endpoint without authentication and authorization")
	}
	e := &endpoints{}
	defer func() {
		if err != nil {
			e.stop(ctx)
		}
	}()
	if cfg.healthAddress != "" {
		listener, err := listen(cfg.healthAddress, cfg.healthLimits)
		if err != nil {
			return nil, fmt.Errorf("health endpoint: %w", err)
		}
		e.healthAddr = listener.Addr()
		e.serve(ctx, "health", listener, cfg.checks.handler(), cfg.healthLimits)
		logger.Info("Serving /healthz", "address", e.healthAddr.String())
	}
	if cfg.metricsAddress != "" {
		tlsConfig, err := serverTLS(cfg.tlsCertFile, cfg.tlsKeyFile)
		if err != nil {
			return nil, fmt.Errorf("metrics endpoint: %w", err)
		}
		listener, err := listen(cfg.metricsAddress, cfg.metricsLimits)
		if err != nil {
			return nil, fmt.Errorf("metrics endpoint: %w", err)
		}
		e.metricsAddr = listener.Addr()
		e.serve(ctx, "metrics", tls.NewListener(listener, tlsConfig), cfg.auth.handler(metricsMux()), cfg.metricsLimits)
		logger.Info("Serving /metrics over HTTPS with delegated authentication and authorization", "address", e.metricsAddr.String())
	}
	go func() {
		<-ctx.Done()
		e.stop(ctx)
	}()
	return e, nil
}

// listen listens on address and accepts at most limits.maxConns
// connections at once.
func listen(address string, limits serverLimits) (net.Listener, error) {
	listener, err := net.Listen("tcp", address)
	if err != nil {
		return nil, err
	}
	return netutil.LimitListener(listener, limits.maxConns), nil
}

// serve serves handler on listener with the limits, one request per
// connection: keep-alive would let a client hold a connection, and so one
// of the few slots, with a request every idle timeout.
func (e *endpoints) serve(ctx context.Context, name string, listener net.Listener, handler http.Handler, limits serverLimits) {
	logger := klog.LoggerWithName(klog.FromContext(ctx), name)
	server := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: limits.readHeaderTimeout,
		ReadTimeout:       limits.readTimeout,
		WriteTimeout:      limits.writeTimeout,
		IdleTimeout:       limits.readHeaderTimeout,
		MaxHeaderBytes:    limits.maxHeaderBytes,
		BaseContext:       func(net.Listener) context.Context { return klog.NewContext(context.WithoutCancel(ctx), logger) },
		// TLS handshake errors and the like, from anyone who connects:
		// not worth a line each at the default verbosity.
		ErrorLog: log.New(logWriter{logger.V(4)}, "", 0),
	}
	server.SetKeepAlivesEnabled(false)
	e.servers = append(e.servers, server)
	go func() {
		if err := server.Serve(listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error(err, "Endpoint failed")
		}
	}()
}

// stop shuts the endpoints down; it may be called more than once.
func (e *endpoints) stop(ctx context.Context) {
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	for _, server := range e.servers {
		_ = server.Shutdown(shutdownCtx)
	}
}

// serverTLS returns the metrics endpoint's TLS configuration: HTTP/1.1
// only (HTTP/2 multiplexes streams past the connection limit, and its
// rapid-reset attack is one more thing to bound), TLS 1.2 or newer, with
// the certificate and key of the files or a self-signed one.
func serverTLS(certFile, keyFile string) (*tls.Config, error) {
	var cert tls.Certificate
	var err error
	switch {
	case certFile != "" && keyFile != "":
		cert, err = tls.LoadX509KeyPair(certFile, keyFile)
	case certFile != "" || keyFile != "":
		return nil, errors.New("--tls-cert-file and --tls-private-key-file go together")
	default:
		var certPEM, keyPEM []byte
		certPEM, keyPEM, err = certutil.GenerateSelfSignedCertKey("gpu-kubelet-plugin", nil, nil)
		if err == nil {
			cert, err = tls.X509KeyPair(certPEM, keyPEM)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"http/1.1"},
	}, nil
}

// logWriter writes the lines of a standard library logger to a klog
// logger.
type logWriter struct{ logger klog.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.logger.Info("HTTP server", "message", strings.TrimSpace(string(p)))
	return len(p), nil
}
