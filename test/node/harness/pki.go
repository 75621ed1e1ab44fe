package harness

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// certValidity: the node lives for one test run; its certificates need
// not outlive a day or two.
const certValidity = 48 * time.Hour

// identity is a key and certificate signed by the node's CA.
type identity struct {
	name string // files <name>.crt and <name>.key
	cn   string
	orgs []string
	// ips and dns are the serving names (subjectAltName).
	ips []net.IP
	dns []string
}

// identities are the node's certificates: the API server's serving
// certificate and a client certificate per component. The kubelet's names
// its node (system:node:<name> in system:nodes), which the Node authorizer
// and NodeRestriction require; the admin and the API server's client for
// kubelets are system:masters.
func identities(nodeName string, nodeIP net.IP) []identity {
	return []identity{
		{name: "apiserver", cn: "kube-apiserver",
			ips: []net.IP{nodeIP, net.IPv4(127, 0, 0, 1), net.ParseIP(serviceIP)},
			dns: []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost"}},
		{name: "admin", cn: "drasched-node-admin", orgs: []string{"system:masters"}},
		{name: "apiserver-kubelet-client", cn: "kube-apiserver-kubelet-client", orgs: []string{"system:masters"}},
		{name: "controller-manager", cn: "system:kube-controller-manager"},
		{name: "scheduler", cn: "system:kube-scheduler"},
		{name: "kubelet", cn: "system:node:" + nodeName, orgs: []string{"system:nodes"}},
		{name: "kube-proxy", cn: "system:kube-proxy"},
	}
}

// kubeconfigUsers are the components that get a kubeconfig of their own
// client certificate, <name>.kubeconfig under Root.
var kubeconfigUsers = []string{"admin", "controller-manager", "scheduler", "kubelet", "kube-proxy"}

// writePKI writes the node's CA, the certificates of identities, the
// service account key pair (sa.key, sa.pub) under dir, and a kubeconfig
// per kubeconfigUsers under kubeconfigDir for the API server at server.
func writePKI(dir, kubeconfigDir, server, nodeName string, nodeIP net.IP) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return err
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	ca, err := cert.NewSelfSignedCACert(cert.Config{CommonName: "drasched-node-ca"}, caKey)
	if err != nil {
		return fmt.Errorf("CA certificate: %w", err)
	}
	if err := writeKeyPair(dir, "ca", ca, caKey); err != nil {
		return err
	}
	for _, id := range identities(nodeName, nodeIP) {
		c, key, err := signed(id, ca, caKey)
		if err != nil {
			return fmt.Errorf("certificate %s: %w", id.name, err)
		}
		if err := writeKeyPair(dir, id.name, c, key); err != nil {
			return err
		}
	}
	if err := writeServiceAccountKeys(dir); err != nil {
		return err
	}
	for _, user := range kubeconfigUsers {
		path := filepath.Join(kubeconfigDir, user+".kubeconfig")
		if err := writeKubeconfig(path, server, filepath.Join(dir, "ca.crt"),
			filepath.Join(dir, user+".crt"), filepath.Join(dir, user+".key"), user); err != nil {
			return err
		}
	}
	return nil
}

// signed makes a P-256 key and a certificate for it signed by the CA, for
// client and server authentication both.
func signed(id identity, ca *x509.Certificate, caKey crypto.Signer) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: id.cn, Organization: id.orgs},
		NotBefore:             ca.NotBefore,
		NotAfter:              now.Add(certValidity),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IPAddresses:           id.ips,
		DNSNames:              id.dns,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		return nil, nil, err
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	return c, key, nil
}

func writeKeyPair(dir, name string, c *x509.Certificate, key crypto.PrivateKey) error {
	certPEM, err := cert.EncodeCertificates(c)
	if err != nil {
		return err
	}
	if err := cert.WriteCert(filepath.Join(dir, name+".crt"), certPEM); err != nil {
		return err
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return err
	}
	return keyutil.WriteKey(filepath.Join(dir, name+".key"), keyPEM)
}

// writeServiceAccountKeys writes the RSA key pair with which the API
// server signs service account tokens (sa.key) and checks them (sa.pub).
func writeServiceAccountKeys(dir string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return err
	}
	if err := keyutil.WriteKey(filepath.Join(dir, "sa.key"), keyPEM); err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644)
}

// writeKubeconfig writes a kubeconfig (mode 0600) for a client
// certificate.
func writeKubeconfig(path, server, caFile, certFile, keyFile, user string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["node"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: caFile}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificate: certFile, ClientKey: keyFile}
	cfg.Contexts[user] = &clientcmdapi.Context{Cluster: "node", AuthInfo: user}
	cfg.CurrentContext = user
	return clientcmd.WriteToFile(*cfg, path)
}
