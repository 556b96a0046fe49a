package metrics

import (
	"context"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heraldhq/herald/store"
)

// EndpointDisabled is 1 for each endpoint its disable_after disabled, read
// from the store at scrape time; enabled endpoints are not listed.
const EndpointDisabled = "herald_endpoint_disabled"

var disabledDesc = prometheus.NewDesc(EndpointDisabled,
	"1 for an endpoint disabled because every attempt failed for its disable_after; its notifications wait until it is enabled."+shared,
	[]string{"endpoint"}, nil)

// PausedTimestampSeconds is when each paused topic or endpoint was paused
// (Unix seconds), read from the store at scrape time, by kind (topic or
// endpoint) and name; what is not paused is not listed. A pause holds
// deliveries back without failing any, so only this tells of one left on.
const PausedTimestampSeconds = "herald_paused_timestamp_seconds"

var pausedDesc = prometheus.NewDesc(PausedTimestampSeconds,
	"When a paused topic or endpoint was paused, in Unix seconds, by kind (topic, endpoint); nothing of it is attempted until it is resumed."+shared,
	[]string{"kind", "name"}, nil)

// endpointCollector reads the disabled endpoints, and the paused topics and
// endpoints, at scrape time.
type endpointCollector struct {
	store   *store.Store
	timeout time.Duration
	errors  *prometheus.CounterVec
}

var _ prometheus.Collector = (*endpointCollector)(nil)

// Describe implements prometheus.Collector.
func (c *endpointCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- disabledDesc
	ch <- pausedDesc
}

// Collect implements prometheus.Collector.
func (c *endpointCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	paused, err := c.store.Paused(ctx)
	if err != nil {
		countError(c.errors, "paused", err)
		return
	}
	for f, since := range paused {
		kind, name, _ := strings.Cut(f, "|")
		switch kind {
		case store.PauseDisabled:
			ch <- prometheus.MustNewConstMetric(disabledDesc, prometheus.GaugeValue, 1, name)
		case store.PauseTopic, store.PauseEndpoint:
			ch <- prometheus.MustNewConstMetric(pausedDesc, prometheus.GaugeValue, float64(since.UnixMilli())/1e3, kind, name)
		}
	}
}
