package etcd_test

import (
	"strings"
	"testing"

	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/store/etcd"
	"github.com/roombridge/roombridge/store/etcd/etcdtest"
	"github.com/roombridge/roombridge/store/storetest"
)

func TestContract(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	storetest.Run(t, func(t *testing.T) func() store.Store {
		prefix := "/contract/" + strings.ReplaceAll(t.Name(), "/", "_")
		return func() store.Store {
			s, err := etcd.New(cli, etcd.Options{Prefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
	})
}
