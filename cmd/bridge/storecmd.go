package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/config"
	"github.com/roombridge/roombridge/core"
	"github.com/roombridge/roombridge/election"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/store/bolt"
	"github.com/roombridge/roombridge/store/etcd"
	"github.com/roombridge/roombridge/store/migrate"
)

// storeBackup writes a consistent snapshot of the store to FILE: through the
// running daemon when it holds the bolt file, else read directly (a stopped
// single node, or etcd at one revision).
func storeBackup(ctx context.Context, api *apiOptions, file string, out io.Writer) error {
	cfg, err := loadConfig(api.config)
	if err != nil {
		return err
	}
	tmp := file + ".partial"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("store backup: %w", err)
	}
	defer os.Remove(tmp)
	defer f.Close()
	st, closeSt, err := openToolStore(ctx, cfg, true)
	switch {
	case err == nil:
		defer closeSt()
		var info store.BackupInfo
		info, err = store.Backup(ctx, st, time.Now(), f)
		if err == nil && info.Records == 0 && cfg.HA != nil {
			err = fmt.Errorf("the etcd prefix %s/store holds nothing: check ha.prefix and ha.etcd in %s (a backup of nothing is refused)", cfg.HA.Prefix, api.config)
		}
	case errors.Is(err, errStoreInUse):
		err = backupThroughDaemon(ctx, api, f)
	}
	if err != nil {
		return fmt.Errorf("store backup: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("store backup: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("store backup: %w", err)
	}
	info, err := store.ReadBackup(f)
	if err != nil {
		return fmt.Errorf("store backup: the file written does not read back: %w", err)
	}
	if err := os.Rename(tmp, file); err != nil {
		return fmt.Errorf("store backup: %w", err)
	}
	if err := syncDir(filepath.Dir(file)); err != nil {
		return fmt.Errorf("store backup: %w", err)
	}
	fmt.Fprintf(out, "backup: %s: %d keys, store format %d, taken %s\n", file, info.Records, info.Format, info.Taken.Format(time.RFC3339))
	return nil
}

// backupThroughDaemon asks the running daemon for its snapshot.
func backupThroughDaemon(ctx context.Context, api *apiOptions, w io.Writer) error {
	c, err := api.client()
	if err != nil {
		return err
	}
	resp, err := c.do(ctx, http.MethodGet, "/v1/store/backup", nil)
	if err != nil {
		return fmt.Errorf("the store is in use by a running bridge, and its backup failed: %w", err)
	}
	defer resp.Body.Close()
	if _, err := io.Copy(w, resp.Body); err != nil {
		return fmt.Errorf("the running bridge's backup was cut off (%w): its log says why", err)
	}
	return nil
}

// storeRestore restores FILE into the configured store, which must be empty
// and not in use: a running bridge (single node: its lock; HA: a leader in
// the election) is refused.
func storeRestore(ctx context.Context, path, file string, out io.Writer) error {
	cfg, err := loadConfig(path)
	if err != nil {
		return err
	}
	f, err := os.Open(file)
	if err != nil {
		return fmt.Errorf("store restore: %w", err)
	}
	defer f.Close()
	st, closeSt, err := openToolStore(ctx, cfg, false)
	if errors.Is(err, errStoreInUse) {
		return fmt.Errorf("store restore: refused: %w; stop it, and restore into an empty data_dir", err)
	}
	if err != nil {
		return fmt.Errorf("store restore: %w", err)
	}
	defer closeSt()
	if cfg.HA != nil {
		if err := noLeader(ctx, st.(*etcd.Store), cfg); err != nil {
			return err
		}
	}
	var last time.Time
	info, err := store.Restore(ctx, st, f, store.RestoreOptions{Progress: func(done, total int) {
		if time.Since(last) > 2*time.Second {
			last = time.Now()
			fmt.Fprintf(out, "restore: %d of %d keys\n", done, total)
		}
	}, Finish: func(tx store.Tx, info store.BackupInfo) error {
		// The restore is the store's first transition after the backup.
		return audit.Append(tx, audit.Record{Time: time.Now(), Actor: "bridge", Action: actionRestored,
			Detail: fmt.Sprintf("from %s: %d keys, format %d, backup taken %s", filepath.Base(file), info.Records, info.Format,
				info.Taken.Format(time.RFC3339))})
	}})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "restored: %d keys, store format %d, from the backup taken %s\n", info.Records, info.Format, info.Taken.Format(time.RFC3339))
	return nil
}

// actionRestored is the audit action of a restore (the last record of the
// restored store).
const actionRestored = "store_restored"

// noLeader refuses a restore while an instance leads the HA election.
func noLeader(ctx context.Context, st *etcd.Store, cfg *config.Config) error {
	l, err := election.New(election.Options{Client: st.Client(), Prefix: cfg.HA.Prefix + "/leader", TTL: cfg.HA.LeaseTTL})
	if err != nil {
		return err
	}
	v, err := l.Leader(ctx)
	if err != nil {
		return fmt.Errorf("store restore: %w", err)
	}
	if v != "" {
		return fmt.Errorf("store restore: refused: a bridge leads on this etcd prefix (%s); stop every instance first", v)
	}
	return nil
}

// storeMigrate says what a migration to this binary's format would change
// (--dry-run), or runs it on a stopped single node. In HA the leader
// migrates at the start of its term: only --dry-run runs here.
func storeMigrate(ctx context.Context, path string, dry bool, out io.Writer) error {
	cfg, err := loadConfig(path)
	if err != nil {
		return err
	}
	if cfg.HA != nil && !dry {
		return fmt.Errorf("store migrate: in HA the leader migrates the store at the start of its term (a new binary that leads); use --dry-run to see what it will change")
	}
	st, closeSt, err := openToolStore(ctx, cfg, true)
	if errors.Is(err, errStoreInUse) {
		return fmt.Errorf("store migrate: %w; stop it (a bridge migrates its store when it starts)", err)
	}
	if err != nil {
		return fmt.Errorf("store migrate: %w", err)
	}
	defer closeSt()
	// A large store's progress, every 2 s, on stderr.
	o := core.MigrateOptions(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	o.DryRun = dry
	res, err := migrate.Run(ctx, st, o)
	if err != nil {
		return err
	}
	printMigration(out, res, dry)
	return nil
}

func printMigration(out io.Writer, res migrate.Result, dry bool) {
	verb := "migrated"
	if dry {
		verb = "would migrate"
	}
	switch {
	case res.Created && dry:
		fmt.Fprintf(out, "an empty store: it would be stamped with format %d\n", core.KnownFormat())
	case res.Created:
		fmt.Fprintf(out, "an empty store: stamped with format %d\n", core.KnownFormat())
	case len(res.Steps) == 0:
		fmt.Fprintf(out, "the store is in format %d, this binary's: nothing to do\n", res.From)
	}
	for _, s := range res.Steps {
		fmt.Fprintf(out, "%s: format %d -> %d (%s): %v\n", verb, s.From, s.To, s.Name, map[string]int(s.Counts))
	}
}

// errStoreInUse: the bolt file is held by a running bridge.
var errStoreInUse = errors.New("a running bridge holds the store")

// openToolStore opens cfg's store for a tool: the bolt file (errStoreInUse when
// a bridge holds it; with existing, one that is not there is an error, not
// created), or the etcd prefix without a fence.
func openToolStore(ctx context.Context, cfg *config.Config, existing bool) (store.Store, func(), error) {
	if cfg.HA == nil {
		path := filepath.Join(cfg.DataDir, "bridge.db")
		if _, err := os.Stat(path); existing && errors.Is(err, os.ErrNotExist) {
			return nil, nil, fmt.Errorf("no store at %s (data_dir %q): check --config, or the directory it is run from", path, cfg.DataDir)
		}
		db, err := bolt.Open(path)
		if err != nil {
			if bolt.InUse(err) {
				return nil, nil, fmt.Errorf("%w (%s)", errStoreInUse, path)
			}
			return nil, nil, err
		}
		return db, func() { _ = db.Close() }, nil
	}
	cli, err := etcd.NewClient(cfg.HA.Etcd, etcd.ClientOptions{KeepAlive: cfg.HA.KeepAlive})
	if err != nil {
		return nil, nil, fmt.Errorf("ha.etcd: %w", err)
	}
	st, err := etcd.New(cli, etcd.Options{Prefix: cfg.HA.Prefix + "/store"})
	if err != nil {
		_ = cli.Close()
		return nil, nil, err
	}
	return st, func() { _ = st.Close(); _ = cli.Close() }, nil
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
