package runners

import "github.com/prometheus/client_golang/prometheus"

var (
	descConnected  = prometheus.NewDesc("roombridge_runners_connected", "Runners connected to this bridge.", nil, nil)
	descHosted     = prometheus.NewDesc("roombridge_runner_agents_hosted", "Agents hosted by connected runners.", nil, nil)
	descInFlight   = prometheus.NewDesc("roombridge_runner_turns_in_flight", "Turns in flight on each runner.", []string{"runner"}, nil)
	descReconnects = prometheus.NewDesc("roombridge_runner_reconnects_total", "Connections of a runner seen before, since this instance started.", nil, nil)
)

// Describe implements prometheus.Collector.
func (h *Hub) Describe(ch chan<- *prometheus.Desc) {
	ch <- descConnected
	ch <- descHosted
	ch <- descInFlight
	ch <- descReconnects
}

// Collect implements prometheus.Collector: read from the hub at scrape.
func (h *Hub) Collect(ch chan<- prometheus.Metric) {
	h.mu.Lock()
	defer h.mu.Unlock()
	connected, hosted := 0, 0
	for _, x := range h.host {
		if x.c != nil {
			connected++
			hosted += len(x.agents)
		}
		ch <- prometheus.MustNewConstMetric(descInFlight, prometheus.GaugeValue, float64(len(x.turns)), x.name)
	}
	ch <- prometheus.MustNewConstMetric(descConnected, prometheus.GaugeValue, float64(connected))
	ch <- prometheus.MustNewConstMetric(descHosted, prometheus.GaugeValue, float64(hosted))
	ch <- prometheus.MustNewConstMetric(descReconnects, prometheus.CounterValue, float64(h.reconnects))
}
