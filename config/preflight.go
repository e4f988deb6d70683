package config

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Preflight checks what the config names outside itself, as the daemon
// will use it, without making anything: each secret file (a regular,
// non-empty file of mode 0600 or stricter; http.api_token_file may be
// missing where it can be made, as the first start makes it), data_dir (a
// directory the bridge may write, or one it may make) and each agent's
// command (a program that exists and may be run). `bridge run` and `bridge
// config check` both call it; every error names its key, all of them
// joined.
func (c *Config) Preflight() error {
	var errs []error
	for _, s := range c.secrets() {
		errs = append(errs, checkSecret(s))
	}
	if err := writableDir(c.DataDir); err != nil {
		errs = append(errs, keyErr("data_dir", "%v", err))
	}
	for _, name := range slices.Sorted(maps.Keys(c.Agents)) {
		errs = append(errs, c.checkCommand(name))
	}
	return errors.Join(errs...)
}

// checkSecret checks the file of secret s, if it has one, as Secret reads it.
func checkSecret(s secretRef) error {
	file := *s.file
	if *s.value != "" || file == "" {
		return nil
	}
	if _, err := os.Stat(file); errors.Is(err, fs.ErrNotExist) && s.key == "http.api_token" {
		if err := writableDir(filepath.Dir(file)); err != nil {
			return keyErr(s.key+"_file", "%s is missing and cannot be made: %v", file, err)
		}
		return nil
	}
	v, err := Secret(s.key, "", file)
	if err != nil {
		return err
	}
	if v == "" {
		return keyErr(s.key+"_file", "%s is empty", file)
	}
	return nil
}

// writableDir checks that dir is a directory this process may write, or
// that the nearest directory above it that exists is (so dir can be made).
func writableDir(dir string) error {
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if errors.Is(err, fs.ErrNotExist) && filepath.Dir(d) != d {
			continue
		}
		switch {
		case err != nil:
			return err
		case !fi.IsDir():
			return fmt.Errorf("%s is not a directory", d)
		case unix.Access(d, unix.W_OK|unix.X_OK) != nil:
			return fmt.Errorf("%s is not writable by this user", d)
		}
		return nil
	}
}

// AgentWorkdir is where agent name runs: its workdir, else
// <data_dir>/work/<name>.
func (c *Config) AgentWorkdir(name string) string {
	if w := c.Agents[name].Workdir; w != "" {
		return w
	}
	return filepath.Join(c.DataDir, "work", name)
}

// Program is the program agent a runs: its command's first word, else
// its kind's CLI (claude, codex); "" for an agent a runner hosts.
func (a Agent) Program() string {
	switch {
	case a.Kind == "runner":
		return ""
	case len(a.Command) > 0:
		return a.Command[0]
	}
	return a.Kind
}

// checkCommand checks that agent name's program exists and may be run: a
// bare name on $PATH, a path (a relative one from the agent's workdir, as
// it is started there) to an executable file.
func (c *Config) checkCommand(name string) error {
	prog := c.Agents[name].Program()
	if prog == "" {
		return nil
	}
	key := "agents." + name + ".command"
	if !strings.ContainsRune(prog, filepath.Separator) {
		if _, err := exec.LookPath(prog); err != nil {
			return keyErr(key, "%q is not a program on $PATH", prog)
		}
		return nil
	}
	path := prog
	if !filepath.IsAbs(path) {
		path = filepath.Join(c.AgentWorkdir(name), path)
	}
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		return keyErr(key, "%v", err)
	case !fi.Mode().IsRegular():
		return keyErr(key, "%s is not a file", path)
	case fi.Mode().Perm()&0o111 == 0:
		return keyErr(key, "%s is not executable (mode %04o; chmod +x it)", path, fi.Mode().Perm())
	}
	return nil
}
