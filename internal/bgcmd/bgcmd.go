// Package bgcmd runs a background command the way the bridge's tasks run
// (delegation's background_run on the bridge, and on a runner): in its own
// process group, so a stop reaches its children, with the tail of its
// output kept.
package bgcmd

import (
	"bytes"
	"os/exec"
	"sync"
)

// MaxOutput bounds the output a command keeps (its tail).
const MaxOutput = 16 << 10

// Cmd is a started background command.
type Cmd struct {
	cmd *exec.Cmd
	out tail
}

// Start starts argv in dir ("": the current directory).
func Start(dir string, argv []string) (*Cmd, error) {
	c := &Cmd{cmd: exec.Command(argv[0], argv[1:]...)}
	c.cmd.Dir = dir
	c.cmd.Stdout, c.cmd.Stderr = &c.out, &c.out
	c.cmd.SysProcAttr = sysProcAttr()
	if err := c.cmd.Start(); err != nil {
		return nil, err
	}
	return c, nil
}

// Wait waits for the command to exit: err is why it failed (nil: it
// succeeded); output is the tail of what it wrote.
func (c *Cmd) Wait() (output string, err error) {
	err = c.cmd.Wait()
	return c.out.String(), err
}

// Kill kills the command's process group (the process and its children).
func (c *Cmd) Kill() { killGroup(c.cmd.Process) }

type tail struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf.Write(p)
	if over := t.buf.Len() - MaxOutput; over > 0 {
		t.buf.Next(over)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.buf.String()
}
