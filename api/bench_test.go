package api_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/heraldhq/herald/api"
)

// BenchmarkEnqueue measures enqueues through the HTTP API over loopback,
// against a real redis-server: one notification per request, and batches.
// Each sub-benchmark starts on a fresh namespace, outside the timer.
func BenchmarkEnqueue(b *testing.B) {
	benchmarks := []struct {
		name  string
		path  string
		batch int // notifications per request; 0 for a single enqueue
	}{
		{name: "Single", path: "/v1/notifications"},
		{name: "Batch100", path: "/v1/notifications/batch", batch: 100},
		{name: "Batch1000", path: "/v1/notifications/batch", batch: 1000},
	}
	item := map[string]any{"topic": "orders", "payload": map[string]any{"order": 12345, "status": "paid", "amount": "99.00"}}
	for _, bm := range benchmarks {
		b.Run(bm.name, func(b *testing.B) {
			tb := setup(b, api.Config{})
			var body []byte
			perRequest, want := 1, http.StatusCreated
			if bm.batch > 0 {
				items := make([]any, bm.batch)
				for i := range items {
					items[i] = item
				}
				body, _ = json.Marshal(map[string]any{"notifications": items})
				perRequest, want = bm.batch, http.StatusOK
			} else {
				body, _ = json.Marshal(item)
			}
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
			b.Cleanup(client.CloseIdleConnections)
			url := tb.http.URL + bm.path
			b.ReportAllocs()
			// Requests mostly wait on the network and Redis: 8 clients per
			// core keep both busy.
			b.SetParallelism(8)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := client.Post(url, "application/json", bytes.NewReader(body))
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					if resp.StatusCode != want {
						b.Errorf("status %d, want %d", resp.StatusCode, want)
						return
					}
				}
			})
			secs := b.Elapsed().Seconds()
			b.ReportMetric(float64(b.N)/secs, "requests/s")
			b.ReportMetric(float64(b.N*perRequest)/secs, "notifications/s")
		})
	}
}
