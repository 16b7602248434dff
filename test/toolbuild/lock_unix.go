//go:build unix

package toolbuild

import (
	"os"
	"syscall"
)

// lockExclusive waits for an exclusive lock on f, which other processes take with it
// too; it is released by unlock or when f is closed.
func lockExclusive(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
}

// unlock releases the lock that lockExclusive took.
func unlock(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
}
