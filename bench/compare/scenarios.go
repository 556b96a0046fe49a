package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heraldhq/herald"
	"github.com/heraldhq/herald/notify/httpsend"
	"github.com/heraldhq/herald/notify/webhook"
)

// payloadSize is the size of every job's payload.
const payloadSize = 100

// producers is how many goroutines enqueue at once.
const producers = 8

// payload returns a 100-byte JSON payload carrying at, the time the
// producer asks the job to start at, in Unix nanoseconds: the handler
// measures lateness against it, not against what the system stored.
//
// It is built in one allocation: the producers make one per job, and in the
// batch scenario the four allocations of a Sprintf-built one took 6% of the
// process's CPU, which is the comparison's, not the systems'.
func payload(at time.Time) []byte {
	b := strconv.AppendInt(append(make([]byte, 0, payloadSize), `{"at":`...), at.UnixNano(), 10)
	b = append(b, `,"pad":"`...)
	for len(b) < payloadSize-2 {
		b = append(b, 'x')
	}
	return append(b, `"}`...)
}

// requested reads the time a payload asks for.
func requested(p []byte) time.Time {
	rest, _ := bytes.CutPrefix(p, []byte(`{"at":`))
	digits, _, _ := bytes.Cut(rest, []byte(","))
	ns, _ := strconv.ParseInt(string(digits), 10, 64)
	return time.Unix(0, ns)
}

// figures are one run's measurements by name.
type figures map[string]float64

// collector counts handled jobs and keeps their lateness.
type collector struct {
	want int64
	seen atomic.Int64
	done chan struct{}

	mu   sync.Mutex
	late []time.Duration
}

func newCollector(want int) *collector {
	return &collector{want: int64(want), done: make(chan struct{}), late: make([]time.Duration, 0, want)}
}

func (c *collector) add(late time.Duration) {
	c.mu.Lock()
	c.late = append(c.late, late)
	c.mu.Unlock()
	if c.seen.Add(1) == c.want {
		close(c.done)
	}
}

// wait waits until want jobs were handled or timeout passed, and says which.
func (c *collector) wait(timeout time.Duration) bool {
	select {
	case <-c.done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// summarize puts the lateness percentiles (ms), the early starts and the
// share delivered into f under prefix.
func (c *collector) summarize(f figures, prefix string) {
	c.mu.Lock()
	late := slices.Sorted(slices.Values(c.late))
	c.mu.Unlock()
	f[prefix+"delivered"] = float64(len(late)) / float64(c.want)
	if len(late) == 0 {
		return
	}
	at := func(p float64) float64 { return ms(late[int(p*float64(len(late)-1))]) }
	f[prefix+"p50"], f[prefix+"p99"], f[prefix+"max"] = at(0.5), at(0.99), ms(late[len(late)-1])
	early := 0
	for _, l := range late {
		if l < 0 {
			early++
		}
	}
	f[prefix+"early"] = float64(early)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// produce runs producers goroutines that call fn for every index below n,
// each index once, and returns the first error.
func produce(n, workers int, fn func(i int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				if err := fn(i); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// enqueueAll enqueues n jobs due at at(i) in batches of batch.
func enqueueAll(sub subject, n, batch, workers int, at func(i int) time.Time) error {
	ctx := context.Background()
	return produce((n+batch-1)/batch, workers, func(b int) error {
		ps, ats := make([][]byte, 0, batch), make([]time.Time, 0, batch)
		for i := b * batch; i < min((b+1)*batch, n); i++ {
			t := at(i)
			ps, ats = append(ps, payload(t)), append(ats, t)
		}
		if batch == 1 {
			return sub.enqueue(ctx, ps[0], ats[0])
		}
		return sub.enqueueBatch(ctx, ps, ats)
	})
}

// withServer runs fn on a fresh redis-server and a subject on it.
func withServer(mk newSubject, retry time.Duration, fn func(srv *server, sub subject) error) error {
	srv, err := startServer()
	if err != nil {
		return err
	}
	defer srv.stop()
	sub, err := mk(srv.Addr, retry)
	if err != nil {
		return err
	}
	defer sub.close()
	return fn(srv, sub)
}

// life enqueues n jobs due now by 8 producers making single calls, then
// starts a worker with a no-op handler and drains them; the Redis
// commands and CPU of the whole, over n, are a job's life. The process's
// own CPU over the enqueue, over n, is the client's cost of an enqueue.
func life(mk newSubject, n int, f figures) error {
	return withServer(mk, 0, func(srv *server, sub subject) error {
		before, err := srv.cost()
		if err != nil {
			return err
		}
		start, cpu := time.Now(), processCPU()
		if err := enqueueAll(sub, n, 1, producers, func(int) time.Time { return time.Time{} }); err != nil {
			return err
		}
		f["enqueue"] = float64(n) / time.Since(start).Seconds()
		f["go_enqueue_us"] = float64((processCPU() - cpu).Microseconds()) / float64(n)
		enqueued, err := srv.cost()
		if err != nil {
			return err
		}
		col := newCollector(n)
		start = time.Now()
		if err := sub.start(func(string, int, []byte) error { col.add(0); return nil }); err != nil {
			return err
		}
		ok := col.wait(2 * time.Minute)
		f["drain"] = float64(n) / time.Since(start).Seconds()
		sub.stop()
		if !ok {
			return fmt.Errorf("life: %d of %d handled in 2m", col.seen.Load(), n)
		}
		after, err := srv.cost()
		if err != nil {
			return err
		}
		d := after.sub(before)
		f["commands"] = float64(d.calls) / float64(n)
		f["cpu_us"] = float64(d.cpu.Microseconds()) / float64(n)
		e := enqueued.sub(before)
		f["cpu_enqueue_us"] = float64(e.cpu.Microseconds()) / float64(n)
		f["commands_enqueue"] = float64(e.calls) / float64(n)
		return nil
	})
}

// processCPU returns the user and system CPU this process has used. Nothing
// else of the comparison runs while a scenario enqueues, so its growth over
// the enqueue is the client's cost.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// bareEnqueue is the scale for the single-call figures: 8 producers making
// n single calls between them, each one RPUSH of the payload, the least a
// client can do per call in one round trip: no record, no index, no
// script. Its rate is the most a queue making one Redis call per enqueue
// can reach on this machine.
func bareEnqueue(n int, f figures) error {
	srv, err := startServer()
	if err != nil {
		return err
	}
	defer srv.stop()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer func() { _ = rdb.Close() }()
	ctx := context.Background()
	start := time.Now()
	if err := produce(n, producers, func(int) error { return rdb.RPush(ctx, "bare", payload(time.Time{})).Err() }); err != nil {
		return err
	}
	f["enqueue_bare"] = float64(n) / time.Since(start).Seconds()
	return nil
}

// enqueueBatched is Herald's batch enqueue: 8 producers, 100 a call.
func enqueueBatched(mk newSubject, n int, f figures) error {
	return withServer(mk, 0, func(_ *server, sub subject) error {
		start := time.Now()
		if err := enqueueAll(sub, n, 100, producers, func(int) time.Time { return time.Time{} }); err != nil {
			return err
		}
		f["enqueue_batch"] = float64(n) / time.Since(start).Seconds()
		return nil
	})
}

// delayed offers rate jobs a second falling due over window: each is
// enqueued lead before the time it asks for, by 8 producers, single calls
// at up to 1k/s and batches of 100 above (where the API has them). The
// handler measures lateness against the asked time.
func delayed(mk newSubject, rate int, window time.Duration, f figures, prefix string) error {
	return withServer(mk, 0, func(_ *server, sub subject) error {
		n := int(float64(rate) * window.Seconds())
		col := newCollector(n)
		if err := sub.start(func(_ string, _ int, p []byte) error { col.add(time.Since(requested(p))); return nil }); err != nil {
			return err
		}
		defer sub.stop()
		batch := 1
		if rate > 1000 {
			batch = 100
		}
		const lead = time.Second
		step := time.Second / time.Duration(rate)
		first := time.Now().Add(lead + 500*time.Millisecond)
		at := func(i int) time.Time { return first.Add(time.Duration(i) * step) }
		ctx := context.Background()
		err := produce((n+batch-1)/batch, producers, func(b int) error {
			time.Sleep(time.Until(at(b * batch).Add(-lead)))
			var ps [][]byte
			var ats []time.Time
			for i := b * batch; i < min((b+1)*batch, n); i++ {
				ps, ats = append(ps, payload(at(i))), append(ats, at(i))
			}
			if batch == 1 {
				return sub.enqueue(ctx, ps[0], ats[0])
			}
			return sub.enqueueBatch(ctx, ps, ats)
		})
		if err != nil {
			return err
		}
		col.wait(window + time.Minute)
		col.summarize(f, prefix)
		return nil
	})
}

// retried enqueues n jobs with two attempts: the first fails, the second,
// asked for retry after the first returned, succeeds. The lateness is the
// second attempt's start against the first's return plus retry.
func retried(mk newSubject, n int, retry time.Duration, f figures) error {
	return withServer(mk, retry, func(_ *server, sub subject) error {
		if err := enqueueAll(sub, n, 1, producers, func(int) time.Time { return time.Time{} }); err != nil {
			return err
		}
		var failed sync.Map
		col := newCollector(n)
		start := time.Now()
		err := sub.start(func(id string, attempt int, _ []byte) error {
			if attempt == 0 {
				failed.Store(id, time.Now())
				return errors.New("first attempt fails")
			}
			if t, ok := failed.Load(id); ok {
				col.add(time.Since(t.(time.Time).Add(retry)))
			}
			return nil
		})
		if err != nil {
			return err
		}
		defer sub.stop()
		col.wait(2 * time.Minute)
		f["retry_rate"] = float64(col.seen.Load()) / time.Since(start).Seconds()
		col.summarize(f, "retry_")
		return nil
	})
}

// burstLead is how long before the burst its jobs are enqueued: long
// enough on a busy machine.
const burstLead = 8 * time.Second

// burst makes n jobs due within one second, enqueued beforehand in
// batches, and watches the server's longest call meanwhile.
func burst(mk newSubject, n int, f figures) error {
	return withServer(mk, 0, func(srv *server, sub subject) error {
		if err := srv.watchSlowCalls(time.Millisecond); err != nil {
			return err
		}
		col := newCollector(n)
		if err := sub.start(func(_ string, _ int, p []byte) error { col.add(time.Since(requested(p))); return nil }); err != nil {
			return err
		}
		defer sub.stop()
		first := time.Now().Add(burstLead)
		step := time.Second / time.Duration(n)
		if err := enqueueAll(sub, n, 100, producers, func(i int) time.Time { return first.Add(time.Duration(i) * step) }); err != nil {
			return err
		}
		if time.Now().After(first) {
			return fmt.Errorf("burst: enqueueing outlasted the %s lead", burstLead)
		}
		col.wait(2 * time.Minute)
		f["burst_rate"] = float64(col.seen.Load()) / time.Since(first).Seconds()
		col.summarize(f, "burst_")
		longest, plain, err := srv.longestCalls()
		f["burst_longest"], f["burst_longest_plain"] = ms(longest), ms(plain)
		return err
	})
}

// memory schedules n jobs an hour ahead and reads how much Redis memory
// each takes beyond its payload.
func memory(mk newSubject, n int, f figures) error {
	return withServer(mk, 0, func(srv *server, sub subject) error {
		before, err := srv.cost()
		if err != nil {
			return err
		}
		at := time.Now().Add(time.Hour)
		if err := enqueueAll(sub, n, 100, 2*producers, func(int) time.Time { return at }); err != nil {
			return err
		}
		after, err := srv.cost()
		if err != nil {
			return err
		}
		f["memory"] = float64(after.memory-before.memory)/float64(n) - payloadSize
		return nil
	})
}

// receiver is a loopback HTTP server answering 200 to every request.
type receiver struct {
	url  string
	srv  *http.Server
	seen atomic.Int64
	want int64
	done chan struct{}
}

func startReceiver() (*receiver, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &receiver{url: "http://" + l.Addr().String() + "/hook"}
	r.srv = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.Copy(io.Discard, req.Body)
		w.WriteHeader(http.StatusOK)
		if r.seen.Add(1) == r.want {
			close(r.done)
		}
	})}
	go func() { _ = r.srv.Serve(l) }()
	return r, nil
}

// expect resets the count and arms done for want requests.
func (r *receiver) expect(want int) {
	r.seen.Store(0)
	r.want = int64(want)
	r.done = make(chan struct{})
}

// webhooks measures n webhooks delivered to a loopback receiver at
// concurrency 16 by Herald's worker (its webhook sender, requests signed)
// and by a plain net/http client.
func webhooks(n int, f figures) error {
	rcv, err := startReceiver()
	if err != nil {
		return err
	}
	defer func() { _ = rcv.srv.Close() }()

	// The plain client keeps as many idle connections as it has
	// goroutines, so that it does not reconnect.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = concurrency
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	defer tr.CloseIdleConnections()
	body := payload(time.Now())
	rcv.expect(n)
	start := time.Now()
	err = produce(n, concurrency, func(int) error {
		res, err := hc.Post(rcv.url, "application/json", bytes.NewReader(body))
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close()
		if res.StatusCode != http.StatusOK {
			return fmt.Errorf("plain client: status %d", res.StatusCode)
		}
		return nil
	})
	if err != nil {
		return err
	}
	f["webhook_plain"] = float64(n) / time.Since(start).Seconds()

	sender, err := webhook.New(&webhook.Config{
		Secret: "whsec_c2VjcmV0LWZvci10aGUtY29tcGFyaXNvbg==",
		Common: httpsend.Common{HTTP: httpsend.Config{AllowNetworks: []string{"127.0.0.0/8"}}},
	})
	if err != nil {
		return err
	}
	return withServer(newHerald, 0, func(srv *server, sub subject) error {
		h := sub.(*heraldSubject)
		h.target, h.senders = rcv.url, map[string]herald.Sender{herald.ChannelWebhook: sender}
		if err := enqueueAll(sub, n, 100, producers, func(int) time.Time { return time.Time{} }); err != nil {
			return err
		}
		rcv.expect(n)
		before, err := srv.cost()
		if err != nil {
			return err
		}
		start := time.Now()
		if err := sub.start(nil); err != nil {
			return err
		}
		defer sub.stop()
		select {
		case <-rcv.done:
		case <-time.After(2 * time.Minute):
			return fmt.Errorf("webhooks: %d of %d received in 2m", rcv.seen.Load(), n)
		}
		f["webhook_herald"] = float64(n) / time.Since(start).Seconds()
		after, err := srv.cost()
		if err != nil {
			return err
		}
		d := after.sub(before)
		f["webhook_cpu_us"] = float64(d.cpu.Microseconds()) / float64(n)
		f["webhook_commands"] = float64(d.calls) / float64(n)
		return nil
	})
}
