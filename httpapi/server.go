package httpapi

import (
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// ReadHeaderTimeout bounds how long a client may take to send a request's
// headers (fixed).
const ReadHeaderTimeout = 10 * time.Second

// ServerOptions are the limits of the HTTP server (config http.*; zero:
// no limit, except ReadHeaderTimeout which is always set).
type ServerOptions struct {
	// ReadTimeout bounds reading one request, headers and body
	// (http.read_timeout).
	ReadTimeout time.Duration
	// WriteTimeout bounds writing one response (http.write_timeout);
	// streaming responses extend it before each write (Stream).
	WriteTimeout time.Duration
	// IdleTimeout closes a keep-alive connection idle that long
	// (http.idle_timeout).
	IdleTimeout time.Duration
	// MaxConnsPerClient caps the open connections of one client address
	// (http.max_conns_per_client); the ones over it are closed at once.
	MaxConnsPerClient int
	// TLS is the port's certificate (http.tls_cert_file, http.tls_key_file);
	// nil: plaintext.
	TLS *tls.Certificate
	Log *slog.Logger
}

// NewServer returns the HTTP server of handler with o's timeouts, and ln
// wrapped to cap connections per client address and, with o.TLS, to speak
// TLS: serve with srv.Serve(ln). This is the one place that decides how the
// API port serves; the daemon and core/coretest both build theirs here.
//
// Either way the port speaks HTTP/1.1 and HTTP/2 (the runners' gRPC
// streams): with TLS, HTTP/2 is negotiated by ALPN ("h2", then
// "http/1.1"); without, HTTP/2 comes unencrypted (h2c).
func NewServer(handler http.Handler, ln net.Listener, o ServerOptions) (*http.Server, net.Listener) {
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: ReadHeaderTimeout, ReadTimeout: o.ReadTimeout,
		WriteTimeout: o.WriteTimeout, IdleTimeout: o.IdleTimeout}
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	if o.TLS != nil {
		srv.Protocols.SetHTTP2(true)
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{*o.TLS}, MinVersion: tls.VersionTLS12,
			NextProtos: []string{"h2", "http/1.1"}}
	} else {
		srv.Protocols.SetUnencryptedHTTP2(true)
	}
	if o.Log != nil {
		srv.ErrorLog = slog.NewLogLogger(o.Log.Handler(), slog.LevelWarn)
	}
	if o.MaxConnsPerClient > 0 { // counted on TCP: one over the cap is closed before its handshake
		ln = &perClient{Listener: ln, max: o.MaxConnsPerClient, open: map[string]int{}, log: o.Log}
	}
	if srv.TLSConfig != nil {
		ln = tls.NewListener(ln, srv.TLSConfig)
	}
	return srv, ln
}

// perClient is a listener that closes a connection at once when its client
// address (the host, without the port) has max open already.
type perClient struct {
	net.Listener
	max int
	log *slog.Logger

	mu   sync.Mutex
	open map[string]int
}

func (l *perClient) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		host, _, err := net.SplitHostPort(c.RemoteAddr().String())
		if err != nil {
			host = c.RemoteAddr().String()
		}
		l.mu.Lock()
		over := l.open[host] >= l.max
		if !over {
			l.open[host]++
		}
		l.mu.Unlock()
		if !over {
			return &clientConn{Conn: c, release: func() { l.release(host) }}, nil
		}
		_ = c.Close()
		if l.log != nil {
			l.log.Warn("http: connection refused: too many open from this client", "client", host, "max", l.max)
		}
	}
}

func (l *perClient) release(host string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[host]--; l.open[host] <= 0 {
		delete(l.open, host)
	}
}

// clientConn releases its client's slot once, at its first Close.
type clientConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *clientConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// LongLived serves a connection that lives as long as its peer wants (a
// runner's gRPC stream, which has heartbeats of its own): the server's read
// and write deadlines are lifted for it.
func LongLived(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		_ = rc.SetReadDeadline(time.Time{})
		_ = rc.SetWriteDeadline(time.Time{})
		h.ServeHTTP(w, r)
	})
}

// Stream lets h write a long response (an export, an event stream, /mcp)
// under the server's write timeout: the deadline is lifted while h works and
// set again, timeout ahead, before each write, so only a client that stops
// reading is cut. timeout 0: h runs as is.
func Stream(h http.Handler, timeout time.Duration) http.Handler {
	if timeout <= 0 {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		_ = rc.SetWriteDeadline(time.Time{})
		h.ServeHTTP(&streamWriter{ResponseWriter: w, rc: rc, timeout: timeout}, r)
	})
}

// streamWriter sets the write deadline before each write.
type streamWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
}

func (s *streamWriter) Write(b []byte) (int, error) {
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
	return s.ResponseWriter.Write(b)
}

// Flush implements http.Flusher.
func (s *streamWriter) Flush() {
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
	_ = s.rc.Flush()
}

// Unwrap lets http.ResponseController reach the connection.
func (s *streamWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }
