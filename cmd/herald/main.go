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
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// The first signal starts a graceful shutdown, which can take a while;
	// the default handling restored, a second one ends the process at once.
	context.AfterFunc(ctx, stop)
	err := cli.Execute(ctx, cli.Deps{Out: os.Stdout, Err: os.Stderr, RedisLogs: cli.RouteRedisLogs}, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "herald:", err)
	}
	os.Exit(cli.ExitCode(err))
}
