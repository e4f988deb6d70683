package core

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"runtime/debug"
	"strconv"

	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/store/migrate"
)

// maxFormat, set at link time (-ldflags "-X
// github.com/roombridge/roombridge/core.maxFormat=1"), makes this binary
// know only the formats up to it: the tests' "old binary" of a rolling
// upgrade. Empty: every step this source has.
var maxFormat string

// steps are the store's migrations, in order: steps[i] produces format i+2.
var steps = []migrate.Step{migrate.LeanDedupe}

// Migrations returns the steps this binary knows, up to KnownFormat.
func Migrations() []migrate.Step {
	known := KnownFormat()
	var out []migrate.Step
	for _, s := range steps {
		if s.To <= known {
			out = append(out, s)
		}
	}
	return out
}

// KnownFormat is the newest store format this binary knows: the last
// step's, store.UnversionedFormat without steps, lowered by maxFormat.
func KnownFormat() int {
	known := store.UnversionedFormat
	if len(steps) > 0 {
		known = steps[len(steps)-1].To
	}
	if n, err := strconv.Atoi(maxFormat); err == nil && n >= store.UnversionedFormat && n < known {
		known = n
	}
	return known
}

// MigrateOptions are the options of migrate.Run for this binary's formats.
func MigrateOptions(log *slog.Logger) migrate.Options {
	return migrate.Options{Known: KnownFormat(), Steps: Migrations(), Log: log}
}

// Version is this binary's version: its VCS revision (with "+dirty" for a
// build from changed sources), or the module's version, or "devel".
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	switch {
	case rev != "" && dirty:
		return shortRev(rev) + "+dirty"
	case rev != "":
		return shortRev(rev)
	case bi.Main.Version != "" && bi.Main.Version != "(devel)":
		return bi.Main.Version
	}
	return "devel"
}

func shortRev(r string) string { return r[:min(len(r), 12)] }

// Instance is what a bridge instance says of itself: in the HA election's
// leader key and in /readyz.
type Instance struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	// Format is the newest store format the binary knows.
	Format int `json:"format"`
	// URL is where runners reach its API (ha.advertise_url).
	URL string `json:"url,omitempty"`
}

// Self is this instance, named name.
func Self(name string) Instance {
	return Instance{Name: name, Version: Version(), Format: KnownFormat()}
}

// JSON is i as the election's value.
func (i Instance) JSON() string {
	b, _ := json.Marshal(i)
	return string(b)
}

// migrateStore brings the store to this binary's format, first thing in a
// term (store/migrate): a new store is stamped, an older one migrated under
// the term's fence. A store newer than this binary is not led: single
// node, that is fatal (the start refused it already); in HA the term ends
// and the election does not campaign again while it holds
// (election.Options.Eligible).
func (b *Bridge) migrateStore(ctx context.Context) (lead bool, err error) {
	o := MigrateOptions(b.log)
	o.Now = b.opts.Clock.Now
	res, err := migrate.Run(ctx, b.opts.Store, o)
	var fe *store.FormatError
	if errors.As(err, &fe) && b.opts.Leadership != nil {
		b.log.Error("not leading: the store's format is newer than this binary's; stop this instance (the new binary leads)",
			"store_format", fe.Store, "binary_format", fe.Known, "error", err)
		return false, nil
	}
	if err != nil {
		return false, err
	}
	b.storeFormat.Store(int64(res.To))
	return true, nil
}

// leaderInfo is a Leadership that can tell who leads and why this instance
// does not campaign (election.Leadership).
type leaderInfo interface {
	Leader(ctx context.Context) (string, error)
	Ineligible() string
}

// readyDetail is /readyz's detail: this instance, the store's format as of
// its last term, and in HA the leader (its election value) and why this
// instance does not campaign, if it does not.
func (b *Bridge) readyDetail(ctx context.Context) any {
	self := b.opts.Instance
	if self.Version == "" {
		self = Self(self.Name)
	}
	d := map[string]any{"instance": self}
	if f := b.storeFormat.Load(); f > 0 {
		d["store_format"] = f
	}
	if li, ok := b.opts.Leadership.(leaderInfo); ok {
		if v, err := li.Leader(ctx); err != nil {
			d["leader_error"] = err.Error()
		} else if v != "" {
			var leader any = v
			if in, ok := parseInstance(v); ok {
				leader = in
			}
			d["leader"] = leader
		}
		if why := li.Ineligible(); why != "" {
			d["not_campaigning"] = why
		}
	}
	return d
}

// writeBackup streams a consistent snapshot of the store (store.Backup):
// `bridge store backup` asks for it (GET /v1/store/backup) while this
// bridge holds the bolt file.
func (b *Bridge) writeBackup(ctx context.Context, w io.Writer) error {
	info, err := store.Backup(ctx, b.opts.Store, b.opts.Clock.Now(), w)
	if err != nil {
		return err
	}
	b.log.InfoContext(ctx, "store backup taken", "records", info.Records, "format", info.Format)
	return nil
}

// parseInstance reads an election value (an Instance; an older binary's
// may be a plain name).
func parseInstance(v string) (Instance, bool) {
	var in Instance
	return in, json.Unmarshal([]byte(v), &in) == nil
}

// leaderURL is the leader's advertised URL, as the election says ("": no
// leader, none advertised, or no election).
func (b *Bridge) leaderURL(ctx context.Context) string {
	li, ok := b.opts.Leadership.(leaderInfo)
	if !ok {
		return ""
	}
	v, err := li.Leader(ctx)
	if err != nil {
		return ""
	}
	in, _ := parseInstance(v)
	return in.URL
}
