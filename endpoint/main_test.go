package endpoint_test

import (
	"testing"

	"github.com/heraldhq/herald/internal/redistest"
)

func TestMain(m *testing.M) { redistest.VerifyMain(m) }
