//go:build unix && !linux

package bgcmd

import "syscall"

// sysProcAttr puts a task in its own process group, so that a stop reaches
// its children too.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
