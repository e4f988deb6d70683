// Package etcdtest runs a real, single-member etcd server inside the test
// process (go.etcd.io/etcd/server/v3/embed) on loopback ports, for the tests
// of every package that needs etcd. Import it from _test.go files only: it
// pulls the etcd server into the binary.
package etcdtest

import (
	"context"
	"fmt"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/roombridge/roombridge/store/etcd"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// startTimeout bounds how long the server may take to become ready; with the
// fast ticks below it is ready in ~0.1 s, so this only trips on a broken host.
const startTimeout = 20 * time.Second

// Server is one embedded etcd member behind a TCP proxy. Clients talk to the
// proxy's stable endpoint; Stop cuts every client connection at once and
// stops the member (an outage, as clients see a crash), Restart brings the
// member back on the same data.
type Server struct {
	t     testing.TB
	dir   string
	proxy *proxy

	mu        sync.Mutex
	etcd      *embed.Etcd
	clientURL url.URL
	peerURL   url.URL
}

// Start starts a server on 127.0.0.1 with random ports and a data dir under
// t.TempDir(), and stops it when the test ends. Ticks are fast (TickMs 10,
// ElectionMs 100): the server is ready in ~0.1 s and leases down to 1 s are
// honoured.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{t: t, dir: t.TempDir()}
	zero := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	s.clientURL, s.peerURL = zero, zero
	p, err := newProxy()
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	s.proxy = p
	if err := s.start(); err != nil {
		p.close()
		t.Fatalf("etcdtest: %v", err)
	}
	t.Cleanup(func() {
		s.Stop()
		p.close()
	})
	return s
}

func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.etcd != nil {
		return nil
	}
	cfg := embed.NewConfig()
	cfg.Name = "etcdtest"
	cfg.Dir = s.dir
	cfg.ListenClientUrls = []url.URL{s.clientURL}
	cfg.AdvertiseClientUrls = []url.URL{s.clientURL}
	cfg.ListenPeerUrls = []url.URL{s.peerURL}
	cfg.AdvertisePeerUrls = []url.URL{s.peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.TickMs, cfg.ElectionMs = 10, 100
	cfg.LogLevel = "error"
	// embed logs "serving ... failed: use of closed network connection" at
	// error level on every Close: silence it entirely.
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return fmt.Errorf("start: %w", err)
	case <-time.After(startTimeout):
		e.Close()
		return fmt.Errorf("start: not ready within %v", startTimeout)
	}
	// Keep the ports the kernel picked, so that a restart serves the same
	// endpoint.
	s.clientURL = url.URL{Scheme: "http", Host: e.Clients[0].Addr().String()}
	s.peerURL = url.URL{Scheme: "http", Host: e.Peers[0].Listener.Addr().String()}
	s.etcd = e
	s.proxy.up(s.clientURL.Host)
	return nil
}

// Endpoint returns the client endpoint (host:port), stable across restarts.
func (s *Server) Endpoint() string { return s.proxy.addr() }

// Dir returns the server's data directory.
func (s *Server) Dir() string { return s.dir }

// Stop cuts every client connection and stops the server (an outage);
// Restart brings it back. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	e := s.etcd
	s.etcd = nil
	s.mu.Unlock()
	s.proxy.down()
	if e != nil {
		e.Close()
	}
}

// Restart starts a stopped server again on the same data dir and ports.
func (s *Server) Restart() {
	s.t.Helper()
	if err := s.start(); err != nil {
		s.t.Fatalf("etcdtest: restart: %v", err)
	}
}

// Client returns a new client of the server, closed when the test ends.
func (s *Server) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	cli, err := etcd.NewClient([]string{s.Endpoint()}, etcd.ClientOptions{})
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// WaitReady waits until the server answers a linearizable read through cli.
func WaitReady(ctx context.Context, cli *clientv3.Client) error {
	for {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := cli.Get(rctx, "etcdtest-ready")
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("etcdtest: not ready: %w", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
