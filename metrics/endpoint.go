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

// endpointCollector reads the disabled endpoints at scrape time.
type endpointCollector struct {
	store   *store.Store
	timeout time.Duration
	errors  *prometheus.CounterVec
}

var _ prometheus.Collector = (*endpointCollector)(nil)

// Describe implements prometheus.Collector.
func (c *endpointCollector) Describe(ch chan<- *prometheus.Desc) { ch <- disabledDesc }

// Collect implements prometheus.Collector.
func (c *endpointCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	paused, err := c.store.Paused(ctx)
	if err != nil {
		c.errors.WithLabelValues("paused").Inc()
		return
	}
	for f := range paused {
		if name, ok := strings.CutPrefix(f, store.PauseDisabled+"|"); ok {
			ch <- prometheus.MustNewConstMetric(disabledDesc, prometheus.GaugeValue, 1, name)
		}
	}
}
