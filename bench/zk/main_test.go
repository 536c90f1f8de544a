package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestMissingZooKeeper(t *testing.T) {
	javaDir = t.TempDir()
	defer func() { javaDir = "/usr/share/java" }()
	_, err := startZooKeeper(time.Second)
	if err == nil || !strings.Contains(err.Error(), "apt-get install zookeeper") {
		t.Fatalf("want the Debian package named, got %v", err)
	}
}

// TestCampaignOrder: candidates lead in the order they joined; each leads
// when the one before it goes. Skipped without Debian's zookeeper.
func TestCampaignOrder(t *testing.T) {
	if m, _ := filepath.Glob(filepath.Join(javaDir, "zookeeper-*.jar")); len(m) == 0 {
		t.Skip("no zookeeper package")
	}
	if _, err := exec.LookPath("java"); err != nil {
		t.Skip("no java")
	}
	z, err := startZooKeeper(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer z.stop()
	conn, granted, err := connect(z.addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if granted != time.Second {
		t.Errorf("session timeout granted %v, want 1s", granted)
	}
	el := "/election/test"
	if err := ensurePath(conn, el); err != nil {
		t.Fatal(err)
	}
	type won struct {
		i    int
		node string
		err  error
	}
	wins := make(chan won, 3)
	stop := make(chan struct{})
	defer close(stop)
	for i := range 3 {
		c, _, err := connect(z.addr, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		go func() {
			node, err := campaign(c, el, fmt.Sprint(i), stop)
			wins <- won{i, node, err}
		}()
		for { // join in order
			kids, _, err := conn.Children(el)
			if err != nil {
				t.Fatal(err)
			}
			if len(kids) == i+1 {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	for want := range 3 {
		select {
		case w := <-wins:
			if w.err != nil || w.i != want {
				t.Fatalf("leader %d (%v), want %d", w.i, w.err, want)
			}
			if err := conn.Delete(w.node, -1); err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no leader %d", want)
		}
	}
}
