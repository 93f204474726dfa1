//go:build linux

package procnode

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// serveLogs answers the API server's requests for container logs (kubectl
// logs) as a kubelet's server does, for every node; it returns the port.
func (k *kubelet) serveLogs() (int, error) {
	cert, err := selfSigned()
	if err != nil {
		return 0, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/containerLogs/{ns}/{pod}/{container}", k.containerLogs)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	k.logServer = srv
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func (k *kubelet) containerLogs(w http.ResponseWriter, req *http.Request) {
	ns, pod, container := req.PathValue("ns"), req.PathValue("pod"), req.PathValue("container")
	r := k.runnerOf(ns, pod)
	if r == nil {
		http.Error(w, "pod "+ns+"/"+pod+" is not running on this node", http.StatusNotFound)
		return
	}
	path := r.logPath(container)
	if req.URL.Query().Get("previous") == "true" {
		path += ".previous"
	}
	b, err := os.ReadFile(path)
	if err != nil {
		http.Error(w, "no log of container "+container+": "+err.Error(), http.StatusNotFound)
		return
	}
	if n, err := strconv.Atoi(req.URL.Query().Get("tailLines")); err == nil && n >= 0 {
		lines := bytes.SplitAfter(b, []byte("\n"))
		if len(lines) > 0 && len(lines[len(lines)-1]) == 0 {
			lines = lines[:len(lines)-1]
		}
		if len(lines) > n {
			lines = lines[len(lines)-n:]
		}
		b = bytes.Join(lines, nil)
	}
	w.Header().Set("Content-Type", "text/plain")
	_, _ = w.Write(b)
}

func (k *kubelet) runnerOf(ns, name string) *podRunner {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, p := range k.pods {
		if p.ns == ns && p.name == name {
			return p
		}
	}
	return nil
}

func selfSigned() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "procnode"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{strings.ToLower("localhost")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
