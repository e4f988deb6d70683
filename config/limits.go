package config

// Limits bound what one request may carry (key limits).
type Limits struct {
	// RequestBytes bounds each text a request carries: its ask (a longer
	// ask is refused when it is made), and its result, each message its
	// agent posts and each background task's output (longer ones are stored
	// cut, with a marker). The same bound holds on bolt and on etcd: at the
	// default, the largest transaction a turn's end writes stays far under
	// etcd's limits of one transaction (128 operations, 1.5 MiB request;
	// the store keeps each under 1 MiB), even for text that JSON escapes
	// six-fold. Default DefaultRequestBytes.
	RequestBytes int `yaml:"request_bytes"`
}

// Bounds of limits.request_bytes.
const (
	DefaultRequestBytes = 32 << 10
	// MaxRequestBytes keeps a turn's end within one etcd transaction for
	// ordinary text (four copies of the bound: ask, result, its reply and
	// its delegator's inbox).
	MaxRequestBytes = 128 << 10
	minRequestBytes = 1 << 10
)

func (l *Limits) setDefaults() {
	if l.RequestBytes == 0 {
		l.RequestBytes = DefaultRequestBytes
	}
}

func (l *Limits) validate() error {
	if l.RequestBytes != 0 && l.RequestBytes < minRequestBytes || l.RequestBytes > MaxRequestBytes {
		return keyErr("limits.request_bytes", "%d: want between %d and %d bytes", l.RequestBytes, minRequestBytes, MaxRequestBytes)
	}
	return nil
}
