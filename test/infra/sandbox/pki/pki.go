// Package pki makes the sandbox's certificate authority and the certificates
// of the API server, its clients and the nodes' kubelet endpoints. Every key
// is ECDSA P-256: quick to generate on every cold start and accepted by each
// component, service-account token signing included.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// validity is long enough that a sandbox left running never sees a
// certificate expire.
const validity = 10 * 365 * 24 * time.Hour

// CA signs every certificate of one sandbox.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
}

// Pair is a PEM certificate and key.
type Pair struct {
	CertPEM []byte
	KeyPEM  []byte
}

// Request describes one leaf certificate.
type Request struct {
	CommonName   string
	Organization []string
	IPs          []net.IP
	DNSNames     []string
	Server       bool
	Client       bool
}

// NewCA creates a self-signed CA.
func NewCA(commonName string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key}, nil
}

// LoadCA reads a CA written by Write.
func LoadCA(dir string) (*CA, error) {
	pair := Pair{}
	var err error
	if pair.CertPEM, err = os.ReadFile(filepath.Join(dir, "ca.crt")); err != nil {
		return nil, err
	}
	if pair.KeyPEM, err = os.ReadFile(filepath.Join(dir, "ca.key")); err != nil {
		return nil, err
	}
	tc, err := tls.X509KeyPair(pair.CertPEM, pair.KeyPEM)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(tc.Certificate[0])
	if err != nil {
		return nil, err
	}
	signer, ok := tc.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, errors.New("CA key cannot sign")
	}
	return &CA{Cert: cert, Key: signer}, nil
}

// Pair returns the CA's own certificate and key in PEM.
func (ca *CA) Pair() (Pair, error) {
	keyPEM, err := encodeKey(ca.Key)
	if err != nil {
		return Pair{}, err
	}
	return Pair{CertPEM: encodeCert(ca.Cert.Raw), KeyPEM: keyPEM}, nil
}

// CertPEM is the CA certificate that every client trusts.
func (ca *CA) CertPEM() []byte { return encodeCert(ca.Cert.Raw) }

// Issue signs a new leaf certificate with a fresh key.
func (ca *CA) Issue(req Request) (Pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Pair{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: req.CommonName, Organization: req.Organization},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		IPAddresses:  req.IPs,
		DNSNames:     req.DNSNames,
	}
	if req.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if req.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return Pair{}, fmt.Errorf("signing %s: %w", req.CommonName, err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return Pair{}, err
	}
	return Pair{CertPEM: encodeCert(der), KeyPEM: keyPEM}, nil
}

// NewSigningKey returns a key for service-account tokens: the private key
// and the public key, both PEM.
func NewSigningKey() (Pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Pair{}, err
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return Pair{}, err
	}
	pub, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return Pair{}, err
	}
	return Pair{CertPEM: pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), KeyPEM: keyPEM}, nil
}

// Write stores the pair as dir/name.crt and dir/name.key (the key 0600).
func (p Pair) Write(dir, name string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, name+".crt"), p.CertPEM, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name+".key"), p.KeyPEM, 0o600)
}

// TLS returns the pair as a tls.Certificate.
func (p Pair) TLS() (tls.Certificate, error) { return tls.X509KeyPair(p.CertPEM, p.KeyPEM) }

func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func encodeKey(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return n
}
