package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// memoryCollector reports Redis's memory use against its maxmemory at
// scrape time.
type memoryCollector struct {
	read    func(ctx context.Context) (used, limit int64, err error)
	timeout time.Duration
	errors  *prometheus.CounterVec
}

var (
	memoryUsedDesc = prometheus.NewDesc(RedisMemoryUsedBytes,
		"Bytes Redis counts against its maxmemory (used_memory less its replication and AOF buffers); "+
			"on a Cluster, of the master closest to its maxmemory."+shared, nil, nil)
	memoryMaxDesc = prometheus.NewDesc(RedisMemoryMaxBytes,
		"Redis's maxmemory in bytes, 0 when unlimited; at it Redis refuses enqueues (503) while deliveries go on. "+
			"On a Cluster, of the master closest to it."+shared, nil, nil)
)

var _ prometheus.Collector = (*memoryCollector)(nil)

// Describe implements prometheus.Collector.
func (c *memoryCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- memoryUsedDesc
	ch <- memoryMaxDesc
}

// Collect implements prometheus.Collector.
func (c *memoryCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	if used, limit, err := c.read(ctx); err != nil {
		// A Redis user that may not run INFO (an ACL, a renamed command)
		// leaves the gauges unknown, as RedisSafetyFunc's are: no store
		// call failed, and counting one at every scrape would page for a
		// Redis that answers every store call.
		if !redis.IsPermissionError(err) && !redis.HasErrorPrefix(err, "unknown command") {
			countError(c.errors, "memory", err)
		}
	} else {
		ch <- prometheus.MustNewConstMetric(memoryUsedDesc, prometheus.GaugeValue, float64(used))
		ch <- prometheus.MustNewConstMetric(memoryMaxDesc, prometheus.GaugeValue, float64(limit))
	}
}
