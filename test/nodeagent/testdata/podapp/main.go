// Command podapp is the container of the node agent's pod tests: it
// answers probes as files in --state-dir say, reports what its pod was
// given, writes where it is told, and records its starts and SIGTERMs.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
)

const saDir = "/var/run/secrets/kubernetes.io/serviceaccount"

func main() {
	addr := flag.String("probe-bind-address", ":9000", "")
	state := flag.String("state-dir", "", "")
	flag.Parse()
	record := func(file, line string) {
		f, err := os.OpenFile(filepath.Join(*state, file), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			fmt.Fprintln(f, line)
			f.Close()
		}
	}
	exists := func(name string) bool { _, err := os.Stat(filepath.Join(*state, name)); return err == nil }
	record("starts", fmt.Sprint(os.Getpid()))

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	go func() {
		for range sigs {
			record("events", "sigterm")
			if !exists("ignore-term") {
				os.Exit(0)
			}
		}
	}()
	http.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if exists("unhealthy") {
			w.WriteHeader(http.StatusInternalServerError)
		}
	})
	http.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if exists("unready") {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	// /write?path=P creates P: 204, or 500 with the error.
	http.HandleFunc("/write", func(w http.ResponseWriter, r *http.Request) {
		if err := os.WriteFile(r.URL.Query().Get("path"), []byte("x"), 0o644); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	http.HandleFunc("/pod", func(w http.ResponseWriter, _ *http.Request) {
		host, _ := os.Hostname()
		read := func(p string) string { b, _ := os.ReadFile(p); return string(b) }
		_ = json.NewEncoder(w).Encode(map[string]string{
			"hostname":  host,
			"podName":   os.Getenv("POD_NAME"),
			"podIP":     os.Getenv("POD_IP"),
			"apiServer": os.Getenv("KUBERNETES_SERVICE_HOST") + ":" + os.Getenv("KUBERNETES_SERVICE_PORT"),
			"namespace": read(saDir + "/namespace"),
			"token":     strings.TrimSpace(read(saDir + "/token")),
			"ca":        read(saDir + "/ca.crt"),
			"hosts":     read("/etc/hosts"),
		})
	})
	if err := http.ListenAndServe(*addr, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
