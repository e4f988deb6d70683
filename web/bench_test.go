package web_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/roombridge/roombridge/core/coretest"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
)

// benchBridge is the whole bridge, idle (no leader work, no connectors:
// nothing runs or is delivered), with the web room: what the benchmarks
// time is the web room's reads and its live streams alone.
func benchBridge(b *testing.B) *coretest.Bridge {
	// 100,000 requests for one agent and 200 SSE clients from one address:
	// over the default queue limit and per-client connection cap.
	cfg := strings.ReplaceAll(config, "%BIN%", fmt.Sprintf("%q", bridgeBin)) +
		"requests: {queue_limit: 1000000}\nhttp: {max_conns_per_client: 1000}\n"
	return coretest.Start(b, coretest.Options{Config: cfg, Dir: b.TempDir(), Idle: true})
}

// seed stores n requests of room backend, asked by the owner (queued), in
// batches.
func seed(b *testing.B, br *coretest.Bridge, n int) {
	svc := br.Requests()
	for done := 0; done < n; {
		err := br.DB.Update(context.Background(), func(tx store.Tx) error {
			for i := 0; i < 5000 && done+i < n; i++ {
				if _, err := svc.CreateTx(tx, requests.Ask{Agent: "coder", Room: "backend", Surface: "web",
					User: "slack:UOWNER", Text: fmt.Sprintf("ask %d", done+i)}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		done += 5000
	}
}

// BenchmarkRoomPage renders the room page over 100,000 stored requests and
// reports its p99.
func BenchmarkRoomPage(b *testing.B) {
	h := benchBridge(b)
	seed(b, h, 100_000)
	cookie := benchSignIn(b, h)
	var lat []time.Duration
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		req, _ := http.NewRequest(http.MethodGet, h.URL+"/rooms/backend", nil)
		req.AddCookie(cookie)
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			b.Fatalf("room page: %v %v", resp, err)
		}
		_, _ = bufio.NewReader(resp.Body).WriteTo(discard{})
		resp.Body.Close()
		lat = append(lat, time.Since(start))
	}
	b.ReportMetric(p99(lat), "p99-ms")
}

// BenchmarkSSEFanout connects 200 SSE clients and measures how long a state
// change takes to reach each.
func BenchmarkSSEFanout(b *testing.B) {
	h := benchBridge(b)
	cookie := benchSignIn(b, h)
	const clients = 200
	got := make(chan time.Time, clients*4)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan struct{}, clients)
	for range clients {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, h.URL+"/events?room=backend", nil)
		req.AddCookie(cookie)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		go func() {
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				if strings.HasPrefix(sc.Text(), "retry:") {
					ready <- struct{}{}
				}
				if sc.Text() == "event: change" {
					got <- time.Now()
				}
			}
		}()
	}
	for range clients {
		<-ready
	}
	var lat []time.Duration
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		if _, err := h.Requests().Create(context.Background(), requests.Ask{Agent: "coder", Room: "backend", Surface: "web",
			User: "slack:UOWNER", Text: "change"}); err != nil {
			b.Fatal(err)
		}
		for range clients {
			lat = append(lat, (<-got).Sub(start))
		}
		// drain the coalesced follow-ups (outbox) of this change
		for drained := false; !drained; {
			select {
			case <-got:
			case <-time.After(50 * time.Millisecond):
				drained = true
			}
		}
	}
	b.ReportMetric(p99(lat), "p99-ms")
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func p99(lat []time.Duration) float64 {
	if len(lat) == 0 {
		return 0
	}
	slices.Sort(lat)
	return float64(lat[len(lat)*99/100].Microseconds()) / 1000
}

// benchSignIn signs in with the API token (the admin).
func benchSignIn(b *testing.B, br *coretest.Bridge) *http.Cookie {
	resp, err := client().PostForm(br.URL+"/signin", url.Values{"token": {coretest.Token}})
	if err != nil {
		b.Fatal(err)
	}
	resp.Body.Close()
	for _, c := range resp.Cookies() {
		if c.Name == "roombridge_session" {
			return c
		}
	}
	b.Fatal("no session cookie")
	return nil
}
