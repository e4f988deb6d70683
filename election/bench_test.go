package election_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/roombridge/roombridge/election"
	"github.com/roombridge/roombridge/store/etcd"
	"github.com/roombridge/roombridge/store/etcd/etcdtest"
)

// benchTTL is the lease TTL of the failover benchmark (the bridge tests' 2 s).
const benchTTL = 2 * time.Second

// benchChild campaigns and prints "lead <unix ns>" when its term starts,
// then holds the term until it is killed.
func benchChild(endpoint string) int {
	cli, err := etcd.NewClient([]string{endpoint}, etcd.ClientOptions{})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	l, err := election.New(election.Options{Client: cli, Prefix: "/bench/leader", TTL: benchTTL, Name: strconv.Itoa(os.Getpid())})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	_ = l.Run(context.Background(), func(ctx context.Context) error {
		fmt.Println("lead", time.Now().UnixNano())
		<-ctx.Done()
		return nil
	})
	return 0
}

type benchProc struct {
	cmd  *exec.Cmd
	lead chan time.Time
}

func startBenchChild(b *testing.B, endpoint string) *benchProc {
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), "ELECTION_BENCH_CHILD="+endpoint)
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	p := &benchProc{cmd: cmd, lead: make(chan time.Time, 1)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if ns, ok := strings.CutPrefix(sc.Text(), "lead "); ok {
				n, _ := strconv.ParseInt(ns, 10, 64)
				p.lead <- time.Unix(0, n)
			}
		}
	}()
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return p
}

// BenchmarkFailover kills the leader process (SIGKILL: no resign, no revoke)
// 20 times; each time, the failover time is from the kill to the moment the
// next instance's leader work starts. Two candidates run at all times (a
// killed one is replaced). It reports the median and maximum against the
// lease TTL (2 s).
//
//	go test -run '^$' -bench Failover -benchtime 1x ./election/
func BenchmarkFailover(b *testing.B) {
	const kills = 20
	srv := etcdtest.Start(b)
	for range b.N {
		procs := []*benchProc{startBenchChild(b, srv.Endpoint())}
		leader := procs[0]
		select {
		case <-leader.lead:
		case <-time.After(20 * time.Second):
			b.Fatal("no first leader")
		}
		procs = append(procs, startBenchChild(b, srv.Endpoint()))
		var took []time.Duration
		for range kills {
			time.Sleep(300 * time.Millisecond) // the standby is campaigning
			killed := time.Now()
			_ = leader.cmd.Process.Kill()
			var next *benchProc
			for _, p := range procs {
				if p != leader {
					next = p
				}
			}
			select {
			case at := <-next.lead:
				took = append(took, at.Sub(killed))
			case <-time.After(benchTTL + 10*time.Second):
				b.Fatal("no new leader within TTL + 10s")
			}
			leader = next
			procs = []*benchProc{next, startBenchChild(b, srv.Endpoint())}
		}
		slices.Sort(took)
		b.ReportMetric(took[len(took)/2].Seconds(), "median-s")
		b.ReportMetric(took[len(took)-1].Seconds(), "max-s")
		b.ReportMetric(took[0].Seconds(), "min-s")
		b.ReportMetric(benchTTL.Seconds(), "ttl-s")
	}
}
