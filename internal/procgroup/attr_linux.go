package procgroup

import "syscall"

func attr(onParentDeath syscall.Signal) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: onParentDeath}
}
