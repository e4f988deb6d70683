//go:build unix

package bgcmd

import (
	"os"
	"syscall"
)

// killGroup kills a task's process group (the process and its children).
func killGroup(p *os.Process) {
	if err := syscall.Kill(-p.Pid, syscall.SIGKILL); err != nil {
		_ = p.Kill()
	}
}
