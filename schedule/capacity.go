package schedule

import "sync"

// capacity counts what the dispatcher may still reserve. Reserve loops take
// from it and workers give back as attempts end; a loop waiting for room
// watches changed.
//
// The room is Concurrency (floor) plus a prefetch that adapts, up to
// Prefetch (total - floor): a ttr runs while its notification waits for a
// worker, so the prefetch halves whenever one waited too long to be started
// (shrink), and grows back by one whenever a worker finds nothing waiting
// (grow), which is what it is for. A reservation counts no more of it than
// the workers are expected to start soon (free).
type capacity struct {
	total, floor int

	mu sync.Mutex // guards limit, avail and ch
	// limit is the room now, from floor to total.
	limit int
	// avail is limit less what is taken; below 0 after a shrink, until as
	// much is given back.
	avail int
	// ch is closed, and replaced, whenever room is given back.
	ch chan struct{}
}

func newCapacity(floor, total int) *capacity {
	return &capacity{total: total, floor: floor, limit: total, avail: total, ch: make(chan struct{})}
}

// free returns the room left while at most ahead may wait for a worker:
// of the prefetch, no more than ahead counts.
func (c *capacity) free(ahead int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return max(c.avail-max(c.limit-c.floor-ahead, 0), 0)
}

// take takes up to n of the room left and returns how much it took.
func (c *capacity) take(n int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n = max(min(n, c.avail), 0)
	c.avail -= n
	return n
}

// give returns n to the room left and wakes the loops that wait for it.
func (c *capacity) give(n int) {
	if n <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.avail += n
	c.wake()
}

// shrink halves the prefetch.
func (c *capacity) shrink() {
	c.mu.Lock()
	defer c.mu.Unlock()
	cut := (c.limit - c.floor + 1) / 2
	c.limit -= cut
	c.avail -= cut
}

// grow adds one to the prefetch, up to its most.
func (c *capacity) grow() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.limit < c.total {
		c.limit++
		c.avail++
		c.wake()
	}
}

// wake wakes the loops waiting for room; c.mu is held.
func (c *capacity) wake() {
	close(c.ch)
	c.ch = make(chan struct{})
}

// changed returns a channel closed the next time room is given back.
func (c *capacity) changed() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ch
}
