package config

import (
	"fmt"
	"path/filepath"
)

// Paths in a configuration file are relative to the file's directory, the
// convention of systemd units, Prometheus and Caddy: data_dir (and its
// default, ./.roombridge), every *_file key, log.file and each agent's
// workdir and home. The built-in configuration (no file) keeps them
// relative to the current directory.

// absDir is the absolute directory of the file at path.
func absDir(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("config: %w", err)
	}
	return filepath.Dir(abs), nil
}

// resolve is p against dir: p itself when p is empty or absolute.
func resolve(dir, p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(dir, p)
}

// resolvePaths makes c's relative paths absolute against dir, the
// directory of its file (after setDefaults: the default data_dir and
// api_token_file too).
func (c *Config) resolvePaths(dir string) {
	ps := []*string{&c.DataDir, &c.HTTP.TLSCertFile, &c.HTTP.TLSKeyFile}
	for _, s := range c.secrets() {
		ps = append(ps, s.file)
	}
	for _, p := range ps {
		*p = resolve(dir, *p)
	}
	c.Log.resolve(dir)
	resolveAgents(dir, c.Agents)
}

// resolve makes log.file absolute against dir ("stderr" is not a path).
func (l *Log) resolve(dir string) {
	if l.File != "stderr" {
		l.File = resolve(dir, l.File)
	}
}

// resolveAgents makes each agent's workdir and home absolute against dir.
func resolveAgents(dir string, agents map[string]Agent) {
	for name, a := range agents {
		a.Workdir, a.Home = resolve(dir, a.Workdir), resolve(dir, a.Home)
		agents[name] = a
	}
}

// Dir is the directory the config's relative paths were resolved against:
// its file's ("" for the built-in configuration, or one parsed from bytes:
// the current directory).
func (c *Config) Dir() string {
	if c.File == "" {
		return ""
	}
	return filepath.Dir(c.File)
}
