// Command compare measures Herald against asynq in one process and one
// run, each on redis-servers of its own started on free loopback ports:
// enqueue, drain, delayed jobs at 1k/s and 10k/s, retries, Redis commands,
// CPU and memory per job, a burst of 100,000 jobs due in one second, and
// webhook delivery against a plain net/http client. Both go through their
// library APIs, asynq with its defaults, each worker at concurrency 16,
// payloads of 100 bytes. Lateness is measured in the handler against the
// time the producer asked for, to the nanosecond. Every scenario runs
// -reps times and the table shows medians; memory is measured once, as it
// does not vary from run to run.
//
// It is a module of its own so that Herald does not depend on asynq.
// `make bench-compare` runs it; docs/benchmarks.md shows a run.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"time"
)

func main() {
	reps := flag.Int("reps", 3, "repetitions of each scenario; the table shows medians")
	count := flag.Int("count", 20_000, "jobs enqueued and drained in the enqueue/drain scenario")
	batchCount := flag.Int("batch-count", 200_000, "jobs of Herald's batch enqueue")
	memCount := flag.Int("memory-count", 1_000_000, "jobs scheduled for the memory figure")
	burstCount := flag.Int("burst-count", 100_000, "jobs due within one second in the burst")
	hooks := flag.Int("webhooks", 10_000, "webhooks delivered by each client")
	window := flag.Duration("window", 5*time.Second, "how long the delay scenarios offer jobs")
	cpuProfile := flag.String("cpuprofile", "", "write a Go CPU profile of the whole run to this file")
	only := flag.String("only", "", "run only the scenarios whose names contain this text (e.g. \"enqueue\"); the memory figure runs only when it matches \"memory\"")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "compare:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	if err := run(os.Stdout, *only, *reps, *count, *batchCount, *memCount, *burstCount, *hooks, *window); err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

// step is one scenario run for one system.
type step struct {
	name string
	fn   func(f figures) error
}

func run(out io.Writer, only string, reps, count, batchCount, memCount, burstCount, hooks int, window time.Duration) error {
	steps := func(mk newSubject, isHerald bool) []step {
		s := []step{
			{"enqueue and drain", func(f figures) error { return life(mk, count, f) }},
			{"delay 1k/s", func(f figures) error { return delayed(mk, 1000, window, f, "late1k_") }},
			{"delay 10k/s", func(f figures) error { return delayed(mk, 10_000, window, f, "late10k_") }},
			{"retry", func(f figures) error { return retried(mk, 5000, 100*time.Millisecond, f) }},
		}
		if isHerald {
			s = append(s,
				step{"bare enqueue", func(f figures) error { return bareEnqueue(count, f) }},
				step{"batch enqueue", func(f figures) error { return enqueueBatched(mk, batchCount, f) }},
				step{"burst", func(f figures) error { return burst(mk, burstCount, f) }},
				step{"webhooks", func(f figures) error { return webhooks(hooks, f) }})
		}
		return slices.DeleteFunc(s, func(st step) bool { return !strings.Contains(st.name, only) })
	}
	systems := []struct {
		name  string
		steps []step
	}{{"asynq", steps(newAsynq, false)}, {"herald", steps(newHerald, true)}}

	runs := map[string][]figures{}
	for rep := range reps {
		for _, sys := range systems {
			f := figures{}
			for _, st := range sys.steps {
				fmt.Fprintf(os.Stderr, "rep %d/%d %s: %s\n", rep+1, reps, sys.name, st.name)
				if err := st.fn(f); err != nil {
					return fmt.Errorf("%s %s: %w", sys.name, st.name, err)
				}
			}
			runs[sys.name] = append(runs[sys.name], f)
		}
	}
	mem := map[string]figures{}
	for name, mk := range map[string]newSubject{"asynq": newAsynq, "herald": newHerald} {
		if !strings.Contains("memory", only) {
			break
		}
		fmt.Fprintf(os.Stderr, "%s: memory at %d scheduled\n", name, memCount)
		mem[name] = figures{}
		if err := memory(mk, memCount, mem[name]); err != nil {
			return fmt.Errorf("%s memory: %w", name, err)
		}
	}
	a, h := medians(runs["asynq"]), medians(runs["herald"])
	if len(mem) > 0 {
		a["memory"], h["memory"] = mem["asynq"]["memory"], mem["herald"]["memory"]
	}
	printTable(out, a, h, reps, memCount, burstCount, hooks)
	return nil
}

// medians returns each figure's median over runs.
func medians(runs []figures) figures {
	out := figures{}
	for k := range runs[0] {
		var vs []float64
		for _, r := range runs {
			vs = append(vs, r[k])
		}
		slices.Sort(vs)
		m := vs[len(vs)/2]
		if len(vs)%2 == 0 {
			m = (vs[len(vs)/2-1] + m) / 2
		}
		out[k] = m
	}
	return out
}

func printTable(out io.Writer, a, h figures, reps, memCount, burstCount, hooks int) {
	yes := func(ok bool) string {
		if ok {
			return "yes"
		}
		return "**no**"
	}
	lateness := func(f figures, p string) string {
		return fmt.Sprintf("p50 %.2f, p99 %.2f, max %.1f ms; early %.0f; delivered %.0f%%",
			f[p+"p50"], f[p+"p99"], f[p+"max"], f[p+"early"], 100*f[p+"delivered"])
	}
	// Each row is printed when its scenario ran (-only): its key is among
	// Herald's figures.
	rows := []struct {
		key   string
		cells []string
	}{
		{"enqueue", []string{"enqueue /s, 8 producers, single calls", n0(a["enqueue"]), n0(h["enqueue"]) + ratio(h["enqueue"], a["enqueue"]), ">= 2x asynq", yes(h["enqueue"] >= 2*a["enqueue"])}},
		{"go_enqueue_us", []string{"CPU per single-call enqueue: the client's (Go) + Redis's", cpuPair(a), cpuPair(h), "", ""}},
		{"enqueue_bare", []string{"for scale: enqueue /s, 8 producers, single calls of one bare RPUSH each (no record, no script)", "", "bare RPUSH: " + n0(h["enqueue_bare"]) + ratio(h["enqueue_bare"], a["enqueue"]), "", ""}},
		{"enqueue_batch", []string{"enqueue /s, 8 producers, batches of 100", "", n0(h["enqueue_batch"]), ">= 150,000", yes(h["enqueue_batch"] >= 150_000)}},
		{"drain", []string{"drain /s, no-op handler, concurrency 16", n0(a["drain"]), n0(h["drain"]) + ratio(h["drain"], a["drain"]), ">= 3x asynq", yes(h["drain"] >= 3*a["drain"])}},
		{"cpu_us", []string{"Redis CPU per job life (enqueue + one attempt; the enqueue's share)", fmt.Sprintf("%.1f us (%.1f)", a["cpu_us"], a["cpu_enqueue_us"]), fmt.Sprintf("%.1f us (%.1f)", h["cpu_us"], h["cpu_enqueue_us"]) + ratio(h["cpu_us"], a["cpu_us"]), "<= 1/3 asynq", yes(h["cpu_us"] <= a["cpu_us"]/3)}},
		{"commands", []string{"Redis commands per job life, incl. inside scripts (the enqueue's share)", fmt.Sprintf("%.1f (%.1f)", a["commands"], a["commands_enqueue"]), fmt.Sprintf("%.1f (%.1f)", h["commands"], h["commands_enqueue"]), "<= 8", yes(h["commands"] <= 8)}},
		{"late1k_delivered", []string{"lateness at 1k/s for 5 s, single calls", lateness(a, "late1k_"), lateness(h, "late1k_"), "p99 <= 5 ms, 0 early", yes(h["late1k_p99"] <= 5 && h["late1k_early"] == 0 && h["late1k_delivered"] == 1)}},
		{"late10k_delivered", []string{"lateness at 10k/s for 5 s, batches of 100 (asynq: single calls)", lateness(a, "late10k_"), lateness(h, "late10k_"), "p99 <= 50 ms, 0 early", yes(h["late10k_p99"] <= 50 && h["late10k_early"] == 0 && h["late10k_delivered"] == 1)}},
		{"retry_delivered", []string{"retry 100 ms after a failed first attempt, lateness", lateness(a, "retry_"), lateness(h, "retry_"), "0 early", yes(h["retry_early"] == 0 && h["retry_delivered"] == 1)}},
		{"memory", []string{fmt.Sprintf("memory per scheduled job beyond its payload, %s scheduled", n0(float64(memCount))), fmt.Sprintf("%.0f B", a["memory"]), fmt.Sprintf("%.0f B", h["memory"]), "<= 400 B", yes(h["memory"] <= 400)}},
		{"burst_delivered", []string{fmt.Sprintf("%s jobs due within one second", n0(float64(burstCount))), "", lateness(h, "burst_") + fmt.Sprintf("; longest Redis call %s (longest plain command, no script: %s)", longest(h["burst_longest"]), longest(h["burst_longest_plain"])), "all, 0 early, longest call < 5 ms", yes(h["burst_delivered"] == 1 && h["burst_early"] == 0 && h["burst_longest"] < 5)}},
		{"webhook_herald", []string{fmt.Sprintf("webhooks /s to a loopback receiver, %s at concurrency 16", n0(float64(hooks))), fmt.Sprintf("plain net/http: %s", n0(h["webhook_plain"])), n0(h["webhook_herald"]) + fmt.Sprintf(" (%.0f%% of plain; Redis %.1f us and %.1f commands a webhook)", 100*h["webhook_herald"]/h["webhook_plain"], h["webhook_cpu_us"], h["webhook_commands"]), ">= 70% of plain", yes(h["webhook_herald"] >= 0.7*h["webhook_plain"])}},
	}
	fmt.Fprintf(out, "Medians of %d runs (memory: one run), asynq and Herald side by side in one process; lateness measured in the handler against the time asked for.\n\n", reps)
	fmt.Fprintln(out, "| | asynq | Herald | goal | met |")
	fmt.Fprintln(out, "|---|---|---|---|---|")
	for _, r := range rows {
		if _, ran := h[r.key]; ran {
			fmt.Fprintf(out, "| %s |\n", strings.Join(r.cells, " | "))
		}
	}
}

// cpuPair formats a system's CPU per single-call enqueue, in its client and
// in Redis.
func cpuPair(f figures) string {
	return fmt.Sprintf("%.1f + %.1f = %.1f us", f["go_enqueue_us"], f["cpu_enqueue_us"], f["go_enqueue_us"]+f["cpu_enqueue_us"])
}

// n0 formats v as a whole number with thousands separators.
func n0(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func ratio(h, a float64) string {
	if a == 0 {
		return ""
	}
	return fmt.Sprintf(" (%.2fx)", h/a)
}

func longest(v float64) string {
	if v == 0 {
		return "< 1 ms"
	}
	return fmt.Sprintf("%.1f ms", v)
}
