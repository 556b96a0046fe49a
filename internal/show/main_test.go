package show

import (
	"testing"

	"github.com/heraldhq/herald/internal/redistest"
)

func TestMain(m *testing.M) { redistest.VerifyMain(m) }
