package asynqimport

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hibiken/asynq"

	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/store"
)

// importer is one run of Run.
type importer struct {
	cfg  *Config
	insp *asynq.Inspector
	sum  *Summary
	// total is what the chosen states held at the start; done is how many
	// tasks have been handled, for ProgressFunc.
	total, done int
}

// state imports the tasks of one state, of which the queue held count at
// the start. It reads the pages from the last to the first: deleting a
// page's tasks (Move) then shifts only tasks already handled, so none is
// passed over.
func (im *importer) state(ctx context.Context, st State, count int) error {
	list := map[State]func(string, ...asynq.ListOption) ([]*asynq.TaskInfo, error){
		StateScheduled: im.insp.ListScheduledTasks,
		StateRetry:     im.insp.ListRetryTasks,
		StatePending:   im.insp.ListPendingTasks,
		StateArchived:  im.insp.ListArchivedTasks,
	}[st]
	size := im.cfg.PageSize
	for page := (count + size - 1) / size; page >= 1; page-- {
		if err := ctx.Err(); err != nil {
			return err
		}
		tasks, err := list(im.cfg.Queue, asynq.PageSize(size), asynq.Page(page))
		if err != nil {
			return fmt.Errorf("asynq: list %s tasks of %s: %w", st, im.cfg.Queue, err)
		}
		if err := im.page(ctx, st, tasks); err != nil {
			return err
		}
		im.done += len(tasks)
		if im.cfg.ProgressFunc != nil {
			im.cfg.ProgressFunc(min(im.done, im.total), max(im.done, im.total))
		}
	}
	return nil
}

// page stores one page of tasks in one batch, then, with Move, deletes from
// asynq those Herald holds. The tasks of a batch Herald's store fails to
// take are not counted, so that the Summary's sum holds after an error.
func (im *importer) page(ctx context.Context, st State, tasks []*asynq.TaskInfo) error {
	reqs := make([]store.EnqueueRequest, 0, len(tasks))
	for _, t := range tasks {
		req, err := im.request(t, st)
		if err != nil {
			im.sum.Matched++
			im.sum.skip(err.Error(), t.ID)
			continue
		}
		reqs = append(reqs, req)
	}
	if len(reqs) == 0 {
		return nil
	}
	held, err := im.store(ctx, st, reqs)
	if err != nil {
		return err
	}
	im.sum.Matched += len(reqs)
	if !im.cfg.Move || im.cfg.DryRun {
		return nil
	}
	for _, id := range held {
		switch err := im.insp.DeleteTask(im.cfg.Queue, id); {
		case err == nil:
			im.sum.Deleted++
		case errors.Is(err, asynq.ErrTaskNotFound):
			im.sum.NotDeleted = add(im.sum.NotDeleted, "gone from asynq before it could be deleted", id)
		default:
			im.sum.NotDeleted = add(im.sum.NotDeleted, err.Error(), id)
		}
	}
	return nil
}

// errConflict is the skip of a task whose id Herald holds with other
// content.
const errConflict = "Herald already holds a different notification with this id"

// store stores reqs, the tasks of one page read in state st (with DryRun,
// only looks them up), and returns the ids Herald holds: imported (with
// DryRun, would be) or already present. It counts nothing when it fails.
func (im *importer) store(ctx context.Context, st State, reqs []store.EnqueueRequest) (held []string, err error) {
	results := make([]store.EnqueueResult, len(reqs))
	if im.cfg.DryRun {
		ids := make([]string, len(reqs))
		for i, req := range reqs {
			ids[i] = req.Notification.ID
		}
		got, err := im.cfg.Store.GetStates(ctx, ids)
		if err != nil {
			return nil, fmt.Errorf("herald: look up: %w", err)
		}
		for i, n := range got {
			switch r := &results[i]; {
			case n == nil:
				r.Status = store.Created
			case store.SameNotification(n, reqs[i].Notification):
				r.Status, r.Notification = store.Existing, n
			default:
				r.Err = notify.ErrConflict
			}
		}
	} else if results, err = im.cfg.Store.EnqueueBatch(ctx, reqs); err != nil {
		return nil, fmt.Errorf("herald: store: %w", err)
	}
	for i, r := range results {
		id := reqs[i].Notification.ID
		switch {
		case r.Err == nil && r.Status == store.Existing:
			// The content's digest leaves out whether the task was
			// dead: one archived or brought back in asynq since it was
			// imported would be deleted there and left as it was here.
			if changed := deadChanged(st, r.Notification.State); changed != "" {
				im.sum.skip(changed, id)
				continue
			}
			im.sum.Present++
		case r.Err == nil:
			im.sum.Imported++
		case errors.Is(r.Err, notify.ErrConflict):
			im.sum.skip(errConflict, id)
			continue
		default:
			im.sum.skip(r.Err.Error(), id)
			continue
		}
		held = append(held, id)
	}
	return held, nil
}

// deadChanged is the skip of a task read in state st that Herald holds,
// with the same content, in state held: when Herald's record is dead and
// the task not archived, or the other way round. "" when they agree.
func deadChanged(st State, held notify.State) string {
	if (st == StateArchived) == (held == notify.StateDead) {
		return ""
	}
	return fmt.Sprintf("%s in asynq but %s in Herald (changed since it was imported)", st, held)
}

// request makes the enqueue of task t, read in state st (see the package
// doc); an error is the reason to skip it.
func (im *importer) request(t *asynq.TaskInfo, st State) (store.EnqueueRequest, error) {
	m, ok := im.cfg.Map[t.Type]
	if !ok {
		return store.EnqueueRequest{}, fmt.Errorf("type %q is not mapped to a topic", t.Type)
	}
	payload, encoded := toJSON(t.Payload)
	if len(payload) > im.cfg.MaxPayload {
		// Said here rather than by the store, whose message holds each
		// payload's size, so that these skips share one reason.
		return store.EnqueueRequest{}, fmt.Errorf("payload is larger than %d bytes", im.cfg.MaxPayload)
	}
	req := &notify.Request{ID: t.ID, Topic: m.Topic, Policy: m.Policy, Payload: payload}
	now := im.cfg.Store.Now()
	out := store.EnqueueRequest{Attempts: t.Retried}
	switch st {
	case StateScheduled, StateRetry:
		req.SendAt = &t.NextProcessAt
	case StateArchived:
		out.Dead, out.Attempts = deadEntry(t, now)
		if !t.LastFailedAt.IsZero() {
			req.SendAt = &t.LastFailedAt
		}
	}
	n, err := im.cfg.Policies.Resolve(req, now, im.cfg.MaxPayload)
	if err == nil && out.Dead == nil && n.Backoff[0] > 0 {
		// The first attempt starts Backoff[0] after send_at: send_at goes
		// that much earlier to keep asynq's due time. A pending task takes
		// a negative delay rather than a time, so that a second run asks
		// for the same content.
		first := -time.Duration(n.Backoff[0])
		if req.SendAt != nil {
			at := req.SendAt.Add(first)
			req.SendAt = &at
		} else {
			d := notify.Duration(first)
			req.Delay = &d
		}
		n, err = im.cfg.Policies.Resolve(req, now, im.cfg.MaxPayload)
	}
	if err != nil {
		return out, err
	}
	if encoded {
		im.sum.Base64++
	}
	out.Notification = n
	return out, nil
}

// toJSON returns payload as Herald keeps it: JSON as it is, anything else
// as a JSON string of its base64 (encoded), nothing as nothing.
func toJSON(payload []byte) (out json.RawMessage, encoded bool) {
	if len(payload) == 0 || json.Valid(payload) {
		return payload, false
	}
	out, _ = json.Marshal(payload) // a []byte marshals to a base64 string
	return out, true
}

// deadEntry returns the history entry and the attempts made of an archived
// task. asynq archives a task on the failure after its last retry, or on a
// SkipRetry error, without counting that failure in Retried; a task
// archived by hand was archived by no failure, and the failures before
// (LastFailedAt, LastErr) were counted when it was retried.
func deadEntry(t *asynq.TaskInfo, now time.Time) (*notify.Attempt, int) {
	attempts, at := t.Retried, t.LastFailedAt
	outcome := notify.OutcomePermanent
	switch {
	case at.IsZero():
		at = now
	case t.Retried >= t.MaxRetry:
		attempts++
		outcome = notify.OutcomeRetry
	case strings.Contains(t.LastErr, asynq.SkipRetry.Error()):
		// asynq keeps only the error's text; a handler's SkipRetry
		// wraps asynq's, whose text it then holds.
		attempts++
	}
	return &notify.Attempt{
		Attempt:    max(attempts-1, 0),
		StartedAt:  at,
		FinishedAt: at,
		Outcome:    outcome,
		Error:      cmp.Or(t.LastErr, "archived in asynq"),
	}, attempts
}
