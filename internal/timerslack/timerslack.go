// Package timerslack lengthens the timer slack of a Go process's threads
// (the guest's), for the sake of one of them: the runtime's sysmon. While
// any P is busy, sysmon sleeps 20 µs at a time (~0.1 ms with the kernel's
// default slack of 50 µs) to see whether a P should be taken back from a
// system call or a goroutine preempted; on a machine whose CPUs a run's
// processes keep busy (host, guest and command on two CPUs), each of its
// wake-ups takes a CPU from one of them. With a longer slack the kernel
// wakes it with the next timer interrupt instead. Its duties (retaking Ps,
// preempting goroutines that run 10 ms) lose nothing that matters here;
// timers elsewhere in the process may fire up to the slack late.
package timerslack

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Relaxed is the slack Relax sets: 2 ms. The native backend starts its
// guest with it, so that the guest's threads have it from their first
// instruction.
const Relaxed = 2_000_000

// Default is the kernel's timer slack for a thread nobody set one for
// (init_task's 50 µs): what the commands a relaxed process starts get.
const Default = 50_000

// Relax sets Relaxed as the timer slack of every thread of this process
// it may: the calling thread's always; the others' (sysmon's among them)
// where the process holds CAP_SYS_NICE in its user namespace. A thread
// made afterwards inherits its maker's slack. A calling thread that has
// it already was started with it, as were all the others: nothing is
// done. Errors are ignored: the slack only ever changes how soon timers
// fire.
func Relax() {
	if now, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0); err == nil && now == Relaxed {
		return
	}
	unix.Prctl(unix.PR_SET_TIMERSLACK, Relaxed, 0, 0, 0) // this thread, whatever /proc holds
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return
	}
	value := []byte(strconv.Itoa(Relaxed))
	for _, t := range tasks {
		// /proc/TID is the thread's own directory, which has the file
		// (/proc/self/task/TID has not).
		if f, err := os.OpenFile("/proc/"+t.Name()+"/timerslack_ns", os.O_WRONLY, 0); err == nil {
			f.Write(value)
			f.Close()
		}
	}
}
