package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roombridge/roombridge/internal/tlstest"
)

// http.tls_cert_file and http.tls_key_file: both or neither, readable
// files, a private key file, a matching pair; errors name the key.
func TestHTTPTLS(t *testing.T) {
	dir := t.TempDir()
	f := tlstest.Write(t, dir)
	tlsConf := func(cert, key string) string {
		return minimal + fmt.Sprintf("http: {tls_cert_file: %q, tls_key_file: %q}\n", cert, key)
	}
	c, err := Parse([]byte(tlsConf(f.Cert, f.Key)))
	if err != nil {
		t.Fatal(err)
	}
	if cert, err := c.HTTP.Certificate(); err != nil || cert == nil || len(cert.Certificate) != 1 {
		t.Fatalf("certificate: %v, %v; want the pair", cert, err)
	}
	if c, err := Parse([]byte(minimal)); err != nil {
		t.Fatal(err)
	} else if cert, err := c.HTTP.Certificate(); cert != nil || err != nil {
		t.Fatalf("no TLS keys: %v, %v; want nil, nil (plaintext)", cert, err)
	}

	open := filepath.Join(dir, "open.key")
	copyFile(t, f.Key, open, 0o644)
	mismatch := filepath.Join(dir, "other.key")
	copyFile(t, tlstest.Write(t, t.TempDir()).Key, mismatch, 0o600)
	for _, tc := range []struct {
		name, yaml, key, says string
	}{
		{"only the cert", minimal + fmt.Sprintf("http: {tls_cert_file: %q}\n", f.Cert), "http.tls_key_file", "set both or neither"},
		{"only the key", minimal + fmt.Sprintf("http: {tls_key_file: %q}\n", f.Key), "http.tls_cert_file", "set both or neither"},
		{"missing cert", tlsConf(filepath.Join(dir, "nope.pem"), f.Key), "http.tls_cert_file", "no such file"},
		{"cert is a directory", tlsConf(dir, f.Key), "http.tls_cert_file", "is a directory"},
		{"missing key", tlsConf(f.Cert, filepath.Join(dir, "nope.key")), "http.tls_key_file", "no such file"},
		{"key readable by others", tlsConf(f.Cert, open), "http.tls_key_file", "chmod 600"},
		{"key of another cert", tlsConf(f.Cert, mismatch), "http.tls_cert_file", "does not match"},
	} {
		_, err := Parse([]byte(tc.yaml))
		var ce *Error
		if !errors.As(err, &ce) || ce.Key != tc.key || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v; want an error about %s saying %q", tc.name, err, tc.key, tc.says)
		}
	}
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(to, mode); err != nil {
		t.Fatal(err)
	}
}
