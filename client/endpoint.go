package client

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/heraldhq/herald/endpoint"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/store"
)

// fileEndpoints returns the endpoints of the policies file in force.
func (c *Client) fileEndpoints() map[string]endpoint.Endpoint { return c.cfg.PoliciesFunc().Endpoints }

// PutEndpoint registers e under name, or replaces the endpoint registered
// under it, and returns what the API shows of it; created reports a new
// name. A bad name or field is a *notify.FieldError ("name",
// "secrets[0].value", never holding a secret); a name the policies file
// defines is endpoint.ErrInFile, since the file would win.
func (c *Client) PutEndpoint(ctx context.Context, name string, e *endpoint.Endpoint) (v endpoint.View, created bool, err error) {
	if !endpoint.ValidName(name) {
		return v, false, notify.Errorf("name", "must match [A-Za-z0-9._:-]{1,128}")
	}
	if err := e.Validate(); err != nil {
		return v, false, err
	}
	if _, ok := c.fileEndpoints()[name]; ok {
		return v, false, fmt.Errorf("%q: %w", name, endpoint.ErrInFile)
	}
	if created, err = c.store.PutEndpoint(ctx, name, e); err != nil {
		c.storeError("put_endpoint", err)
		return v, false, err
	}
	return e.View(name, endpoint.SourceAPI, c.store.Now()), created, nil
}

// GetEndpoint returns what the API shows of the endpoint in force under
// name: the policies file's, or else the one registered over the API; or
// endpoint.ErrNotFound.
func (c *Client) GetEndpoint(ctx context.Context, name string) (v endpoint.View, err error) {
	if e, ok := c.fileEndpoints()[name]; ok {
		v = e.View(name, endpoint.SourceFile, c.store.Now())
	} else {
		e, err := c.store.Endpoint(ctx, name)
		if err != nil {
			c.storeError("get_endpoint", err)
			return v, err
		}
		v = e.View(name, endpoint.SourceAPI, c.store.Now())
	}
	paused, err := c.store.Paused(ctx)
	if err != nil {
		c.storeError("paused", err)
		return v, err
	}
	markPaused(&v, paused)
	h, err := c.store.EndpointHealth(ctx, name)
	if err != nil {
		c.storeError("get_endpoint", err)
		return v, err
	}
	v.DisabledAt, v.FailingSince = h.DisabledAt, h.FailingSince
	return v, nil
}

// markPaused sets what paused (store.Paused) says of v.
func markPaused(v *endpoint.View, paused map[string]time.Time) {
	_, v.Paused = paused[store.PauseKey(store.PauseEndpoint, v.Name)]
	_, v.Disabled = paused[store.PauseKey(store.PauseDisabled, v.Name)]
}

// EnableEndpoint enables an endpoint that its disable_after disabled: the
// notifications that waited start at once; resumed counts them. Enabling
// an enabled endpoint changes nothing.
func (c *Client) EnableEndpoint(ctx context.Context, name string) (resumed int, err error) {
	if err := c.checkResumable(ctx, store.PauseEndpoint, store.PauseDisabled, name); err != nil {
		return 0, err
	}
	if resumed, err = c.store.EnableEndpoint(ctx, name); err != nil {
		c.storeError("enable_endpoint", err)
	}
	return resumed, err
}

// endPauses ends the pause and the disabling of the endpoint name, where
// there are any: resuming costs a round trip per shard.
func (c *Client) endPauses(ctx context.Context, name string) error {
	paused, err := c.store.Paused(ctx)
	if err != nil {
		return err
	}
	if _, ok := paused[store.PauseKey(store.PauseEndpoint, name)]; ok {
		if _, err := c.store.Resume(ctx, store.PauseEndpoint, name); err != nil {
			return err
		}
	}
	if _, ok := paused[store.PauseKey(store.PauseDisabled, name)]; ok {
		if _, err := c.store.EnableEndpoint(ctx, name); err != nil {
			return err
		}
	}
	return nil
}

// ListEndpoints returns every endpoint in name order: the policies file's,
// and those registered over the API, marked Shadowed where the file defines
// the same name; each with its health, as GetEndpoint.
func (c *Client) ListEndpoints(ctx context.Context) ([]endpoint.View, error) {
	stored, err := c.store.Endpoints(ctx)
	if err != nil {
		c.storeError("list_endpoints", err)
		return nil, err
	}
	paused, err := c.store.Paused(ctx)
	if err != nil {
		c.storeError("paused", err)
		return nil, err
	}
	file := c.fileEndpoints()
	now := c.store.Now()
	out := []endpoint.View{}
	for _, name := range slices.Sorted(maps.Keys(file)) {
		e := file[name]
		out = append(out, e.View(name, endpoint.SourceFile, now))
	}
	for name, e := range stored {
		v := e.View(name, endpoint.SourceAPI, now)
		_, v.Shadowed = file[name]
		out = append(out, v)
	}
	// Only an endpoint with a disable_after keeps a health record, and one
	// disabled before its disable_after was removed still has one.
	var kept []*endpoint.View
	var names []string
	for i := range out {
		v := &out[i]
		markPaused(v, paused)
		if v.DisableAfter > 0 || v.Disabled {
			kept, names = append(kept, v), append(names, v.Name)
		}
	}
	health, err := c.store.EndpointsHealth(ctx, names)
	if err != nil {
		c.storeError("list_endpoints", err)
		return nil, err
	}
	for i, v := range kept {
		v.DisabledAt, v.FailingSince = health[i].DisabledAt, health[i].FailingSince
	}
	slices.SortStableFunc(out, func(a, b endpoint.View) int {
		if a.Name != b.Name {
			return strings.Compare(a.Name, b.Name)
		}
		return strings.Compare(b.Source, a.Source) // the file's, in force, first
	})
	return out, nil
}

// DeleteEndpoint removes the endpoint registered over the API under name:
// endpoint.ErrNotFound when there is none, endpoint.ErrInFile when only the
// policies file defines it. Unless the policies file defines the name too,
// a pause or disabling of the endpoint ends with it: the notifications
// parked behind them come due, and fail permanently at their next attempt
// for want of the endpoint, instead of waiting for one no one can resume.
func (c *Client) DeleteEndpoint(ctx context.Context, name string) error {
	err := c.store.DeleteEndpoint(ctx, name)
	_, inFile := c.fileEndpoints()[name]
	if errors.Is(err, endpoint.ErrNotFound) && inFile {
		return fmt.Errorf("%q: %w", name, endpoint.ErrInFile)
	}
	if err == nil && !inFile {
		err = c.endPauses(ctx, name)
	}
	if err != nil && !errors.Is(err, endpoint.ErrNotFound) {
		c.storeError("delete_endpoint", err)
	}
	return err
}
