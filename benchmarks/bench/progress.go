package bench

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// Progress prints a line per second while a run goes on:
//
//	[ycsb-A write-back] 7s  9103 ops/s (last 1s)  64120 ops  pending 12
//
// Ops is counted by the run (Add from any goroutine); Extra, if set, adds
// run-specific fields (pending changes, pinned bytes, …) to each line.
type Progress struct {
	Label string
	Out   io.Writer
	Extra func() string

	ops   atomic.Int64
	start time.Time
	stop  chan struct{}
	wg    sync.WaitGroup
}

// Add counts n completed operations.
func (p *Progress) Add(n int64) { p.ops.Add(n) }

// Ops is the number of operations counted so far.
func (p *Progress) Ops() int64 { return p.ops.Load() }

// Start begins printing; Stop ends it. A Progress runs once.
func (p *Progress) Start() {
	p.start = time.Now()
	p.stop = make(chan struct{})
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		last := int64(0)
		lastAt := p.start
		for {
			select {
			case <-p.stop:
				return
			case now := <-t.C:
				n := p.ops.Load()
				rate := float64(n-last) / now.Sub(lastAt).Seconds()
				last, lastAt = n, now
				line := fmt.Sprintf("[%s] %3.0fs  %8.0f ops/s (last 1s)  %9d ops", p.Label, now.Sub(p.start).Seconds(), rate, n)
				if p.Extra != nil {
					if x := p.Extra(); x != "" {
						line += "  " + x
					}
				}
				fmt.Fprintln(p.Out, line)
			}
		}
	}()
}

// Stop stops printing and waits for the printer to finish.
func (p *Progress) Stop() {
	if p.stop == nil {
		return
	}
	close(p.stop)
	p.wg.Wait()
	p.stop = nil
}
