// Command durablepg measures durablepg (github.com/akashsharma95/durablepg) the way
// `legato bench` measures Legato: one-at-a-time starts, and the wake scenario's two
// latencies (a start to its first step's body, an event to the next step's body), each
// run started or signalled 20 ms after the last. durablepg runs its worker in the
// caller's process; the starts and events are sent from that process too, its one
// documented layout. It prints one JSON line of figures, which
// bench/peers/durablepg_bench.py relays to the comparison table.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"sort"
	"sync"
	"time"

	durablepg "github.com/akashsharma95/durablepg"
	"github.com/jackc/pgx/v5/pgxpool"
)

// spacing is the wake scenario's pause between one start (or event) and the next.
const spacing = 20 * time.Millisecond

type figure struct {
	Scenario string         `json:"scenario"`
	Name     string         `json:"name"`
	Value    float64        `json:"value"`
	Unit     string         `json:"unit"`
	Settings map[string]any `json:"settings"`
}

// stamps records the first time each run's step body ran.
type stamps struct {
	mu   sync.Mutex
	seen map[int]time.Time
}

func (s *stamps) mark(i int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.seen[i]; !ok {
		s.seen[i] = time.Now()
	}
}

func (s *stamps) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.seen)
}

func (s *stamps) at(i int) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[i]
}

func main() {
	url := flag.String("url", "", "the database (a postgres:// URL)")
	wakes := flag.Int("wake", 50, "wake samples")
	starts := flag.Int("start", 300, "one-at-a-time starts")
	flag.Parse()
	if err := run(*url, *wakes, *starts); err != nil {
		out, _ := json.Marshal(map[string]any{"figures": []figure{}, "error": err.Error()})
		fmt.Println(string(out))
	}
}

func run(url string, wakes, starts int) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	engine, err := durablepg.New(durablepg.Config{DB: pool, MaxConcurrency: 64})
	if err != nil {
		return err
	}
	if err := engine.Init(ctx); err != nil {
		return err
	}
	first := &stamps{seen: map[int]time.Time{}}
	next := &stamps{seen: map[int]time.Time{}}
	engine.RegisterWorkflow("noop", func(wf *durablepg.Builder) {
		wf.Step("noop", func(context.Context, *durablepg.StepContext) (any, error) {
			return map[string]any{"ok": true}, nil
		})
	})
	// An event key is global in durablepg: each run waits on a key of its own, so one
	// event wakes one run, as Legato's signal does.
	for i := -1; i < wakes; i++ {
		engine.RegisterWorkflow(fmt.Sprintf("wake_%d", i), func(wf *durablepg.Builder) {
			wf.Step("first", func(context.Context, *durablepg.StepContext) (any, error) {
				first.mark(i)
				return map[string]any{"i": i}, nil
			})
			wf.WaitEvent(fmt.Sprintf("go_%d", i), 5*time.Minute)
			wf.Step("next", func(context.Context, *durablepg.StepContext) (any, error) {
				next.mark(i)
				return map[string]any{"i": i}, nil
			})
		})
	}

	var figures []figure
	// One-at-a-time starts, before the worker runs (as Legato's start scenario).
	for i := 0; i < 20; i++ {
		if _, err := engine.Run(ctx, "noop", map[string]any{"i": i}); err != nil {
			return err
		}
	}
	began := time.Now()
	for i := 0; i < starts; i++ {
		if _, err := engine.Run(ctx, "noop", map[string]any{"i": i}); err != nil {
			return err
		}
	}
	rate := float64(starts) / time.Since(began).Seconds()
	figures = append(figures, figure{"start", "one at a time", rate, "/s", map[string]any{"runs": starts}})

	worker := make(chan error, 1)
	go func() { worker <- engine.StartWorker(ctx) }()
	if err := waitFor(ctx, pool, "SELECT count(*) FROM durable.workflow_runs WHERE state <> 'completed'", 0, worker); err != nil {
		return fmt.Errorf("draining the starts: %w", err)
	}
	startedAt := map[int]time.Time{}
	signalledAt := map[int]time.Time{}
	// The warm-up run (-1), then the samples.
	for i := -1; i < wakes; i++ {
		startedAt[i] = time.Now()
		if _, err := engine.Run(ctx, fmt.Sprintf("wake_%d", i), map[string]any{"i": i}); err != nil {
			return err
		}
		if i == -1 {
			if err := waitWaiting(ctx, pool, 1, worker); err != nil {
				return err
			}
			if err := engine.EmitEvent(ctx, "go_-1", map[string]any{"n": -1}); err != nil {
				return err
			}
			if err := waitStamp(ctx, next, 1, worker); err != nil {
				return err
			}
			continue
		}
		time.Sleep(spacing)
	}
	if err := waitWaiting(ctx, pool, int64(wakes), worker); err != nil {
		return err
	}
	for i := 0; i < wakes; i++ {
		signalledAt[i] = time.Now()
		if err := engine.EmitEvent(ctx, fmt.Sprintf("go_%d", i), map[string]any{"n": i}); err != nil {
			return err
		}
		time.Sleep(spacing)
	}
	if err := waitStamp(ctx, next, wakes+1, worker); err != nil {
		return err
	}
	var toFirst, toNext []float64
	for i := 0; i < wakes; i++ {
		toFirst = append(toFirst, ms(first.at(i).Sub(startedAt[i])))
		toNext = append(toNext, ms(next.at(i).Sub(signalledAt[i])))
	}
	settings := map[string]any{"samples": wakes, "layout": "1 process: worker, starts and events", "spacing_ms": 20}
	for _, p := range []float64{50, 99} {
		figures = append(figures,
			figure{"wake", fmt.Sprintf("signal -> next task p%g", p), percentile(toNext, p), "ms", settings},
			figure{"wake", fmt.Sprintf("start -> first task p%g", p), percentile(toFirst, p), "ms", settings},
		)
	}
	out, err := json.Marshal(map[string]any{"figures": figures, "error": nil})
	if err != nil {
		return err
	}
	fmt.Println(string(out))
	// The worker holds a pooled connection until it stops: stop it before the pool closes.
	cancel()
	select {
	case <-worker:
	case <-time.After(10 * time.Second):
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// percentile is bench.peers.percentile: the nearest-rank sample.
func percentile(samples []float64, p float64) float64 {
	ordered := append([]float64(nil), samples...)
	sort.Float64s(ordered)
	rank := int(p/100*float64(len(ordered))+0.5) - 1
	rank = max(0, min(len(ordered)-1, rank))
	return ordered[rank]
}

func waitWaiting(ctx context.Context, pool *pgxpool.Pool, want int64, worker <-chan error) error {
	return waitFor(ctx, pool, "SELECT count(*) FROM durable.workflow_runs WHERE state = 'waiting_event'", want, worker)
}

// waitFor polls query (a count) until it returns want.
func waitFor(ctx context.Context, pool *pgxpool.Pool, query string, want int64, worker <-chan error) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var got int64
		if err := pool.QueryRow(ctx, query).Scan(&got); err != nil {
			return err
		}
		if got == want {
			return nil
		}
		if err := check(deadline, worker); err != nil {
			return fmt.Errorf("%s: %d, not %d: %w", query, got, want, err)
		}
	}
}

func waitStamp(ctx context.Context, s *stamps, want int, worker <-chan error) error {
	deadline := time.Now().Add(2 * time.Minute)
	for s.count() < want {
		if err := check(deadline, worker); err != nil {
			return fmt.Errorf("%d of %d steps ran: %w", s.count(), want, err)
		}
	}
	return nil
}

func check(deadline time.Time, worker <-chan error) error {
	select {
	case err := <-worker:
		return fmt.Errorf("the worker stopped: %v", err)
	default:
	}
	if time.Now().After(deadline) {
		return fmt.Errorf("timed out")
	}
	time.Sleep(20 * time.Millisecond)
	return nil
}
