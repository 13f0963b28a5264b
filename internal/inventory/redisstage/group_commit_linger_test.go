package redisstage

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// lingerHook makes g signal each linger on the returned channel and, with
// hold, wait there until the test closes the returned release channel.
func lingerHook(g *groupCommit, hold bool) (lingering <-chan struct{}, release chan struct{}) {
	ch, rel := make(chan struct{}, 10), make(chan struct{})
	g.lingering = func() {
		ch <- struct{}{}
		if hold {
			<-rel
		}
	}
	return ch, rel
}

// wantWritten fails the test unless f wrote exactly want, transaction by
// transaction.
func wantWritten(t *testing.T, f *fakeRows, want ...[]string) {
	t.Helper()
	if got := f.written(); !slices.EqualFunc(got, want, slices.Equal[[]string]) {
		t.Fatalf("transactions %v, want %v", got, want)
	}
}

// Linger is off by default: the group after a write is taken at once.
func TestGroupDoesNotLingerByDefault(t *testing.T) {
	f := newFakeRows()
	g := newGroupCommit(f)
	lingering, _ := lingerHook(g, false)
	first, rest := behindAWrite(t, g, f, nil, "b")
	close(f.release)
	<-first
	if err := <-rest["b"]; err != nil {
		t.Fatal(err)
	}
	if n := len(lingering); n != 0 {
		t.Fatalf("%d lingers with the default settings, want none", n)
	}
}

// A lone sale on an idle item is written at once: it never lingers for
// company, whatever the linger (here an hour).
func TestLoneSaleDoesNotLinger(t *testing.T) {
	f := newFakeRows()
	close(f.release)
	g := newGroupCommit(f)
	g.linger = time.Hour
	lingering, _ := lingerHook(g, false)
	for _, no := range []string{"a", "b"} { // one after the other: each alone
		if err := <-sell(g, context.Background(), no, "u-"+no); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(lingering); n != 0 {
		t.Fatalf("%d lingers for sales that each found the item idle, want none", n)
	}
	wantWritten(t, f, []string{"a"}, []string{"b"})
}

// With a linger set, the sales that arrived while a write ran linger for
// the ones on their way: a sale that arrives during the linger joins
// their group. Without one (and before the linger existed),
// the group was taken the instant the write ended, and the late one was
// written in a transaction of its own after it.
func TestSalesBehindAWriteLingerForTheNextOnItsWay(t *testing.T) {
	f := newFakeRows()
	g := newGroupCommit(f)
	g.linger = time.Millisecond // the hook holds it before its timer starts
	lingering, release := lingerHook(g, true)
	first, rest := behindAWrite(t, g, f, nil, "b", "c")
	close(f.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	select {
	case <-lingering:
	case err := <-rest["b"]:
		t.Fatalf("b answered (%v) before any linger: its group was taken the instant the write ended", err)
	}
	d := sell(g, context.Background(), "d", "u-d")
	queued(t, g, 3)
	close(release)
	for n, ch := range map[string]<-chan error{"b": rest["b"], "c": rest["c"], "d": d} {
		if err := <-ch; err != nil {
			t.Errorf("sale %s: %v", n, err)
		}
	}
	wantWritten(t, f, []string{"first"}, []string{"b", "c", "d"})
}

// A linger ends as soon as a full group waits, however long the linger
// may last (an hour here): the sales are written, not held to the cap.
func TestLingerEndsWhenTheGroupIsFull(t *testing.T) {
	f := newFakeRows()
	g := newGroupCommit(f)
	g.max, g.linger = 3, time.Hour
	lingering, _ := lingerHook(g, false)
	first, rest := behindAWrite(t, g, f, nil, "b", "c")
	close(f.release)
	<-first
	<-lingering
	d := sell(g, context.Background(), "d", "u-d")
	for n, ch := range map[string]<-chan error{"b": rest["b"], "c": rest["c"], "d": d} {
		if err := <-ch; err != nil {
			t.Errorf("sale %s: %v", n, err)
		}
	}
	wantWritten(t, f, []string{"first"}, []string{"b", "c", "d"})
}

// A linger ends at its cap when nobody else comes: the sales that waited
// are written, alone if need be.
func TestLingerEndsAtItsCap(t *testing.T) {
	f := newFakeRows()
	g := newGroupCommit(f)
	g.linger = time.Millisecond
	lingering, _ := lingerHook(g, false)
	first, rest := behindAWrite(t, g, f, nil, "b")
	close(f.release)
	<-first
	<-lingering
	if err := <-rest["b"]; err != nil {
		t.Fatal(err)
	}
	wantWritten(t, f, []string{"first"}, []string{"b"})
}

// A sale whose request ends while its group lingers leaves, unwritten,
// and the others are written without it.
func TestSaleLeavesDuringTheLinger(t *testing.T) {
	f := newFakeRows()
	g := newGroupCommit(f)
	g.linger = time.Millisecond // the hook holds it before its timer starts
	lingering, release := lingerHook(g, true)
	gone, cancel := context.WithCancel(context.Background())
	first, rest := behindAWrite(t, g, f, map[string]context.Context{"gone": gone}, "gone", "stays")
	close(f.release)
	<-first
	<-lingering
	cancel()
	if err := <-rest["gone"]; !errors.Is(err, context.Canceled) {
		t.Fatalf("the sale that left: %v, want context.Canceled", err)
	}
	close(release)
	if err := <-rest["stays"]; err != nil {
		t.Fatal(err)
	}
	wantWritten(t, f, []string{"first"}, []string{"stays"})
}
