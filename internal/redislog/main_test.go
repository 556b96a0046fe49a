package redislog

import (
	"testing"

	"github.com/heraldhq/herald/internal/redistest"
)

func TestMain(m *testing.M) { redistest.VerifyMain(m) }
