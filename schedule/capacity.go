package schedule

import "sync"

// capacity counts what the dispatcher may still reserve. Reserve loops take
// from it and workers give back as attempts end; a loop waiting for room
// watches changed.
type capacity struct {
	total int

	mu    sync.Mutex // guards avail and ch
	avail int
	// ch is closed, and replaced, whenever room is given back.
	ch chan struct{}
}

func newCapacity(total int) *capacity {
	return &capacity{total: total, avail: total, ch: make(chan struct{})}
}

// free returns the room left.
func (c *capacity) free() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.avail
}

// take takes up to n of the room left and returns how much it took.
func (c *capacity) take(n int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n = min(n, c.avail)
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
	close(c.ch)
	c.ch = make(chan struct{})
}

// changed returns a channel closed the next time room is given back.
func (c *capacity) changed() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ch
}
