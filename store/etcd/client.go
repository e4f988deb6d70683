package etcd

import (
	"fmt"
	"log/slog"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// Client settings for a bridge: the defaults of gRPC are tuned for servers
// that stay away for long (reconnect back-off up to 2 minutes), but a bridge
// must lead again within seconds of etcd coming back.
const (
	// dialTimeout bounds the first connection.
	dialTimeout = 5 * time.Second
	// DefaultKeepAlive is how often an idle connection is pinged: etcd's
	// server refuses pings more often than its --grpc-keepalive-min-time
	// (5 s by default) with GOAWAY "too_many_pings" and drops the
	// connection. A dead connection under a request is noticed sooner
	// anyway: every commit and read is bounded by Options.Timeout, and the
	// election's lease by its TTL.
	DefaultKeepAlive = 10 * time.Second
	// keepAliveTimeout is how long a ping may go unanswered.
	keepAliveTimeout = 5 * time.Second
	// minKeepAlive is etcd's default --grpc-keepalive-min-time.
	minKeepAlive = 5 * time.Second
	// reconnectMax caps the reconnect back-off.
	reconnectMax = time.Second
)

// ClientOptions configure NewClient.
type ClientOptions struct {
	// KeepAlive is the ping interval of an idle connection (default
	// DefaultKeepAlive; at least 5 s, etcd's minimum).
	KeepAlive time.Duration
	// Log, when set, receives gRPC's own log lines (RouteGRPCLogs).
	Log *slog.Logger
}

// NewClient returns an etcd client of endpoints with the settings above.
func NewClient(endpoints []string, o ClientOptions) (*clientv3.Client, error) {
	if o.Log != nil {
		RouteGRPCLogs(o.Log)
	}
	cli, err := clientv3.New(clientConfig(endpoints, o))
	if err != nil {
		return nil, fmt.Errorf("etcd: client of %v: %w", endpoints, err)
	}
	return cli, nil
}

func clientConfig(endpoints []string, o ClientOptions) clientv3.Config {
	keepAlive := max(o.KeepAlive, minKeepAlive)
	if o.KeepAlive == 0 {
		keepAlive = DefaultKeepAlive
	}
	return clientv3.Config{
		Endpoints:            endpoints,
		DialTimeout:          dialTimeout,
		DialKeepAliveTime:    keepAlive,
		DialKeepAliveTimeout: keepAliveTimeout,
		// etcd does not permit pings without an active stream: an idle
		// client that pinged would be dropped.
		PermitWithoutStream: false,
		Logger:              zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: reconnectMax},
			MinConnectTimeout: dialTimeout,
		})},
	}
}
