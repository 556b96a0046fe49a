package store_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/heraldtest"
	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/store"
)

// TestReadOnlyStoreFollowsACountRecordedLater: a read-only store opened on
// a namespace nothing has recorded yet reads it with the count recording
// would choose (1 on a single Redis). Once a process configured with
// another count records it and enqueues, the reader must find what that
// process stored, as a reader opened afterwards does.
func TestReadOnlyStoreFollowsACountRecordedLater(t *testing.T) {
	t.Skip("defect: a read-only store keeps the count it guessed for an unrecorded namespace after another process records a different one, and misses its records")
	t.Parallel()
	ctx := context.Background()
	client := server.Client(t)
	ns := redistest.Namespace(t)
	reader, err := store.New(&store.Config{Client: client, Namespace: ns, ReadOnly: true, Logger: heraldtest.Logger(t)})
	require.NoError(t, err)
	stats, err := reader.Stats(ctx)
	require.NoError(t, err)
	require.Empty(t, stats)

	writer, err := store.New(&store.Config{Client: client, Namespace: ns, Shards: 4, Logger: heraldtest.Logger(t)})
	require.NoError(t, err)
	var ids []string
	for i := range 8 {
		id := "n" + strconv.Itoa(i)
		_, _, err := writer.Enqueue(ctx, heraldtest.Notification(t, id, time.Now()), false)
		require.NoError(t, err)
		ids = append(ids, id)
	}

	later, err := store.New(&store.Config{Client: client, Namespace: ns, ReadOnly: true, Logger: heraldtest.Logger(t)})
	require.NoError(t, err)
	for _, id := range ids {
		_, err := later.Get(ctx, id)
		require.NoError(t, err, "a reader opened after the count was recorded finds %s", id)
	}
	var missing []string
	for _, id := range ids {
		if _, err := reader.Get(ctx, id); err != nil {
			missing = append(missing, id+": "+err.Error())
		}
	}
	require.Empty(t, missing, "the reader opened before the count was recorded")
	stats, err = reader.Stats(ctx)
	require.NoError(t, err)
	require.EqualValues(t, len(ids), stats["jobs"].Scheduled, "%+v", stats["jobs"])
}
