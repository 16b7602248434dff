package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// writeFilePrivate writes a file that holds a credential: readable by its owner only
// (0600, whatever mode a file at path had), and atomically, so that a reader (the
// provider rereading its kubeconfig) sees the old content or the new, never a part.
//
// The content goes to a new file in path's folder, created 0600 with O_EXCL (so it can be
// no file or link someone prepared), synced, and renamed over path. A rename replaces
// what is at path, a symbolic link included, and never writes through a link: a link at
// path is replaced by the file and its target is left as it was; stderr says so.
func writeFilePrivate(path string, data []byte, stderr io.Writer) (err error) {
	if fi, err := os.Lstat(path); err == nil {
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink(path)
			fmt.Fprintf(stderr, "%s is a symbolic link (to %s): it is replaced by the kubeconfig, and %s is left as it was\n", path, target, target)
		case !fi.Mode().IsRegular():
			return fmt.Errorf("writing the kubeconfig to %s: it exists and is no regular file", path)
		}
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("writing the kubeconfig next to %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	// CreateTemp makes it 0600 already, less what the umask takes; owner-only either way.
	if err = tmp.Chmod(0o600); err != nil {
		return fmt.Errorf("writing the kubeconfig to %s: %w", tmp.Name(), err)
	}
	if _, err = tmp.Write(data); err != nil {
		return fmt.Errorf("writing the kubeconfig to %s: %w", tmp.Name(), err)
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("writing the kubeconfig to %s: %w", tmp.Name(), err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("writing the kubeconfig to %s: %w", tmp.Name(), err)
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("moving the kubeconfig into place at %s: %w", path, err)
	}
	syncDir(dir)
	return nil
}

// syncDir makes a rename in dir durable. Best effort: some systems (Windows) cannot open
// a folder for syncing, and the file is in place either way.
func syncDir(dir string) {
	d, err := os.Open(dir)
	if err != nil {
		return
	}
	_ = d.Sync()
	_ = d.Close()
}
