package cli

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/heraldhq/herald/cmd/herald/config"
	"github.com/heraldhq/herald/internal/redisconf"
	"github.com/heraldhq/herald/internal/redislog"
)

// pingTimeout bounds the PING that checks a new connection, so a wrong
// address fails the command at once instead of at its first store call.
const pingTimeout = 5 * time.Second

// embeddedTick is how often the embedded Redis's clock moves on (runClock):
// a key's time to live ends up to this much early or late, where a
// redis-server ends it to the millisecond. miniredis's ClockTTL would be
// exact, but it moves the clock at every command, and each move visits
// every key: with 300 keys besides Herald's own, a notification's life took
// twice as long, with 3,000 thirteen times.
const embeddedTick = 100 * time.Millisecond

// redisConn is the Redis a command runs on: a client of the configured
// servers, or of an embedded in-process server.
type redisConn struct {
	client redis.UniversalClient
	// embedded is the in-process server when redis.addrs is empty, and nil
	// otherwise.
	embedded *miniredis.Miniredis
	// stopClock stops the embedded server's clock.
	stopClock func()
}

// openRedis connects to the Redis cfg names: one server (standalone), a
// master found through its Sentinels (go-redis's failover client, which
// follows a failover) or a Cluster. With no address it starts an embedded
// in-process Redis (miniredis) on a loopback port, when allowEmbedded, and
// warns loudly that nothing survives exit; otherwise an empty address list
// is a *UsageError, since a command that reads or writes notifications would
// find an empty Redis of its own. The connection is checked with checkRedis.
// onConnect, when set, runs on every new connection to a configured server.
func openRedis(ctx context.Context, cfg *config.RedisConfig, log *slog.Logger, allowEmbedded bool, command string,
	onConnect func(context.Context, *redis.Conn) error,
) (*redisConn, error) {
	rc := &redisConn{}
	if len(cfg.Addrs) == 0 {
		if !allowEmbedded {
			return nil, &UsageError{Err: fmt.Errorf("redis.addrs is empty, which runs an embedded Redis inside herald serve or herald demo; "+
				"%s needs that Redis's address: set redis.addrs or HERALD_REDIS_ADDRS, such as the one herald serve printed", command)}
		}
		mr, err := miniredis.Run()
		if err != nil {
			return nil, fmt.Errorf("start the embedded Redis: %w", err)
		}
		rc.embedded = mr
		rc.stopClock = runClock(mr, embeddedTick)
		rc.client = redis.NewClient(&redis.Options{Addr: mr.Addr()})
		log.WarnContext(ctx, "herald: EMBEDDED REDIS: redis.addrs is empty, so notifications live in this process's memory and NOTHING SURVIVES EXIT; "+
			"set redis.addrs to keep them", "addr", mr.Addr(), "other_commands", "HERALD_REDIS_ADDRS="+mr.Addr())
	} else {
		rc.client = cfg.NewClient(onConnect)
	}
	pingCtx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	if err := checkRedis(pingCtx, rc.client, rc.embedded == nil); err != nil {
		rc.close()
		return nil, fmt.Errorf("redis %s (%s): %w", strings.Join(cfg.Addrs, ","), cfg.Mode, tlsHint(err, cfg.TLS))
	}
	return rc, nil
}

// tlsHint adds to err, a failure to reach Redis, what to change when it is
// how a TLS setting that does not match the server's fails: a server that
// takes TLS closes a plain connection at once (EOF), one that does not
// leaves a TLS handshake unanswered, and a certificate from a company's
// own authority is refused until this machine trusts it.
func tlsHint(err error, tlsOn bool) error {
	var unknownAuthority x509.UnknownAuthorityError
	switch {
	case errors.As(err, &unknownAuthority):
		return fmt.Errorf("%w (the server's certificate is signed by an authority this machine does not trust: "+
			"add it to the system's certificates, or point SSL_CERT_FILE at it)", err)
	case !tlsOn && errors.Is(err, io.EOF):
		return fmt.Errorf("%w (Redis closed the connection at once: if it takes TLS on that port, set redis.tls to true)", err)
	case tlsOn && errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w (no answer in time: if it does not take TLS on that port, set redis.tls to false)", err)
	}
	return err
}

// scriptProbe is the script checkRedis runs to learn whether the Redis user
// may run scripts, as every change Herald makes is one.
var scriptProbe = redis.NewScript("return 1")

// checkRedis checks, in one round trip, that Redis answers and, on a
// configured server, that Herald can work on it: a version of at least
// redisconf.VersionMin (from INFO server; one that refuses INFO is given the
// benefit of the doubt) and a user allowed EVAL and EVALSHA. A refused
// password is a *UsageError naming redis.password; a server too old is a
// *redisconf.VersionError.
func checkRedis(ctx context.Context, c redis.UniversalClient, configured bool) error {
	var ping *redis.StatusCmd
	var info *redis.StringCmd
	var eval, evalSHA *redis.Cmd
	cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		ping = p.Ping(ctx)
		if configured {
			info = p.Info(ctx, "server")
			// One connection, or one Cluster node, runs the pipeline, so the
			// EVAL has cached the script when the EVALSHA asks for it.
			eval = scriptProbe.Eval(ctx, p, nil)
			evalSHA = scriptProbe.EvalSha(ctx, p, nil)
		}
		return nil
	})
	if !slices.ContainsFunc(cmds, func(cmd redis.Cmder) bool { return cmd.Err() != nil }) && err != nil {
		// The pipeline did not run at all, and go-redis set no command's
		// error: the connection failed, or the password was refused.
		ping.SetErr(err)
	}
	if err := ping.Err(); err != nil {
		// Redis answers a password for a default user that has none
		// with "ERR AUTH <password> called without any password configured".
		if redis.IsAuthError(err) || redis.HasErrorPrefix(err, "AUTH ") {
			return &UsageError{Err: fmt.Errorf("authentication refused by Redis: check redis.username and redis.password (HERALD_REDIS_USERNAME, HERALD_REDIS_PASSWORD): %w", err)}
		}
		return err
	}
	if !configured {
		return nil
	}
	if info.Err() == nil {
		if err := redisconf.CheckVersion(redisconf.ParseVersion(info.Val())); err != nil {
			return err
		}
	}
	for _, cmd := range []*redis.Cmd{eval, evalSHA} {
		if err := cmd.Err(); redis.IsPermissionError(err) {
			return fmt.Errorf("the Redis user may not run scripts, which is how Herald changes anything; allow it @scripting: %w", err)
		}
	}
	return nil
}

// RouteRedisLogs sends go-redis's own messages to log as warnings, each
// logged at most once every 30s with how many repeats went unlogged, so
// that an outage, which the dispatcher already reports, does not fill the
// log with the same line several times a second. The setting is
// process-wide.
func RouteRedisLogs(log *slog.Logger) { redislog.Route(log) }

// runClock moves mr's clock on with the wall clock's, every tick until
// stop is called: miniredis counts a key's time to live down only when
// told that time has passed, so without it no key would ever expire, and
// a long-running herald serve would keep every dashboard sign-out, every
// minute's activity counts and every endpoint's rate slot and leases for
// as long as it runs.
func runClock(mr *miniredis.Miniredis, tick time.Duration) (stop func()) {
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		ticker := time.NewTicker(tick)
		defer ticker.Stop()
		last := time.Now()
		for {
			select {
			case <-done:
				return
			case <-ticker.C:
				now := time.Now()
				mr.FastForward(now.Sub(last))
				last = now
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
	}
}

// close closes the client, then stops the embedded server if there is one.
func (rc *redisConn) close() {
	_ = rc.client.Close()
	if rc.embedded != nil {
		rc.stopClock()
		rc.embedded.Close()
	}
}
