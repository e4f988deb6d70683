package process

import "syscall"

// sysProcAttr puts the agent in its own process group (stop signals reach
// its children too) and has the kernel send it SIGTERM if the bridge dies,
// so that a killed bridge leaves no agent working unsupervised next to the
// resumed one.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
