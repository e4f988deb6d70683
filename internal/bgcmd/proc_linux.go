package bgcmd

import "syscall"

// sysProcAttr puts a task in its own process group (a stop reaches its
// children too) and has the kernel kill it if the bridge dies: a task
// never works on unsupervised after a crash; the restarted bridge ends it
// as interrupted.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
