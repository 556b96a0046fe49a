package schedule

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/store"
)

// healthStore is what disable_after needs of the store. A Store that does
// not implement it (a test double) disables nothing.
type healthStore interface {
	EndpointSucceeded(ctx context.Context, name string) error
	EndpointFailed(ctx context.Context, name string, disableAfter time.Duration) (bool, error)
}

var _ healthStore = (*store.Store)(nil)

// recordHealth tells the store how an attempt to an endpoint with a
// disable_after ended: a success clears its failing streak, a failure
// extends it and, past disable_after, disables the endpoint, whose
// notifications then wait parked until it is enabled.
//
// An endpoint without disable_after records no streak, but may keep one
// from while it had one: its first success ends that, once per dispatcher
// until it has a disable_after again. Otherwise an operator who turned
// disable_after off in the policies file, and on again after the endpoint
// recovered, would see it disabled at its first failure, its streak dating
// from before. Other attempts to such endpoints cost nothing.
func (d *Dispatcher) recordHealth(ctx context.Context, n *notify.Notification, sendErr error) {
	hs, ok := d.store.(healthStore)
	if n.Endpoint == "" || d.cfg.Endpoints == nil || !ok || errors.Is(sendErr, notify.ErrReleased) {
		return
	}
	e, err := d.cfg.Endpoints.Endpoint(ctx, n.Endpoint)
	if err != nil {
		return
	}
	if e.DisableAfter <= 0 {
		if sendErr != nil {
			return
		}
		if _, ended := d.streakEnded.Load(n.Endpoint); ended {
			return
		}
		if err := hs.EndpointSucceeded(context.WithoutCancel(ctx), n.Endpoint); err != nil {
			d.cfg.Observer.StoreError("health", err)
			return
		}
		d.streakEnded.Store(n.Endpoint, struct{}{})
		return
	}
	d.streakEnded.Delete(n.Endpoint)
	ctx = context.WithoutCancel(ctx)
	if sendErr == nil {
		err = hs.EndpointSucceeded(ctx, n.Endpoint)
	} else {
		// Each dispatcher logs the disabling it learns of first from a
		// failure, rather than from its read of what is paused.
		var disabled bool
		disabled, err = hs.EndpointFailed(ctx, n.Endpoint, time.Duration(e.DisableAfter))
		if disabled && d.pauses.note(store.PauseKey(store.PauseDisabled, n.Endpoint), d.store.Now()) {
			d.log.WarnContext(ctx, "schedule: endpoint disabled: every attempt failed for its disable_after; its notifications wait until it is enabled",
				slog.String("endpoint", n.Endpoint), slog.Duration("disable_after", time.Duration(e.DisableAfter)))
		}
	}
	if err != nil {
		d.cfg.Observer.StoreError("health", err)
	}
}
