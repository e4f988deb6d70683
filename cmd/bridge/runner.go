package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/agents/process"
	"github.com/roombridge/roombridge/config"
	"github.com/roombridge/roombridge/runners"
)

// runRunner is `bridge runner`: it hosts the agents of the runner config at
// path on this machine and connects out to the bridge (docs/design.md §6).
func runRunner(ctx context.Context, path string) error {
	f, err := config.LoadRunner(path)
	if err != nil {
		return err
	}
	log := slog.New(logHandler(f.Log, os.Stderr))
	b, err := os.ReadFile(f.Runner.TokenFile)
	if err != nil {
		return fmt.Errorf("runner.token_file: %w", err)
	}
	var tlsCfg *tls.Config
	if f.Runner.CAFile != "" {
		pool, err := addPEM(x509.NewCertPool(), "runner.ca_file", f.Runner.CAFile)
		if err != nil {
			return err
		}
		tlsCfg = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	rts, dirs := map[string]agents.Runtime{}, map[string]string{}
	for name, a := range f.Agents {
		workdir := a.Workdir
		if workdir == "" {
			workdir = filepath.Join("work", name)
		}
		if err := os.MkdirAll(workdir, 0o700); err != nil {
			return fmt.Errorf("agents.%s.workdir: %w", name, err)
		}
		rts[name] = &process.Runtime{Kind: process.Kind(orDefault(a.Kind, string(process.Exec))), Command: a.Command,
			Workdir: workdir, TurnTimeout: a.TurnTimeout}
		dirs[name] = workdir // its background commands run there too
	}
	r, err := runners.NewRunner(runners.RunnerOptions{Name: f.Runner.Name, URLs: f.Runner.Bridges,
		Token: strings.TrimSpace(string(b)), Agents: rts, Workdirs: dirs, TLS: tlsCfg, Log: log,
		// A follower names the leader: followed on the same terms as
		// runner.bridges.
		Follow: func(u string) error { return config.CheckBridgeURL(u, f.Runner.Insecure) }})
	if err != nil {
		return err
	}
	log.Info("runner started", "runner", f.Runner.Name, "agents", len(rts), "bridges", strings.Join(f.Runner.Bridges, ","))
	return r.Run(ctx)
}

// runnersList is `bridge runners list`.
func runnersList(ctx context.Context, api *apiOptions, out io.Writer) error {
	c, err := api.client()
	if err != nil {
		return err
	}
	var st []runners.Status
	if err := c.getJSON(ctx, http.MethodGet, "/v1/runners", &st); err != nil {
		return err
	}
	printRunners(out, st)
	return nil
}

// runnerAdd is `bridge runners add NAME`: it prints the runner's token.
func runnerAdd(ctx context.Context, api *apiOptions, name string, out io.Writer) error {
	c, err := api.client()
	if err != nil {
		return err
	}
	body, err := json.Marshal(map[string]string{"name": name})
	if err != nil {
		return err
	}
	resp, err := c.do(ctx, http.MethodPost, "/v1/runners", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var res struct{ Token string }
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
		return fmt.Errorf("runners add %s: %w", name, err)
	}
	fmt.Fprintf(out, "runner %s added. Its token (shown once; put it in the runner's token_file, mode 0600):\n%s\n", name, res.Token)
	return nil
}

// runnerRevoke is `bridge runners revoke NAME`.
func runnerRevoke(ctx context.Context, api *apiOptions, name string, out io.Writer) error {
	c, err := api.client()
	if err != nil {
		return err
	}
	var res map[string]string
	if err := c.getJSON(ctx, http.MethodPost, "/v1/runners/"+url.PathEscape(name)+"/revoke", &res); err != nil {
		return err
	}
	fmt.Fprintf(out, "runner %s revoked: its connection is closed and its token refused\n", name)
	return nil
}

func printRunners(out io.Writer, st []runners.Status) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUNNER\tSTATE\tAGENTS\tTURNS\tLAST CONTACT")
	for _, s := range st {
		state := "disconnected"
		switch {
		case s.Connected:
			state = "connected"
		case s.Away:
			state = "away (turns interrupted)"
		}
		last := "never"
		if !s.LastContact.IsZero() {
			last = s.LastContact.Local().Format(time.DateTime)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", s.Name, state, strings.Join(s.Agents, ","), s.Turns, last)
	}
	_ = tw.Flush()
}

// addPEM adds the certificates of file to pool; errors name key.
func addPEM(pool *x509.CertPool, key, file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no certificate in %s", key, file)
	}
	return pool, nil
}
