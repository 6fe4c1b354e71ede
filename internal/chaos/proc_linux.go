package chaos

import "syscall"

// childAttr makes the kernel SIGKILL a child if the harness itself dies, so
// not even a crashed harness leaves a ferry behind.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
