package main

// The controller-runtime side of bench/metadata_watch.py: sync one informer of the Secrets
// of one namespace, whole objects (corev1.Secret) or metadata only
// (metav1.PartialObjectMetadata, what Builder.WatchesMetadata / OnlyMetadata watch), with
// managedFields stripped as setpoint's cache does. It speaks the same two lines on stdout
// as the Python child of the script: {"synced": N} once synced, then, after --updates
// MODIFIED events, a JSON report (its own CPU from getrusage, RSS from /proc/self/statm,
// and the live heap after a GC).

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

func cpuSeconds() float64 {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		panic(err)
	}
	return float64(usage.Utime.Nano()+usage.Stime.Nano()) / 1e9
}

func rssBytes() float64 {
	data, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		panic(err)
	}
	pages, err := strconv.ParseFloat(strings.Fields(string(data))[1], 64)
	if err != nil {
		panic(err)
	}
	return pages * float64(os.Getpagesize())
}

func liveHeap() float64 {
	runtime.GC()
	debug.FreeOSMemory()
	var stats runtime.MemStats
	runtime.ReadMemStats(&stats)
	return float64(stats.HeapAlloc)
}

func emit(value any) {
	line, err := json.Marshal(value)
	if err != nil {
		panic(err)
	}
	fmt.Println(string(line))
}

// syncSecrets runs the measured informer ("full" or "metadata") until the report is out.
func syncSecrets(mode, namespace string, updates int64) {
	ctrl.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache: cache.Options{
			DefaultNamespaces: map[string]cache.Config{namespace: {}},
			DefaultTransform:  cache.TransformStripManagedFields(),
		},
	})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		if err := mgr.Start(ctx); err != nil {
			panic(err)
		}
	}()
	var obj client.Object = &corev1.Secret{}
	var list client.ObjectList = &corev1.SecretList{}
	if mode == "metadata" {
		partial := &metav1.PartialObjectMetadata{}
		partial.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
		partials := &metav1.PartialObjectMetadataList{}
		partials.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("SecretList"))
		obj, list = partial, partials
	}
	heap0, rss0, cpu0 := liveHeap(), rssBytes(), cpuSeconds()
	informer, err := mgr.GetCache().GetInformer(ctx, obj)
	if err != nil {
		panic(err)
	}
	var seen atomic.Int64
	done := make(chan struct{})
	_, err = informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, _ any) {
			if seen.Add(1) == updates {
				close(done)
			}
		},
	})
	if err != nil {
		panic(err)
	}
	if !toolscache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		panic("the informer did not sync")
	}
	syncCPU := cpuSeconds() - cpu0
	heap1, rss1 := liveHeap(), rssBytes()
	if err := mgr.GetCache().List(ctx, list); err != nil {
		panic(err)
	}
	objects := float64(len(mustItems(list)))
	emit(map[string]any{"synced": int(objects)})
	cpu1 := cpuSeconds()
	<-done
	emit(map[string]any{
		"objects":       int(objects),
		"store_bytes":   (heap1 - heap0) / objects,
		"rss_bytes":     (rss1 - rss0) / objects,
		"sync_cpu_us":   syncCPU / objects * 1e6,
		"update_cpu_us": (cpuSeconds() - cpu1) / float64(updates) * 1e6,
	})
}

func mustItems(list client.ObjectList) []any {
	switch l := list.(type) {
	case *corev1.SecretList:
		items := make([]any, len(l.Items))
		for i := range l.Items {
			items[i] = &l.Items[i]
		}
		return items
	case *metav1.PartialObjectMetadataList:
		items := make([]any, len(l.Items))
		for i := range l.Items {
			items[i] = &l.Items[i]
		}
		return items
	}
	panic("unknown list type")
}
