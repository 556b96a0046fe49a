package bench

import (
	"fmt"
	"io"
	"time"
)

// Report is what herald bench prints, with --json as these fields; times
// in milliseconds.
type Report struct {
	Namespace     string  `json:"namespace"`
	Count         int     `json:"count"`
	Delivered     int     `json:"delivered"`
	WindowMS      float64 `json:"window_ms"`
	EnqueueMS     float64 `json:"enqueue_ms"`
	EnqueuedLate  bool    `json:"enqueued_late"`
	ElapsedMS     float64 `json:"elapsed_ms"`
	PerSecond     float64 `json:"throughput_per_second"`
	LatenessP50MS float64 `json:"lateness_p50_ms"`
	LatenessP90MS float64 `json:"lateness_p90_ms"`
	LatenessP99MS float64 `json:"lateness_p99_ms"`
	LatenessMaxMS float64 `json:"lateness_max_ms"`
	Early         int     `json:"early"`
	StoreErrors   int     `json:"store_errors"`
	Interrupted   bool    `json:"interrupted"`
}

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// NewReport returns the report of r, a run over window.
func NewReport(r *Result, window time.Duration) *Report {
	return &Report{
		Namespace: r.Namespace, Count: r.Count, Delivered: r.Delivered, WindowMS: msOf(window),
		EnqueueMS: msOf(r.Enqueue), EnqueuedLate: r.EnqueuedLate, ElapsedMS: msOf(r.Elapsed), PerSecond: r.Throughput(),
		LatenessP50MS: msOf(r.Lateness.P50), LatenessP90MS: msOf(r.Lateness.P90),
		LatenessP99MS: msOf(r.Lateness.P99), LatenessMaxMS: msOf(r.Lateness.Max),
		Early: r.Lateness.Early, StoreErrors: r.StoreErrors, Interrupted: r.Interrupted,
	}
}

// Print prints the report for a terminal.
func (b *Report) Print(out io.Writer) error {
	if b.Interrupted {
		fmt.Fprintln(out, "interrupted: the figures cover what was delivered before the signal")
	}
	if b.Count > 0 && b.EnqueueMS > 0 {
		fmt.Fprintf(out, "enqueued   %d in %.0fms (%.0f/s)\n", b.Count, b.EnqueueMS, float64(b.Count)/b.EnqueueMS*1000)
	}
	if b.EnqueuedLate {
		fmt.Fprintln(out, "           (enqueueing outlasted --lead, so the lateness includes it: raise --lead)")
	}
	fmt.Fprintf(out, "delivered  %d of %d in %.0fms from the first due time (%.0f/s)\n", b.Delivered, b.Count, b.ElapsedMS, b.PerSecond)
	_, err := fmt.Fprintf(out, "lateness   p50 %.2fms  p90 %.2fms  p99 %.2fms  max %.2fms  early %d\n",
		b.LatenessP50MS, b.LatenessP90MS, b.LatenessP99MS, b.LatenessMaxMS, b.Early)
	if b.StoreErrors > 0 {
		_, err = fmt.Fprintf(out, "store errors %d (retried)\n", b.StoreErrors)
	}
	return err
}
