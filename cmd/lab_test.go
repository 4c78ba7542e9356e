// SPDX-License-Identifier: Apache-2.0

package cmd

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// The pod sandbox process (`swiftlane lab pause`) reaps the children it
// inherits and exits 0 on SIGTERM. It runs here as a child of the test
// binary, which starts a short-lived grandchild of its own first: a
// zombie unless reaped.
func TestSandboxPause(t *testing.T) {
	if os.Getenv("SWL_TEST_PAUSE") == "1" {
		child, err := os.StartProcess("/bin/true", []string{"true"}, &os.ProcAttr{})
		if err != nil {
			os.Exit(3)
		}
		sandboxPause(func() { fmt.Println(child.Pid) })
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSandboxPause$")
	cmd.Env = append(os.Environ(), "SWL_TEST_PAUSE=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("pause never said it was listening: %v", err)
	}
	grandchild, err := strconv.Atoi(line[:len(line)-1])
	if err != nil {
		t.Fatal(err)
	}
	// /bin/true exits at once; the pause must reap it (SIGCHLD). The
	// kernel has no event for "reaped": poll for the zombie to go.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", grandchild)); errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d was not reaped", grandchild)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("pause after SIGTERM: %v, want exit 0", err)
	}
}
