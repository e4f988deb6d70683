package etcd

// ClientConfig is clientConfig, for the tests.
var ClientConfig = clientConfig
