package harness

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// State is what the harness knows of the node between its commands (up,
// restart-kubelet, down run as separate processes): the host as it was
// before the node started, the sessions it started since, and the daemons
// that run. It is the one record of what the node started; Config.StateDir
// keeps it as state.json.
type State struct {
	// Before is the host as the node found it; nil before the first up.
	Before *Snapshot `json:"before,omitempty"`
	// Sessions are those of every daemon started since Before, also of
	// daemons that have been stopped or restarted since: whatever is left
	// in them is the node's, whatever binary it runs. (A kwok cluster
	// beside the node runs the same kube-apiserver and etcd binaries, in
	// sessions of its own.)
	Sessions []int `json:"sessions,omitempty"`
	// Daemons are those the node started and has not stopped, by name.
	Daemons map[string]*Daemon `json:"daemons,omitempty"`
}

// loadState reads the state at path; a missing file is an empty state.
func loadState(path string) (*State, error) {
	s := &State{}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, s); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// save writes the state to path atomically: a harness killed while it
// writes leaves the earlier state, never half of one.
func (s *State) save(path string) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".state-*.json")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// running are the names of the daemons that run, in start order.
func (s *State) running() []string {
	var names []string
	for _, name := range daemons {
		if s.Daemons[name].running() {
			names = append(names, name)
		}
	}
	return names
}

// started records a daemon that has started, and its session.
func (s *State) started(d *Daemon) {
	if s.Daemons == nil {
		s.Daemons = map[string]*Daemon{}
	}
	s.Daemons[d.Name] = d
	if !slices.Contains(s.Sessions, d.PID) {
		s.Sessions = append(s.Sessions, d.PID)
	}
}
