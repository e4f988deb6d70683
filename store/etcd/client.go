package etcd

import (
	"fmt"
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
	// keepAliveTime/keepAliveTimeout detect a dead TCP connection (a
	// partition that sends no RST) within ~4 s.
	keepAliveTime    = 2 * time.Second
	keepAliveTimeout = 2 * time.Second
	// reconnectMax caps the reconnect back-off.
	reconnectMax = time.Second
)

// NewClient returns an etcd client of endpoints with the settings above.
func NewClient(endpoints []string) (*clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:            endpoints,
		DialTimeout:          dialTimeout,
		DialKeepAliveTime:    keepAliveTime,
		DialKeepAliveTimeout: keepAliveTimeout,
		PermitWithoutStream:  true,
		Logger:               zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: reconnectMax},
			MinConnectTimeout: dialTimeout,
		})},
	})
	if err != nil {
		return nil, fmt.Errorf("etcd: client of %v: %w", endpoints, err)
	}
	return cli, nil
}
