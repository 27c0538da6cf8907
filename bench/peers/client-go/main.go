// client-go-peer: one leader-election candidate built on
// k8s.io/client-go/tools/leaderelection, for the side-by-side benchmark
// (scripts/bench.sh). It is configured as client-go's own leader-election
// example recommends: a LeaseLock, ReleaseOnCancel, the work stopped before the
// context is cancelled, and the process exits once leadership is lost.
//
// Every change of leadership is recorded for the benchmark in two forms:
// --flag-file holds {"mode":"leader"|"follower","holder":ID,"at_boottime_ns":N}
// (written atomically), and <flag-file>.events gets one line "MODE NS" per
// change, NS being CLOCK_BOOTTIME nanoseconds taken when the callback ran.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

type recorder struct {
	mu       sync.Mutex
	flagFile string
	identity string
	mode     string
}

func boottimeNs() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}

// set records a change of mode; repeating the current mode is a no-op.
func (r *recorder) set(mode string) {
	at := boottimeNs()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mode == mode {
		return
	}
	r.mode = mode
	body, _ := json.Marshal(map[string]any{"mode": mode, "holder": r.identity, "at_boottime_ns": at})
	tmp := r.flagFile + ".tmp"
	if err := os.WriteFile(tmp, body, 0o644); err == nil {
		_ = os.Rename(tmp, r.flagFile)
	}
	f, err := os.OpenFile(r.flagFile+".events", os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err == nil {
		fmt.Fprintf(f, "%s %d\n", mode, at)
		f.Close()
	}
}

func main() {
	var (
		namespace     = flag.String("namespace", "", "namespace of the Lease")
		leaseName     = flag.String("lease-name", "", "name of the Lease")
		identity      = flag.String("identity", "", "this candidate's identity")
		flagFile      = flag.String("flag-file", "", "where the mode is recorded")
		leaseDuration = flag.Duration("lease-duration", 15*time.Second, "LeaseDuration")
		renewDeadline = flag.Duration("renew-deadline", 10*time.Second, "RenewDeadline")
		retryPeriod   = flag.Duration("retry-period", 2*time.Second, "RetryPeriod")
	)
	flag.Parse()
	if *namespace == "" || *leaseName == "" || *identity == "" || *flagFile == "" {
		fmt.Fprintln(os.Stderr, "--namespace, --lease-name, --identity and --flag-file are required")
		os.Exit(2)
	}
	rec := &recorder{flagFile: *flagFile, identity: *identity}
	rec.set("follower")

	config, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubeconfig:", err)
		os.Exit(1)
	}
	client := kubernetes.NewForConfigOrDie(config)
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: *leaseName, Namespace: *namespace},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: *identity},
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, os.Interrupt)
	go func() {
		<-signals
		// The example's rule for ReleaseOnCancel: the protected work must have stopped
		// before cancel, so the lease is released only after the follower record.
		rec.set("follower")
		cancel()
	}()

	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
		Lock:            lock,
		ReleaseOnCancel: true,
		LeaseDuration:   *leaseDuration,
		RenewDeadline:   *renewDeadline,
		RetryPeriod:     *retryPeriod,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				rec.set("leader")
				<-ctx.Done()
			},
			OnStoppedLeading: func() {
				rec.set("follower")
			},
		},
	})
	// RunOrDie returns once leadership is lost or released; like the example, exit then
	// (a Deployment would restart the container).
	rec.set("follower")
}
