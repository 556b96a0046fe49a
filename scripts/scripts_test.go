// Package scripts holds the tests of the shell scripts make runs before the
// tests: what a machine without redis-server or a C compiler is told, and
// what gets installed. Each test runs a script with a PATH of its own,
// holding bash, a few tools and fakes of redis-server, gcc, apt-get, sudo
// and id, so that nothing is installed and the machine's own tools are
// never seen.
package scripts

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

type testBundle struct {
	// bin is the scripts' whole PATH.
	bin string
	// stash holds what the fake apt-get installs into bin.
	stash string
}

func setup(t *testing.T, uid string) *testBundle {
	t.Helper()
	b := &testBundle{bin: t.TempDir(), stash: t.TempDir()}
	// /usr/bin/env finds bash on PATH; apt-install runs env, the fakes mv.
	for _, tool := range []string{"bash", "dirname", "env", "mv"} {
		path, err := exec.LookPath(tool)
		require.NoError(t, err)
		require.NoError(t, os.Symlink(path, filepath.Join(b.bin, tool)))
	}
	b.fake(t, b.bin, "id", "echo "+uid)
	return b
}

// fake writes an executable shell script named name into dir.
func (b *testBundle) fake(t *testing.T, dir, name, body string) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755))
}

// redisServer is a fake redis-server that prints version as the real one
// does.
func redisServer(version string) string {
	return `echo "Redis server v=` + version + ` sha=00000000:0 malloc=jemalloc-5.3.0 bits=64 build=ae4d7c971a948f0"`
}

// aptGet fakes apt-get: update succeeds, and install puts a fake program
// with body on PATH, as installing its package would.
func (b *testBundle) aptGet(t *testing.T, program, body string) {
	t.Helper()
	b.fake(t, b.stash, program, body)
	b.fake(t, b.bin, "apt-get", `case "$1" in update) exit 0;; esac
mv "`+filepath.Join(b.stash, program)+`" "`+b.bin+`"/`)
}

// run runs script with the bundle's PATH and env, and returns its exit
// status and what it printed on stderr.
func (b *testBundle) run(t *testing.T, script string, env ...string) (int, string) {
	t.Helper()
	cmd := exec.Command("./" + script)
	cmd.Env = append([]string{"PATH=" + b.bin, "HOME=" + os.Getenv("HOME")}, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	require.Empty(t, stdout.String(), "the scripts speak on stderr only, as make's other output goes to stdout")
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), stderr.String()
	}
	require.NoError(t, err)
	return 0, stderr.String()
}

func TestEnsureRedis(t *testing.T) {
	t.Parallel()

	howTo := "Install Redis 6.2 or newer so that `redis-server` is on PATH, then run make again:\n" +
		"  Debian 12+, Ubuntu 24.04+: sudo apt-get install redis-server\n" +
		"  older Debian and Ubuntu:   Redis's own apt repository, https://packages.redis.io\n"

	t.Run("Present", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "1000")
		b.fake(t, b.bin, "redis-server", redisServer("7.0.15"))
		code, stderr := b.run(t, "ensure-redis")
		require.Equal(t, 0, code, stderr)
		require.Empty(t, stderr)
	})

	t.Run("TooOld", func(t *testing.T) {
		t.Parallel()
		// Ubuntu 22.04's and Debian 11's apt-get install Redis 6.0.
		b := setup(t, "1000")
		b.fake(t, b.bin, "redis-server", redisServer("6.0.16"))
		code, stderr := b.run(t, "ensure-redis")
		require.Equal(t, 1, code)
		require.Contains(t, stderr, "error: "+filepath.Join(b.bin, "redis-server")+" is Redis 6.0.16, and Herald needs 6.2 or newer.\n"+howTo)
	})

	t.Run("MissingWithoutAptGet", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "0")
		code, stderr := b.run(t, "ensure-redis")
		require.Equal(t, 1, code)
		require.Equal(t, "redis-server is missing, and there is no apt-get here to install it with.\n"+
			"error: redis-server is not installed, and make could not install it.\n"+howTo+
			"  macOS:                     brew install redis\n", stderr)
	})

	t.Run("MissingNotRoot", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "1000")
		b.fake(t, b.bin, "apt-get", `echo "apt-get ran" >&2; exit 100`)
		b.fake(t, b.bin, "sudo", `echo "sudo: a password is required" >&2; exit 1`)
		code, stderr := b.run(t, "ensure-redis")
		require.Equal(t, 1, code)
		require.NotContains(t, stderr, "apt-get ran")
		require.NotContains(t, stderr, "installing redis-server")
		require.Contains(t, stderr, "redis-server is missing, and installing it with apt-get needs root (or sudo without a password).\n"+
			"error: redis-server is not installed, and make could not install it.\n"+howTo)
	})

	t.Run("AptGetFails", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "0")
		b.fake(t, b.bin, "apt-get", `echo "E: Could not resolve 'deb.debian.org'" >&2; exit 100`)
		code, stderr := b.run(t, "ensure-redis")
		require.Equal(t, 1, code)
		require.Equal(t, "redis-server is missing: installing redis-server with apt-get...\n"+
			"E: Could not resolve 'deb.debian.org'\n"+
			"apt-get could not install redis-server (its messages are above).\n"+
			"error: redis-server is not installed, and make could not install it.\n"+howTo+
			"  macOS:                     brew install redis\n", stderr)
	})

	t.Run("Installed", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "0")
		b.aptGet(t, "redis-server", redisServer("7.0.15"))
		code, stderr := b.run(t, "ensure-redis")
		require.Equal(t, 0, code, stderr)
		require.Equal(t, "redis-server is missing: installing redis-server with apt-get...\n"+
			"note: the redis-server package also runs Redis as a service on 127.0.0.1:6379, which the tests do not use; "+
			"sudo systemctl disable --now redis-server stops it.\n", stderr)
		require.FileExists(t, filepath.Join(b.bin, "redis-server"))
	})

	t.Run("InstalledWithSudo", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "1000")
		b.aptGet(t, "redis-server", redisServer("7.2.4"))
		b.fake(t, b.bin, "sudo", `[ "$1" = -n ] || { echo "sudo would prompt" >&2; exit 1; }; shift; "$@"`)
		code, stderr := b.run(t, "ensure-redis")
		require.Equal(t, 0, code, stderr)
		require.Contains(t, stderr, "installing redis-server with apt-get...")
		require.FileExists(t, filepath.Join(b.bin, "redis-server"))
	})

	t.Run("InstalledTooOld", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "0")
		b.aptGet(t, "redis-server", redisServer("6.0.16"))
		code, stderr := b.run(t, "ensure-redis")
		require.Equal(t, 1, code)
		require.Contains(t, stderr, "is Redis 6.0.16, and Herald needs 6.2 or newer.\n"+howTo)
	})
}

func TestEnsureCgo(t *testing.T) {
	t.Parallel()

	// The real go, which decides by itself whether cgo is on: it is when
	// CGO_ENABLED is unset and the C compiler is on PATH.
	goBin, err := exec.LookPath("go")
	require.NoError(t, err)
	setupGo := func(t *testing.T, uid string) *testBundle {
		t.Helper()
		b := setup(t, uid)
		require.NoError(t, os.Symlink(goBin, filepath.Join(b.bin, "go")))
		return b
	}
	env := []string{"CC=", "CGO_ENABLED=", "GOFLAGS=", "GOENV=off", "GOCACHE=" + t.TempDir()}

	t.Run("Present", func(t *testing.T) {
		t.Parallel()
		b := setupGo(t, "1000")
		b.fake(t, b.bin, "gcc", "exit 0")
		code, stderr := b.run(t, "ensure-cgo", env...)
		require.Equal(t, 0, code, stderr)
		require.Empty(t, stderr)
	})

	t.Run("MissingWithoutAptGet", func(t *testing.T) {
		t.Parallel()
		b := setupGo(t, "0")
		code, stderr := b.run(t, "ensure-cgo", env...)
		require.Equal(t, 1, code)
		require.Equal(t, "a C compiler (gcc, for go test -race) is missing, and there is no apt-get here to install it with.\n"+
			"error: go test -race needs cgo, and cgo a C compiler, which make could not install.\n"+
			"Install one, then run make again:\n"+
			"  Debian/Ubuntu: sudo apt-get install gcc\n"+
			"  macOS:         xcode-select --install\n", stderr)
	})

	t.Run("Installed", func(t *testing.T) {
		t.Parallel()
		b := setupGo(t, "0")
		b.aptGet(t, "gcc", "exit 0")
		code, stderr := b.run(t, "ensure-cgo", env...)
		require.Equal(t, 0, code, stderr)
		require.Equal(t, "a C compiler (gcc, for go test -race) is missing: installing gcc libc6-dev with apt-get...\n", stderr)
	})

	t.Run("CgoTurnedOff", func(t *testing.T) {
		t.Parallel()
		b := setupGo(t, "0")
		b.fake(t, b.bin, "gcc", "exit 0")
		code, stderr := b.run(t, "ensure-cgo", append(env, "CGO_ENABLED=0")...)
		require.Equal(t, 1, code)
		require.Contains(t, stderr, "CGO_ENABLED is 0 here")
	})
}
