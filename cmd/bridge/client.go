package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/roombridge/roombridge/approvals"
	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/httpapi"
	"github.com/roombridge/roombridge/internal/clip"
	"github.com/roombridge/roombridge/requests"
)

// client talks to a running daemon's HTTP API.
type client struct {
	base  string
	token string
	http  *http.Client
}

// apiTransport is the CLI's HTTP transport (nil: http.DefaultTransport); a
// test narrows its receive buffer.
var apiTransport http.RoundTripper

// client is the client of the daemon that o's --api and --config name.
func (o *apiOptions) client() (*client, error) {
	cfg, err := loadConfig(o.config)
	if err != nil {
		return nil, err
	}
	tok, err := apiTokenForClient(cfg.HTTP.APIToken, cfg.HTTP.APITokenFile)
	if err != nil {
		return nil, err
	}
	base, tr := o.api, apiTransport
	if base == "" {
		addr := cfg.HTTP.Addr
		if b, err := os.ReadFile(filepath.Join(cfg.DataDir, addrFile)); err == nil {
			addr = strings.TrimSpace(string(b))
		}
		base = cfg.HTTP.Scheme() + "://" + addr
	}
	if tr == nil && cfg.HTTP.TLSCertFile != "" {
		if tr, err = trustServer(cfg.HTTP.TLSCertFile); err != nil {
			return nil, err
		}
	}
	return &client{base: strings.TrimSuffix(base, "/"), token: tok, http: &http.Client{Transport: tr}}, nil
}

// trustServer is the CLI's transport to a daemon that serves TLS with the
// certificate in certFile (http.tls_cert_file): it trusts the system's roots
// and that certificate itself, so a self-signed one works too.
func trustServer(certFile string) (http.RoundTripper, error) {
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if pool, err = addPEM(pool, "http.tls_cert_file", certFile); err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return tr, nil
}

func apiTokenForClient(token, file string) (string, error) {
	if token != "" {
		return token, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("http.api_token_file: %w (is the daemon set up? it creates the token on first run)", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// do calls the API; a non-2xx answer becomes an error carrying its message.
func (c *client) do(ctx context.Context, method, path string, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("calling the daemon at %s: %w", c.base, err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		var e struct {
			Error string `json:"error"`
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if json.Unmarshal(b, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(b))
		}
		return nil, fmt.Errorf("%s (HTTP %d)", e.Error, resp.StatusCode)
	}
	return resp, nil
}

func (c *client) getJSON(ctx context.Context, method, path string, v any) error {
	resp, err := c.do(ctx, method, path, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}

// requestsList is `requests list`: every request (of the state and agent
// given, if any), page after page.
func requestsList(ctx context.Context, api *apiOptions, state, agent string, out io.Writer) error {
	if state != "" {
		if _, err := requests.ParseState(state); err != nil {
			return fmt.Errorf("%w: --state: %v", errUsage, err)
		}
	}
	c, err := api.client()
	if err != nil {
		return err
	}
	q := url.Values{}
	if state != "" {
		q.Set("state", state)
	}
	if agent != "" {
		q.Set("agent", agent)
	}
	q.Set("limit", strconv.Itoa(httpapi.MaxLimit))
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tAGENT\tREQUESTER\tASK")
	for { // every page: the API answers at most httpapi.MaxLimit at once
		var res struct {
			Requests []requests.Request `json:"requests"`
			Next     string             `json:"next"`
		}
		if err := c.getJSON(ctx, http.MethodGet, "/v1/requests?"+q.Encode(), &res); err != nil {
			return err
		}
		for _, r := range res.Requests {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.ID, r.State, r.Agent, r.Requester, clip.Line(r.Ask, 60, clip.Bytes))
		}
		if res.Next == "" {
			return tw.Flush()
		}
		q.Set("after", res.Next)
	}
}

func printRequest(out io.Writer, r *requests.Request) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", k, v)
		}
	}
	row("id", r.ID.String())
	row("state", r.State.String())
	row("agent", r.Agent)
	row("room", r.Room)
	row("requester", r.Requester)
	row("ask", r.Ask)
	row("retry_of", r.RetryOf.String())
	row("delegated_by", r.DelegatedBy.String())
	row("session", r.Session)
	row("reason", r.Reason)
	row("result", r.Result)
	row("created", r.Created.Format(time.RFC3339))
	_ = tw.Flush()
}

// requestAction is `requests show ID` (verb "show": GET /v1/requests/ID) and
// `cancel|retry ID` (POST /v1/requests/ID/<verb>); it prints the request.
func requestAction(ctx context.Context, api *apiOptions, verb, id string, out io.Writer) error {
	if _, err := requests.ParseRef(id, time.Now()); err != nil {
		return err
	}
	c, err := api.client()
	if err != nil {
		return err
	}
	method, path := http.MethodPost, "/v1/requests/"+url.PathEscape(id)+"/"+verb
	if verb == "show" {
		method, path = http.MethodGet, "/v1/requests/"+url.PathEscape(id)
	}
	var r requests.Request
	if err := c.getJSON(ctx, method, path, &r); err != nil {
		return err
	}
	printRequest(out, &r)
	return nil
}

// approvalAction approves or denies an approval through the daemon.
func approvalAction(ctx context.Context, api *apiOptions, verb, id string, out io.Writer) error {
	if _, err := approvals.ParseID(id, time.Now()); err != nil {
		return err
	}
	c, err := api.client()
	if err != nil {
		return err
	}
	var a approvals.Approval
	if err := c.getJSON(ctx, http.MethodPost, "/v1/approvals/"+url.PathEscape(id)+"/"+verb, &a); err != nil {
		return err
	}
	fmt.Fprintf(out, "%s %s\n%s\n", a.ID, a.State, approvals.Status(&a))
	return nil
}

// answerQuestion answers a question an agent asked (ask_user) through the
// daemon, as the API token holder.
func answerQuestion(ctx context.Context, api *apiOptions, id, text string, out io.Writer) error {
	if _, err := approvals.ParseID(id, time.Now()); err != nil {
		return err
	}
	c, err := api.client()
	if err != nil {
		return err
	}
	body, err := json.Marshal(httpapi.AnswerBody{Text: text})
	if err != nil {
		return err
	}
	resp, err := c.do(ctx, http.MethodPost, "/v1/questions/"+url.PathEscape(id)+"/answer", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var a approvals.Approval
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		return fmt.Errorf("answer %s: %w", id, err)
	}
	fmt.Fprintf(out, "%s %s\n%s\n", a.ID, a.State, approvals.Status(&a))
	return nil
}

// revokeUser cancels a user's waiting requests through the daemon.
func revokeUser(ctx context.Context, api *apiOptions, user string, out io.Writer) error {
	if err := approvals.CheckUser(user); err != nil {
		return err
	}
	c, err := api.client()
	if err != nil {
		return err
	}
	var res struct {
		Cancelled []requests.ID `json:"cancelled"`
	}
	if err := c.getJSON(ctx, http.MethodPost, "/v1/users/"+url.PathEscape(user)+"/revoke", &res); err != nil {
		return err
	}
	fmt.Fprintf(out, "%s revoked: %d waiting request(s) cancelled; running ones finish\n", user, len(res.Cancelled))
	for _, id := range res.Cancelled {
		fmt.Fprintln(out, id)
	}
	return nil
}

// exportOptions are the flags of `audit export`.
type exportOptions struct {
	since, until, format, output string
}

// auditExport is `audit export`: the audit log to stdout or a file, with a
// progress bar on stderr.
func auditExport(ctx context.Context, api *apiOptions, o exportOptions, stdout, stderr io.Writer) error {
	if err := exportFormat(&o.format, o.output); err != nil {
		return err
	}
	c, err := api.client()
	if err != nil {
		return err
	}
	q := url.Values{"format": {o.format}}
	if o.since != "" {
		q.Set("since", o.since)
	}
	if o.until != "" {
		q.Set("until", o.until)
	}
	resp, err := c.do(ctx, http.MethodGet, "/v1/audit?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	w, closeOut, err := exportOutput(o.output, stdout)
	if err != nil {
		return fmt.Errorf("audit export: %w", err) // err names the file: "open FILE: ..."
	}
	var total uint64
	if o.since == "" && o.until == "" {
		total, _ = strconv.ParseUint(resp.Header.Get("X-Audit-Total"), 10, 64)
	}
	bar := newProgressBar(stderr, total)
	n, err := io.Copy(w, &countingReader{r: resp.Body, lines: bar.add})
	bar.finish()
	if cerr := closeOut(); err == nil {
		err = cerr // "close FILE: ...": what was written may not be on disk
	}
	if err != nil {
		return fmt.Errorf("audit export: after %d bytes: %w", n, err)
	}
	if msg := resp.Trailer.Get(httpapi.AuditErrorTrailer); msg != "" {
		return fmt.Errorf("audit export: after %d bytes: %s", n, msg)
	}
	return nil
}

// exportOutput is where the export goes: stdout, or the file path (-o),
// created with mode 0600 (audit records name people and what they asked;
// an existing file keeps its mode) and truncated. close closes it.
func exportOutput(path string, stdout io.Writer) (w io.Writer, close func() error, err error) {
	if path == "" {
		return stdout, func() error { return nil }, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, nil, err
	}
	return f, f.Close, nil
}

// exportFormat settles the export's format: --format if given, else the
// extension of -o (.csv, .jsonl, .json), else jsonl; both in any case. A --format that
// contradicts a known extension is refused, so x.csv never holds JSONL.
func exportFormat(format *string, output string) error {
	ext := ""
	switch strings.ToLower(filepath.Ext(output)) {
	case ".csv":
		ext = "csv"
	case ".jsonl", ".json", ".ndjson":
		ext = "jsonl"
	}
	if *format == "" {
		*format = orDefault(ext, "jsonl")
		return nil
	}
	f, err := audit.ParseFormat(*format)
	if err != nil {
		return fmt.Errorf("%w: --format: %q (want jsonl or csv)", errUsage, *format)
	}
	if ext != "" && ext != string(f) {
		return fmt.Errorf("%w: --format %s but -o %s names a %s file", errUsage, *format, output, ext)
	}
	*format = string(f)
	return nil
}

// tasksList prints what runs now (requests and background tasks) in one
// room, or in every room of the config, and the background tasks that
// failed or were interrupted and are not dismissed (their WHAT says so).
func tasksList(ctx context.Context, api *apiOptions, room string, out io.Writer) error {
	rooms := []string{room}
	if room == "" {
		cfg, err := loadConfig(api.config)
		if err != nil {
			return err
		}
		rooms = rooms[:0]
		for _, r := range cfg.Rooms {
			rooms = append(rooms, r.Name)
		}
	}
	c, err := api.client()
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ROOM\tKIND\tID\tREQUEST\tAGENT\tSINCE\tWHAT")
	for _, name := range rooms {
		var res struct {
			Tasks []httpapi.Task `json:"tasks"`
		}
		if err := c.getJSON(ctx, http.MethodGet, "/v1/rooms/"+url.PathEscape(name)+"/tasks", &res); err != nil {
			return err
		}
		for _, t := range res.Tasks {
			id, what := t.RequestID.String(), t.Activity
			if t.Kind == "task" {
				id, what = t.TaskID, t.Name+": "+strings.Join(t.Command, " ")
				if !t.Run.IsZero() {
					what = t.Name + ": " + t.RunAgent + " " + t.Run.String() + ": " + t.Text
				}
				if t.State != "" && t.State != "running" {
					what = t.State + " (" + orDefault(t.Reason, "no reason given") + "; clear with `" + progName() + " tasks dismiss " + t.TaskID + "`): " + what
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", name, t.Kind, id, t.RequestID, t.Agent,
				t.StartedAt.Local().Format(time.TimeOnly), clip.Line(what, 80, clip.Bytes))
		}
	}
	return tw.Flush()
}

// taskAction stops (verb "stop") or dismisses (verb "dismiss") a
// background task through the daemon.
func taskAction(ctx context.Context, api *apiOptions, verb, id string, out io.Writer) error {
	if id == "" {
		return fmt.Errorf("%w: tasks %s needs exactly one task ID (T-3)", errUsage, verb)
	}
	c, err := api.client()
	if err != nil {
		return err
	}
	var res struct {
		ID          string      `json:"id"`
		State       string      `json:"state"`
		Name        string      `json:"name"`
		Request     requests.ID `json:"request"`
		DismissedBy string      `json:"dismissed_by"`
	}
	if err := c.getJSON(ctx, http.MethodPost, "/v1/tasks/"+url.PathEscape(id)+"/"+verb, &res); err != nil {
		return err
	}
	if verb == "dismiss" {
		fmt.Fprintf(out, "%s (%s) %s, dismissed by %s; no longer listed\n", res.ID, res.Name, res.State, res.DismissedBy)
		return nil
	}
	fmt.Fprintf(out, "%s (%s) %s — incomplete; %s is told so\n", res.ID, res.Name, res.State, res.Request)
	return nil
}
