package webhook

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"testing"

	"github.com/heraldhq/herald/notify/httpsend"
	"github.com/heraldhq/herald/notify/httpsend/httpsendtest"
)

// BenchmarkSend measures signed sends to a local receiver, and reports the
// connections the receiver saw: with keep-alive reuse they stay at the
// number of concurrent senders however many requests are made.
func BenchmarkSend(b *testing.B) {
	for _, bench := range []struct {
		name string
		// parallelism multiplies GOMAXPROCS into the number of concurrent
		// senders; 0 sends from one goroutine.
		parallelism int
	}{
		{name: "Serial"},
		{name: "Concurrent32PerCPU", parallelism: 32},
	} {
		b.Run(bench.name, func(b *testing.B) {
			rec := httpsendtest.NewReceiver(b, "tcp4", httpsendtest.Answer(200, "success"))
			sender := newSender(b, Config{Common: httpsend.Common{HTTP: loopback}})
			n := notification(rec.URL() + "/hook")
			b.ReportAllocs()
			b.ResetTimer()
			if bench.parallelism == 0 {
				for b.Loop() {
					if _, err := sender.Send(context.Background(), n); err != nil {
						b.Fatal(err)
					}
				}
			} else {
				b.SetParallelism(bench.parallelism)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if _, err := sender.Send(context.Background(), n); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "sends/s")
			b.ReportMetric(float64(rec.Conns()), "conns")
		})
	}
}

// BenchmarkPlainPost is what BenchmarkSend/Serial costs without Herald: a
// plain net/http POST of the same body to the same receiver, the yardstick
// of what signing, headers and the HTTP library add per send.
func BenchmarkPlainPost(b *testing.B) {
	rec := httpsendtest.NewReceiver(b, "tcp4", httpsendtest.Answer(200, "success"))
	n := notification(rec.URL() + "/hook")
	hc := &http.Client{}
	b.ReportAllocs()
	for b.Loop() {
		res, err := hc.Post(n.Target, "application/json", bytes.NewReader(n.Payload))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close()
	}
}
