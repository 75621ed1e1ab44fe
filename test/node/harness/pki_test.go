package harness

import (
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// TestWritePKI: every certificate is signed by the CA and goes with its
// key; the kubelet's names its node for the Node authorizer, the API
// server's serves its addresses and names; each kubeconfig is private and
// names its component's files and the server.
func TestWritePKI(t *testing.T) {
	dir := t.TempDir()
	pki := filepath.Join(dir, "pki")
	nodeIP := net.IPv4(192, 0, 2, 2)
	if err := writePKI(pki, dir, "https://192.0.2.2:16443", "gpu-node-1", nodeIP); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(pki); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("pki directory: %v, %v; want mode 0700", fi, err)
	}
	cas, err := cert.CertsFromFile(filepath.Join(pki, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if !cas[0].IsCA {
		t.Fatal("ca.crt is no CA")
	}
	roots := x509.NewCertPool()
	roots.AddCert(cas[0])
	certs := map[string]*x509.Certificate{}
	for _, id := range identities("gpu-node-1", nodeIP) {
		pair, err := tls.LoadX509KeyPair(filepath.Join(pki, id.name+".crt"), filepath.Join(pki, id.name+".key"))
		if err != nil {
			t.Fatalf("%s: %v", id.name, err)
		}
		c := pair.Leaf
		if _, err := c.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("%s: no client certificate of the CA: %v", id.name, err)
		}
		if fi, err := os.Stat(filepath.Join(pki, id.name+".key")); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s.key: %v; want mode 0600", id.name, err)
		}
		certs[id.name] = c
	}
	if k := certs["kubelet"]; k.Subject.CommonName != "system:node:gpu-node-1" || !slices.Equal(k.Subject.Organization, []string{"system:nodes"}) {
		t.Errorf("kubelet's certificate names %v, want system:node:gpu-node-1 in system:nodes", k.Subject)
	}
	if a := certs["admin"]; !slices.Equal(a.Subject.Organization, []string{"system:masters"}) {
		t.Errorf("admin: %v, want system:masters", a.Subject)
	}
	for _, name := range []string{"192.0.2.2", "127.0.0.1", "10.97.0.1", "kubernetes.default.svc", "localhost"} {
		if _, err := certs["apiserver"].Verify(x509.VerifyOptions{Roots: roots, DNSName: name}); err != nil {
			t.Errorf("the API server's certificate does not serve %s: %v", name, err)
		}
	}
	if err := certs["apiserver"].VerifyHostname("192.0.2.3"); err == nil {
		t.Error("the API server's certificate serves another address")
	}
	sa, err := keyutil.PrivateKeyFromFile(filepath.Join(pki, "sa.key"))
	if err != nil {
		t.Fatal(err)
	}
	pubs, err := keyutil.PublicKeysFromFile(filepath.Join(pki, "sa.pub"))
	if err != nil || len(pubs) != 1 {
		t.Fatalf("sa.pub: %v, %v", pubs, err)
	}
	if !sa.(*rsa.PrivateKey).PublicKey.Equal(pubs[0]) {
		t.Error("sa.pub is not sa.key's public key")
	}
	for _, user := range kubeconfigUsers {
		path := filepath.Join(dir, user+".kubeconfig")
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v; want mode 0600", path, err)
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Host != "https://192.0.2.2:16443" || cfg.CAFile != filepath.Join(pki, "ca.crt") ||
			cfg.CertFile != filepath.Join(pki, user+".crt") || cfg.KeyFile != filepath.Join(pki, user+".key") {
			t.Errorf("%s: server %s, CA %s, client %s %s", path, cfg.Host, cfg.CAFile, cfg.CertFile, cfg.KeyFile)
		}
	}
}
