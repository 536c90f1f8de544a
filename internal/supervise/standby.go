package supervise

import (
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"sync"
)

// standbyFlag, the watchdog's first argument, makes it wait for "start
// ENV" on its control pipe before it starts the command.
const standbyFlag = "-standby"

// Standby is a watchdog started ahead of its command: starting the
// command through it costs a line on a pipe and a fork, where a watchdog
// started then costs the start of a process of this binary first (tens of
// milliseconds for a Go binary of krole's size). It is used once. Its
// methods are safe for concurrent use.
type Standby struct {
	spec Spec

	mu  sync.Mutex
	dog *dog // nil once used or closed
}

// Prepare starts spec's watchdog on standby; [Standby.Start] starts the
// command. spec.Watchdog is required; spec.Env is the part of the
// command's environment known now, and Start adds the rest. The watchdog
// exits, starting nothing, when the Standby is closed or this process
// dies.
func Prepare(spec Spec) (*Standby, error) {
	if len(spec.Watchdog) == 0 {
		return nil, errors.New("a standby needs a watchdog")
	}
	path, err := exec.LookPath(spec.Path)
	if err != nil {
		return nil, fmt.Errorf("command %q: %w", spec.Path, err)
	}
	d, err := spawnDog(spec, path, true)
	if err != nil {
		return nil, err
	}
	return &Standby{spec: spec, dog: d}, nil
}

// Start starts the command, with env added to its environment (as
// [Spec].Env is), and returns once it has started, as [Start] does. When
// the standby watchdog cannot start it (it has died), Start starts the
// command as [Start] would. A Standby starts one command; a second Start
// is an error.
func (s *Standby) Start(env []string) (*Child, error) {
	d := s.take()
	if d == nil {
		return nil, errors.New("the standby watchdog was used or closed")
	}
	msg, err := json.Marshal(env)
	if err == nil {
		_, err = fmt.Fprintf(d.ctl, "start %s\n", msg)
	}
	if err != nil { // the watchdog has died: EPIPE
		d.close()
		return s.cold(env)
	}
	c, err := d.awaitStart(s.spec.Path)
	var ee *exec.Error
	if err != nil && !errors.As(err, &ee) {
		// The watchdog ended without a word on the command (it was
		// killed while on standby): the command never started.
		return s.cold(env)
	}
	return c, err
}

// cold starts the command as Start does, without the standby.
func (s *Standby) cold(env []string) (*Child, error) {
	spec := s.spec
	spec.Env = append(append([]string(nil), spec.Env...), env...)
	return Start(spec)
}

// Close ends the standby watchdog, if Start has not used it, and waits for
// it to exit.
func (s *Standby) Close() {
	if d := s.take(); d != nil {
		d.close()
	}
}

// take returns the watchdog, once: nil after Start or Close took it.
func (s *Standby) take() *dog {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.dog
	s.dog = nil
	return d
}
