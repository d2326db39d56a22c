package bakery

import (
	"context"
	"fmt"
	"math"
	"sync"
)

// DefaultBlock is the block size of a Sequence unless SequenceOptions says.
const DefaultBlock = 1000

// MaxBlock is the largest block the server reserves at once.
const MaxBlock = 100_000_000

// SequenceOptions configures a Sequence.
type SequenceOptions struct {
	// Block is how many ids each reservation takes (1 to 100,000,000;
	// 0 means DefaultBlock). Larger blocks mean fewer round trips and
	// larger gaps when a process ends with ids unused.
	Block uint64
}

// Sequence hands out unique ids, increasing within one Sequence, from
// blocks reserved locally (`POST /v1/sequences/{name}/reserve`). When a
// block is 80 % used, the next one is reserved in the background, so Next
// waits only when ids are drawn faster than blocks arrive. Ids of a block
// unused when the process ends are never handed out (a gap, never a
// duplicate). A Sequence is safe for concurrent use.
type Sequence struct {
	c    *Client
	name string
	size uint64

	mu      sync.Mutex
	next    uint64 // next id of the current block
	end     uint64 // one past the current block's last id
	trigger uint64 // when an id >= trigger is handed out, prefetch

	hasPending         bool
	pendStart, pendEnd uint64
	fetching           bool
	fetched            chan struct{} // closed when the fetch in flight ends
	fetchErr           error
}

// Sequence returns the sequence name. It does no I/O: the first Next
// reserves the first block.
func (c *Client) Sequence(name string, opts SequenceOptions) (*Sequence, error) {
	size := opts.Block
	if size == 0 {
		size = DefaultBlock
	}
	if size > MaxBlock {
		return nil, &Error{Kind: KindInvalidInput, Message: fmt.Sprintf("block %d: at most %d", size, MaxBlock)}
	}
	return &Sequence{c: c, name: name, size: size, trigger: math.MaxUint64}, nil
}

// Name is the sequence's name.
func (s *Sequence) Name() string { return s.name }

// Block is the number of ids reserved at once.
func (s *Sequence) Block() uint64 { return s.size }

// Next returns the next id. It does no I/O unless the local blocks are
// used up; then it waits for the next block until ctx ends.
func (s *Sequence) Next(ctx context.Context) (uint64, error) {
	s.mu.Lock()
	if s.next < s.end {
		id := s.next
		s.next++
		if id >= s.trigger {
			s.startFetch()
		}
		s.mu.Unlock()
		return id, nil
	}
	return s.nextSlow(ctx)
}

// nextSlow is Next when the current block is used up; s.mu is held.
func (s *Sequence) nextSlow(ctx context.Context) (uint64, error) {
	for {
		if s.next < s.end {
			id := s.next
			s.next++
			if id >= s.trigger {
				s.startFetch()
			}
			s.mu.Unlock()
			return id, nil
		}
		if s.hasPending {
			s.next, s.end, s.hasPending = s.pendStart, s.pendEnd, false
			s.trigger = s.next + (s.end-s.next)*8/10
			continue
		}
		if !s.fetching {
			s.fetchErr = nil
			s.startFetch()
		}
		ch := s.fetched
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, fmt.Errorf("bakery: sequence %q: waiting for a block: %w", s.name, ctx.Err())
		}
		s.mu.Lock()
		if !s.hasPending && !s.fetching && s.fetchErr != nil {
			err := s.fetchErr
			s.fetchErr = nil
			s.mu.Unlock()
			return 0, err
		}
	}
}

// startFetch reserves the next block in the background; s.mu is held.
func (s *Sequence) startFetch() {
	s.trigger = math.MaxUint64
	s.fetching = true
	ch := make(chan struct{})
	s.fetched = ch
	if !s.c.goBg(s.fetch) {
		s.fetching = false
		s.fetchErr = ErrClosed
		close(ch)
	}
}

type block struct {
	Name  string `json:"name"`
	Start uint64 `json:"start"`
	End   uint64 `json:"end"`
}

func (s *Sequence) fetch(bg context.Context) {
	var b block
	// A reservation of unknown outcome is repeated: the block it may have
	// reserved is never handed out (a gap, never a duplicate).
	_, err := s.c.do(bg, call{method: "POST",
		path:  fmt.Sprintf("/v1/sequences/%s/reserve?size=%d", escape(s.name), s.size),
		out:   &b,
		retry: retryUnknown})
	if err == nil && b.End <= b.Start {
		err = &Error{Kind: KindInternal, Message: fmt.Sprintf("empty block %d..%d", b.Start, b.End)}
	}
	if err != nil && bg.Err() == nil {
		s.c.log.Warn("bakery: reserving a block failed", "sequence", s.name, "error", err)
	}
	s.mu.Lock()
	s.fetching = false
	if err != nil {
		s.fetchErr = err
	} else {
		s.hasPending, s.pendStart, s.pendEnd = true, b.Start, b.End
	}
	close(s.fetched)
	s.mu.Unlock()
}
