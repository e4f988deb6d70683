// Package bgcmd runs a background command the way the bridge's tasks run
// (delegation's background_run on the bridge, and on a runner): in its own
// process group, so a stop reaches its children, with the tail of its
// output kept.
package bgcmd

import (
	"os/exec"
	"syscall"

	"github.com/roombridge/roombridge/internal/procgroup"
)

// MaxOutput bounds the output a command keeps (its tail).
const MaxOutput = 16 << 10

// Cmd is a started background command.
type Cmd struct {
	cmd *exec.Cmd
	out procgroup.Tail
}

// Start starts argv in dir ("": the current directory).
func Start(dir string, argv []string) (*Cmd, error) {
	c := &Cmd{cmd: exec.Command(argv[0], argv[1:]...), out: procgroup.Tail{Max: MaxOutput}}
	c.cmd.Dir = dir
	c.cmd.Stdout, c.cmd.Stderr = &c.out, &c.out
	// Its own process group (a stop reaches its children too); the kernel
	// kills it if its parent dies: a task never works on unsupervised after
	// a crash, the restarted bridge (or runner) ends it as interrupted.
	c.cmd.SysProcAttr = procgroup.Attr(syscall.SIGKILL)
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
func (c *Cmd) Kill() {
	if err := procgroup.Signal(c.cmd.Process, syscall.SIGKILL); err != nil {
		_ = c.cmd.Process.Kill()
	}
}
