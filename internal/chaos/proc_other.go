//go:build unix && !linux

package chaos

import "syscall"

func childAttr() *syscall.SysProcAttr { return nil }
