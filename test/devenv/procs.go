package devenv

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ProcessesUsing lists the live processes (other than this one) whose
// command line names a path under one of dirs, as "pid:name". After
// Env.Stop, ProcessesUsing(env.ProcessDirs()...) must be empty: etcd,
// kube-apiserver and every squid name their directory in their arguments.
// Zombies are not counted (they hold no resources but a pid).
func ProcessesUsing(dirs ...string) []string {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var out []string
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil || pid == self {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "cmdline"))
		if err != nil || len(cmdline) == 0 {
			continue
		}
		if state(pid) == "Z" {
			continue
		}
		args := strings.Split(string(bytes.TrimRight(cmdline, "\x00")), "\x00")
		if names(args, dirs) {
			out = append(out, fmt.Sprintf("%d:%s", pid, filepath.Base(args[0])))
		}
	}
	return out
}

func names(args, dirs []string) bool {
	for _, a := range args {
		for _, d := range dirs {
			if d != "" && strings.Contains(a, d) {
				return true
			}
		}
	}
	return false
}

// state is the one-letter state of pid from /proc/<pid>/stat ("" if gone).
func state(pid int) string {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return ""
	}
	s := string(stat)
	end := strings.LastIndexByte(s, ')')
	if end < 0 {
		return ""
	}
	fields := strings.Fields(s[end+1:])
	if len(fields) == 0 {
		return ""
	}
	return fields[0]
}
