package etcd

import "time"

// ClientConfig is clientConfig, for the tests.
var ClientConfig = clientConfig

// WarmKeys is warmKeys, for the tests.
const WarmKeys = warmKeys

// WarmLen is how many keys the warm cache holds.
func (s *Store) WarmLen() int { return len(s.warm) + len(s.warmOld) }

// KeepWarm makes the warm cache last d, until the returned func restores
// it: for tests whose Updates a loaded machine may space by more than a
// second.
func KeepWarm(d time.Duration) (restore func()) {
	was := warmFor
	warmFor = d
	return func() { warmFor = was }
}
