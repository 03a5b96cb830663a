package bench

import (
	"sync"
	"time"
)

// Sample is a value read at T seconds after a Sampler started.
type Sample struct {
	T float64 `json:"t_s"`
	V float64 `json:"v"`
}

// Sampler reads a value periodically while a run goes on (pinned bytes over
// time, say): once at Start, every Every (default 500 ms), and once at
// Stop. Reads that fail are skipped.
type Sampler struct {
	Every time.Duration
	Read  func() (float64, error)

	mu      sync.Mutex // guards samples
	samples []Sample
	start   time.Time
	stop    chan struct{}
	done    chan struct{}
}

// Start begins sampling; a Sampler runs once.
func (s *Sampler) Start() {
	if s.Every <= 0 {
		s.Every = 500 * time.Millisecond
	}
	s.start = time.Now()
	s.stop, s.done = make(chan struct{}), make(chan struct{})
	s.sample()
	go func() {
		defer close(s.done)
		t := time.NewTicker(s.Every)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
				s.sample()
			}
		}
	}()
}

func (s *Sampler) sample() {
	v, err := s.Read()
	if err != nil {
		return
	}
	at := time.Since(s.start).Seconds()
	s.mu.Lock()
	s.samples = append(s.samples, Sample{T: at, V: v})
	s.mu.Unlock()
}

// Stop takes a last sample, stops sampling and returns the samples in time
// order.
func (s *Sampler) Stop() []Sample {
	if s.stop != nil {
		close(s.stop)
		<-s.done
		s.stop = nil
		s.sample()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Sample(nil), s.samples...)
}

// XY splits samples into the x (seconds) and y values of a plot Series,
// with y scaled by scale (1.0/1024 for KiB, say).
func XY(samples []Sample, scale float64) (x, y []float64) {
	x, y = make([]float64, len(samples)), make([]float64, len(samples))
	for i, s := range samples {
		x[i], y[i] = s.T, s.V*scale
	}
	return x, y
}
