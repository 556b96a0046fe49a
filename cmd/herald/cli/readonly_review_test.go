package cli

import (
	"bufio"
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestReadOnlyCommandsSendNoWrite watches, with MONITOR, what the commands
// that open the store read-only send to Redis on a namespace in use: none
// may send a command that writes Herald's keys. (Scripts are left out:
// the dead listing's is read-only, and MONITOR cannot tell.)
func TestReadOnlyCommandsSendNoWrite(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	require.NoError(t, e.run(t, "enqueue", "--topic", "jobs", "--id", "job-1").err)
	e.dead(t, "jobs", "d1")

	ctx := context.Background()
	conn, err := net.Dial("tcp", server.Addr)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.Write([]byte("MONITOR\r\n"))
	require.NoError(t, err)
	lines := make(chan string, 100000)
	go func() {
		sc := bufio.NewScanner(conn)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	// MONITOR is on once it has echoed a command of ours.
	probe := server.Client(t)
	marker := e.namespace + ":monitor-probe"
	waitFor(t, 5*time.Second, "MONITOR on", func() bool {
		probe.Exists(ctx, marker)
		for {
			select {
			case l := <-lines:
				if strings.Contains(l, marker) {
					return true
				}
			default:
				return false
			}
		}
	})

	for _, args := range [][]string{
		{"stats"}, {"dlq", "list"}, {"endpoint", "list"}, {"pauses"}, {"status", "job-1"}, {"status", "d1"},
	} {
		r := e.run(t, args...)
		require.NoError(t, r.err, "%v: %s", args, r.logs)
	}
	end := e.namespace + ":monitor-end"
	probe.Exists(ctx, end)
	writes := map[string]bool{"SET": true, "HSET": true, "HSETNX": true, "DEL": true, "UNLINK": true, "ZADD": true, "ZREM": true,
		"HDEL": true, "HINCRBY": true, "EXPIRE": true, "PEXPIRE": true, "LPUSH": true, "RPUSH": true, "SADD": true, "SREM": true,
		"PUBLISH": true, "XADD": true}
	var written []string
	deadline := time.After(5 * time.Second)
	for done := false; !done; {
		select {
		case l := <-lines:
			if strings.Contains(l, end) {
				done = true
				break
			}
			f := strings.Fields(l)
			// +1700000000.123456 [0 127.0.0.1:5555] "CMD" "arg" ...
			if len(f) >= 4 && strings.Contains(l, e.namespace) && writes[strings.ToUpper(strings.Trim(f[3], `"`))] {
				written = append(written, l)
			}
		case <-deadline:
			t.Fatal("MONITOR never echoed the end marker")
		}
	}
	require.Empty(t, written, "writes sent by commands that only read")
}
