package config

import (
	"crypto/tls"
	"os"
	"time"
)

// Limits of the HTTP server and of the request queues, with their defaults
// (docs/security.md lists them with their keys). A zero value means the
// default.
const (
	DefaultReadTimeout       = 30 * time.Second
	DefaultWriteTimeout      = 60 * time.Second
	DefaultIdleTimeout       = 120 * time.Second
	DefaultMaxConnsPerClient = 64
	DefaultQueueLimit        = 1000
)

// Requests bounds what waits for the agents.
type Requests struct {
	// QueueLimit is how many requests one agent may have queued; a creation
	// beyond it is refused (HTTP 429) until the queue shrinks. Default
	// DefaultQueueLimit.
	QueueLimit int `yaml:"queue_limit"`
}

// Queue returns requests.queue_limit or its default.
func (r Requests) Queue() int { return orDefault(r.QueueLimit, DefaultQueueLimit) }

// Timeouts returns http.read_timeout, http.write_timeout and
// http.idle_timeout, or their defaults.
func (h HTTP) Timeouts() (read, write, idle time.Duration) {
	return orDefault(h.ReadTimeout, DefaultReadTimeout), orDefault(h.WriteTimeout, DefaultWriteTimeout),
		orDefault(h.IdleTimeout, DefaultIdleTimeout)
}

// ConnsPerClient returns http.max_conns_per_client or its default.
func (h HTTP) ConnsPerClient() int { return orDefault(h.MaxConnsPerClient, DefaultMaxConnsPerClient) }

func orDefault[T int | time.Duration](v, d T) T {
	if v == 0 {
		return d
	}
	return v
}

// validateLimits checks the keys of this file: none may be negative.
func (c *Config) validateLimits() error {
	for _, k := range []struct {
		key string
		neg bool
	}{
		{"http.read_timeout", c.HTTP.ReadTimeout < 0},
		{"http.write_timeout", c.HTTP.WriteTimeout < 0},
		{"http.idle_timeout", c.HTTP.IdleTimeout < 0},
		{"http.max_conns_per_client", c.HTTP.MaxConnsPerClient < 0},
		{"requests.queue_limit", c.Requests.QueueLimit < 0},
	} {
		if k.neg {
			return keyErr(k.key, "must not be negative")
		}
	}
	return nil
}

// Scheme is how the API port is reached: https with http.tls_cert_file
// (validated: with its key), else http.
func (h HTTP) Scheme() string {
	if h.TLSCertFile != "" {
		return "https"
	}
	return "http"
}

// Certificate returns the API port's TLS certificate from
// http.tls_cert_file and http.tls_key_file (nil, nil when neither is set:
// the port serves plaintext). Both must be set, the files readable, the key
// file private (mode 0600 or stricter, like every secret file) and the pair
// must match; errors name the key. The files are read once: a renewed
// certificate is served after a restart.
func (h HTTP) Certificate() (*tls.Certificate, error) {
	switch {
	case h.TLSCertFile == "" && h.TLSKeyFile == "":
		return nil, nil
	case h.TLSKeyFile == "":
		return nil, keyErr("http.tls_key_file", "required with http.tls_cert_file (set both or neither)")
	case h.TLSCertFile == "":
		return nil, keyErr("http.tls_cert_file", "required with http.tls_key_file (set both or neither)")
	}
	certPEM, err := os.ReadFile(h.TLSCertFile)
	if err != nil {
		return nil, keyErr("http.tls_cert_file", "%v", err)
	}
	if err := checkSecretFile(h.TLSKeyFile); err != nil {
		return nil, keyErr("http.tls_key_file", "%v", err)
	}
	keyPEM, err := os.ReadFile(h.TLSKeyFile)
	if err != nil {
		return nil, keyErr("http.tls_key_file", "%v", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, keyErr("http.tls_cert_file", "with http.tls_key_file: %v", err)
	}
	return &cert, nil
}
