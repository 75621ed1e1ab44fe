package kwokcluster

import (
	"errors"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// NewClient returns a clientset for the cluster of a kubeconfig file,
// with the given user agent. qps and burst of 0 keep client-go's defaults.
func NewClient(kubeconfig, userAgent string, qps float32, burst int) (kubernetes.Interface, error) {
	if kubeconfig == "" {
		return nil, errors.New("--kubeconfig is required")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.UserAgent = userAgent
	if qps > 0 {
		cfg.QPS = qps
	}
	if burst > 0 {
		cfg.Burst = burst
	}
	return kubernetes.NewForConfig(cfg)
}
