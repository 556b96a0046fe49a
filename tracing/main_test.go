package tracing_test

import (
	"testing"

	"github.com/heraldhq/herald/internal/redistest"
)

// server is the Redis the package's tests share; each test has its own
// namespace.
var server *redistest.Server

func TestMain(m *testing.M) { redistest.RunMain(m, &server) }
