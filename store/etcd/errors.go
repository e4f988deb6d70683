package etcd

import (
	"context"
	"errors"
	"fmt"

	"github.com/roombridge/roombridge/store"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// kind classifies an error of the etcd client as one of the store's kinds
// (nil when it is none of them): a full database is store.ErrFull; a
// request etcd refuses for its size is store.ErrTooLarge; no answer in
// time, no connection, no etcd leader or a leader change (an election
// between etcd members) is store.ErrUnavailable — the store is busy, not
// this instance fenced.
func kind(err error) error {
	switch {
	case errors.Is(err, rpctypes.ErrNoSpace) || errors.Is(err, rpctypes.ErrGRPCNoSpace):
		return store.ErrFull
	case errors.Is(err, rpctypes.ErrRequestTooLarge) || errors.Is(err, rpctypes.ErrTooManyOps) ||
		errors.Is(err, rpctypes.ErrGRPCRequestTooLarge) || errors.Is(err, rpctypes.ErrGRPCTooManyOps):
		return store.ErrTooLarge
	case errors.Is(err, context.DeadlineExceeded):
		return store.ErrUnavailable
	}
	code := status.Code(err)
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		code = ee.Code()
	}
	switch code {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted:
		return store.ErrUnavailable
	case codes.ResourceExhausted:
		return store.ErrFull
	}
	return nil
}

// wrap returns err of operation op ("commit", "read"), wrapping its store
// kind as well when it has one.
func wrap(op string, err error) error {
	if k := kind(err); k != nil && !errors.Is(err, k) {
		return fmt.Errorf("store: etcd: %s: %w: %w", op, k, err)
	}
	return fmt.Errorf("store: etcd: %s: %w", op, err)
}
