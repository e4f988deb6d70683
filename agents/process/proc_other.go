//go:build unix && !linux

package process

import "syscall"

// sysProcAttr puts the agent in its own process group, so that stop signals
// reach its children too.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
