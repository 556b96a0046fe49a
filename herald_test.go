package herald_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald"
	"github.com/heraldhq/herald/internal/redistest"
)

var server *redistest.Server

func TestMain(m *testing.M) { redistest.RunMain(m, &server) }

func TestEnqueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: server.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	set, err := herald.NewPolicies(nil, map[string]herald.Topic{"texts": {Channel: herald.ChannelSMS}})
	require.NoError(t, err)
	c, err := herald.NewClient(rdb, &herald.ClientConfig{Namespace: redistest.Namespace(t), Policies: set})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })

	t.Run("ChannelFromTarget", func(t *testing.T) {
		for _, tc := range []struct {
			name, topic, target, want string
		}{
			{"NoTargetIsPull", "jobs", "", herald.ChannelPull},
			{"URLIsWebhook", "hooks", "https://merchant.example/notify", herald.ChannelWebhook},
			{"PhoneIsSMS", "reminders", "+14155550100", herald.ChannelSMS},
			{"TopicDecides", "texts", "+14155550100", herald.ChannelSMS},
		} {
			res, err := c.Enqueue(ctx, tc.topic, nil, herald.Target(tc.target))
			require.NoError(t, err, tc.name)
			require.Equal(t, tc.want, res.Notification.Channel, tc.name)
		}
	})

	t.Run("Idempotent", func(t *testing.T) {
		at := time.Now().Add(time.Hour)
		first, err := c.Enqueue(ctx, "jobs", map[string]int{"n": 1}, herald.ID("same"), herald.SendAt(at))
		require.NoError(t, err)
		require.Equal(t, herald.Created, first.Status)
		again, err := c.Enqueue(ctx, "jobs", map[string]int{"n": 1}, herald.ID("same"), herald.SendAt(at))
		require.NoError(t, err)
		require.Equal(t, herald.Existing, again.Status)
		_, err = c.Enqueue(ctx, "jobs", map[string]int{"n": 2}, herald.ID("same"), herald.SendAt(at))
		require.ErrorIs(t, err, herald.ErrConflict)
		replaced, err := c.Enqueue(ctx, "jobs", map[string]int{"n": 2}, herald.ID("same"), herald.SendAt(at), herald.Replace())
		require.NoError(t, err)
		require.Equal(t, herald.Replaced, replaced.Status)
		require.JSONEq(t, `{"n":2}`, string(replaced.Notification.Payload))
	})

	t.Run("BadFieldIsNamed", func(t *testing.T) {
		_, err := c.Enqueue(ctx, "jobs", nil, herald.ID("bad id"))
		var fe *herald.FieldError
		require.ErrorAs(t, err, &fe)
		require.Equal(t, "id", fe.Field)
		_, err = c.Enqueue(ctx, "jobs", func() {})
		require.ErrorAs(t, err, &fe)
		require.Equal(t, "payload", fe.Field)
	})

	t.Run("Cancel", func(t *testing.T) {
		_, err := c.Enqueue(ctx, "jobs", nil, herald.ID("to-cancel"), herald.Delay(time.Hour))
		require.NoError(t, err)
		n, err := c.Cancel(ctx, "to-cancel")
		require.NoError(t, err)
		require.Equal(t, herald.StateCancelled, n.State)
		_, err = c.Get(ctx, "unknown")
		require.ErrorIs(t, err, herald.ErrNotFound)
	})
}
