//go:build !unix

package stdiobridge

import "os/exec"

// setProcessGroup does nothing where process groups do not exist.
func setProcessGroup(*exec.Cmd) {}

// killGroup kills cmd's process; without process groups only the child itself is reached, and
// there is no gentler signal to send first.
func killGroup(cmd *exec.Cmd, _ bool) {
	_ = cmd.Process.Kill()
}
