package api

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"

	"github.com/heraldhq/herald/notify"
)

// MemoryWarningRatio is the share of Redis's maxmemory past which /readyz
// warns that Redis is filling up: enqueues are refused once it is full.
const MemoryWarningRatio = 0.9

// RedisMemory is what Redis uses against its maxmemory, for /readyz.
type RedisMemory struct {
	// Used is what Redis counts against its maxmemory, in bytes:
	// used_memory less its replication and AOF buffers.
	Used int64
	// Max is Redis's maxmemory in bytes; 0 when it has none.
	Max int64
	// Addr is the server the figures are of, when there is a choice: on a
	// Cluster, the master closest to its maxmemory. Optional.
	Addr string
}

// memoryDetails is RedisMemory as /readyz shows it, under details.memory.
type memoryDetails struct {
	UsedBytes int64 `json:"used_bytes"`
	MaxBytes  int64 `json:"max_bytes"`
	// UsedRatio is UsedBytes/MaxBytes, absent without a maxmemory.
	UsedRatio *float64 `json:"used_ratio,omitempty"`
	Addr      string   `json:"addr,omitempty"`
	// Warning says that Redis is full or past MemoryWarningRatio of it.
	Warning string `json:"warning,omitempty"`
	// Unknown says why the figures could not be read.
	Unknown string `json:"unknown,omitempty"`
}

// readMemory reads Redis's memory with read for /readyz. A failed read is
// shown, not an error: Redis answered the readiness check.
func readMemory(ctx context.Context, read func(context.Context) (RedisMemory, error)) memoryDetails {
	m, err := read(ctx)
	if err != nil {
		return memoryDetails{Unknown: "reading INFO memory failed: " + err.Error()}
	}
	d := memoryDetails{UsedBytes: m.Used, MaxBytes: m.Max, Addr: m.Addr}
	if m.Max <= 0 {
		return d
	}
	ratio := math.Round(float64(m.Used)/float64(m.Max)*1000) / 1000
	d.UsedRatio = &ratio
	switch {
	case m.Used >= m.Max:
		d.Warning = "Redis is at maxmemory: it refuses enqueues, pauses and endpoint registrations (503) until memory is freed; " +
			"deliveries go on. To free memory, " + notify.FreeingMemory
	case ratio >= MemoryWarningRatio:
		d.Warning = fmt.Sprintf("Redis is %d%% full: at maxmemory it refuses enqueues (503), while deliveries go on; %s",
			int(ratio*100), notify.FreeingMemory)
	}
	return d
}

// withMemory returns details, a JSON object or nil, with memory added
// under "memory".
func withMemory(details any, memory memoryDetails) any {
	out := map[string]any{}
	switch d := details.(type) {
	case nil:
	case map[string]any:
		maps.Copy(out, d)
	default:
		// A struct or another map: its JSON object's fields, as they
		// would have been shown.
		raw, err := json.Marshal(d)
		if err != nil || json.Unmarshal(raw, &out) != nil {
			return details
		}
	}
	out["memory"] = memory
	return out
}
