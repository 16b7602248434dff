package toolbuild

import (
	"path/filepath"
	"testing"
	"time"
)

func TestLockFileExcludes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	unlockFirst, err := LockFile(path)
	if err != nil {
		t.Fatal(err)
	}
	second := make(chan func())
	failed := make(chan error, 1)
	go func() {
		unlock, err := LockFile(path)
		if err != nil {
			failed <- err
			return
		}
		second <- unlock
	}()
	select {
	case unlock := <-second:
		unlock()
		t.Fatal("a second lock was taken while the first was held")
	case err := <-failed:
		t.Fatal(err)
	case <-time.After(200 * time.Millisecond):
	}
	unlockFirst()
	select {
	case unlock := <-second:
		unlock()
	case err := <-failed:
		t.Fatal(err)
	case <-time.After(10 * time.Second):
		t.Fatal("the second lock was not taken after the first was released")
	}
}
