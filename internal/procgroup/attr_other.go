//go:build unix && !linux

package procgroup

import "syscall"

func attr(syscall.Signal) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
