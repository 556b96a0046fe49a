// Command herald is Herald's program: the server, the dispatcher and the
// operator's tools. Run `herald --help` for its commands; package cli
// builds them.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/heraldhq/herald/cmd/herald/cli"
)

func main() {
	ctx, cancel := context.WithCancelCause(context.Background())
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	go func() {
		// The first signal starts a graceful shutdown, which can take a
		// while; a second one ends the process at once, with the status a
		// shell gives a process its signal ended. Exiting rather than
		// restoring the default handling works where the signal was
		// ignored when herald started, as SIGINT is for a script's
		// background job.
		s := <-signals
		// The cause is what a command that stops part way reports
		// ("interrupt signal received"), as signal.NotifyContext words it.
		cancel(fmt.Errorf("%v signal received", s))
		s = <-signals
		os.Exit(128 + int(s.(syscall.Signal)))
	}()
	err := cli.Execute(ctx, cli.Deps{Out: os.Stdout, Err: os.Stderr, RedisLogs: cli.RouteRedisLogs, TraceLogs: cli.RouteTraceLogs}, os.Args[1:])
	cancel(nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "herald:", err)
	}
	os.Exit(cli.ExitCode(err))
}
