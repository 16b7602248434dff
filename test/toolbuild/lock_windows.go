//go:build windows

package toolbuild

import (
	"os"

	"golang.org/x/sys/windows"
)

// allBytes locks the whole file, however long it grows.
const allBytes = ^uint32(0)

// lockExclusive waits for an exclusive lock on f, which other processes take with it
// too; it is released by unlock or when f is closed.
func lockExclusive(f *os.File) error {
	return windows.LockFileEx(windows.Handle(f.Fd()), windows.LOCKFILE_EXCLUSIVE_LOCK, 0, allBytes, allBytes, new(windows.Overlapped))
}

// unlock releases the lock that lockExclusive took.
func unlock(f *os.File) error {
	return windows.UnlockFileEx(windows.Handle(f.Fd()), 0, allBytes, allBytes, new(windows.Overlapped))
}
